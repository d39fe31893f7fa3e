//! `GangScheduling`: Kubernetes' own gang scheduling of `scheduling.k8s.io`
//! PodGroups (upstream `pkg/scheduler/framework/plugins/gangscheduling`,
//! KEP-4671 and KEP-5832). In the default profile, as in kube-scheduler
//! with the `GenericWorkload` feature; it concerns only pods that name a
//! PodGroup in `spec.schedulingGroup.podGroupName`.
//!
//! What runs where (the plugin itself holds no state; the checks live in the
//! worker's gang book, [`crate::gang::GangBook`], and in the coordinator):
//! - **PreEnqueue** ([`crate::gang::GangBook::pre_enqueue`], run by the cycle
//!   before PreFilter): a member whose PodGroup is not known yet, or whose
//!   `gang` group has fewer than `minCount` pods, is
//!   `UnschedulableAndUnresolvable` with upstream's message and waits for a
//!   pod or a PodGroup event. The coordinator holds members back, with the
//!   reason on the pod, while the PodGroup does not exist, is invalid
//!   (`minCount` < 1, neither or both of `basic` and `gang`), or the group's
//!   pods name different `schedulerName`s (upstream rejects the whole group
//!   then) — it is the one place that sees every pod of the group.
//! - **Reserve / Permit** (the worker, as for `Coscheduling`): members of a
//!   `gang` group wait assumed until `minCount` are placed (bound ones
//!   count), then go to the coordinator in one all-or-none `ProposeGang`;
//!   they wait at most 5 minutes (upstream's fixed `permitTimeoutDuration`;
//!   the API has no timeout field). `basic` members are bound one by one.
//! - **A member that fits nowhere rejects the group as a unit**: its
//!   waiting siblings are released at once (upstream 1.37 schedules a
//!   group in one pod group cycle and rejects it whole), rather than
//!   holding their room until the timeout.
//! - **Status**: the coordinator writes the condition
//!   `PodGroupInitiallyScheduled` (`PodGroupScheduled` in `v1alpha2`):
//!   `True`/`Scheduled` once `minCount` members are placed (terminal), else
//!   `False` with `Unschedulable` or `SchedulerError` and the message.

use flotilla_shared::framework::{ClusterEvent, ExtensionPoint, Plugin};

use super::names;

/// Registry name.
pub const NAME: &str = names::GANG_SCHEDULING;

/// Extension points served outside the cycle runner (upstream 1.36's:
/// PreEnqueue, Reserve, Permit).
pub const POINTS: &[ExtensionPoint] = &[
    ExtensionPoint::PreEnqueue,
    ExtensionPoint::Reserve,
    ExtensionPoint::Permit,
];

/// A waiting member can go on once another member arrives, one is bound,
/// or its PodGroup appears or changes (upstream registers unscheduled and
/// assigned `Pod/Add`, `PodGroup/Add|Update`).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::UnscheduledPodAdded,
    ClusterEvent::AssignedPodAdded,
    ClusterEvent::PodGroupChanged,
];

/// The plugin (it has no arguments).
#[derive(Debug, Clone, Copy, Default)]
pub struct GangScheduling;

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}
