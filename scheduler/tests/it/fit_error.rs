//! The FitError message through the real Filter plugins.

use std::collections::BTreeSet;

use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{
    bind_in_cache, cache_with, default_framework, expect_fit_error, info, node, snapshot_of,
};

#[test]
fn a_mixed_cluster_rejects_the_pod_with_upstreams_exact_histogram() {
    // The pod wants team=blue, host port 8080 and one cpu.
    let mut nodes = vec![
        // Filter order decides the one reason per node: NodeUnschedulable
        // runs before NodeAffinity, NodePorts and NodeResourcesFit.
        node("cordoned", "4", "8Gi")
            .label("team", "blue")
            .unschedulable(),
        node("port-a", "4", "8Gi").label("team", "blue"),
        node("port-b", "4", "8Gi").label("team", "blue"),
        NodeBuilder::new("full")
            .cpu("4")
            .memory("8Gi")
            .pods(1)
            .label("team", "blue"),
        // Lacks a pod slot AND cpu: NodeResourcesFit reports both reasons.
        NodeBuilder::new("full-and-small")
            .cpu("500m")
            .memory("8Gi")
            .pods(1)
            .label("team", "blue"),
    ];
    // Ten nodes of another team: "10 ..." must sort between "1 ..." and "2 ...".
    nodes.extend((0..10).map(|i| node(&format!("red-{i:02}"), "4", "8Gi").label("team", "red")));
    let cache = cache_with(nodes.into_iter().map(NodeBuilder::build_spec));
    bind_in_cache(&cache, PodBuilder::new("web-a").host_port(8080), "port-a");
    bind_in_cache(&cache, PodBuilder::new("web-b").host_port(8080), "port-b");
    bind_in_cache(&cache, PodBuilder::new("filler-1"), "full");
    bind_in_cache(&cache, PodBuilder::new("filler-2"), "full-and-small");
    let snap = snapshot_of(&cache);
    assert_eq!(snap.len(), 15);

    let pod = info(
        PodBuilder::new("p")
            .cpu("1")
            .node_selector("team", "blue")
            .host_port(8080),
    );
    let fit = expect_fit_error(default_framework().schedule(&pod, &snap));
    assert_eq!(
        fit.to_string(),
        "0/15 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable, \
         10 node(s) didn't match Pod's node affinity/selector, 2 Too many pods, \
         2 node(s) didn't have free ports for the requested pod ports."
    );
    assert_eq!(fit.num_all_nodes, 15);
    assert_eq!(
        fit.diagnosis.node_to_status.len(),
        15,
        "every node has a status"
    );
    assert_eq!(
        fit.diagnosis.unschedulable_plugins,
        BTreeSet::from([
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "NodeUnschedulable"
        ])
    );
}

#[test]
fn untolerated_taints_and_short_cpu_give_the_upstream_five_node_message() {
    let mut nodes: Vec<_> = (0..3)
        .map(|i| node(&format!("small-{i}"), "1", "8Gi"))
        .collect();
    nodes.extend((0..2).map(|i| {
        node(&format!("tainted-{i}"), "8", "8Gi").taint("dedicated", "gpu", "NoSchedule")
    }));
    let cache = cache_with(nodes.into_iter().map(NodeBuilder::build_spec));
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("p").cpu("2"));
    let fit = expect_fit_error(default_framework().schedule(&pod, &snap));
    assert_eq!(
        fit.to_string(),
        "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient cpu."
    );

    // Tolerating the taint makes the big nodes feasible.
    let tolerant = info(PodBuilder::new("t").cpu("2").toleration(
        "dedicated",
        "Equal",
        "gpu",
        "NoSchedule",
    ));
    let r = default_framework()
        .schedule(&tolerant, &snap)
        .expect("a tolerant pod fits on a tainted node");
    assert!(r.node.starts_with("tainted-"), "placed on {}", r.node);
}
