//! `DefaultBinder`: the Bind plugin (upstream
//! `pkg/scheduler/framework/plugins/defaultbinder`): writes a `v1.Binding`
//! through the `pods/binding` subresource.
//!
//! In Flotilla the coordinator is the one component that writes Bindings,
//! after its bind arbiter granted the worker's proposal; this plugin names
//! that step so configurations can list it at `bind` / `multiPoint`
//! (upstream requires at least one Bind plugin per profile).

use flotilla_shared::framework::{ExtensionPoint, Plugin};

use super::names;

/// Registry name.
pub const NAME: &str = names::DEFAULT_BINDER;

/// The extension points it serves.
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::Bind];

/// Bind through the coordinator.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
}
