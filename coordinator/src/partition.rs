//! Node partitioning: which worker searches which nodes first.
//!
//! Workers form one pool per workload class (online, batch). Within each pool
//! every node has exactly one owner, chosen by rendezvous (highest random
//! weight) hashing of `(node, worker)`: when a worker joins or leaves, only
//! about `1/n` of the pool's nodes change owner. A partition only steers the
//! search; workers fall back to every node before calling a pod unschedulable.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use flotilla_shared::WorkloadClass;

/// A registered worker's id (assigned by the coordinator, never reused).
pub type WorkerId = u64;

fn weight(node: &str, worker: WorkerId) -> u64 {
    // DefaultHasher::new() uses fixed keys: stable across runs and processes.
    let mut h = DefaultHasher::new();
    node.hash(&mut h);
    worker.hash(&mut h);
    h.finish()
}

/// The owner of `node` among `workers` (highest weight; `None` if empty).
#[must_use]
pub fn owner(node: &str, workers: &[WorkerId]) -> Option<WorkerId> {
    workers
        .iter()
        .copied()
        .max_by_key(|w| (weight(node, *w), *w))
}

/// Partitions `nodes` within each pool: worker → its node names (sorted).
/// Every worker in `pools` gets an entry, possibly empty.
#[must_use]
pub fn partition<'a>(
    nodes: impl IntoIterator<Item = &'a Arc<str>>,
    pools: &BTreeMap<WorkloadClass, Vec<WorkerId>>,
) -> HashMap<WorkerId, Vec<Arc<str>>> {
    let mut out: HashMap<WorkerId, Vec<Arc<str>>> =
        pools.values().flatten().map(|w| (*w, Vec::new())).collect();
    for node in nodes {
        for workers in pools.values() {
            if let Some(w) = owner(node, workers) {
                out.entry(w).or_default().push(node.clone());
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<Arc<str>> {
        (0..n)
            .map(|i| Arc::from(format!("node-{i:05}").as_str()))
            .collect()
    }

    #[test]
    fn each_node_has_exactly_one_owner_per_pool() {
        let ns = nodes(1000);
        let pools = BTreeMap::from([
            (WorkloadClass::Online, vec![1, 2]),
            (WorkloadClass::Batch, vec![3, 4, 5]),
        ]);
        let p = partition(&ns, &pools);
        let online: usize = [1, 2].iter().map(|w| p[w].len()).sum();
        let batch: usize = [3, 4, 5].iter().map(|w| p[w].len()).sum();
        assert_eq!(online, 1000);
        assert_eq!(batch, 1000);
        for w in [3, 4, 5] {
            assert!(
                (250..420).contains(&p[&w].len()),
                "roughly even: {}",
                p[&w].len()
            );
        }
    }

    #[test]
    fn a_worker_leaving_moves_only_its_own_nodes() {
        let ns = nodes(2000);
        let before = partition(
            &ns,
            &BTreeMap::from([(WorkloadClass::Online, vec![1, 2, 3, 4])]),
        );
        let after = partition(
            &ns,
            &BTreeMap::from([(WorkloadClass::Online, vec![1, 2, 3])]),
        );
        for w in [1, 2, 3] {
            for n in &before[&w] {
                assert!(after[&w].contains(n), "{n} moved off surviving worker {w}");
            }
        }
        let moved = after.values().map(Vec::len).sum::<usize>()
            - [1, 2, 3].iter().map(|w| before[w].len()).sum::<usize>();
        assert_eq!(moved, before[&4].len());
    }

    #[test]
    fn empty_pool_owns_nothing() {
        assert_eq!(owner("n", &[]), None);
        let p = partition(&nodes(3), &BTreeMap::new());
        assert!(p.is_empty());
    }
}
