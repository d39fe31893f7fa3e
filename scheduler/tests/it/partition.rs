//! Partition steering: a worker searches its own nodes first and falls back
//! to the rest of the cluster only when none of them fits.

use std::collections::HashSet;
use std::sync::Arc;

use flotilla_shared::testing::PodBuilder;

use crate::{cache_with, default_framework, info, node, snapshot_of};

#[test]
fn pods_land_in_the_partition_while_it_has_room_then_outside() {
    let cache = cache_with((0..10).map(|i| node(&format!("n-{i:02}"), "4", "32Gi").build_spec()));
    let partition: HashSet<Arc<str>> = ["n-01", "n-04", "n-07"]
        .into_iter()
        .map(Arc::from)
        .collect();
    cache.set_partition(partition.iter().cloned());
    let mut snap = snapshot_of(&cache);
    assert_eq!(snap.partition_len(), 3);
    let fw = default_framework();

    // 500m pods: 8 per 4-cpu node, 24 in the partition.
    let mut place = |i: usize| {
        let pod = info(
            PodBuilder::new(&format!("p-{i:02}"))
                .cpu("500m")
                .memory("1Gi"),
        );
        let r = fw.schedule(&pod, &snap).expect("the cluster has room");
        cache.assume(pod, &r.node).expect("assume on a known node");
        cache.update_snapshot(&mut snap);
        r
    };
    for i in 0..20 {
        let r = place(i);
        assert!(
            partition.contains(&r.node),
            "pod {i} left the partition for {}",
            r.node
        );
        assert!(!r.outside_partition, "pod {i}");
        assert_eq!(r.evaluated, 3, "pod {i}: only the partition is searched");
    }
    for i in 20..24 {
        let r = place(i);
        assert!(
            partition.contains(&r.node),
            "pod {i} left the partition for {}",
            r.node
        );
        assert!(!r.outside_partition, "pod {i}");
    }
    for name in &partition {
        assert_eq!(
            cache.node(name).expect("node").requested.milli_cpu,
            4000,
            "{name} is full"
        );
    }

    let r = place(24);
    assert!(r.outside_partition, "the partition is full: {r:?}");
    assert!(!partition.contains(&r.node), "placed on {}", r.node);
    assert_eq!(r.evaluated, 10, "the whole partition, then the rest");
    assert_eq!(r.feasible, 7);
}
