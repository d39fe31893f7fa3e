//! `Coscheduling`: gang scheduling of PodGroups (kubernetes-sigs
//! scheduler-plugins `pkg/coscheduling/coscheduling.go`, `core/core.go`).
//! Not in the default plugin list: enable it in a profile, as upstream
//! (`multiPoint` or `preFilter` + `postFilter` + `permit`), e.g.
//!
//! ```yaml
//! profiles:
//! - schedulerName: default-scheduler
//!   plugins:
//!     multiPoint:
//!       enabled:
//!       - name: Coscheduling
//!   pluginConfig:
//!   - name: Coscheduling
//!     args:
//!       permitWaitingTimeSeconds: 60
//!       podGroupBackoffSeconds: 0
//! ```
//!
//! What runs where:
//! - **PreFilter** (here): a member of a group that was backed off recently,
//!   or of a group with fewer than `minMember` pods, is
//!   `UnschedulableAndUnresolvable` with upstream's message; pods without
//!   the label, or whose PodGroup does not exist, pass.
//! - **Permit / Unreserve / PostFilter** run in the worker
//!   ([`crate::gang`], `worker.rs`): members wait assumed until `minMember`
//!   are placed, then go to the coordinator as one all-or-none `ProposeGang`;
//!   a missing PodGroup is rejected at Permit (`PodGroup not found`); a
//!   member that fits nowhere rejects its waiting siblings unless the group
//!   misses ≤ 10 % of `minMember`.
//! - **QueueSort** (upstream: priority, then the PodGroup's creation time) is
//!   **not** implemented: the queue keeps PrioritySort's order. Members of a
//!   group arrive together (one worker), so they are still tried close
//!   together.
//! - `spec.minResources` is not checked at PreFilter (upstream's cluster
//!   resource pre-check): the atomic grant refuses a gang that does not fit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use flotilla_shared::PodInfo;
use flotilla_shared::framework::{
    ClusterEvent, CycleState, ExtensionPoint, Plugin, PreFilterPlugin, PreFilterResult,
    SharedLister, Status,
};

use super::names;
use crate::gang::GangBook;

/// Registry name.
pub const NAME: &str = names::COSCHEDULING;

/// Args kind in `pluginConfig`.
pub const ARGS_KIND: &str = "CoschedulingArgs";

/// Extension points served outside the cycle runner (by the worker).
pub const POINTS: &[ExtensionPoint] = &[
    ExtensionPoint::PostFilter,
    ExtensionPoint::Reserve,
    ExtensionPoint::Permit,
];

/// A rejected member can pass once more siblings exist or its PodGroup
/// changes (upstream registers `Pod/Add` and PodGroup `Add|Update`).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::UnscheduledPodAdded,
    ClusterEvent::PodGroupChanged,
];

/// `CoschedulingArgs` as written in `pluginConfig` (upstream
/// `apis/config/types.go`; defaults from `v1/defaults.go`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct CoschedulingArgs {
    /// Default wait at Permit for groups without `scheduleTimeoutSeconds`,
    /// in seconds. Defaults to 60.
    pub permit_waiting_time_seconds: i64,
    /// How long a group's members are rejected at PreFilter after a member
    /// failed and the waiting siblings were rejected, in seconds; 0 (the
    /// default) disables it.
    pub pod_group_backoff_seconds: i64,
}

impl Default for CoschedulingArgs {
    fn default() -> Self {
        CoschedulingArgs {
            permit_waiting_time_seconds: 60,
            pod_group_backoff_seconds: 0,
        }
    }
}

/// The plugin: reads the worker's [`GangBook`].
#[derive(Debug, Clone)]
pub struct Coscheduling {
    book: Arc<GangBook>,
}

impl Coscheduling {
    /// The plugin over `book`, configured with `args` (written into the
    /// book, where the worker's Permit reads them).
    ///
    /// # Errors
    /// A negative `permitWaitingTimeSeconds` or `podGroupBackoffSeconds`,
    /// naming the field.
    pub fn new(book: Arc<GangBook>, args: &CoschedulingArgs) -> Result<Self, String> {
        let wait = u64::try_from(args.permit_waiting_time_seconds).map_err(|_| {
            format!(
                "permitWaitingTimeSeconds: must not be negative, got {}",
                args.permit_waiting_time_seconds
            )
        })?;
        let backoff = u64::try_from(args.pod_group_backoff_seconds).map_err(|_| {
            format!(
                "podGroupBackoffSeconds: must not be negative, got {}",
                args.pod_group_backoff_seconds
            )
        })?;
        book.configure(
            Duration::from_secs(wait),
            (backoff > 0).then(|| Duration::from_secs(backoff)),
        );
        Ok(Coscheduling { book })
    }

    /// The book this plugin reads.
    #[must_use]
    pub fn book(&self) -> &Arc<GangBook> {
        &self.book
    }
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for Coscheduling {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _lister: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        match self.book.pre_filter(pod, Instant::now()) {
            Ok(()) => (PreFilterResult::default(), Status::success()),
            // Unresolvable: preemption cannot help (upstream's comment).
            Err(m) => (
                PreFilterResult::default(),
                Status::unresolvable(m).with_plugin(NAME),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::pod_group::{LABEL_POD_GROUP, PodGroup};
    use flotilla_shared::testing::{FakeLister, PodBuilder};

    #[test]
    fn args_default_and_validate() {
        let a: CoschedulingArgs = crate::framework::decode_args(None, ARGS_KIND).unwrap();
        assert_eq!(a.permit_waiting_time_seconds, 60);
        assert_eq!(a.pod_group_backoff_seconds, 0);
        let bad = CoschedulingArgs {
            pod_group_backoff_seconds: -1,
            ..CoschedulingArgs::default()
        };
        let err = Coscheduling::new(Arc::new(GangBook::new()), &bad).unwrap_err();
        assert_eq!(err, "podGroupBackoffSeconds: must not be negative, got -1");
        let v = serde_json::json!({"permitWaitingTimeSeconds": "x"});
        let err =
            crate::framework::decode_args::<CoschedulingArgs>(Some(&v), ARGS_KIND).unwrap_err();
        assert!(err.starts_with("permitWaitingTimeSeconds"), "{err}");
    }

    #[test]
    fn pre_filter_rejects_a_short_group_as_unresolvable() {
        let book = Arc::new(GangBook::new());
        let p = Coscheduling::new(book.clone(), &CoschedulingArgs::default()).unwrap();
        let mut g = PodGroup::default();
        g.metadata.name = Some("pg".into());
        g.metadata.namespace = Some("default".into());
        g.spec.min_member = 2;
        book.apply_group(&g);
        let pod = PodBuilder::new("p1")
            .label(LABEL_POD_GROUP, "pg")
            .build_info();
        book.pod_pending(&pod);
        let lister = FakeLister::default();
        let (_, st) = p.pre_filter(&mut CycleState::default(), &pod, &lister);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            st.message(),
            "pre-filter pod p1 cannot find enough sibling pods, current pods number: 1, minMember of group: 2"
        );
        let sibling = PodBuilder::new("p2")
            .label(LABEL_POD_GROUP, "pg")
            .build_info();
        book.pod_pending(&sibling);
        let (_, st) = p.pre_filter(&mut CycleState::default(), &pod, &lister);
        assert!(st.is_success());
    }
}
