//! Score plugins through the full pipeline: which node wins.

use flotilla_shared::testing::PodBuilder;

use crate::{bind_in_cache, cache_with, default_framework, info, node, snapshot_of};

#[test]
fn a_new_pod_goes_to_the_least_allocated_node() {
    let cache = cache_with([
        node("busy", "4", "8Gi").build_spec(),
        node("idle", "4", "8Gi").build_spec(),
    ]);
    bind_in_cache(
        &cache,
        PodBuilder::new("half").cpu("2").memory("4Gi"),
        "busy",
    );
    let snap = snapshot_of(&cache);
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("1").memory("1Gi"));
    for _ in 0..20 {
        let r = fw.schedule(&pod, &snap).expect("both nodes fit");
        assert_eq!(&*r.node, "idle");
        assert_eq!(r.feasible, 2);
        // TaintToleration 100 x 3 + NodeAffinity 0 x 2
        // + LeastAllocated (75 + 87) / 2 = 81 + BalancedAllocation (v1.36:
        // balance 100 without the pod, 93 with it: 50 + (50 + 93 - 100) / 2
        // = 71); ImageLocality skips (no node reports images).
        assert_eq!(r.score, 300 + 81 + 71);
    }
}

#[test]
fn a_preferred_node_affinity_picks_the_matching_node_when_resources_are_equal() {
    let cache = cache_with([
        node("in-zone-b", "4", "8Gi")
            .label("zone", "b")
            .build_spec(),
        node("in-zone-a", "4", "8Gi")
            .label("zone", "a")
            .build_spec(),
        node("no-zone", "4", "8Gi").build_spec(),
    ]);
    let snap = snapshot_of(&cache);
    let fw = default_framework();
    let pod = info(
        PodBuilder::new("p")
            .cpu("1")
            .memory("1Gi")
            .preferred_affinity(10, "zone", "In", &["a"]),
    );
    for _ in 0..20 {
        let r = fw.schedule(&pod, &snap).expect("all nodes fit");
        assert_eq!(&*r.node, "in-zone-a");
    }
}

#[test]
fn a_prefer_no_schedule_taint_loses_to_an_untainted_node_even_a_busier_one() {
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("1").memory("1Gi"));

    let equal = cache_with([
        node("soft", "4", "8Gi")
            .taint("dedicated", "batch", "PreferNoSchedule")
            .build_spec(),
        node("plain", "4", "8Gi").build_spec(),
    ]);
    let mut snap = snapshot_of(&equal);
    for _ in 0..20 {
        assert_eq!(&*fw.schedule(&pod, &snap).expect("both fit").node, "plain");
    }

    // TaintToleration weighs 3: 300 points outweigh the resource scores.
    bind_in_cache(
        &equal,
        PodBuilder::new("half").cpu("2").memory("4Gi"),
        "plain",
    );
    equal.update_snapshot(&mut snap);
    assert_eq!(snap.get("plain").expect("plain").requested.milli_cpu, 2000);
    for _ in 0..20 {
        assert_eq!(&*fw.schedule(&pod, &snap).expect("both fit").node, "plain");
    }

    // A pod tolerating the taint no longer avoids the node: it now prefers
    // the emptier tainted node.
    let tolerant = info(PodBuilder::new("t").cpu("1").memory("1Gi").toleration(
        "dedicated",
        "Equal",
        "batch",
        "PreferNoSchedule",
    ));
    assert_eq!(
        &*fw.schedule(&tolerant, &snap).expect("both fit").node,
        "soft"
    );
}

#[test]
fn the_runners_up_go_with_the_placement_best_first() {
    // Five equal nodes, busier and busier: LeastAllocated ranks them by
    // their free room, so the choice is n0 and the alternatives offered to
    // the arbiter are the next three, best first; n4 does not fit at all.
    let cache = cache_with((0..5).map(|i| node(&format!("n{i}"), "4", "8Gi").build_spec()));
    for (i, cpu) in ["100m", "500m", "1", "1500m", "3500m"].iter().enumerate() {
        bind_in_cache(
            &cache,
            PodBuilder::new(&format!("used-{i}")).cpu(cpu),
            &format!("n{i}"),
        );
    }
    let snap = snapshot_of(&cache);
    let fw = default_framework();
    let r = fw
        .schedule(&info(PodBuilder::new("p").cpu("1")), &snap)
        .expect("four nodes fit");
    assert_eq!(&*r.node, "n0");
    assert_eq!(r.feasible, 4);
    let alternatives: Vec<&str> = r.alternatives.iter().map(|n| &**n).collect();
    assert_eq!(alternatives, ["n1", "n2", "n3"]);

    // One feasible node: nothing to offer instead.
    let r = fw
        .schedule(&info(PodBuilder::new("big").cpu("3800m")), &snap)
        .expect("n0 fits");
    assert_eq!((&*r.node, r.alternatives.len()), ("n0", 0));
}
