//! `MaxInstancesPerNode` (Flotilla; no upstream equivalent): a pod that
//! declares `scheduling.flotilla.dev/max-instances-per-node: "k"` fits only
//! on nodes running fewer than `k` pods of its app, the app being the
//! pod's namespace plus the value of the label [`MaxInstancesPerNodeArgs::label_key`]
//! (default `app`). This is the DLRM trace's `max_instance_per_node`
//! (a density cap per service); `k = 1` is what a required anti-affinity
//! on the hostname expresses.
//!
//! The rule lives in [`flotilla_shared::max_instances`]; the plugin's bind
//! check runs it on the coordinator's view (the arbiter refuses a proposal
//! that would make the `k + 1`-th instance, so the cap holds with several
//! workers).
//!
//! The cap is symmetric: the smallest `k` among the incoming pod and its
//! app's pods on the node applies, so a pod without a cap of its own is
//! still held to its app's (see [`flotilla_shared::max_instances`]).
//!
//! - PreFilter reads the annotation and the label once: `Skip` for pods
//!   with neither (Filter then does not run for them); a value
//!   that is not a positive integer, or a pod without the app label, is
//!   `UnschedulableAndUnresolvable` with a message naming the pod and the
//!   annotation (the pod is unschedulable until it is fixed).
//! - Filter counts the app's pods on the node (one pass over
//!   `NodeInfo::pods`, stopping at the `k`-th): `Unschedulable` with
//!   [`REASON_MAX_INSTANCES`] when there are already `k` (preemption may
//!   evict lower-priority instances).
//!
//! Not in the default profile: enable it by name (`multiPoint` or `filter`
//! plus `preFilter`), with args
//! `{kind: MaxInstancesPerNodeArgs, labelKey: app}`.

use std::borrow::Cow;

use serde::Deserialize;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin,
    PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::max_instances::{self, InstanceLimit, Violation};
pub use flotilla_shared::max_instances::{
    ANNOTATION_MAX_INSTANCES_PER_NODE, DEFAULT_APP_LABEL, REASON_MAX_INSTANCES,
};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;
use crate::framework::decode_args;

/// Registry name.
pub const NAME: &str = names::MAX_INSTANCES_PER_NODE;

/// `kind` of the args.
pub const ARGS_KIND: &str = "MaxInstancesPerNodeArgs";

/// CycleState key of the pod's limit.
const PRE_FILTER_KEY: &str = "PreFilterMaxInstancesPerNode";

/// A pod of the app leaving a node, or a new node, can make room.
const EVENTS: &[ClusterEvent] = &[ClusterEvent::NodeAdded, ClusterEvent::AssignedPodDeleted];

/// `MaxInstancesPerNodeArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct MaxInstancesPerNodeArgs {
    /// The pod label whose value names the app (with the namespace).
    /// Default `app`; must not be empty.
    pub label_key: String,
}

impl Default for MaxInstancesPerNodeArgs {
    fn default() -> Self {
        MaxInstancesPerNodeArgs {
            label_key: DEFAULT_APP_LABEL.to_owned(),
        }
    }
}

/// The plugin (PreFilter + Filter).
#[derive(Debug, Clone)]
pub struct MaxInstancesPerNode {
    label_key: String,
}

impl Default for MaxInstancesPerNode {
    fn default() -> Self {
        MaxInstancesPerNode {
            label_key: DEFAULT_APP_LABEL.to_owned(),
        }
    }
}

impl MaxInstancesPerNode {
    /// Builds the plugin from its `pluginConfig` args.
    ///
    /// # Errors
    /// Undecodable args, or an empty `labelKey` (the message starts with
    /// the field's path).
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let args: MaxInstancesPerNodeArgs = decode_args(args, ARGS_KIND)?;
        if args.label_key.trim().is_empty() {
            return Err("labelKey: Required value: the label naming a pod's app".to_owned());
        }
        Ok(MaxInstancesPerNode {
            label_key: args.label_key,
        })
    }

    /// The app label key.
    #[must_use]
    pub fn label_key(&self) -> &str {
        &self.label_key
    }
}

impl Plugin for MaxInstancesPerNode {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for MaxInstancesPerNode {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let status = match max_instances::limit_of(pod, &self.label_key) {
            Ok(None) => Status::skip(),
            Ok(Some(limit)) => {
                state.write(PRE_FILTER_KEY, limit);
                Status::success()
            }
            // Nothing on any node can fix the pod's own annotation.
            Err(e) => Status::unresolvable(e.to_string()).with_plugin(NAME),
        };
        (PreFilterResult::default(), status)
    }
}

/// PreFilter's reading of the limit and Filter's count, in one
/// ([`max_instances::check_placement`]), on the arbiter's copy of the node
/// (its pods only: also run with the pods nominated there).
impl BindCheck for MaxInstancesPerNode {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        match max_instances::check_placement(pod, node, &self.label_key) {
            Ok(()) => Ok(()),
            Err(Violation::Full) => Err(Cow::Borrowed(REASON_MAX_INSTANCES)),
            Err(Violation::Invalid(e)) => Err(Cow::Owned(e.to_string())),
        }
    }
}

