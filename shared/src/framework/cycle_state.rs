//! `CycleState`: per-scheduling-cycle scratch space plugins share between
//! extension points (e.g. PreFilter computes, Filter reads).

use std::any::Any;

use super::Status;

/// Typed slots keyed by a plugin-chosen static name. Written in PreFilter
/// (single-threaded), read concurrently by Filter and Score.
///
/// A short list rather than a map: a cycle holds a handful of slots and
/// Filter reads one per node, so a scan that usually matches the key's
/// address beats hashing the string.
#[derive(Default)]
pub struct CycleState {
    slots: Vec<(&'static str, Box<dyn Any + Send + Sync>)>,
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.slots.iter().map(|(k, _)| k))
            .finish()
    }
}

impl CycleState {
    /// Stores `value` under `key`, replacing any earlier value.
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        match self.position(key) {
            Some(i) => self.slots[i].1 = Box::new(value),
            None => self.slots.push((key, Box::new(value))),
        }
    }

    fn position(&self, key: &'static str) -> Option<usize> {
        self.slots
            .iter()
            .position(|(k, _)| std::ptr::eq(*k, key) || *k == key)
    }

    /// What a Filter reads from its PreFilter: the value under `key`.
    ///
    /// # Errors
    /// `Error` `reading "<key>" from cycleState: not found (PreFilter did
    /// not run)`, for `plugin`, when it is absent or of another type.
    pub fn read_pre_filter<T: Any + Send + Sync>(
        &self,
        key: &'static str,
        plugin: &'static str,
    ) -> Result<&T, Status> {
        self.read(key).ok_or_else(|| {
            Status::error(format!(
                "reading {key:?} from cycleState: not found (PreFilter did not run)"
            ))
            .with_plugin(plugin)
        })
    }

    /// Reads the value under `key` if it exists and has type `T`.
    #[must_use]
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.position(key)
            .and_then(|i| self.slots[i].1.downcast_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::CycleState;

    #[test]
    fn slots_are_found_by_name_replaced_on_rewrite_and_typed() {
        let mut s = CycleState::default();
        s.write("PreFilterA", 1_u32);
        s.write("PreFilterB", "b");
        s.write("PreFilterA", 2_u32);
        assert_eq!(s.read::<u32>("PreFilterA"), Some(&2));
        assert_eq!(s.read::<&str>("PreFilterB"), Some(&"b"));
        // Same text at another address is the same key.
        let key: &'static str = String::from("PreFilterB").leak();
        assert_eq!(s.read::<&str>(key), Some(&"b"));
        assert_eq!(s.read::<i64>("PreFilterA"), None, "wrong type");
        assert_eq!(s.read::<u32>("Missing"), None);
        assert_eq!(format!("{s:?}"), r#"{"PreFilterA", "PreFilterB"}"#);
    }
}
