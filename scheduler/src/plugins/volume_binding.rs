//! `VolumeBinding`: a pod's claims must be bound to PVs the node can reach,
//! or bindable or provisionable there (upstream
//! `pkg/scheduler/framework/plugins/volumebinding/volume_binding.go`).
//!
//! - PreFilter: [`binding::pod_claims`] sorts the pod's claims into bound
//!   and unbound `WaitForFirstConsumer` ones and gathers the candidate
//!   PVs; `Skip` for a pod without claims. A claim not found, being
//!   deleted, `Lost`, an ephemeral claim not created yet or not the pod's,
//!   or an unbound `Immediate` claim (`pod has unbound immediate
//!   PersistentVolumeClaims`) reject the pod `UnschedulableAndUnresolvable`
//!   with upstream's text; a class without a binding mode is an `Error`.
//! - Filter: [`binding::find_pod_volumes`]: one
//!   `UnschedulableAndUnresolvable` status whose reasons come in upstream's
//!   order (`node(s) had volume node affinity conflict`, `node(s) didn't
//!   find available persistent volumes to bind`, `node(s) unavailable due
//!   to one or more pvc(s) bound to non-existent pv(s)`). Storage capacity
//!   is not checked (see [`binding`]).
//!
//! # Args
//! [`VolumeBindingArgs`]: `bindTimeoutSeconds` (default 600, not
//! negative), how long PreBind is to wait for the claims to be bound.
//!
//! # Reserve and PreBind, at the coordinator
//! In Flotilla the coordinator is the one writer, so the binding side runs
//! there, once the arbiter granted the placement: the plugin's
//! [`BindCheck`] re-runs PreFilter and Filter on the arbiter's view for the
//! granted node and hands over the [`VolumePlan`] (Reserve assumes it in
//! the arbiter's view, so no other grant takes the same PV; PreBind writes
//! each PV's `claimRef` and each provisioned claim's
//! `volume.kubernetes.io/selected-node`, then waits up to
//! `bindTimeoutSeconds` for the claims to be bound before the pod's
//! Binding; a failure unreserves and the pod backs off). A worker's own
//! Reserve and PreBind do nothing ([`POINTS`]).

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, ExtensionPoint, FilterPlugin,
    Plugin, PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::volumes::binding::{self, PodClaims};
use flotilla_shared::{NodeInfo, PodInfo};
use serde::Deserialize;

use super::names;
use crate::framework::decode_args;

/// Registry name.
pub const NAME: &str = names::VOLUME_BINDING;

/// The args kind in `pluginConfig`.
pub const ARGS_KIND: &str = "VolumeBindingArgs";

/// Upstream default of `bindTimeoutSeconds` (v1 defaulting), in seconds.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: u64 = 600;

const STATE_KEY: &str = "PreFilterVolumeBinding";

/// Extension points served outside the worker's cycle: Reserve and
/// PreBind, which the coordinator runs after the grant (see the module
/// docs); PreScore and Score are accepted with nothing to run (upstream
/// scores storage capacity there only with the `StorageCapacityScoring`
/// gate, and Flotilla does not track capacity).
pub const POINTS: &[ExtensionPoint] = &[
    ExtensionPoint::PreScore,
    ExtensionPoint::Score,
    ExtensionPoint::Reserve,
    ExtensionPoint::PreBind,
];

/// Upstream's events: a StorageClass added (`Update` is not told apart
/// here), a claim or PV added or updated, a node added or its labels or
/// taints changed, a CSINode or CSIDriver added or updated.
/// `CSIStorageCapacity` changes are not watched (capacity is not checked).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::StorageClassAdded,
    ClusterEvent::PvcChanged,
    ClusterEvent::PvChanged,
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeLabelChanged,
    ClusterEvent::NodeTaintChanged,
    ClusterEvent::CsiNodeChanged,
    ClusterEvent::CsiDriverChanged,
];