impl FilterPlugin for MaxInstancesPerNode {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let limit = match state.read_pre_filter::<InstanceLimit>(PRE_FILTER_KEY, NAME) {
            Ok(limit) => limit,
            Err(st) => return st,
        };
        if max_instances::fits(limit, &pod.uid, node, &self.label_key) {
            Status::success()
        } else {
            Status::unschedulable(REASON_MAX_INSTANCES).with_plugin(NAME)
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, app_pod};

    fn node_with(pods: Vec<PodInfo>) -> NodeInfo {
        NodeBuilder::new("n1").pods(110).build_info_with(pods)
    }

    /// PreFilter then Filter, as the framework runs them.
    fn run(pl: &MaxInstancesPerNode, pod: &PodInfo, node: &NodeInfo) -> Status {
        let mut state = CycleState::default();
        let lister = FakeLister::new(vec![node.clone()]);
        let (_, st) = pl.pre_filter(&mut state, pod, &lister);
        if st.code != Code::Success {
            return st;
        }
        pl.filter(&state, pod, node)
    }

    #[test]
    fn the_kth_instance_on_a_node_is_refused_with_the_reason() {
        let pl = MaxInstancesPerNode::default();
        let pod = app_pod("p", "ns", "web", Some("2"));
        let full = node_with(vec![
            app_pod("a", "ns", "web", Some("2")),
            app_pod("b", "ns", "web", Some("2")),
        ]);
        let st = run(&pl, &pod, &full);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(
            st.reasons,
            ["node(s) already run the maximum number of instances of this app"]
        );
        assert_eq!(st.plugin, "MaxInstancesPerNode");
        let one = node_with(vec![app_pod("a", "ns", "web", Some("2"))]);
        assert_eq!(run(&pl, &pod, &one), Status::success(), "1 of 2");
    }

    #[test]
    fn other_apps_and_other_namespaces_do_not_count() {
        let pl = MaxInstancesPerNode::default();
        let pod = app_pod("p", "ns", "web", Some("1"));
        let n = node_with(vec![
            app_pod("a", "ns", "db", Some("1")),
            app_pod("b", "other", "web", Some("1")),
            PodBuilder::new("c").namespace("ns").build_info(),
        ]);
        assert_eq!(run(&pl, &pod, &n), Status::success());
    }

    #[test]
    fn the_label_key_comes_from_the_args() {
        let args = serde_json::json!({"kind": ARGS_KIND, "labelKey": "service"});
        let pl = MaxInstancesPerNode::from_args(Some(&args)).expect("args");
        assert_eq!(pl.label_key(), "service");
        let pod = PodBuilder::new("p")
            .label("service", "s")
            .annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, "1")
            .build_info();
        let n = node_with(vec![
            PodBuilder::new("a").label("service", "s").build_info(),
        ]);
        assert!(run(&pl, &pod, &n).is_rejected());
        let e = MaxInstancesPerNode::from_args(Some(&serde_json::json!({"labelKey": ""})))
            .expect_err("empty key");
        assert!(e.starts_with("labelKey:"), "{e}");
        assert!(MaxInstancesPerNode::from_args(Some(&serde_json::json!({"x": 1}))).is_err());
    }

    #[test]
    fn a_pod_without_a_cap_is_held_to_its_apps() {
        let pl = MaxInstancesPerNode::default();
        let pod = app_pod("p", "ns", "web", None);
        let n = node_with(vec![app_pod("a", "ns", "web", Some("1"))]);
        assert!(run(&pl, &pod, &n).is_rejected());
        let n = node_with(vec![app_pod("a", "ns", "web", None)]);
        assert_eq!(run(&pl, &pod, &n), Status::success());
    }

    #[test]
    fn pods_without_the_app_label_or_the_annotation_skip_the_filter() {
        let pl = MaxInstancesPerNode::default();
        let pod = PodBuilder::new("p").namespace("ns").build_info();
        let (_, st) = pl.pre_filter(
            &mut CycleState::default(),
            &pod,
            &FakeLister::new(Vec::new()),
        );
        assert_eq!(st.code, Code::Skip);
    }

    #[test]
    fn a_malformed_annotation_is_unresolvable_and_names_pod_and_annotation() {
        let pl = MaxInstancesPerNode::default();
        let pod = app_pod("p", "ns", "web", Some("lots"));
        let st = run(&pl, &pod, &node_with(Vec::new()));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            st.message(),
            "pod ns/p: annotation scheduling.flotilla.dev/max-instances-per-node: \"lots\" is not \
             a positive integer"
        );
        let no_app = PodBuilder::new("q")
            .annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, "2")
            .build_info();
        let st = run(&pl, &no_app, &node_with(Vec::new()));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert!(st.message().contains("needs the label \"app\""), "{st}");
    }
}
