//! The SchedulingBasic-shaped cluster the scheduler's benches share.

use std::sync::Arc;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

/// `nodes` nodes `node-NNNNN` of 4 CPU / 32 Gi / 110 pods (label `zone`
/// `a` or `b`, alternating), each running 10 pods of 100m / 500 Mi.
pub fn basic_cache(nodes: usize) -> NodeCache {
    let cache = NodeCache::default();
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        cache.upsert_node(
            NodeBuilder::new(&name)
                .cpu("4")
                .memory("32Gi")
                .pods(110)
                .label("zone", if i % 2 == 0 { "a" } else { "b" })
                .build_spec(),
        );
        for j in 0..10 {
            cache.add_bound_pod(Arc::new(
                PodBuilder::new(&format!("p-{i}-{j}"))
                    .cpu("100m")
                    .memory("500Mi")
                    .node_name(&name)
                    .build_info(),
            ));
        }
    }
    cache
}

/// [`basic_cache`] and a snapshot of it.
#[allow(dead_code)] // not every bench takes a snapshot
pub fn basic_cluster(nodes: usize) -> (NodeCache, Snapshot) {
    let cache = basic_cache(nodes);
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    (cache, snap)
}
