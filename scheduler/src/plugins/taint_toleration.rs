//! `TaintToleration`: hard taints (`NoSchedule`, `NoExecute`) filter, soft
//! taints (`PreferNoSchedule`) score (upstream
//! `pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`).
//!
//! - **Filter**: the first taint with effect `NoSchedule` or `NoExecute` that
//!   no toleration tolerates rejects the node with
//!   `UnschedulableAndUnresolvable` `"node(s) had untolerated taint(s)"`
//!   (the v1.35+ text; older releases named the taint).
//! - **Bind check**: the Filter's rule
//!   ([`taints::has_untolerated_hard_taint`]) on the coordinator's view of
//!   the node, so a node tainted while a proposal was in flight does not
//!   get the pod.
//! - **Score**: the number of `PreferNoSchedule` taints the pod does not
//!   tolerate; `normalize_score` is `DefaultNormalizeScore(100, reverse)`, so
//!   the node with the most untolerated soft taints scores 0 and nodes with
//!   none score 100.

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, ExtensionPoint, FilterPlugin,
    MAX_NODE_SCORE, Plugin, ScorePlugin, Status, default_normalize_score, refuse_if,
};
use flotilla_shared::node_hot::{HotFilter, HotFlags, NodeHot};
use flotilla_shared::taints::{self, PREFER_NO_SCHEDULE};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::TAINT_TOLERATION;

/// Upstream's PreScore point, accepted in a configuration with nothing to
/// run: upstream's collects the pod's PreferNoSchedule tolerations for its
/// Score, and this Score tests the pod's tolerations itself.
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::PreScore];

/// Upstream reason text (v1.35+).
pub const REASON: &str = "node(s) had untolerated taint(s)";

/// A new node or a taint change can help.
const EVENTS: &[ClusterEvent] = &[ClusterEvent::NodeAdded, ClusterEvent::NodeTaintChanged];

/// Filter and Score plugin for node taints (default score weight 3).
#[derive(Debug, Clone, Copy, Default)]
pub struct TaintToleration;

impl TaintToleration {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        TaintToleration
    }
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