/// `VolumeBindingArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeBindingArgs {
    /// `bindTimeoutSeconds`: how long PreBind waits for the claims to be
    /// bound, in seconds. Default 600; 0 is accepted, as upstream accepts
    /// it (every PreBind that has to wait then times out).
    pub bind_timeout_seconds: u64,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        VolumeBindingArgs {
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
        }
    }
}

/// The args as written (int64 upstream), before range checks.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawArgs {
    bind_timeout_seconds: Option<i64>,
    shape: Option<serde_json::Value>,
}

impl VolumeBindingArgs {
    /// Decodes `pluginConfig` args (`None` or an absent field: defaults)
    /// and validates them as upstream's `ValidateVolumeBindingArgs` does
    /// with the `StorageCapacityScoring` gate off.
    ///
    /// # Errors
    /// A message starting with the field path:
    /// - `bindTimeoutSeconds: Invalid value: -1: invalid
    ///   BindTimeoutSeconds, should not be a negative value`;
    /// - ``shape: Invalid value: ...: unexpected field `shape`, remove it
    ///   or turn on the feature gate StorageCapacityScoring`` (Flotilla has
    ///   no storage capacity scoring);
    /// - unknown fields, wrong types or a wrong `kind`.
    pub fn decode(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let raw: RawArgs = decode_args(args, ARGS_KIND)?;
        if let Some(shape) = raw.shape {
            return Err(format!(
                "shape: Invalid value: {shape}: unexpected field `shape`, remove it or turn on \
                 the feature gate StorageCapacityScoring"
            ));
        }
        let secs = raw
            .bind_timeout_seconds
            .unwrap_or(DEFAULT_BIND_TIMEOUT_SECONDS.cast_signed());
        let Ok(bind_timeout_seconds) = u64::try_from(secs) else {
            return Err(format!(
                "bindTimeoutSeconds: Invalid value: {secs}: invalid BindTimeoutSeconds, should \
                 not be a negative value"
            ));
        };
        Ok(VolumeBindingArgs {
            bind_timeout_seconds,
        })
    }

    /// `bindTimeoutSeconds` as a duration.
    #[must_use]
    pub fn bind_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.bind_timeout_seconds)
    }
}

/// VolumeBinding: PreFilter and Filter in the worker's cycle; the bind
/// check, Reserve and PreBind at the coordinator (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeBinding {
    args: VolumeBindingArgs,
}

impl VolumeBinding {
    /// The plugin with `args`.
    #[must_use]
    pub const fn new(args: VolumeBindingArgs) -> Self {
        VolumeBinding { args }
    }

    /// The plugin from its `pluginConfig` args.
    ///
    /// # Errors
    /// As [`VolumeBindingArgs::decode`].
    pub fn from_config(args: Option<&serde_json::Value>) -> Result<Self, String> {
        VolumeBindingArgs::decode(args).map(Self::new)
    }

