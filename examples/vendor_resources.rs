//! An out-of-tree plugin: `VendorResources`, a Filter + Score plugin for a
//! vendor's extended resources (device plugins advertise them as
//! `<vendor domain>/<name>`, e.g. `example.com/fpga`), registered by name and
//! enabled through a `KubeSchedulerConfiguration`, like any in-tree plugin.
//!
//! - **PreFilter**: collects the pod's requests whose name starts with the
//!   configured prefix; a pod without any gets `Skip`, so this plugin's
//!   Filter does not run for it (and PreScore skips its Score).
//! - **Filter**: a node that does not advertise (allocatable > 0) every such
//!   resource is `UnschedulableAndUnresolvable` (no eviction can create
//!   allocatable), reason `node(s) didn't have vendor resource <name>`; one
//!   without enough left for the pod is `Unschedulable` (preemption may
//!   help), `node(s) didn't have enough free <name>`. The configuration
//!   hands these resources to the plugin: NodeResourcesFit's
//!   `ignoredResourceGroups` names the vendor domain (upstream's way of
//!   leaving extended resources to someone else), or NodeResourcesFit would
//!   reject such nodes first with `Insufficient <name>`.
//! - **Bind check**: the same rule ([`shortfall`]) on the coordinator's
//!   view of the node, so two workers granted the node's last free units
//!   at the same moment cannot both have them: the arbiter refuses the
//!   second with the Filter's reason. It reads only the pod and the node,
//!   so it also keeps the units of pods nominated there.
//! - **Score**: prefers nodes where those resources are least used: for each
//!   resource, the share of the node's allocatable still free once the pod is
//!   placed, 0..=100, averaged over the pod's vendor resources (units are the
//!   resource's own integer units, e.g. devices).
//! - **Args** (`pluginConfig`, kind `VendorResourcesArgs`):
//!   `resourcePrefix` (default `example.com/`, must end with `/`).
//!
//! Run it: `cargo run --example vendor_resources` schedules one pod on a
//! three-node cluster and prints each node's verdict. Its tests run with
//! `cargo test --workspace` (see `[[example]]` in `Cargo.toml`): besides
//! the plugin's own, two real workers racing for a few units through the
//! coordinator (never over-committed), the arbiter with and without the
//! bind check, and a property test that the arbiter grants a placement
//! exactly when the profile's Filters pass it. The guide is in
//! `docs/plugins.md`.

use std::sync::Arc;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::config::{self, SchedulerConfig};
use flotilla_scheduler::framework::{PluginHandle, decode_args};
use flotilla_scheduler::{Framework, Registry};
use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE,
    Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, SharedLister, Status,
};
use flotilla_shared::{NodeInfo, PodInfo};

/// Registry name, as profiles name it.
pub const NAME: &str = "VendorResources";
/// `kind` of its args in `pluginConfig`.
pub const ARGS_KIND: &str = "VendorResourcesArgs";
/// Default `resourcePrefix`.
pub const DEFAULT_PREFIX: &str = "example.com/";

/// The plugin's args.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VendorResourcesArgs {
    /// Extended resources whose name starts with this belong to the vendor.
    #[serde(default = "default_prefix")]
    pub resource_prefix: String,
}

fn default_prefix() -> String {
    DEFAULT_PREFIX.to_owned()
}

impl Default for VendorResourcesArgs {
    fn default() -> Self {
        VendorResourcesArgs {
            resource_prefix: default_prefix(),
        }
    }
}

/// New nodes, or nodes whose allocatable grew, may advertise the resource.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeAllocatableGrew,
    ClusterEvent::AssignedPodDeleted,
];

/// What PreFilter leaves for Filter and Score: the pod's vendor requests.
#[derive(Debug, Clone)]
struct VendorRequests(Vec<(Arc<str>, i64)>);

/// Why a node cannot take a pod's vendor requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall<'a> {
    /// The node does not advertise this resource (allocatable 0): no
    /// eviction can help.
    Missing(&'a str),
    /// The node has too few free units of this resource left.
    NotEnough(&'a str),
}

impl Shortfall<'_> {
    /// The Filter's reason.
    #[must_use]
    pub fn reason(&self) -> String {
        match self {
            Shortfall::Missing(name) => format!("node(s) didn't have vendor resource {name}"),
            Shortfall::NotEnough(name) => format!("node(s) didn't have enough free {name}"),
        }
    }
}

/// The rule of both the Filter and the bind check: the first of `wanted`
/// (resource, units) that `node` does not advertise or has too few free
/// units of (allocatable minus what its pods request), if any.
pub fn shortfall<'a>(
    wanted: impl IntoIterator<Item = &'a (Arc<str>, i64)>,
    node: &NodeInfo,
) -> Option<Shortfall<'a>> {
    wanted.into_iter().find_map(|(name, qty)| {
        let alloc = node.spec.allocatable.scalar(name);
        if alloc <= 0 {
            Some(Shortfall::Missing(name))
        } else if node.requested.scalar(name) + qty > alloc {
            Some(Shortfall::NotEnough(name))
        } else {
            None
        }
    })
}

