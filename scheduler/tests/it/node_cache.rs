//! The node cache and its snapshots.

use flotilla_scheduler::cache::Snapshot;
use flotilla_shared::testing::PodBuilder;

use crate::{cache_with, info, node};

#[test]
fn a_refreshed_snapshot_sees_assumed_pods_and_keeps_every_node() {
    let cache = cache_with((0..3).map(|i| node(&format!("n{i}"), "4", "8Gi").build_spec()));
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.len(), 3);
    cache
        .assume(info(PodBuilder::new("a").cpu("1")), "n1")
        .expect("assume");
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.len(), 3);
    assert_eq!(snap.get("n1").expect("n1").requested.milli_cpu, 1000);
}

#[test]
#[ignore = "bug: NodeCache tracks changed nodes and the layout flag globally, not per snapshot: \
            once one snapshot consumed them, update_snapshot on any other snapshot (a fresh one \
            included) copies nothing, so a second snapshot is empty or stale"]
fn every_snapshot_of_a_cache_sees_every_node_and_every_change() {
    let cache = cache_with((0..3).map(|i| node(&format!("n{i}"), "4", "8Gi").build_spec()));
    let mut first = Snapshot::default();
    cache.update_snapshot(&mut first);
    cache
        .assume(info(PodBuilder::new("a").cpu("1")), "n1")
        .expect("assume");

    let mut second = Snapshot::default();
    cache.update_snapshot(&mut second);
    assert_eq!(second.len(), 3, "a fresh snapshot must hold every node");

    cache.update_snapshot(&mut first);
    assert_eq!(
        first.get("n1").expect("n1").requested.milli_cpu,
        1000,
        "the first snapshot must see the assumed pod too"
    );
}

#[test]
#[ignore = "bug: NodeCache::remove_node forgets the pods bound to the node, so when the node object \
            comes back (deleted and re-created, pods still bound) it starts empty and the worker \
            sees free room those pods still hold (upstream keeps them until the pods go)"]
fn a_node_deleted_and_re_added_still_counts_the_pods_bound_to_it() {
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    cache.add_bound_pod(std::sync::Arc::new(
        PodBuilder::new("a").cpu("3").node_name("n1").build_info(),
    ));
    cache.remove_node("n1");
    cache.upsert_node(node("n1", "4", "8Gi").build_spec());
    assert_eq!(cache.node("n1").expect("n1").requested.milli_cpu, 3000);
    assert_eq!(cache.pod_node("uid-a").as_deref(), Some("n1"));
}
