//! PodTopologySpread through the full pipeline (default profile): hard
//! constraints spread a workload evenly over zones, the FitError names the
//! spread reasons, and soft constraints steer the choice through Score.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_scheduler::cache::Snapshot;
use flotilla_shared::PodInfo;
use flotilla_shared::testing::PodBuilder;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::{
    bind_in_cache, cache_with, default_framework, expect_fit_error, info, node, snapshot_of,
};

/// `maxSkew` over `topology.kubernetes.io/zone` for pods labelled `app=web`.
fn zone_spread(max_skew: i32, when: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: "topology.kubernetes.io/zone".into(),
        when_unsatisfiable: when.into(),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: None,
        }),
        ..Default::default()
    }
}

fn web(name: &str, when: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", "web")
        .cpu("100m")
        .memory("128Mi")
        .spread_constraint(zone_spread(1, when))
}

/// `app=web` pods per zone in `snap`.
fn web_per_zone(snap: &Snapshot) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for n in snap.nodes() {
        let zone = n.spec.labels["topology.kubernetes.io/zone"].clone();
        let web = n
            .pods
            .iter()
            .filter(|p| p.labels.get("app").map(String::as_str) == Some("web"))
            .count();
        *out.entry(zone).or_insert(0) += web;
    }
    out
}

#[test]
fn six_pods_spread_two_per_zone_over_three_zones_with_max_skew_1() {
    // Uneven zones: 1, 2 and 3 nodes. Spreading is per zone, not per node.
    let zones = [
        ("a-1", "zone-a"),
        ("b-1", "zone-b"),
        ("b-2", "zone-b"),
        ("c-1", "zone-c"),
        ("c-2", "zone-c"),
        ("c-3", "zone-c"),
    ];
    let cache = cache_with(zones.iter().map(|(n, z)| {
        node(n, "8", "32Gi")
            .label("topology.kubernetes.io/zone", z)
            .build_spec()
    }));
    let fw = default_framework();
    let mut snap = snapshot_of(&cache);
    for i in 0..6 {
        let pod: Arc<PodInfo> = info(web(&format!("web-{i}"), "DoNotSchedule"));
        let r = fw
            .schedule(&pod, &snap)
            .expect("a zone within maxSkew exists");
        cache.assume(pod, &r.node).expect("node exists");
        cache.update_snapshot(&mut snap);
        let counts = web_per_zone(&snap);
        let max = counts.values().max().copied().unwrap_or(0);
        let min = counts.values().min().copied().unwrap_or(0);
        assert!(max - min <= 1, "after pod {i}: {counts:?}");
    }
    let counts: Vec<usize> = web_per_zone(&snap).into_values().collect();
    assert_eq!(counts, [2, 2, 2]);
}

#[test]
fn unsatisfiable_spread_reports_upstream_reasons_in_the_fit_error() {
    let cache = cache_with([
        node("a-1", "4", "8Gi")
            .label("topology.kubernetes.io/zone", "zone-a")
            .build_spec(),
        node("b-1", "4", "8Gi")
            .label("topology.kubernetes.io/zone", "zone-b")
            .build_spec(),
        // zone-c is the emptiest zone but has no room for the pod.
        node("c-1", "50m", "8Gi")
            .label("topology.kubernetes.io/zone", "zone-c")
            .build_spec(),
        node("no-zone", "4", "8Gi").build_spec(),
    ]);
    bind_in_cache(&cache, web("web-a", "DoNotSchedule"), "a-1");
    bind_in_cache(&cache, web("web-b", "DoNotSchedule"), "b-1");
    let snap = snapshot_of(&cache);
    let pod = info(web("web-new", "DoNotSchedule"));
    let fit = expect_fit_error(default_framework().schedule(&pod, &snap));
    assert_eq!(
        fit.to_string(),
        "0/4 nodes are available: 1 Insufficient cpu, \
         1 node(s) didn't match pod topology spread constraints (missing required label), \
         2 node(s) didn't match pod topology spread constraints."
    );
    assert!(
        fit.diagnosis
            .unschedulable_plugins
            .contains("PodTopologySpread")
    );
}

#[test]
fn a_soft_constraint_scores_the_emptier_zone_highest() {
    let cache = cache_with([
        node("a-1", "4", "8Gi")
            .label("topology.kubernetes.io/zone", "zone-a")
            .build_spec(),
        node("b-1", "4", "8Gi")
            .label("topology.kubernetes.io/zone", "zone-b")
            .build_spec(),
    ]);
    bind_in_cache(&cache, web("web-1", "ScheduleAnyway"), "a-1");
    bind_in_cache(&cache, web("web-2", "ScheduleAnyway"), "a-1");
    // zone-b's node is busier, so the resource scores favour a-1.
    bind_in_cache(
        &cache,
        PodBuilder::new("batch").cpu("2").memory("4Gi"),
        "b-1",
    );
    let snap = snapshot_of(&cache);
    let pod = info(web("web-new", "ScheduleAnyway"));
    let (r, detail) = default_framework().schedule_detailed(&pod, &snap);
    assert_eq!(&*r.expect("both nodes fit").node, "b-1");
    let spread: BTreeMap<&str, i64> = detail
        .scored
        .iter()
        .map(|s| {
            let pts = s
                .plugin_scores
                .iter()
                .find(|(p, _)| *p == "PodTopologySpread")
                .map(|(_, v)| *v)
                .expect("PodTopologySpread scored");
            (&*s.node, pts)
        })
        .collect();
    assert_eq!(spread, BTreeMap::from([("a-1", 0), ("b-1", 100)]));
    // Pods without constraints: PreScore skips, so the plugin adds no score.
    let plain = info(PodBuilder::new("plain").cpu("100m"));
    let (_, detail) = default_framework().schedule_detailed(&plain, &snap);
    assert!(
        detail.scored.iter().all(|s| s
            .plugin_scores
            .iter()
            .all(|(p, _)| *p != "PodTopologySpread")),
        "{:?}",
        detail.scored
    );
}