/// The plugin.
#[derive(Debug, Clone)]
pub struct VendorResources {
    prefix: String,
}

impl VendorResources {
    /// Builds it from `pluginConfig` args.
    ///
    /// # Errors
    /// A message naming the field (`resourcePrefix: ...`).
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let a: VendorResourcesArgs = decode_args(args, ARGS_KIND)?;
        if a.resource_prefix.len() < 2 || !a.resource_prefix.ends_with('/') {
            return Err(format!(
                "resourcePrefix: Invalid value: {:?}: must be a domain followed by '/', e.g. \"example.com/\"",
                a.resource_prefix
            ));
        }
        Ok(VendorResources {
            prefix: a.resource_prefix,
        })
    }

    /// The factory to register under [`NAME`]: this plugin at PreFilter,
    /// Filter, PreScore and Score, with its Filter's bind check.
    #[must_use]
    pub fn factory() -> flotilla_scheduler::framework::PluginFactory {
        Arc::new(|args| {
            let p = Arc::new(VendorResources::from_args(args)?);
            Ok(PluginHandle::new(p.clone())
                .pre_filter(p.clone())
                .filter(p.clone())
                .bind_check(p.clone())
                .pre_score(p.clone())
                .score(p))
        })
    }

    /// The pod's requests of this vendor's resources (units > 0).
    fn wanted<'p>(&'p self, pod: &'p PodInfo) -> impl Iterator<Item = &'p (Arc<str>, i64)> {
        pod.requests
            .scalar
            .iter()
            .filter(|(name, qty)| name.starts_with(&self.prefix) && *qty > 0)
    }

    fn requests(&self, pod: &PodInfo) -> Vec<(Arc<str>, i64)> {
        self.wanted(pod).cloned().collect()
    }
}

impl Plugin for VendorResources {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for VendorResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let wanted = self.requests(pod);
        if wanted.is_empty() {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(NAME, VendorRequests(wanted));
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for VendorResources {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(VendorRequests(wanted)) = state.read::<VendorRequests>(NAME) else {
            return Status::error("PreFilter state missing").with_plugin(NAME);
        };
        match shortfall(wanted, node) {
            None => Status::success(),
            Some(s @ Shortfall::Missing(_)) => Status::unresolvable(s.reason()).with_plugin(NAME),
            Some(s @ Shortfall::NotEnough(_)) => {
                Status::unschedulable(s.reason()).with_plugin(NAME)
            }
        }
    }
}

/// The Filter's rule on the arbiter's copy of the node. A pod without
/// vendor requests (PreFilter's `Skip`) passes at once, allocating nothing.
impl BindCheck for VendorResources {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        match shortfall(self.wanted(pod), node) {
            None => Ok(()),
            Some(s) => Err(s.reason().into()),
        }
    }
}

impl PreScorePlugin for VendorResources {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        _cluster: &dyn SharedLister,
    ) -> Status {
        // PreFilter stored the requests unless it skipped; a cycle that runs
        // Score without Filter (e.g. this plugin only at `score`) stores
        // them here.
        if state.read::<VendorRequests>(NAME).is_none() {
            let wanted = self.requests(pod);
            if wanted.is_empty() {
                return Status::skip();
            }
            state.write(NAME, VendorRequests(wanted));
        }
        Status::success()
    }
}

impl ScorePlugin for VendorResources {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(VendorRequests(wanted)) = state.read::<VendorRequests>(NAME) else {
            return Err(Status::error("PreScore state missing").with_plugin(NAME));
        };
        let mut sum = 0;
        for (name, qty) in wanted {
            let alloc = node.spec.allocatable.scalar(name);
            if alloc <= 0 {
                continue;
            }
            let free_after = (alloc - node.requested.scalar(name) - qty).max(0);
            sum += free_after * MAX_NODE_SCORE / alloc;
        }
        Ok(sum / i64::try_from(wanted.len()).unwrap_or(1).max(1))
    }
}

/// The in-tree plugins plus this one.
#[must_use]
pub fn registry() -> Registry {
    let mut r = Registry::in_tree();
    r.register(NAME, VendorResources::factory())
        .expect("VendorResources is not an in-tree name");
    r
}

/// A configuration that enables the plugin in the default profile, weight 2,
/// for `prefix`, and takes the vendor's resources out of NodeResourcesFit's
/// hands (`ignoredResourceGroups`).
#[must_use]
pub fn config_text(prefix: &str) -> String {
    let group = prefix.trim_end_matches('/');
    format!(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: {NAME}
            weight: 2
    pluginConfig:
      - name: {NAME}
        args:
          resourcePrefix: {prefix}
      - name: NodeResourcesFit
        args:
          ignoredResourceGroups: [{group}]
"#
    )
}

