//! `PrioritySort`: the QueueSort plugin (upstream
//! `pkg/scheduler/framework/plugins/queuesort/priority_sort.go`): higher
//! `spec.priority` first, then earlier enqueue time.
//!
//! The order itself lives in the queue (`crate::queue`, whose activeQ heap
//! key compares exactly this); the plugin exists so configurations can name
//! it at `queueSort` / `multiPoint`, as upstream requires exactly one
//! QueueSort plugin per profile.

use flotilla_shared::framework::{ExtensionPoint, Plugin};

use super::names;

/// Registry name.
pub const NAME: &str = names::PRIORITY_SORT;

/// The extension points it serves.
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::QueueSort];

/// QueueSort by priority, then arrival.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
}
