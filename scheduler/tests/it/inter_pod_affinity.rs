//! InterPodAffinity through the whole cycle (`Framework::schedule` over a
//! `NodeCache` snapshot): each placement is bound in the cache before the
//! next pod, as the worker does.

use std::collections::BTreeSet;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::{Framework, Profile};
use flotilla_shared::framework::Code;
use flotilla_shared::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};

use crate::{
    bind_in_cache, cache_with, default_framework, expect_fit_error, framework_with, info, node,
    snapshot_of,
};

/// Two nodes in each of zones a, b and c.
fn three_zones() -> NodeCache {
    cache_with(["a", "b", "c"].into_iter().flat_map(|z| {
        (1..=2).map(move |i| {
            node(&format!("{z}{i}"), "4", "8Gi")
                .label("topology.kubernetes.io/zone", z)
                .build_spec()
        })
    }))
}

fn zone_of(snap: &Snapshot, node: &str) -> String {
    snap.get(node).expect("known node").spec.labels["topology.kubernetes.io/zone"].clone()
}

/// `app=<app>` pods that must not share a zone with each other.
fn anti_affine(name: &str, app: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .label("app", app)
        .pod_affinity(
            PodAffinityKind::RequiredAnti,
            pod_affinity_term("app", "In", &[app], "topology.kubernetes.io/zone"),
        )
}

/// Schedules `pod` and binds it where it went; returns the node.
fn place(fw: &Framework, cache: &NodeCache, snap: &mut Snapshot, pod: PodBuilder) -> String {
    cache.update_snapshot(snap);
    let r = fw
        .schedule(&info(pod.clone()), snap)
        .expect("the pod must fit somewhere");
    bind_in_cache(cache, pod, &r.node);
    r.node.to_string()
}

#[test]
fn mutually_anti_affine_pods_land_in_distinct_zones_and_a_fourth_does_not_fit() {
    let cache = three_zones();
    let fw = default_framework();
    let mut snap = snapshot_of(&cache);
    let mut zones = BTreeSet::new();
    for i in 0..3 {
        let n = place(
            &fw,
            &cache,
            &mut snap,
            anti_affine(&format!("web-{i}"), "web"),
        );
        cache.update_snapshot(&mut snap);
        assert!(zones.insert(zone_of(&snap, &n)), "web-{i} shares a zone");
    }
    assert_eq!(zones.len(), 3);

    // Every zone now holds a web pod: the fourth is rejected everywhere by
    // its own anti-affinity (Unschedulable: preemption could help).
    cache.update_snapshot(&mut snap);
    let fit = expect_fit_error(fw.schedule(&info(anti_affine("web-3", "web")), &snap));
    assert_eq!(
        fit.to_string(),
        "0/6 nodes are available: 6 node(s) didn't match pod anti-affinity rules."
    );
    assert!(
        fit.diagnosis
            .node_to_status
            .iter()
            .all(|(_, st)| st.code == Code::Unschedulable && st.plugin == "InterPodAffinity")
    );

    // A pod of another app is free to go anywhere...
    let db = info(anti_affine("db-0", "db"));
    assert!(fw.schedule(&db, &snap).is_ok());
    // ...but a plain web pod without terms is kept out by the placed pods'
    // anti-affinity (symmetry).
    let fit = expect_fit_error(fw.schedule(
        &info(PodBuilder::new("web-plain").label("app", "web")),
        &snap,
    ));
    assert_eq!(
        fit.to_string(),
        "0/6 nodes are available: 6 node(s) didn't satisfy existing pods anti-affinity rules."
    );
}

