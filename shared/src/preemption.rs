//! The mark preemption leaves on its victims: upstream's preemption sets the
//! pod condition `DisruptionTarget=True` (reason `PreemptionByScheduler`)
//! on each victim before deleting it, and DefaultPreemption reads it to tell
//! a victim still terminating (so a preemptor waiting for that room does not
//! evict more pods elsewhere). The coordinator writes it; the workers read
//! it.

use k8s_openapi::api::core::v1::{Pod, PodCondition};

/// Condition type upstream uses for pods about to be disrupted.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Its reason when the scheduler preempts the pod.
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// The condition a victim gets: `DisruptionTarget`, `True`,
/// `PreemptionByScheduler`, message `<scheduler_name>: preempting to
/// accommodate a higher priority pod` (`scheduler_name`: the preemptor's
/// `spec.schedulerName`).
#[must_use]
pub fn disruption_target_condition(scheduler_name: &str) -> PodCondition {
    PodCondition {
        type_: DISRUPTION_TARGET.to_owned(),
        status: "True".to_owned(),
        reason: Some(REASON_PREEMPTION_BY_SCHEDULER.to_owned()),
        message: Some(format!(
            "{scheduler_name}: preempting to accommodate a higher priority pod"
        )),
        ..Default::default()
    }
}

/// Whether `pod` carries that mark (its first `DisruptionTarget` condition
/// is `True` with reason `PreemptionByScheduler`; upstream
/// `podTerminatingByPreemption` also requires the pod to be terminating).
#[must_use]
pub fn marked_by_preemption(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == DISRUPTION_TARGET))
        .is_some_and(|c| {
            c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    #[test]
    fn the_mark_is_recognised_and_only_with_upstreams_reason() {
        let mut pod = Pod::default();
        assert!(!marked_by_preemption(&pod));
        let mut cond = disruption_target_condition("default-scheduler");
        assert_eq!(
            cond.message.as_deref(),
            Some("default-scheduler: preempting to accommodate a higher priority pod")
        );
        pod.status = Some(PodStatus {
            conditions: Some(vec![cond.clone()]),
            ..PodStatus::default()
        });
        assert!(marked_by_preemption(&pod));
        cond.reason = Some("EvictionByEvictionAPI".into());
        pod.status.as_mut().unwrap().conditions = Some(vec![cond]);
        assert!(!marked_by_preemption(&pod), "another disruption");
    }
}
