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