#[test]
fn a_self_affine_group_starts_anywhere_then_gathers_in_one_zone() {
    let cache = three_zones();
    let fw = default_framework();
    let mut snap = snapshot_of(&cache);
    let member = |i: usize| {
        PodBuilder::new(&format!("cache-{i}"))
            .cpu("100m")
            .label("app", "cache")
            .pod_affinity(
                PodAffinityKind::Required,
                pod_affinity_term("app", "In", &["cache"], "topology.kubernetes.io/zone"),
            )
    };
    let first = place(&fw, &cache, &mut snap, member(0));
    cache.update_snapshot(&mut snap);
    let zone = zone_of(&snap, &first);
    for i in 1..5 {
        let n = place(&fw, &cache, &mut snap, member(i));
        cache.update_snapshot(&mut snap);
        assert_eq!(zone_of(&snap, &n), zone, "cache-{i} left the group's zone");
    }
    // A pod that needs the group but is not part of it: only the group's
    // zone, and the other zones' rejection is UnschedulableAndUnresolvable.
    let (r, detail) = fw.schedule_detailed(
        &info(PodBuilder::new("client").pod_affinity(
            PodAffinityKind::Required,
            pod_affinity_term("app", "In", &["cache"], "topology.kubernetes.io/zone"),
        )),
        &snap,
    );
    assert_eq!(zone_of(&snap, &r.expect("fits").node), zone);
    assert_eq!(detail.rejected.len(), 4);
    for (_, st) in &detail.rejected {
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["node(s) didn't match pod affinity rules"]);
    }
}

#[test]
fn preferred_anti_affinity_spreads_replicas_and_weighs_two() {
    // n-b is the busier node, so the resource scores prefer n-a; the
    // preferred anti-affinity (weight 100, plugin weight 2) must win.
    let cache = cache_with(["a", "b"].into_iter().map(|z| {
        NodeBuilder::new(&format!("n-{z}"))
            .cpu("4")
            .memory("8Gi")
            .pods(110)
            .label("zone", z)
            .build_spec()
    }));
    bind_in_cache(&cache, PodBuilder::new("api-0").label("app", "api"), "n-a");
    bind_in_cache(
        &cache,
        PodBuilder::new("filler").cpu("1").memory("2Gi"),
        "n-b",
    );
    let snap = snapshot_of(&cache);
    let fw = default_framework();
    let pod = info(PodBuilder::new("api-1").label("app", "api").pod_affinity(
        PodAffinityKind::PreferredAnti(100),
        pod_affinity_term("app", "In", &["api"], "zone"),
    ));
    for _ in 0..10 {
        assert_eq!(&*fw.schedule(&pod, &snap).expect("fits").node, "n-b");
    }
    let (_, detail) = fw.schedule_detailed(&pod, &snap);
    let ipa = |node: &str| {
        detail
            .scored
            .iter()
            .find(|s| &*s.node == node)
            .and_then(|s| {
                s.plugin_scores
                    .iter()
                    .find(|(p, _)| *p == "InterPodAffinity")
            })
            .map(|(_, s)| *s)
    };
    // Raw -100 on n-a, 0 on n-b -> normalized 0 and 100.
    assert_eq!(ipa("n-a"), Some(0));
    assert_eq!(ipa("n-b"), Some(100));
    assert!(fw.score_weights().contains(&("InterPodAffinity", 2)));
    let resources = |node: &str| {
        detail
            .scored
            .iter()
            .find(|s| &*s.node == node)
            .map(|s| s.total - 2 * ipa(node).unwrap_or(0))
    };
    assert!(
        resources("n-a") > resources("n-b"),
        "without InterPodAffinity n-a would win"
    );
    // Without the plugin the pod goes to the emptier node.
    let no_ipa = framework_with(&Profile::only(&[
        ("NodeResourcesFit", 1),
        ("NodeResourcesBalancedAllocation", 1),
    ]));
    assert_eq!(&*no_ipa.schedule(&pod, &snap).expect("fits").node, "n-a");
}

#[test]
fn pods_without_affinity_skip_the_plugin_entirely() {
    // No pod in the cluster has affinity terms: PreFilter and PreScore skip,
    // so the plugin neither rejects nor scores (no entry in the detail).
    let cache = three_zones();
    bind_in_cache(&cache, PodBuilder::new("plain-0").label("app", "web"), "a1");
    let snap = snapshot_of(&cache);
    let fw = framework_with(&Profile::default());
    let (r, detail) =
        fw.schedule_detailed(&info(PodBuilder::new("plain-1").label("app", "web")), &snap);
    assert!(r.is_ok());
    assert!(detail.rejected.is_empty());
    assert!(detail.scored.iter().all(|s| {
        s.plugin_scores
            .iter()
            .all(|(p, _)| *p != "InterPodAffinity")
    }));
}