/// The Filter's rule on the arbiter's copy of the node.
impl BindCheck for TaintToleration {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        refuse_if(
            taints::has_untolerated_hard_taint(&pod.tolerations, &node.spec.taints),
            REASON,
        )
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if taints::has_untolerated_hard_taint(&pod.tolerations, &node.spec.taints) {
            Status::unresolvable(REASON).with_plugin(NAME)
        } else {
            Status::success()
        }
    }

    /// Passes every node without a `NoSchedule` / `NoExecute` taint.
    fn hot_filter(&self, _state: &CycleState, _pod: &PodInfo) -> Option<HotFilter> {
        Some(HotFilter {
            clear: HotFlags::NO_SCHEDULE_TAINT,
            ..HotFilter::ANY
        })
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // Upstream first narrows the tolerations to those with an empty or
        // PreferNoSchedule effect; `Toleration::tolerates` already rejects a
        // toleration whose (non-empty) effect differs from the taint's, so
        // testing all tolerations against PreferNoSchedule taints is the same.
        let count = node
            .spec
            .taints
            .iter()
            .filter(|t| t.effect == PREFER_NO_SCHEDULE && !taints::tolerated(&pod.tolerations, t))
            .count();
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    /// 0 intolerable `PreferNoSchedule` taints on a node that has none.
    fn score_hot(&self, _state: &CycleState, _pod: &PodInfo, node: &NodeHot) -> Option<i64> {
        (!node.flags.intersects(HotFlags::PREFER_NO_SCHEDULE_TAINT)).then_some(0)
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node(name: &str, taints: &[(&str, &str, &str)]) -> NodeInfo {
        let mut b = NodeBuilder::new(name);
        for (k, v, e) in taints {
            b = b.taint(k, v, e);
        }
        NodeInfo::new(Arc::new(b.build_spec()))
    }

    fn scores(pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<i64> {
        let state = CycleState::default();
        let mut s: Vec<i64> = nodes
            .iter()
            .map(|n| TaintToleration.score(&state, pod, n).unwrap())
            .collect();
        TaintToleration.normalize_score(&state, pod, &mut s);
        s
    }

    #[test]
    fn untolerated_no_schedule_or_no_execute_taint_rejects() {
        let state = CycleState::default();
        let pod = PodBuilder::new("p").build_info();
        for effect in ["NoSchedule", "NoExecute"] {
            let st = TaintToleration::new().filter(
                &state,
                &pod,
                &node("n", &[("dedicated", "gpu", effect)]),
            );
            assert_eq!(st.code, Code::UnschedulableAndUnresolvable, "{effect}");
            assert_eq!(st.reasons, ["node(s) had untolerated taint(s)"]);
            assert_eq!(st.plugin, "TaintToleration");
        }
        // A soft taint never filters.
        let soft = node("n", &[("dedicated", "gpu", "PreferNoSchedule")]);
        assert_eq!(
            TaintToleration.filter(&state, &pod, &soft),
            Status::success()
        );
    }

    #[test]
    fn tolerated_taints_pass_the_filter() {
        let state = CycleState::default();
        let n = node(
            "n",
            &[
                ("dedicated", "gpu", "NoSchedule"),
                ("zone", "", "NoExecute"),
            ],
        );
        let pod = PodBuilder::new("p")
            .toleration("dedicated", "Equal", "gpu", "NoSchedule")
            .toleration("zone", "Exists", "", "")
            .build_info();
        assert!(TaintToleration.filter(&state, &pod, &n).is_success());
        // Tolerating only one of the two hard taints is not enough.
        let half = PodBuilder::new("h")
            .toleration("dedicated", "Equal", "gpu", "NoSchedule")
            .build_info();
        assert!(TaintToleration.filter(&state, &half, &n).is_rejected());
        // Wrong value under Equal does not tolerate.
        let wrong = PodBuilder::new("w")
            .toleration("dedicated", "Equal", "cpu", "NoSchedule")
            .toleration("zone", "Exists", "", "")
            .build_info();
        assert!(TaintToleration.filter(&state, &wrong, &n).is_rejected());
        // Empty key + Exists tolerates everything.
        let all = PodBuilder::new("a")
            .toleration("", "Exists", "", "")
            .build_info();
        assert!(TaintToleration.filter(&state, &all, &n).is_success());
    }

    #[test]
    fn more_untolerated_soft_taints_score_lower() {
        // Upstream test "the more intolerable taints a node has, the lower
        // score it gets": raw counts 0, 1, 2 -> reverse normalize with max 2:
        // 100 - 0*100/2 = 100, 100 - 1*100/2 = 50, 100 - 2*100/2 = 0.
        let pod = PodBuilder::new("p")
            .toleration("foo", "Equal", "bar", "PreferNoSchedule")
            .build_info();
        let nodes = [
            node("n1", &[]),
            node("n2", &[("cpu-type", "arm64", "PreferNoSchedule")]),
            node(
                "n3",
                &[
                    ("cpu-type", "arm64", "PreferNoSchedule"),
                    ("disk-type", "ssd", "PreferNoSchedule"),
                ],
            ),
        ];
        assert_eq!(scores(&pod, &nodes), [100, 50, 0]);
    }

    #[test]
    fn only_prefer_no_schedule_taints_count() {
        // Upstream test "only taints and tolerations that have effect
        // PreferNoSchedule are checked": the NoSchedule taint on n1 is not
        // counted (raw 0); n2's PreferNoSchedule taint is not tolerated by a
        // NoSchedule toleration (raw 1) -> normalized 100, 0.
        let pod = PodBuilder::new("p")
            .toleration("cpu-type", "Equal", "arm64", "NoSchedule")
            .build_info();
        let nodes = [
            node("n1", &[("cpu-type", "arm64", "NoSchedule")]),
            node("n2", &[("cpu-type", "arm64", "PreferNoSchedule")]),
        ];
        assert_eq!(scores(&pod, &nodes), [100, 0]);
    }

    #[test]
    fn tolerated_soft_taints_do_not_count_and_all_zero_becomes_max() {
        // A toleration with empty effect tolerates PreferNoSchedule taints.
        let pod = PodBuilder::new("p")
            .toleration("cpu-type", "Exists", "", "")
            .build_info();
        let nodes = [
            node("n1", &[("cpu-type", "arm64", "PreferNoSchedule")]),
            node("n2", &[]),
        ];
        let state = CycleState::default();
        assert_eq!(TaintToleration.score(&state, &pod, &nodes[0]), Ok(0));
        // All raw scores 0 -> reverse normalization gives every node 100.
        assert_eq!(scores(&pod, &nodes), [100, 100]);
    }

    #[test]
    fn registers_node_added_and_taint_changed() {
        assert_eq!(
            TaintToleration.events_to_register(),
            [ClusterEvent::NodeAdded, ClusterEvent::NodeTaintChanged]
        );
    }
}
