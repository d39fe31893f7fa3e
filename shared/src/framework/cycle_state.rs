//! `CycleState`: per-scheduling-cycle scratch space plugins share between
//! extension points (e.g. PreFilter computes, Filter reads).

use std::any::Any;
use std::collections::HashMap;

/// Typed slots keyed by a plugin-chosen static name. Written in PreFilter
/// (single-threaded), read concurrently by Filter and Score.
#[derive(Default)]
pub struct CycleState {
    slots: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.slots.keys()).finish()
    }
}

impl CycleState {
    /// Stores `value` under `key`, replacing any earlier value.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.slots.insert(key, Box::new(value));
    }

    /// Reads the value under `key` if it exists and has type `T`.
    #[must_use]
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.slots.get(key).and_then(|b| b.downcast_ref())
    }
}
