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
//! - **Score**: prefers nodes where those resources are least used: for each
//!   resource, the share of the node's allocatable still free once the pod is
//!   placed, 0..=100, averaged over the pod's vendor resources (units are the
//!   resource's own integer units, e.g. devices).
//! - **Args** (`pluginConfig`, kind `VendorResourcesArgs`):
//!   `resourcePrefix` (default `example.com/`, must end with `/`).
//!
//! Run it: `cargo run --example vendor_resources` schedules one pod on a
//! three-node cluster and prints each node's verdict. Its tests run with
//! `cargo test --workspace` (see `[[example]]` in `Cargo.toml`). The guide
//! is in `docs/plugins.md`.

use std::sync::Arc;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::config::{self, SchedulerConfig};
use flotilla_scheduler::framework::{PluginHandle, decode_args};
use flotilla_scheduler::{Framework, Registry};
use flotilla_shared::framework::{
    ClusterEvent, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, SharedLister, Status,
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
    /// Filter, PreScore and Score.
    #[must_use]
    pub fn factory() -> flotilla_scheduler::framework::PluginFactory {
        Arc::new(|args| {
            let p = Arc::new(VendorResources::from_args(args)?);
            Ok(PluginHandle::new(p.clone())
                .pre_filter(p.clone())
                .filter(p.clone())
                .pre_score(p.clone())
                .score(p))
        })
    }

    fn requests(&self, pod: &PodInfo) -> Vec<(Arc<str>, i64)> {
        pod.requests
            .scalar
            .iter()
            .filter(|(name, qty)| name.starts_with(&self.prefix) && *qty > 0)
            .cloned()
            .collect()
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
        for (name, qty) in wanted {
            let alloc = node.spec.allocatable.scalar(name);
            if alloc <= 0 {
                return Status::unresolvable(format!("node(s) didn't have vendor resource {name}"))
                    .with_plugin(NAME);
            }
            if node.requested.scalar(name) + qty > alloc {
                return Status::unschedulable(format!("node(s) didn't have enough free {name}"))
                    .with_plugin(NAME);
            }
        }
        Status::success()
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
}
