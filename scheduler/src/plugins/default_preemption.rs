//! `DefaultPreemption`: the PostFilter plugin (upstream
//! `pkg/scheduler/framework/plugins/defaultpreemption`). When a pod fits on
//! no node it looks for lower-priority pods whose eviction lets it fit.
//!
//! The algorithm lives in [`crate::preemption`] (it needs the whole
//! framework and snapshot, not one node); this plugin exists so
//! configurations can enable, disable and configure it at `postFilter` /
//! `multiPoint`. [`crate::Framework::preemption`] hands its args to the
//! caller when the profile enables it.

use flotilla_shared::framework::{ExtensionPoint, Plugin};

use super::names;
use crate::preemption::DefaultPreemptionArgs;

/// Registry name.
pub const NAME: &str = names::DEFAULT_PREEMPTION;

/// The extension points it serves: PostFilter, and upstream's PreEnqueue,
/// accepted in a configuration with nothing to run (upstream's only holds
/// a pod back while its own asynchronous preemption is being carried out;
/// Flotilla's preemptor waits for its victims through its nomination).
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::PreEnqueue, ExtensionPoint::PostFilter];

/// PostFilter plugin carrying its validated args.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultPreemption {
    /// `DefaultPreemptionArgs` from `pluginConfig` (defaults when absent).
    pub args: DefaultPreemptionArgs,
}

impl DefaultPreemption {
    /// Builds the plugin from its `pluginConfig` args.
    ///
    /// # Errors
    /// See [`DefaultPreemptionArgs::decode`].
    pub fn from_config(args: Option<&serde_json::Value>) -> Result<Self, String> {
        Ok(DefaultPreemption {
            args: DefaultPreemptionArgs::decode(args)?,
        })
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
}
