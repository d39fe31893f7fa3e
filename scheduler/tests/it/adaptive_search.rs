//! Upstream's adaptive `percentageOfNodesToScore`: how many nodes a cycle
//! evaluates before it stops looking.

use flotilla_scheduler::Profile;
use flotilla_scheduler::cache::Snapshot;
use flotilla_shared::testing::PodBuilder;

use crate::{cache_with, default_framework, framework_with, info, node, snapshot_of};

fn thousand_identical_nodes() -> Snapshot {
    let cache =
        cache_with((0..1000).map(|i| node(&format!("node-{i:04}"), "4", "32Gi").build_spec()));
    snapshot_of(&cache)
}

#[test]
fn a_thousand_node_cluster_evaluates_exactly_42_percent_of_its_nodes() {
    let snap = thousand_identical_nodes();
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("100m").memory("100Mi"));
    // Several cycles: the search start rotates, which must not change the count.
    for cycle in 0..50 {
        let r = fw
            .schedule(&pod, &snap)
            .expect("identical empty nodes all fit");
        assert_eq!(r.evaluated, 420, "cycle {cycle}: evaluated");
        assert_eq!(r.feasible, 420, "cycle {cycle}: feasible");
    }
}

/// Above 20,000 candidate nodes Filter runs in parallel chunks.
fn twenty_thousand_identical_nodes() -> Snapshot {
    let cache =
        cache_with((0..20_000).map(|i| node(&format!("node-{i:05}"), "4", "32Gi").build_spec()));
    snapshot_of(&cache)
}

#[test]
fn a_twenty_thousand_node_cluster_scores_exactly_5_percent_of_its_nodes() {
    let snap = twenty_thousand_identical_nodes();
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("100m").memory("100Mi"));
    // What gets scored is exact even when the parallel Filter overshoots
    // (the next test pins `evaluated` too); allow one node per other Filter
    // thread here.
    let slack = rayon::current_num_threads();
    for cycle in 0..30 {
        let r = fw
            .schedule(&pod, &snap)
            .expect("identical empty nodes all fit");
        assert_eq!(r.feasible, 1000, "cycle {cycle}: feasible nodes scored");
        assert!(
            (1000..=1000 + slack).contains(&r.evaluated),
            "cycle {cycle}: evaluated {} nodes",
            r.evaluated
        );
    }
}

#[test]
fn a_twenty_thousand_node_cluster_evaluates_exactly_5_percent_of_its_nodes() {
    let snap = twenty_thousand_identical_nodes();
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("100m").memory("100Mi"));
    for cycle in 0..200 {
        let r = fw
            .schedule(&pod, &snap)
            .expect("identical empty nodes all fit");
        assert_eq!(r.evaluated, 1000, "cycle {cycle}: evaluated");
        assert_eq!(r.feasible, 1000, "cycle {cycle}: feasible");
    }
}

#[test]
fn a_profile_scoring_100_percent_of_nodes_evaluates_every_node() {
    let snap = thousand_identical_nodes();
    let profile = Profile {
        percentage_of_nodes_to_score: 100,
        ..Profile::default()
    };
    let fw = framework_with(&profile);
    let pod = info(PodBuilder::new("p").cpu("100m"));
    for cycle in 0..5 {
        let r = fw
            .schedule(&pod, &snap)
            .expect("identical empty nodes all fit");
        assert_eq!(r.evaluated, 1000, "cycle {cycle}: evaluated");
        assert_eq!(r.feasible, 1000, "cycle {cycle}: feasible");
    }
}

#[test]
fn a_search_that_finds_too_few_feasible_nodes_keeps_looking_through_the_whole_cluster() {
    // Only 10 of 1000 nodes fit: the cycle cannot stop at 420 evaluated nodes.
    let cache = cache_with((0..1000).map(|i| {
        let cpu = if i % 100 == 7 { "4" } else { "1" };
        node(&format!("node-{i:04}"), cpu, "32Gi").build_spec()
    }));
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("p").cpu("2"));
    let r = default_framework()
        .schedule(&pod, &snap)
        .expect("ten nodes fit");
    assert_eq!(r.evaluated, 1000);
    assert_eq!(r.feasible, 10);
    assert!(r.node.ends_with('7'), "placed on {}", r.node);
}
