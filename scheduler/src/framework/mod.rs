//! The framework runtime: the plugin registry, profiles, and the cycle runner.
//! The plugin *traits* live in `flotilla_shared::framework` so the
//! coordinator can share types with the plugins.

pub mod args;
pub mod metrics;
pub mod parallel;
pub mod profile;
pub mod profile_map;
pub mod registry;
pub mod runtime;
pub mod validation;

pub use args::decode_args;
pub use metrics::{AttemptResult, ProfileMetrics};
pub use profile::{
    PluginRef, PluginSet, Plugins, Profile, default_multi_point, num_feasible_nodes_to_find,
};
pub use profile_map::ProfileMap;
pub use registry::{PluginFactory, PluginHandle, Registry, RegistryError};
pub use runtime::{
    Candidates, CycleDetail, Framework, NodeScores, PreFilterOutcome, ScheduleError, ScheduleResult,
};
