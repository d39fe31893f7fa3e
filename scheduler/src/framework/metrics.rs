//! A profile's handles into the process metrics
//! ([`flotilla_shared::metrics`]), resolved once when the framework is
//! built, so the cycle records without label lookups: attempts and their
//! latency by result, extension-point durations, and (sampled) plugin
//! execution durations.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_shared::framework::{Code, ExtensionPoint};
use flotilla_shared::metrics::metrics;
use prometheus::{Histogram, IntCounter};

/// How a scheduling attempt ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// Placed and bound.
    Scheduled,
    /// Fits nowhere.
    Unschedulable,
    /// An internal error (a plugin, an extender, a failed Binding).
    Error,
}

impl AttemptResult {
    const ALL: [AttemptResult; 3] = [
        AttemptResult::Scheduled,
        AttemptResult::Unschedulable,
        AttemptResult::Error,
    ];

    /// Upstream's label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "scheduled",
            AttemptResult::Unschedulable => "unschedulable",
            AttemptResult::Error => "error",
        }
    }

    const fn index(self) -> usize {
        match self {
            AttemptResult::Scheduled => 0,
            AttemptResult::Unschedulable => 1,
            AttemptResult::Error => 2,
        }
    }
}

const CODES: [Code; 5] = [
    Code::Success,
    Code::Error,
    Code::Unschedulable,
    Code::UnschedulableAndUnresolvable,
    Code::Skip,
];

const fn code_index(c: Code) -> usize {
    match c {
        Code::Success => 0,
        Code::Error => 1,
        Code::Unschedulable => 2,
        Code::UnschedulableAndUnresolvable => 3,
        Code::Skip => 4,
    }
}

/// Extension points whose duration a profile records.
pub const TIMED_POINTS: [ExtensionPoint; 6] = [
    ExtensionPoint::PreFilter,
    ExtensionPoint::Filter,
    ExtensionPoint::PostFilter,
    ExtensionPoint::PreScore,
    ExtensionPoint::Score,
    ExtensionPoint::Permit,
];

/// One profile's metric handles.
pub struct ProfileMetrics {
    attempts: [IntCounter; 3],
    attempt_duration: [Histogram; 3],
    points: HashMap<ExtensionPoint, [Histogram; 5]>,
    /// Looked up on every timed plugin call: a fast hasher.
    plugins: foldhash::HashMap<(&'static str, ExtensionPoint), [Histogram; 5]>,
}

impl std::fmt::Debug for ProfileMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileMetrics").finish_non_exhaustive()
    }
}

fn by_code(f: impl Fn(Code) -> Histogram) -> [Histogram; 5] {
    CODES.map(f)
}

impl ProfileMetrics {
    /// The handles of profile `profile`, with per-plugin handles for
    /// `plugins` (name, extension point).
    pub(crate) fn new(profile: &str, plugins: &[(&'static str, ExtensionPoint)]) -> Self {
        let m = metrics();
        ProfileMetrics {
            attempts: AttemptResult::ALL.map(|r| {
                m.schedule_attempts
                    .with_label_values(&[r.as_str(), profile])
            }),
            attempt_duration: AttemptResult::ALL.map(|r| {
                m.scheduling_attempt_duration
                    .with_label_values(&[r.as_str(), profile])
            }),
            points: TIMED_POINTS
                .iter()
                .map(|&p| {
                    (
                        p,
                        by_code(|c| {
                            m.extension_point_duration.with_label_values(&[
                                p.metric_name(),
                                c.as_str(),
                                profile,
                            ])
                        }),
                    )
                })
                .collect(),
            plugins: plugins
                .iter()
                .map(|&(name, p)| {
                    (
                        (name, p),
                        by_code(|c| {
                            m.plugin_execution_duration.with_label_values(&[
                                name,
                                p.metric_name(),
                                c.as_str(),
                            ])
                        }),
                    )
                })
                .collect(),
        }
    }

    /// One attempt ended with `result` after `took` (cycle start to the
    /// outcome; to the Binding for a scheduled pod).
    pub fn attempt(&self, result: AttemptResult, took: Duration) {
        self.attempts[result.index()].inc();
        self.attempt_duration[result.index()].observe(took.as_secs_f64());
    }

    /// All plugins of `point` ran in `took`, ending with `code`.
    pub fn point(&self, point: ExtensionPoint, code: Code, took: Duration) {
        if let Some(h) = self.points.get(&point) {
            h[code_index(code)].observe(took.as_secs_f64());
        }
    }

    /// Plugin `name` ran at `point`, ending with `code`: one debug event
    /// (exported as a span event when tracing is on) and, when the cycle is
    /// sampled (`started` is when the plugin began), its duration.
    pub(crate) fn plugin_ran(
        &self,
        name: &'static str,
        point: ExtensionPoint,
        code: Code,
        started: Option<std::time::Instant>,
    ) {
        tracing::debug!(
            plugin = name,
            point = point.metric_name(),
            code = code.as_str(),
            "plugin ran"
        );
        if let Some(t) = started {
            self.plugin(name, point, code, t.elapsed());
        }
    }

    /// Plugin `name` ran at `point` in `took`, ending with `code`.
    pub(crate) fn plugin(
        &self,
        name: &'static str,
        point: ExtensionPoint,
        code: Code,
        took: Duration,
    ) {
        if let Some(h) = self.plugins.get(&(name, point)) {
            h[code_index(code)].observe(took.as_secs_f64());
        }
    }
}