    /// The plugin's args.
    #[must_use]
    pub const fn args(&self) -> VolumeBindingArgs {
        self.args
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        match binding::pod_claims(pod, &cluster.volumes()) {
            Err(r) => (PreFilterResult::default(), r.into_status(NAME)),
            Ok(None) => (PreFilterResult::default(), Status::skip()),
            Ok(Some(claims)) => {
                state.write(STATE_KEY, claims);
                (PreFilterResult::default(), Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let claims = match state.read_pre_filter::<PodClaims>(STATE_KEY, NAME) {
            Ok(c) => c,
            Err(st) => return st,
        };
        match binding::find_pod_volumes(claims, node.name(), &node.spec.labels) {
            Ok(_) => Status::success(),
            Err(conflicts) => conflicts.into_status(NAME),
        }
    }
}

impl BindCheck for VolumeBinding {
    /// PreFilter and Filter again, on the arbiter's view (where the PVs
    /// other grants reserved are shown taken); when the pod's claims are to
    /// be bound or provisioned on `node`, sets [`BindView::volume_plan`].
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult {
        view.volume_plan = binding::plan(
            pod,
            &node.spec.name,
            &node.spec.labels,
            view.volumes,
            self.args.bind_timeout(),
        )?;
        Ok(())
    }

    /// It reads the volume objects of the view.
    fn node_local(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, storage_class};
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, pre_filter_then_filter};
    use flotilla_shared::volumes::VolumeState;
    use serde_json::json;
    use std::sync::Arc;

    const HOST: &str = "kubernetes.io/hostname";

    fn lister() -> FakeLister {
        let mut s = VolumeState::default();
        s.apply_storage_class(&storage_class(
            "local",
            binding::NOT_SUPPORTED_PROVISIONER,
            Some("WaitForFirstConsumer"),
        ))
        .unwrap();
        s.apply_storage_class(&storage_class("fast", "csi.example.com", Some("Immediate")))
            .unwrap();
        s.apply_pv(
            &PvBuilder::new("pv-1")
                .class("local")
                .capacity("10Gi")
                .access_mode("ReadWriteOnce")
                .available()
                .node_affinity(HOST, "In", &["n1"])
                .build(),
        )
        .unwrap();
        s.apply_pv(
            &PvBuilder::new("pv-bound")
                .node_affinity(HOST, "In", &["n2"])
                .build(),
        )
        .unwrap();
        for c in [
            PvcBuilder::new("later")
                .class("local")
                .access_mode("ReadWriteOnce")
                .storage("1Gi"),
            PvcBuilder::new("bound").bound_to("pv-bound"),
            PvcBuilder::new("gone").bound_to("pv-gone"),
            PvcBuilder::new("now").class("fast"),
        ] {
            s.apply_claim(&c.build()).unwrap();
        }
        let nodes = ["n1", "n2"]
            .map(|n| NodeBuilder::new(n).label(HOST, n).build_info_with([]))
            .to_vec();
        let mut l = FakeLister::new(nodes);
        l.volumes = Arc::new(s);
        l
    }

    fn run(claims: &[&str]) -> Result<Vec<Status>, Status> {
        let pod = PodBuilder::new("p").pvc_volumes(claims).build_info();
        pre_filter_then_filter(&VolumeBinding::default(), &pod, &lister())
    }

    fn unresolvable(reasons: &[&'static str]) -> Status {
        Status {
            code: Code::UnschedulableAndUnresolvable,
            reasons: reasons.iter().map(|r| (*r).into()).collect(),
            plugin: NAME,
        }
    }

    #[test]
    fn filter_reports_every_reason_in_one_status() {
        assert_eq!(
            run(&["later", "bound"]).unwrap(),
            [
                unresolvable(&[binding::REASON_NODE_CONFLICT]),
                unresolvable(&[binding::REASON_BIND_CONFLICT]),
            ],
            "n1 has the free PV but not the bound one; n2 the other way round"
        );
        assert_eq!(
            run(&["gone", "later"]).unwrap(),
            [
                unresolvable(&[binding::REASON_PV_NOT_EXIST]),
                unresolvable(&[binding::REASON_BIND_CONFLICT, binding::REASON_PV_NOT_EXIST]),
            ]
        );
        assert_eq!(run(&["later"]).unwrap()[0], Status::success());
    }

    #[test]
    fn prefilter_skips_pods_without_claims_and_rejects_unbound_immediate_ones() {
        assert_eq!(run(&[]), Err(Status::skip()));
        assert_eq!(
            run(&["now"]),
            Err(unresolvable(&[
                "pod has unbound immediate PersistentVolumeClaims"
            ]))
        );
        assert_eq!(
            run(&["ghost"]),
            Err(unresolvable(&["persistentvolumeclaim \"ghost\" not found"]))
        );
    }

    #[test]
    fn filter_without_prefilter_is_an_error() {
        let st = VolumeBinding::default().filter(
            &CycleState::default(),
            &PodBuilder::new("p").build_info(),
            &NodeBuilder::new("n1").build_info_with([]),
        );
        assert_eq!(st.code, Code::Error);
    }

    #[test]
    fn args_default_and_validate_as_upstream() {
        assert_eq!(
            VolumeBindingArgs::decode(None)
                .unwrap()
                .bind_timeout_seconds,
            600
        );
        let a = json!({"kind": "VolumeBindingArgs", "bindTimeoutSeconds": 30});
        let p = VolumeBinding::from_config(Some(&a)).unwrap();
        assert_eq!(p.args().bind_timeout(), std::time::Duration::from_secs(30));
        assert_eq!(
            VolumeBindingArgs::decode(Some(&json!({"bindTimeoutSeconds": 0})))
                .unwrap()
                .bind_timeout_seconds,
            0,
            "upstream only refuses negative values"
        );
        assert_eq!(
            VolumeBindingArgs::decode(Some(&json!({"bindTimeoutSeconds": -1}))).unwrap_err(),
            "bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be \
             a negative value"
        );
        let e = VolumeBindingArgs::decode(Some(&json!({"shape": []}))).unwrap_err();
        assert!(
            e.starts_with("shape: Invalid value: []: unexpected field `shape`"),
            "{e}"
        );
        let e = VolumeBindingArgs::decode(Some(&json!({"bindTimeout": 5}))).unwrap_err();
        assert!(e.contains("bindTimeout"), "{e}");
        let e = VolumeBindingArgs::decode(Some(&json!({"bindTimeoutSeconds": "5"}))).unwrap_err();
        assert!(e.starts_with("bindTimeoutSeconds: "), "{e}");
    }

    #[test]
    fn registers_upstream_events_in_the_default_profile() {
        assert_eq!(VolumeBinding::default().name(), "VolumeBinding");
        assert_eq!(VolumeBinding::default().events_to_register(), EVENTS);
        assert!(!names::NOT_IMPLEMENTED.contains(&NAME));
        assert!(
            crate::framework::Registry::in_tree()
                .names()
                .contains(&NAME)
        );
        assert!(
            crate::framework::default_multi_point()
                .iter()
                .any(|p| p.name == NAME)
        );
    }

    #[test]
    fn the_bind_check_plans_the_bindings_the_filter_found() {
        use flotilla_shared::framework::{BindCheck, BindView, KeptCounts};
        use flotilla_shared::volumes::binding::StaticBinding;
        use std::collections::{BTreeMap, HashMap};
        let l = lister();
        let nodes: HashMap<Arc<str>, NodeInfo> = ["n1", "n2"]
            .map(|n| {
                (
                    Arc::from(n),
                    NodeBuilder::new(n).label(HOST, n).build_info_with([]),
                )
            })
            .into_iter()
            .collect();
        let ns = BTreeMap::new();
        let mut kept = KeptCounts::default();
        let plugin = VolumeBinding::new(VolumeBindingArgs {
            bind_timeout_seconds: 7,
        });
        let pod = PodBuilder::new("p").pvc_volumes(&["later"]).build_info();
        let mut view = BindView::new(&nodes, &ns, 0, &mut kept).with_volumes(&l.volumes);
        assert_eq!(
            plugin.check_bind(&pod, &nodes["n2"], &mut view),
            Err(binding::REASON_BIND_CONFLICT.into()),
            "pv-1 reaches n1 only"
        );
        assert_eq!(view.volume_plan, None);
        plugin.check_bind(&pod, &nodes["n1"], &mut view).unwrap();
        let plan = view.volume_plan.take().expect("a plan");
        assert_eq!(&*plan.node, "n1");
        assert_eq!(plan.bind_timeout, std::time::Duration::from_secs(7));
        assert_eq!(
            plan.decisions.static_bindings,
            [StaticBinding {
                claim: "later".into(),
                pv: "pv-1".into()
            }]
        );
        // Bound claims only: nothing to plan.
        let bound = PodBuilder::new("q").pvc_volumes(&["bound"]).build_info();
        plugin.check_bind(&bound, &nodes["n2"], &mut view).unwrap();
        assert_eq!(view.volume_plan, None);
        assert!(!BindCheck::node_local(&plugin));
    }
}
