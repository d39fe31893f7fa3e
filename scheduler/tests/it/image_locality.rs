//! ImageLocality in the default profile, over a `NodeCache` snapshot whose
//! image → node-count map the cache maintains.

use flotilla_shared::testing::PodBuilder;

use crate::{cache_with, default_framework, info, node, snapshot_of};

const APP: &str = "registry.example/app:1.0";

#[test]
fn the_node_holding_a_large_image_wins_when_resources_are_equal() {
    let cache = cache_with([
        node("cold", "4", "8Gi").build_spec(),
        node("warm", "4", "8Gi")
            .image(&[APP, "registry.example/app@sha256:feed"], 800 << 20)
            .build_spec(),
        node("other", "4", "8Gi")
            .image(&["busybox:latest"], 5 << 20)
            .build_spec(),
    ]);
    let snap = snapshot_of(&cache);
    let fw = default_framework();
    let pod = info(PodBuilder::new("app").cpu("1").memory("1Gi").image(APP));
    for _ in 0..20 {
        assert_eq!(&*fw.schedule(&pod, &snap).expect("fits").node, "warm");
    }
    // 800 MiB on 1 of 3 nodes: 266.7 MiB -> 100 × (266.7 - 23) / 977 = 24.
    let (r, detail) = fw.schedule_detailed(&pod, &snap);
    assert_eq!(&*r.expect("fits").node, "warm");
    let image_score = |n: &str| {
        detail
            .scored
            .iter()
            .find(|s| &*s.node == n)
            .and_then(|s| s.plugin_scores.iter().find(|(p, _)| *p == "ImageLocality"))
            .map(|(_, v)| *v)
    };
    assert_eq!(image_score("warm"), Some(24));
    assert_eq!(image_score("cold"), Some(0));
    assert_eq!(image_score("other"), Some(0));
}

#[test]
fn a_pod_whose_images_are_nowhere_skips_the_plugin_until_a_node_pulls_them() {
    let cache = cache_with([
        node("a", "4", "8Gi").build_spec(),
        node("b", "4", "8Gi").build_spec(),
    ]);
    let fw = default_framework();
    let pod = info(PodBuilder::new("app").cpu("1").memory("1Gi").image(APP));
    let (_, detail) = fw.schedule_detailed(&pod, &snapshot_of(&cache));
    assert!(
        detail
            .scored
            .iter()
            .all(|s| s.plugin_scores.iter().all(|(p, _)| *p != "ImageLocality")),
        "PreScore Skip: no ImageLocality score at all"
    );
    // `b` pulls the image (a node status update): it now wins.
    cache.upsert_node(node("b", "4", "8Gi").image(&[APP], 900 << 20).build_spec());
    assert_eq!(cache.image_node_count(APP), 1);
    let snap = snapshot_of(&cache);
    for _ in 0..10 {
        assert_eq!(&*fw.schedule(&pod, &snap).expect("fits").node, "b");
    }
    // Both nodes hold it: no preference left, both score the same.
    cache.upsert_node(node("a", "4", "8Gi").image(&[APP], 900 << 20).build_spec());
    let (_, detail) = fw.schedule_detailed(&pod, &snapshot_of(&cache));
    let scores: Vec<i64> = detail
        .scored
        .iter()
        .flat_map(|s| {
            s.plugin_scores
                .iter()
                .filter(|(p, _)| *p == "ImageLocality")
        })
        .map(|(_, v)| *v)
        .collect();
    // 900 MiB on every node counts in full: 100 × (900 - 23) / 977 = 89.
    assert_eq!(scores, [89, 89]);
}