/// The framework of `cfg`'s first profile, with this plugin registered.
///
/// # Errors
/// The profile does not make a valid framework.
pub fn framework(cfg: &SchedulerConfig) -> Result<Framework, String> {
    Framework::new(&cfg.profiles[0], &registry()).map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    let cfg = config::parse_with(&config_text(DEFAULT_PREFIX), "vendor.yaml", &registry())
        .map_err(|e| e.to_string())?;
    let fw = framework(&cfg)?;
    let cache = NodeCache::default();
    for (name, fpgas) in [
        ("plain", None),
        ("fpga-busy", Some("4")),
        ("fpga-idle", Some("4")),
    ] {
        let mut n = NodeBuilder::new(name).cpu("8").memory("32Gi").pods(110);
        if let Some(q) = fpgas {
            n = n.resource("example.com/fpga", q);
        }
        cache.upsert_node(n.build_spec());
    }
    // fpga-busy already runs a pod holding 3 of its 4 FPGAs.
    cache.add_bound_pod(Arc::new(
        PodBuilder::new("busy")
            .request("example.com/fpga", "3")
            .node_name("fpga-busy")
            .build_info(),
    ));
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    let pod = PodBuilder::new("trainer")
        .cpu("1")
        .request("example.com/fpga", "1")
        .build_info();
    let (result, detail) = fw.schedule_detailed(&pod, &snap);
    for (node, st) in &detail.rejected {
        println!("{node}: rejected by {}: {}", st.plugin, st.message());
    }
    for s in &detail.scored {
        println!("{}: total {} {:?}", s.node, s.total, s.plugin_scores);
    }
    let r = result.map_err(|e| e.to_string())?;
    println!("default/trainer -> {}", r.node);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_scheduler::framework::ScheduleError;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    fn cluster(nodes: &[(&str, Option<&str>)], bound: &[(&str, &str)]) -> Snapshot {
        let cache = NodeCache::default();
        for (name, fpgas) in nodes {
            let mut n = NodeBuilder::new(name).cpu("8").memory("32Gi").pods(110);
            if let Some(q) = fpgas {
                n = n.resource("example.com/fpga", q);
            }
            cache.upsert_node(n.build_spec());
        }
        for (i, (node, qty)) in bound.iter().enumerate() {
            cache.add_bound_pod(Arc::new(
                PodBuilder::new(&format!("bound-{i}"))
                    .request("example.com/fpga", qty)
                    .node_name(node)
                    .build_info(),
            ));
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap
    }

    fn enabled() -> Framework {
        let cfg = config::parse_with(&config_text(DEFAULT_PREFIX), "vendor.yaml", &registry())
            .expect("the example configuration loads");
        framework(&cfg).expect("framework")
    }

    #[test]
    fn the_configuration_enables_it_by_name_at_every_point_it_implements() {
        use flotilla_shared::framework::ExtensionPoint;
        let fw = enabled();
        for point in [
            ExtensionPoint::PreFilter,
            ExtensionPoint::Filter,
            ExtensionPoint::PreScore,
            ExtensionPoint::Score,
        ] {
            assert!(fw.enabled_at(point).contains(&NAME), "{point:?}");
        }
        assert!(fw.score_weights().contains(&(NAME, 2)));
        // Without registering it, the same file is refused by name.
        let err =
            config::parse(&config_text(DEFAULT_PREFIX), "vendor.yaml").expect_err("unknown plugin");
        assert!(err.to_string().contains(NAME), "{err}");
    }

    #[test]
    fn nodes_without_the_resource_are_filtered_out_with_the_reason() {
        let snap = cluster(&[("plain", None), ("fpga", Some("2"))], &[]);
        let pod = PodBuilder::new("p")
            .request("example.com/fpga", "1")
            .build_info();
        let (result, detail) = enabled().schedule_detailed(&pod, &snap);
        assert_eq!(result.expect("fits").node.as_ref(), "fpga");
        let (_, st) = detail
            .rejected
            .iter()
            .find(|(n, _)| n.as_ref() == "plain")
            .expect("plain rejected");
        assert_eq!(st.plugin, NAME);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            st.message(),
            "node(s) didn't have vendor resource example.com/fpga"
        );
    }

    #[test]
    fn a_node_short_of_free_units_may_be_helped_by_preemption() {
        let snap = cluster(&[("full", Some("2"))], &[("full", "2")]);
        let pod = PodBuilder::new("p")
            .request("example.com/fpga", "1")
            .build_info();
        match enabled().schedule(&pod, &snap) {
            Err(ScheduleError::Unschedulable(fit)) => {
                let (_, st) = &fit.diagnosis.node_to_status[0];
                assert_eq!(st.code, Code::Unschedulable, "resolvable by eviction");
                assert_eq!(
                    fit.to_string(),
                    "0/1 nodes are available: 1 node(s) didn't have enough free example.com/fpga."
                );
            }
            other => panic!("expected a FitError, got {other:?}"),
        }
    }

    #[test]
    fn the_least_used_node_wins_and_scores_are_the_free_share() {
        // After placing 1: busy has (4-3-1)/4 = 0 % free, idle (4-0-1)/4 = 75 %.
        let snap = cluster(
            &[("busy", Some("4")), ("idle", Some("4"))],
            &[("busy", "3")],
        );
        let pod = PodBuilder::new("p")
            .request("example.com/fpga", "1")
            .build_info();
        let (result, detail) = enabled().schedule_detailed(&pod, &snap);
        assert_eq!(result.expect("fits").node.as_ref(), "idle");
        let score_of = |node: &str| {
            detail
                .scored
                .iter()
                .find(|s| s.node.as_ref() == node)
                .and_then(|s| s.plugin_scores.iter().find(|(p, _)| *p == NAME))
                .map(|(_, v)| *v)
        };
        assert_eq!((score_of("busy"), score_of("idle")), (Some(0), Some(75)));
    }

    #[test]
    fn pods_without_vendor_requests_skip_it() {
        let snap = cluster(&[("plain", None)], &[]);
        let pod = PodBuilder::new("p").cpu("1").build_info();
        let (result, detail) = enabled().schedule_detailed(&pod, &snap);
        assert_eq!(result.expect("fits").node.as_ref(), "plain");
        assert!(
            detail.scored[0]
                .plugin_scores
                .iter()
                .all(|(p, _)| *p != NAME),
            "Score skipped: {:?}",
            detail.scored[0].plugin_scores
        );
    }

    #[test]
    fn another_prefix_is_another_vendor() {
        let cfg = config::parse_with(&config_text("vendor.io/"), "vendor.yaml", &registry())
            .expect("loads");
        let fw = framework(&cfg).expect("framework");
        let snap = cluster(&[("plain", None)], &[]);
        // example.com/fpga is not this vendor's: the plugin skips the pod,
        // and NodeResourcesFit (ignoring only vendor.io) reports the missing
        // resource. (`schedule` is the cycle; PostFilter runs in the worker.)
        let pod = PodBuilder::new("p")
            .request("example.com/fpga", "1")
            .build_info();
        match fw.schedule(&pod, &snap) {
            Err(ScheduleError::Unschedulable(fit)) => assert_eq!(
                fit.to_string(),
                "0/1 nodes are available: 1 Insufficient example.com/fpga."
            ),
            other => panic!("expected a FitError, got {other:?}"),
        }
    }

    #[test]
    fn bad_args_name_the_field() {
        let bad = config_text("no-slash");
        let err = config::parse_with(&bad, "vendor.yaml", &registry()).expect_err("refused");
        assert!(
            err.to_string()
                .contains("pluginConfig[0].args.resourcePrefix: Invalid value"),
            "{err}"
        );
        let typo = config_text(DEFAULT_PREFIX).replace("resourcePrefix", "resourcePrefx");
        let err = config::parse_with(&typo, "vendor.yaml", &registry()).expect_err("refused");
        assert!(err.to_string().contains("resourcePrefx"), "{err}");
    }

    /// `registry()` but with a `VendorResources` that provides no bind
    /// check: its Filter is then not re-checked at bind time.
    fn registry_without_check() -> Registry {
        let mut r = Registry::in_tree();
        r.register(
            NAME,
            Arc::new(|args| {
                let mut h = (VendorResources::factory())(args)?;
                h.bind_check = None;
                Ok(h)
            }),
        )
        .expect("VendorResources is not an in-tree name");
        r
    }

    fn example_config(registry: &Registry) -> SchedulerConfig {
        config::parse_with(&config_text(DEFAULT_PREFIX), "vendor.yaml", registry)
            .expect("the example configuration loads")
    }

    /// The check is the Filter's rule, with its reason; a pod without
    /// vendor requests passes.
    #[test]
    fn the_bind_check_decides_as_the_filter_does() {
        use flotilla_shared::framework::{BindView, KeptCounts};
        use std::collections::{BTreeMap, HashMap};

        let snap = cluster(&[("full", Some("2")), ("plain", None)], &[("full", "2")]);
        let nodes: HashMap<Arc<str>, NodeInfo> = snap
            .nodes()
            .iter()
            .map(|n| (n.spec.name.clone(), (**n).clone()))
            .collect();
        let (namespaces, mut kept) = (BTreeMap::new(), KeptCounts::default());
        let plugin = VendorResources::from_args(None).expect("defaults");
        let mut verdict = |pod: &PodInfo, node: &str| {
            let mut view = BindView::new(&nodes, &namespaces, 0, &mut kept);
            plugin
                .check_bind(pod, &nodes[node], &mut view)
                .map_err(|r| r.into_owned())
        };
        let fpga = PodBuilder::new("p")
            .request("example.com/fpga", "1")
            .build_info();
        assert_eq!(
            verdict(&fpga, "full"),
            Err("node(s) didn't have enough free example.com/fpga".into())
        );
        assert_eq!(
            verdict(&fpga, "plain"),
            Err("node(s) didn't have vendor resource example.com/fpga".into())
        );
        let cpu = PodBuilder::new("c").cpu("1").build_info();
        assert_eq!(verdict(&cpu, "plain"), Ok(()));
        assert!(plugin.node_local(), "it guards nominated pods' units too");
    }

    /// Two workers whose caches both show n1's last FPGA free propose their
    /// pods for it: the arbiter grants one. Without the bind check both
    /// are granted (the node is over-committed), and the coordinator marks
    /// the plugin unchecked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_arbiter_grants_the_last_unit_once_and_only_with_the_check() {
        use flotilla_coordinator::cluster::{EmbeddedCluster, PodRef};
        use flotilla_coordinator::{Coordinator, Decision, PodPhase};
        use flotilla_shared::WorkloadClass;

        async fn race(registry: &Registry) -> (Decision, Decision, Vec<(String, String)>) {
            let cluster = Arc::new(EmbeddedCluster::new());
            let node = NodeBuilder::new("n1")
                .cpu("8")
                .memory("32Gi")
                .pods(110)
                .resource("example.com/fpga", "1")
                .build();
            cluster.apply_node(node).expect("node");
            let served = example_config(registry)
                .served_profiles(registry)
                .expect("the profile builds");
            let coord = Arc::new(Coordinator::with_profiles(cluster.clone(), served));
            let stop = tokio_util::sync::CancellationToken::new();
            let (synced_tx, synced) = tokio::sync::oneshot::channel();
            tokio::spawn(coord.clone().sync_and_watch(stop.clone(), synced_tx));
            synced.await.expect("the coordinator syncs");
            // Two workers with open streams: each is handed the pod of its
            // class, and may propose only that one.
            let (online, _) = coord.register("online-0", WorkloadClass::Online);
            let (batch, _) = coord.register("batch-0", WorkloadClass::Batch);
            let _streams = (
                coord.attach(online).expect("attach"),
                coord.attach(batch).expect("attach"),
            );
            let mut refs = Vec::new();
            for (name, class) in [("a", "online"), ("b", "batch")] {
                let pod = PodBuilder::new(name)
                    .cpu("1")
                    .label("flotilla.io/workload-class", class)
                    .request("example.com/fpga", "1")
                    .build();
                cluster.create_pod(pod.clone()).expect("pod");
                refs.push(PodRef::of(&pod));
            }
            let handed = |name: &str, w| {
                coord
                    .record("default", name)
                    .is_some_and(|r| r.phase == PodPhase::Pending(Some(w)))
            };
            tokio::time::timeout(std::time::Duration::from_secs(10), async {
                while !(handed("a", online) && handed("b", batch)) {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("each pod handed to its worker");
            let da = coord.propose(online, &refs[0], "n1").await;
            let db = coord.propose(batch, &refs[1], "n1").await;
            stop.cancel();
            (da, db, coord.unchecked_filters())
        }

        let (da, db, unchecked) = race(&registry()).await;
        assert_eq!(da, Decision::Bound);
        assert_eq!(
            db,
            Decision::Conflict("node n1: node(s) didn't have enough free example.com/fpga".into())
        );
        assert!(unchecked.is_empty(), "{unchecked:?}");

        let (da, db, unchecked) = race(&registry_without_check()).await;
        assert_eq!(
            (da, db),
            (Decision::Bound, Decision::Bound),
            "not re-checked: 2 FPGAs granted on a node with 1"
        );
        assert_eq!(
            unchecked,
            [("default-scheduler".to_owned(), NAME.to_owned())]
        );
    }

    /// Two real workers (one per pool: each owns every node) schedule 48
    /// pods wanting one FPGA each onto 4 nodes with 2 each: the workers'
    /// caches lag each other's grants, so they keep proposing the same
    /// units. The coordinator never binds more FPGAs on a node than it has,
    /// and every unit ends up used.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_workers_racing_for_the_units_never_over_commit_a_node() {
        use flotilla_loadtest::run::{RunConfig, run_embedded_full};
        use flotilla_loadtest::workload::Workload;
        use std::collections::BTreeMap;
        use std::time::Duration;

        const NODES: usize = 4;
        const UNITS: i64 = 2;
        const PODS: usize = 48;
        let nodes = (0..NODES)
            .map(|i| {
                NodeBuilder::new(&format!("n{i}"))
                    .cpu("64")
                    .memory("256Gi")
                    .pods(110)
                    .resource("example.com/fpga", &UNITS.to_string())
                    .build()
            })
            .collect();
        let pods = (0..PODS)
            .map(|i| {
                let class = if i % 2 == 0 { "online" } else { "batch" };
                PodBuilder::new(&format!("p{i:02}"))
                    .cpu("100m")
                    .label("flotilla.io/workload-class", class)
                    .request("example.com/fpga", "1")
                    .build()
            })
            .collect();
        let workload = Workload {
            name: "vendor-race".into(),
            nodes,
            pods,
            ..Workload::default()
        };
        let registry = registry();
        let cfg = RunConfig {
            in_process_workers: 2,
            expect_workers: 2,
            progress: false,
            timeout: Duration::from_secs(60),
            scheduler: example_config(&registry),
            registry,
            ..RunConfig::default()
        };
        let out = run_embedded_full(workload, cfg)
            .await
            .expect("the run completes");
        assert!(!out.report.timed_out);
        assert!(out.coordinator.unchecked_filters().is_empty());
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        for pod in out.cluster.pods() {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let info = PodInfo::from_pod(pod).expect("a valid pod");
            *used.entry(node).or_default() += info.requests.scalar("example.com/fpga");
        }
        for (node, units) in &used {
            assert!(
                *units <= UNITS,
                "{node}: {units} FPGAs bound, {UNITS} allocatable"
            );
        }
        let bound: i64 = used.values().sum();
        let units = UNITS * i64::try_from(NODES).expect("small");
        assert_eq!(bound, units, "every unit used: {used:?}");
        let c = out.coordinator.summary().counters;
        println!(
            "{} proposals, {} grants, {} conflicts, {} alternatives granted",
            c.proposals, c.grants, c.conflicts, c.alternatives_granted
        );
        assert_eq!(c.grants, u64::try_from(units).expect("small"));
        assert!(c.conflicts > 0, "the workers raced for the same units");
        assert_eq!(out.report.unschedulable, PODS - NODES * 2);
    }

    /// The bind arbiter grants a placement exactly when the profile's
    /// PreFilter and Filter plugins, as a worker runs them, pass the node
    /// on the same view: for the default profile plus MaxInstancesPerNode
    /// plus this plugin (NodeResourcesFit leaving the vendor's group to it,
    /// as the example's configuration does), random small clusters and a
    /// random pending pod. The arbiter side is
    /// `flotilla_coordinator::arbiter::check`, the one function the
    /// coordinator's `check_grant` decides with, over the counts it keeps
    /// (one `KeptCounts` per cluster, reused from node to node).
    mod agreement {
        use std::collections::{BTreeMap, HashMap};
        use std::sync::OnceLock;

        use flotilla_coordinator::arbiter;
        use flotilla_shared::framework::{BindView, KeptCounts, ServedProfile};
        use flotilla_shared::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE;
        use flotilla_shared::testing::{PodAffinityKind, hard_spread, pod_affinity_term};
        use flotilla_shared::topology_spread::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
        use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        use proptest::prelude::*;

        use super::*;

        const FPGA: &str = "example.com/fpga";

        /// The profile's framework (the worker's side) and its served form
        /// (the arbiter's).
        fn profile() -> &'static (Framework, ServedProfile) {
            static PROFILE: OnceLock<(Framework, ServedProfile)> = OnceLock::new();
            PROFILE.get_or_init(|| {
                // The example's configuration, MaxInstancesPerNode enabled
                // after this plugin.
                let yaml = config_text(DEFAULT_PREFIX).replace(
                    "            weight: 2\n",
                    "            weight: 2\n          - name: MaxInstancesPerNode\n",
                );
                let cfg = config::parse_with(&yaml, "agreement.yaml", &registry())
                    .expect("the configuration loads");
                let served = cfg
                    .served_profiles(&registry())
                    .expect("the profile builds")
                    .remove(0);
                assert!(served.unchecked_filters.is_empty());
                assert_eq!(
                    served.bind_checks.last().map(|c| c.name()),
                    Some("MaxInstancesPerNode")
                );
                (framework(&cfg).expect("framework"), served)
            })
        }

        /// One node: zone (`a`, `b` or none), disk (`ssd`, `hdd` or none),
        /// a taint (none, `dedicated=gpu` NoSchedule / PreferNoSchedule,
        /// `maint` NoExecute), cordoned, cpu cores, pod slots, FPGAs.
        #[derive(Debug, Clone)]
        struct NodeGen {
            zone: u8,
            disk: u8,
            taint: u8,
            cordoned: bool,
            cpu: u8,
            slots: u8,
            fpga: u8,
        }

        /// A pod's common traits: app label (`web`, `db` or none),
        /// namespace (`default` or `other`), half cpus, FPGAs, host port 80,
        /// required anti-affinity against `app=db` (none, per zone, per
        /// host), instance cap (none, 1, 2).
        #[derive(Debug, Clone)]
        struct PodGen {
            app: u8,
            other_ns: bool,
            half_cpus: u8,
            fpga: u8,
            port: bool,
            anti: u8,
            cap: u8,
        }

        /// The pending pod: its common traits plus toleration (none,
        /// `dedicated=gpu:NoSchedule`, everything), `nodeSelector
        /// disk=ssd`, required node affinity (none, `zone In [a]`,
        /// `metadata.name In [n0]`), required pod affinity to `app=web`
        /// per zone (none, same namespace, `namespaceSelector team=x`), a
        /// hard spread constraint on `app=web` (none, zone, zone with
        /// `minDomains: 3`, host with `nodeTaintsPolicy: Honor`), a
        /// malformed cap, `spec.nodeName: n0`.
        #[derive(Debug, Clone)]
        struct Incoming {
            pod: PodGen,
            toleration: u8,
            selector: bool,
            node_affinity: u8,
            affinity: u8,
            spread: u8,
            bad_cap: bool,
            node_name: bool,
        }

        /// 0 with probability `p0`, else 1..`n` evenly: each rule of the
        /// pending pod and the nodes is off most of the time, so about a
        /// third of the placements pass every Filter.
        fn option(p0: f64, n: u8) -> impl Strategy<Value = u8> {
            prop::bool::weighted(p0).prop_flat_map(move |zero| {
                if zero {
                    Just(0).boxed()
                } else {
                    (1..n).boxed()
                }
            })
        }

        fn node_gen() -> impl Strategy<Value = NodeGen> {
            (
                0..3u8,
                0..3u8,
                option(0.7, 4),
                prop::bool::weighted(0.08),
                1..5u8,
                2..8u8,
                0..4u8,
            )
                .prop_map(|(zone, disk, taint, cordoned, cpu, slots, fpga)| NodeGen {
                    zone,
                    disk,
                    taint,
                    cordoned,
                    cpu,
                    slots,
                    fpga,
                })
        }

        fn pod_gen() -> impl Strategy<Value = PodGen> {
            (
                0..3u8,
                prop::bool::weighted(0.3),
                0..4u8,
                option(0.6, 3),
                prop::bool::weighted(0.2),
                option(0.7, 3),
                option(0.75, 3),
            )
                .prop_map(|(app, other_ns, half_cpus, fpga, port, anti, cap)| PodGen {
                    app,
                    other_ns,
                    half_cpus,
                    fpga,
                    port,
                    anti,
                    cap,
                })
        }

        fn incoming() -> impl Strategy<Value = Incoming> {
            (
                pod_gen(),
                0..3u8,
                prop::bool::weighted(0.15),
                option(0.8, 3),
                option(0.8, 3),
                option(0.5, 4),
                prop::bool::weighted(0.03),
                prop::bool::weighted(0.05),
            )
                .prop_map(|t| Incoming {
                    pod: t.0,
                    toleration: t.1,
                    selector: t.2,
                    node_affinity: t.3,
                    affinity: t.4,
                    spread: t.5,
                    bad_cap: t.6,
                    node_name: t.7,
                })
        }

        fn node_spec(i: usize, g: &NodeGen) -> flotilla_shared::NodeSpec {
            let name = format!("n{i}");
            let mut b = NodeBuilder::new(&name)
                .cpu(&g.cpu.to_string())
                .memory("16Gi")
                .pods(u32::from(g.slots))
                .label(LABEL_HOSTNAME, &name);
            if g.fpga > 0 {
                b = b.resource(FPGA, &g.fpga.to_string());
            }
            if let Some(z) = ["a", "b"].get(usize::from(g.zone)) {
                b = b.label(LABEL_TOPOLOGY_ZONE, z);
            }
            if let Some(d) = ["ssd", "hdd"].get(usize::from(g.disk)) {
                b = b.label("disk", d);
            }
            b = match g.taint {
                1 => b.taint("dedicated", "gpu", "NoSchedule"),
                2 => b.taint("dedicated", "gpu", "PreferNoSchedule"),
                3 => b.taint("maint", "", "NoExecute"),
                _ => b,
            };
            if g.cordoned {
                b = b.unschedulable();
            }
            b.build_spec()
        }

        fn pod_builder(name: &str, g: &PodGen) -> PodBuilder {
            let mut b = PodBuilder::new(name)
                .namespace(if g.other_ns { "other" } else { "default" })
                .cpu(&format!("{}m", u32::from(g.half_cpus) * 500))
                .memory("100Mi");
            if let Some(app) = ["web", "db"].get(usize::from(g.app)) {
                b = b.label("app", app);
            }
            if g.fpga > 0 {
                b = b.request(FPGA, &g.fpga.to_string());
            }
            if g.port {
                b = b.host_port(80);
            }
            if let Some(key) = [LABEL_TOPOLOGY_ZONE, LABEL_HOSTNAME].get(usize::from(g.anti)) {
                b = b.pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["db"], key),
                );
            }
            if let Some(k) = ["1", "2"].get(usize::from(g.cap)) {
                b = b.annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, k);
            }
            b
        }

        fn incoming_pod(g: &Incoming) -> PodInfo {
            let mut b = pod_builder("incoming", &g.pod);
            b = match g.toleration {
                1 => b.toleration("dedicated", "Equal", "gpu", "NoSchedule"),
                2 => b.toleration("", "Exists", "", ""),
                _ => b,
            };
            if g.selector {
                b = b.node_selector("disk", "ssd");
            }
            if g.node_affinity == 1 {
                b = b.required_affinity(LABEL_TOPOLOGY_ZONE, "In", &["a"]);
            }
            if g.affinity > 0 {
                let mut term = pod_affinity_term("app", "In", &["web"], LABEL_TOPOLOGY_ZONE);
                if g.affinity == 2 {
                    term.namespace_selector = Some(LabelSelector {
                        match_labels: Some([("team".to_owned(), "x".to_owned())].into()),
                        match_expressions: None,
                    });
                }
                b = b.pod_affinity(PodAffinityKind::Required, term);
            }
            match g.spread {
                1 => b = b.spread_constraint(hard_spread(LABEL_TOPOLOGY_ZONE, 1, "web")),
                2 => {
                    let mut c = hard_spread(LABEL_TOPOLOGY_ZONE, 1, "web");
                    c.min_domains = Some(3);
                    b = b.spread_constraint(c);
                }
                3 => {
                    let mut c = hard_spread(LABEL_HOSTNAME, 1, "web");
                    c.node_taints_policy = Some("Honor".into());
                    b = b.spread_constraint(c);
                }
                _ => {}
            }
            if g.bad_cap {
                b = b.annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, "zero");
            }
            if g.node_name {
                b = b.node_name("n0");
            }
            let mut pod: Pod = b.build();
            if g.node_affinity == 2 {
                pin_to_n0(&mut pod);
            }
            PodInfo::from_pod(Arc::new(pod)).expect("a valid pod")
        }

        /// Adds the required node affinity term `metadata.name In [n0]`
        /// (NodeAffinity's PreFilter narrows the nodes to it).
        fn pin_to_n0(pod: &mut Pod) {
            let spec = pod.spec.as_mut().expect("spec");
            let affinity = spec.affinity.get_or_insert_with(Default::default);
            affinity
                .node_affinity
                .get_or_insert_with(Default::default)
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Default::default)
                .node_selector_terms
                .push(NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec!["n0".into()]),
                    }]),
                });
        }

        fn namespaces() -> BTreeMap<String, BTreeMap<String, String>> {
            [("default", "x"), ("other", "y")]
                .into_iter()
                .map(|(ns, team)| (ns.to_owned(), [("team".to_owned(), team.to_owned())].into()))
                .collect()
        }

        /// A node's verdicts: the worker's and the arbiter's.
        struct Verdict {
            node: String,
            /// `Ok`: the status of the Filters on the node; `Err`: PreFilter
            /// rejected the pod, or left the node out of its node set.
            worker: Result<Status, Status>,
            arbiter: Result<(), String>,
        }

        /// Each node's verdicts (see [`Verdict`]).
        fn verdicts(nodes: &[NodeGen], bound: &[(PodGen, usize)], pod: &PodInfo) -> Vec<Verdict> {
            let (fw, served) = profile();
            let specs: Vec<_> = nodes
                .iter()
                .enumerate()
                .map(|(i, g)| node_spec(i, g))
                .collect();
            let placed: Vec<Arc<PodInfo>> = bound
                .iter()
                .enumerate()
                .map(|(k, (g, on))| {
                    let node = format!("n{}", on % nodes.len());
                    Arc::new(
                        pod_builder(&format!("b{k}"), g)
                            .node_name(&node)
                            .build_info(),
                    )
                })
                .collect();
            let namespaces = namespaces();

            // The worker: a node cache, its snapshot, the dry run.
            let cache = NodeCache::default();
            for s in &specs {
                cache.upsert_node(s.clone());
            }
            for (ns, labels) in &namespaces {
                cache.upsert_namespace(ns, labels.clone());
            }
            for p in &placed {
                cache.add_bound_pod(p.clone());
            }
            let mut snap = Snapshot::default();
            cache.update_snapshot(&mut snap);
            let pre = fw.run_pre_filter_plugins(pod, &snap);

            // The arbiter: its view of the same nodes and pods.
            let mut view_nodes: HashMap<Arc<str>, NodeInfo> = specs
                .iter()
                .map(|s| (s.name.clone(), NodeInfo::new(Arc::new(s.clone()))))
                .collect();
            for p in &placed {
                let on = p.node_name.as_deref().expect("bound");
                view_nodes.get_mut(on).expect("its node").add_pod(p.clone());
            }
            let anti = placed
                .iter()
                .filter(|p| arbiter::has_required_anti_affinity(p))
                .count();
            let mut kept = KeptCounts::default();

            let mut out = Vec::new();
            for s in &specs {
                let name = &*s.name;
                let worker = match &pre {
                    Err(st) => Err(st.clone()),
                    Ok(pre) if pre.node_names.as_ref().is_some_and(|n| !n.contains(name)) => {
                        Err(Status::unresolvable("filtered out by the prefilter result"))
                    }
                    Ok(pre) => {
                        let node = snap.get(name).expect("in the snapshot");
                        Ok(fw.filter_with_nominated_pods(pre, pod, node, &snap))
                    }
                };
                let mut view = BindView::new(&view_nodes, &namespaces, anti, &mut kept);
                let arbiter =
                    arbiter::check(&served.bind_checks, pod, &view_nodes[name], &[], &mut view)
                        .map_err(|r| r.reason(name));
                out.push(Verdict {
                    node: name.to_owned(),
                    worker,
                    arbiter,
                });
            }
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Same verdict on every node; where a Filter rejected the
            /// node, the arbiter gives its reason (`node <name>: <reason>`).
            #[test]
            fn the_arbiter_grants_exactly_what_the_filters_pass(
                nodes in prop::collection::vec(node_gen(), 1..6),
                bound in prop::collection::vec((pod_gen(), 0..6usize), 0..10),
                pod in incoming(),
            ) {
                let info = incoming_pod(&pod);
                for v in verdicts(&nodes, &bound, &info) {
                    let passes = v.worker.as_ref().is_ok_and(Status::is_success);
                    prop_assert_eq!(
                        passes,
                        v.arbiter.is_ok(),
                        "{}: the worker says {:?}, the arbiter {:?}",
                        &v.node,
                        &v.worker,
                        &v.arbiter
                    );
                    if let (Ok(st), Err(reason)) = (&v.worker, &v.arbiter) {
                        prop_assert_eq!(reason, &format!("node {}: {}", v.node, st.message()));
                    }
                }
            }
        }
    }
}
