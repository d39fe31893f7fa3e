//! `SchedulingGates`: the PreEnqueue plugin (upstream
//! `pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go`).
//! A pod whose `spec.schedulingGates` is not empty is kept out of activeQ
//! until every gate is removed.
//!
//! PreEnqueue runs in the queue, not in the scheduling cycle: when the
//! profile enables this plugin, [`crate::queue::SchedulingQueue`] (built
//! with [`crate::queue::QueueConfig::honour_scheduling_gates`]) asks
//! [`SchedulingGates::pre_enqueue`] for every pod it is given and parks a
//! gated one in its gated set, with this status's message as the reason.
//! Gates can only be removed from a pod (the API refuses adding one after
//! creation), so the pod update that removes the last gate is what releases
//! it: upstream registers `Pod/UpdatePodSchedulingGatesEliminated` for it;
//! here the queue's `add` of the updated pod does the same, so the plugin
//! registers no cluster event.

use flotilla_shared::PodInfo;
use flotilla_shared::framework::{Code, ExtensionPoint, Plugin, Status};

use super::names;

/// Registry name.
pub const NAME: &str = names::SCHEDULING_GATES;

/// The extension points it serves (run by the queue).
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::PreEnqueue];

/// Keeps gated pods out of activeQ.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedulingGates;

impl SchedulingGates {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        SchedulingGates
    }

    /// Upstream `PreEnqueue`: success for a pod without gates; otherwise
    /// `UnschedulableAndUnresolvable` with upstream's message
    /// `waiting for scheduling gates: [gate-a gate-b]` (Go's `%v` of the
    /// gate names, in spec order, space-separated).
    #[must_use]
    pub fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.scheduling_gates.is_empty() {
            return Status::success();
        }
        Status::new(
            Code::UnschedulableAndUnresolvable,
            format!(
                "waiting for scheduling gates: [{}]",
                pod.scheduling_gates.join(" ")
            ),
        )
        .with_plugin(NAME)
    }
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::PodBuilder;

    #[test]
    fn pods_without_gates_pass() {
        let pod = PodBuilder::new("p").build_info();
        assert_eq!(SchedulingGates.pre_enqueue(&pod), Status::success());
    }

    #[test]
    fn gated_pods_get_upstreams_message_with_every_gate_in_order() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["example.com/a"],
                "waiting for scheduling gates: [example.com/a]",
            ),
            (
                &["gate-b", "gate-a"],
                "waiting for scheduling gates: [gate-b gate-a]",
            ),
        ];
        for (gates, want) in cases {
            let pod = gates
                .iter()
                .fold(PodBuilder::new("p"), |b, g| b.scheduling_gate(g))
                .build_info();
            let st = SchedulingGates.pre_enqueue(&pod);
            assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
            assert_eq!(st.message(), *want);
            assert_eq!(st.plugin, "SchedulingGates");
        }
    }
}
