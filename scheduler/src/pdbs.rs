//! The worker's PodDisruptionBudgets (`policy/v1`), as the coordinator
//! forwards them (`pdb_upsert` / `pdb_deleted`), for preemption's victim
//! selection (upstream's DefaultPreemption lists every PDB of the cluster and
//! prefers victims whose eviction violates none).
//!
//! Each budget is compiled once ([`PdbInfo`]) when it arrives; one that
//! cannot be read (a malformed selector) is logged, naming it and the field,
//! and left out: preemption then treats its pods as unprotected, which is
//! what a budget that selects nothing does upstream.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use parking_lot::RwLock;
use tracing::warn;

use flotilla_shared::pdb::PdbInfo;

/// PodDisruptionBudgets by (namespace, name). Written by the watch task,
/// read by the scheduling thread.
#[derive(Debug, Default)]
pub struct PdbStore {
    by_key: RwLock<BTreeMap<(String, String), Arc<PodDisruptionBudget>>>,
    /// The compiled budgets, rebuilt on every change (changes are rare,
    /// reads happen on every preemption attempt).
    compiled: RwLock<Arc<[PdbInfo]>>,
}

impl PdbStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a PDB (a missing namespace becomes `default`).
    pub fn upsert(&self, mut pdb: PodDisruptionBudget) {
        let namespace = pdb
            .metadata
            .namespace
            .get_or_insert_with(|| "default".into())
            .clone();
        let key = (namespace, pdb.metadata.name.clone().unwrap_or_default());
        if let Err(e) = PdbInfo::from_pdb(&pdb) {
            warn!(error = %e, "PodDisruptionBudget cannot be read; preemption ignores it");
        }
        let mut by_key = self.by_key.write();
        by_key.insert(key, Arc::new(pdb));
        self.recompile(&by_key);
    }

    /// Removes a PDB; returns whether it was there.
    pub fn remove(&self, namespace: &str, name: &str) -> bool {
        let mut by_key = self.by_key.write();
        let removed = by_key
            .remove(&(namespace.to_owned(), name.to_owned()))
            .is_some();
        if removed {
            self.recompile(&by_key);
        }
        removed
    }

    fn recompile(&self, by_key: &BTreeMap<(String, String), Arc<PodDisruptionBudget>>) {
        let compiled: Vec<PdbInfo> = by_key
            .values()
            .filter_map(|p| PdbInfo::from_pdb(p).ok())
            .collect();
        *self.compiled.write() = compiled.into();
    }

    /// The readable budgets, compiled, by namespace then name.
    #[must_use]
    pub fn compiled(&self) -> Arc<[PdbInfo]> {
        self.compiled.read().clone()
    }

    /// Every PDB, by namespace then name.
    #[must_use]
    pub fn list(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.by_key.read().values().cloned().collect()
    }

    /// Number of PDBs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_key.read().len()
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_key.read().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pdb(ns: Option<&str>, name: &str) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                namespace: ns.map(str::to_owned),
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..PodDisruptionBudget::default()
        }
    }

    #[test]
    fn upsert_replaces_by_namespace_and_name_and_remove_drops() {
        let s = PdbStore::new();
        s.upsert(pdb(Some("a"), "x"));
        s.upsert(pdb(None, "x"));
        s.upsert(pdb(Some("a"), "x"));
        assert_eq!(s.len(), 2);
        let keys: Vec<_> = s
            .list()
            .iter()
            .map(|p| p.metadata.namespace.clone().unwrap_or_default())
            .collect();
        assert_eq!(keys, ["a", "default"]);
        assert_eq!(s.compiled().len(), 2);
        assert!(s.remove("default", "x"));
        assert_eq!(s.compiled().len(), 1);
        assert!(!s.remove("default", "x"));
        assert_eq!(s.len(), 1);
    }
}
