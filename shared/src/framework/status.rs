//! `Status`: what a plugin returns (upstream `framework.Status`).

use std::borrow::Cow;
use std::fmt;

/// Outcome class of a plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Code {
    /// The plugin is satisfied.
    #[default]
    Success,
    /// An internal error: the attempt fails and the pod backs off.
    Error,
    /// The pod does not fit now; removing pods (preemption) may help.
    Unschedulable,
    /// The pod does not fit and preemption cannot help on this node.
    UnschedulableAndUnresolvable,
    /// The plugin has nothing to do for this pod. Returned from PreFilter it
    /// means the same plugin's Filter is skipped for this pod; from PreScore,
    /// the same plugin's Score is skipped (upstream).
    Skip,
}

impl Code {
    /// Upstream's name of the code (`Success`, `Unschedulable`, ...), as in
    /// the `status` label of kube-scheduler's metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Skip => "Skip",
        }
    }
}

/// A plugin's answer: a [`Code`], the human-readable reasons (upstream texts,
/// counted in the FitError histogram), and the plugin that answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// Outcome class.
    pub code: Code,
    /// Reasons, e.g. `["Insufficient cpu", "Insufficient memory"]`.
    pub reasons: Vec<Cow<'static, str>>,
    /// Name of the plugin that returned a non-success status.
    pub plugin: &'static str,
}

impl Status {
    /// Success.
    #[must_use]
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: "",
        }
    }

    /// A status with one reason.
    #[must_use]
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        Status {
            code,
            reasons: vec![reason.into()],
            plugin: "",
        }
    }

    /// `Unschedulable` with one reason.
    #[must_use]
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// `UnschedulableAndUnresolvable` with one reason.
    #[must_use]
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// `Error` with a message.
    #[must_use]
    pub fn error(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Code::Error, message)
    }

    /// `Skip`.
    #[must_use]
    pub const fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Vec::new(),
            plugin: "",
        }
    }

    /// Records which plugin answered.
    #[must_use]
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = plugin;
        self
    }

    /// `Success` (Skip counts as success where a result is expected).
    #[must_use]
    pub fn is_success(&self) -> bool {
        matches!(self.code, Code::Success | Code::Skip)
    }

    /// `Unschedulable` or `UnschedulableAndUnresolvable`.
    #[must_use]
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// Reasons joined by `", "` (upstream `Status.Message()`).
    #[must_use]
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message())
    }
}
