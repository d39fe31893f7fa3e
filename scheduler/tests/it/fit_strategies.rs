//! NodeResourcesFit scoring strategies and args through the whole cycle:
//! `pluginConfig` args reach the plugin, and the choice follows the
//! strategy as placements accumulate in the cache.

use std::sync::Arc;

use flotilla_scheduler::cache::NodeCache;
use flotilla_scheduler::framework::RegistryError;
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::testing::PodBuilder;
use serde_json::json;

use crate::{bind_in_cache, cache_with, expect_fit_error, framework_with, info, node, snapshot_of};

/// A profile running only NodeResourcesFit (weight 1) with `args`.
fn fit_only(args: serde_json::Value) -> Profile {
    let mut p = Profile::only(&[("NodeResourcesFit", 1)]);
    p.plugin_config.insert("NodeResourcesFit".into(), args);
    p
}

/// Three 4-cpu / 8 Gi nodes: `a` half full, `c` a quarter full, `b` empty.
fn three_nodes() -> NodeCache {
    let cache = cache_with([
        node("a", "4", "8Gi").build_spec(),
        node("b", "4", "8Gi").build_spec(),
        node("c", "4", "8Gi").build_spec(),
    ]);
    bind_in_cache(&cache, PodBuilder::new("a-0").cpu("2").memory("2Gi"), "a");
    bind_in_cache(&cache, PodBuilder::new("c-0").cpu("1").memory("1Gi"), "c");
    cache
}

/// Schedules `n` pods of 1 cpu / 1 Gi one after another, assuming each
/// into the cache as the worker does, and returns the chosen nodes.
fn place(fw: &Framework, cache: &NodeCache, n: usize) -> Vec<String> {
    let mut snap = snapshot_of(cache);
    (0..n)
        .map(|i| {
            let pod = info(PodBuilder::new(&format!("p-{i}")).cpu("1").memory("1Gi"));
            let r = fw.schedule(&pod, &snap).expect("room is left");
            cache.assume(Arc::clone(&pod), &r.node).expect("assume");
            cache.update_snapshot(&mut snap);
            r.node.to_string()
        })
        .collect()
}

#[test]
fn most_allocated_packs_pods_onto_the_fullest_node() {
    let fw = framework_with(&fit_only(json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "NodeResourcesFitArgs",
        "scoringStrategy": {"type": "MostAllocated"}
    })));
    let cache = three_nodes();
    // `a` fills up first (2 free cpus), then `c` (3), then `b` (4).
    assert_eq!(
        place(&fw, &cache, 9),
        ["a", "a", "c", "c", "c", "b", "b", "b", "b"]
    );
    // Everything is full now: the next pod fits nowhere.
    let snap = snapshot_of(&cache);
    let extra = info(PodBuilder::new("extra").cpu("1").memory("1Gi"));
    let fit = expect_fit_error(fw.schedule(&extra, &snap));
    assert_eq!(fit.diagnosis.node_to_status.len(), 3);
}

#[test]
fn least_allocated_spreads_the_same_pods() {
    // The default strategy, with and without explicit args.
    for args in [
        json!({}),
        json!({"scoringStrategy": {"type": "LeastAllocated"}}),
    ] {
        let fw = framework_with(&fit_only(args));
        let cache = three_nodes();
        let order = place(&fw, &cache, 3);
        // `b` (empty) first; then `b` and `c` are equally free (one cpu
        // used each): either, then the other; `a` (half full) is never
        // picked while they have more room.
        assert_eq!(order[0], "b");
        assert!(!order.contains(&"a".to_owned()), "{order:?}");
    }
}

#[test]
fn a_requested_to_capacity_ratio_shape_can_pack_too() {
    // Score rises with utilization: a bin-packing shape.
    let fw = framework_with(&fit_only(json!({"scoringStrategy": {
        "type": "RequestedToCapacityRatio",
        "requestedToCapacityRatio": {"shape": [
            {"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
    }})));
    let cache = three_nodes();
    assert_eq!(place(&fw, &cache, 3), ["a", "a", "c"]);
}

#[test]
fn ignored_resources_let_a_pod_past_filter() {
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    let snap = snapshot_of(&cache);
    let pod = info(
        PodBuilder::new("dev")
            .cpu("1")
            .request("example.com/device", "1"),
    );
    let plain = framework_with(&fit_only(json!({})));
    let fit = expect_fit_error(plain.schedule(&pod, &snap));
    assert_eq!(
        fit.to_string(),
        "0/1 nodes are available: 1 Insufficient example.com/device."
    );
    for args in [
        json!({"ignoredResources": ["example.com/device"]}),
        json!({"ignoredResourceGroups": ["example.com"]}),
    ] {
        let fw = framework_with(&fit_only(args));
        assert_eq!(&*fw.schedule(&pod, &snap).expect("fits").node, "n1");
    }
}

#[test]
fn bad_args_fail_the_profile_with_the_json_path() {
    let err = |args: serde_json::Value| {
        Framework::new(&fit_only(args), &Registry::in_tree()).expect_err("bad args")
    };
    match err(json!({"scoringStrategy": {"type": "MostAllocated",
        "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 200}]}}))
    {
        RegistryError::Args { name, message } => {
            assert_eq!(name, "NodeResourcesFit");
            assert_eq!(
                message,
                "scoringStrategy.resources[1].weight: Invalid value: 200: resource weight of memory not in valid range (0, 100]"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let e = err(json!({"scoringStrategy": {"type": "Packed"}}));
    assert!(
        e.to_string().starts_with(
            "plugin \"NodeResourcesFit\": scoringStrategy.type: Unsupported value: \"Packed\""
        ),
        "{e}"
    );
    // BalancedAllocation args are checked the same way.
    let mut p = Profile::only(&[("NodeResourcesBalancedAllocation", 1)]);
    p.plugin_config.insert(
        "NodeResourcesBalancedAllocation".into(),
        json!({"resources": [{"name": "cpu", "weight": 3}]}),
    );
    let e = Framework::new(&p, &Registry::in_tree()).expect_err("weight must be 1");
    assert_eq!(
        e.to_string(),
        "plugin \"NodeResourcesBalancedAllocation\": resources[0].weight: Invalid value: 3: must be 1"
    );
}
