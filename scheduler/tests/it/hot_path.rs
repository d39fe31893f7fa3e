//! The cycle's fast path over the snapshot's [`NodeHot`] records must never
//! change a decision: for every in-tree plugin, a node meeting its
//! `hot_filter` condition is one its `filter` passes, and a `score_hot`
//! equals its `score`. Random nodes (cordons, taints of every effect,
//! images, extended resources, full and over-committed nodes) against
//! random pods (zero and positive requests, extended requests,
//! tolerations, host ports, nodeName, images).

use std::sync::Arc;

use proptest::prelude::*;

use flotilla_scheduler::Registry;
use flotilla_shared::framework::{Code, CycleState, SharedLister as _};
use flotilla_shared::node_hot::NodeHot;
use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, hard_spread};
use flotilla_shared::{NodeInfo, PodInfo};

use crate::{cache_with, default_framework, info, node, snapshot_of};

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

#[derive(Debug, Clone)]
struct NodeShape {
    milli_cpu: u32,
    memory_mi: u32,
    ephemeral_mi: u32,
    slots: u32,
    cordoned: bool,
    taint: Option<usize>,
    gpus: u32,
    image: bool,
    placed: Vec<(u32, u32, u32)>,
}

#[derive(Debug, Clone)]
struct PodShape {
    milli_cpu: u32,
    memory_mi: u32,
    ephemeral_mi: u32,
    gpus: u32,
    tolerate: Option<usize>,
    tolerate_cordon: bool,
    host_port: bool,
    node_name: Option<bool>,
    image: bool,
}

fn node_shape() -> impl Strategy<Value = NodeShape> {
    (
        (0u32..4000, 0u32..4096, prop_oneof![Just(0u32), 1u32..2048]),
        (0u32..4, any::<bool>(), proptest::option::of(0usize..3)),
        (0u32..3, any::<bool>()),
        proptest::collection::vec((0u32..2500, 0u32..2500, 0u32..512), 0..4),
    )
        .prop_map(
            |(
                (milli_cpu, memory_mi, ephemeral_mi),
                (slots, cordoned, taint),
                (gpus, image),
                placed,
            )| NodeShape {
                milli_cpu,
                memory_mi,
                ephemeral_mi,
                slots,
                cordoned,
                taint,
                gpus,
                image,
                placed,
            },
        )
}

fn pod_shape() -> impl Strategy<Value = PodShape> {
    (
        (
            prop_oneof![Just(0u32), 1u32..2000],
            prop_oneof![Just(0u32), 1u32..2000],
            prop_oneof![Just(0u32), 1u32..512],
            prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        ),
        (
            proptest::option::of(0usize..3),
            any::<bool>(),
            any::<bool>(),
        ),
        (proptest::option::of(any::<bool>()), any::<bool>()),
    )
        .prop_map(
            |(
                (milli_cpu, memory_mi, ephemeral_mi, gpus),
                (tolerate, tolerate_cordon, host_port),
                (node_name, image),
            )| PodShape {
                milli_cpu,
                memory_mi,
                ephemeral_mi,
                gpus,
                tolerate,
                tolerate_cordon,
                host_port,
                node_name,
                image,
            },
        )
}

fn requests(mut b: PodBuilder, cpu: u32, mem: u32, eph: u32) -> PodBuilder {
    if cpu > 0 {
        b = b.cpu(&format!("{cpu}m"));
    }
    if mem > 0 {
        b = b.memory(&format!("{mem}Mi"));
    }
    if eph > 0 {
        b = b.request("ephemeral-storage", &format!("{eph}Mi"));
    }
    b
}

fn build_node(s: &NodeShape) -> NodeInfo {
    let mut b = NodeBuilder::new("n1")
        .cpu(&format!("{}m", s.milli_cpu))
        .memory(&format!("{}Mi", s.memory_mi))
        .pods(s.slots);
    if s.ephemeral_mi > 0 {
        b = b.resource("ephemeral-storage", &format!("{}Mi", s.ephemeral_mi));
    }
    if s.gpus > 0 {
        b = b.resource("nvidia.com/gpu", &s.gpus.to_string());
    }
    if s.cordoned {
        b = b.unschedulable();
    }
    if let Some(e) = s.taint {
        b = b.taint("dedicated", "x", EFFECTS[e]);
    }
    if s.image {
        b = b.image(&["app:v1"], 300 << 20);
    }
    let mut n = NodeInfo::new(Arc::new(b.build_spec()));
    for (i, (cpu, mem, eph)) in s.placed.iter().enumerate() {
        let p = requests(PodBuilder::new(&format!("placed-{i}")), *cpu, *mem, *eph);
        n.add_pod(Arc::new(p.node_name("n1").build_info()));
    }
    n
}

fn build_pod(s: &PodShape) -> PodInfo {
    let mut b = requests(
        PodBuilder::new("p"),
        s.milli_cpu,
        s.memory_mi,
        s.ephemeral_mi,
    );
    if s.gpus > 0 {
        b = b.request("nvidia.com/gpu", &s.gpus.to_string());
    }
    if let Some(e) = s.tolerate {
        b = b.toleration("dedicated", "Equal", "x", EFFECTS[e]);
    }
    if s.tolerate_cordon {
        b = b.toleration(
            "node.kubernetes.io/unschedulable",
            "Exists",
            "",
            "NoSchedule",
        );
    }
    if s.host_port {
        b = b.host_port(8080);
    }
    if let Some(same) = s.node_name {
        b = b.node_name(if same { "n1" } else { "elsewhere" });
    }
    if s.image {
        b = b.image("app:v1");
    }
    b.build_info()
}

/// Runs every in-tree plugin's PreFilter, Filter, PreScore and Score on
/// (pod, node), checking the hot path against them. Returns how many
/// plugins answered from the hot record (so callers can check the path is
/// taken at all).
fn check_plugins(pod: &PodInfo, node: &NodeInfo) -> Result<usize, TestCaseError> {
    let registry = Registry::in_tree();
    let lister = FakeLister::new(vec![node.clone()]);
    let hot = NodeHot::of(node);
    let mut answered = 0;
    for name in registry.names() {
        let Ok(handle) = registry.build(name, None) else {
            continue;
        };
        let mut state = CycleState::default();
        let mut filter_runs = true;
        if let Some(pf) = &handle.pre_filter {
            let (_, st) = pf.pre_filter(&mut state, pod, &lister);
            match st.code {
                Code::Success => {}
                Code::Skip => filter_runs = false,
                _ => continue,
            }
        }
        if let (Some(f), true) = (&handle.filter, filter_runs)
            && let Some(cond) = f.hot_filter(&state, pod)
            && cond.passes(&hot)
        {
            let st = f.filter(&state, pod, node);
            prop_assert!(
                st.is_success(),
                "{name}: the hot condition passed but Filter says {st:?}"
            );
            answered += 1;
        }
        let mut score_runs = true;
        if let Some(ps) = &handle.pre_score {
            let st = ps.pre_score(&mut state, pod, lister.nodes(), &lister);
            match st.code {
                Code::Success => {}
                Code::Skip => score_runs = false,
                _ => continue,
            }
        }
        if let (Some(s), true) = (&handle.score, score_runs) {
            // The batch agrees with the node-by-node fast path (the node
            // repeated, among an empty record it must not read for them).
            let records = [NodeHot::default(), hot];
            let mut batch = [Some(-1); 3];
            s.score_hot_batch(&state, pod, &records, &[1, 1, 1], &mut batch);
            let one = s.score_hot(&state, pod, &hot);
            prop_assert_eq!(batch, [one; 3], "{}: score_hot_batch", name);
            if let Some(v) = one {
                let full = s.score(&state, pod, node);
                prop_assert_eq!(Ok(v), full.map_err(|e| e.message()), "{}", name);
                answered += 1;
            }
        }
    }
    Ok(answered)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_hot_path_never_disagrees_with_filter_and_score(
        n in node_shape(),
        p in pod_shape(),
    ) {
        check_plugins(&build_pod(&p), &build_node(&n))?;
    }
}

#[test]
fn a_plain_pod_on_a_plain_node_is_answered_from_the_hot_record() {
    let node = build_node(&NodeShape {
        milli_cpu: 4000,
        memory_mi: 4096,
        ephemeral_mi: 0,
        slots: 3,
        cordoned: false,
        taint: None,
        gpus: 0,
        image: false,
        placed: vec![(100, 100, 0)],
    });
    let pod = build_pod(&PodShape {
        milli_cpu: 100,
        memory_mi: 100,
        ephemeral_mi: 0,
        gpus: 0,
        tolerate: None,
        tolerate_cordon: false,
        host_port: false,
        node_name: None,
        image: false,
    });
    // Filters: NodeUnschedulable, NodeName, TaintToleration, NodePorts,
    // NodeResourcesFit; Scores: TaintToleration, NodeResourcesFit,
    // NodeResourcesBalancedAllocation.
    assert_eq!(check_plugins(&pod, &node).unwrap(), 8);
}

#[test]
fn the_snapshot_keeps_the_hot_records_current() {
    let cache = cache_with([
        node("a", "4", "8Gi").build_spec(),
        node("b", "4", "8Gi").build_spec(),
    ]);
    let mut snap = snapshot_of(&cache);
    let fw = default_framework();
    let pod = info(PodBuilder::new("p").cpu("1").memory("1Gi"));
    let chosen = fw.schedule(&pod, &snap).expect("fits").node;
    cache
        .assume(pod.clone(), &chosen)
        .expect("assume into the cache");
    cache.update_snapshot(&mut snap);
    for (n, hot) in snap.nodes().iter().zip(snap.hot()) {
        assert_eq!(*hot, NodeHot::of(n), "{}", n.name());
    }
    let i = snap.index_of(&chosen).unwrap();
    assert_eq!(snap.hot()[i].requested_milli_cpu, 1000);
    assert_eq!(snap.hot()[i].pod_count, 1);
    // A cordon reaches the record: the hot path no longer passes the node,
    // and Filter gives the upstream reason.
    let other = if &*chosen == "a" { "b" } else { "a" };
    cache.upsert_node(node(other, "4", "8Gi").unschedulable().build_spec());
    cache.update_snapshot(&mut snap);
    let o = snap.index_of(other).unwrap();
    assert_eq!(snap.hot()[o], NodeHot::of(&snap.nodes()[o]));
    // 3.5 CPU: too much for the chosen node (1 CPU used), and the other
    // is cordoned.
    let big = info(PodBuilder::new("big").cpu("3500m"));
    let msg = crate::expect_fit_error(fw.schedule(&big, &snap)).to_string();
    assert!(
        msg.contains("1 Insufficient cpu") && msg.contains("1 node(s) were unschedulable"),
        "{msg}"
    );
}

/// A cluster of `zones[i]`-labelled nodes (`None`: no zone label), with
/// `placed` pods (node, matches the selector), and a pod spreading over
/// zones (and, if `host`, over hostnames too).
fn spread_case(
    zones: &[Option<usize>],
    placed: &[(usize, bool)],
    max_skew: i32,
    min_domains: Option<i32>,
    self_match: bool,
    host: bool,
) -> (PodInfo, Vec<NodeInfo>) {
    use flotilla_shared::topology_spread::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    let mut nodes: Vec<NodeInfo> = zones
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let name = format!("n{i}");
            let mut b = NodeBuilder::new(&name)
                .pods(100)
                .label(LABEL_HOSTNAME, &name);
            if let Some(z) = z {
                b = b.label(LABEL_TOPOLOGY_ZONE, &format!("hot-spread-zone-{z}"));
            }
            NodeInfo::new(Arc::new(b.build_spec()))
        })
        .collect();
    for (k, (i, web)) in placed.iter().enumerate() {
        let i = i % nodes.len();
        let pod = PodBuilder::new(&format!("placed-{k}"))
            .label("app", if *web { "web" } else { "db" })
            .node_name(&format!("n{i}"))
            .build_info();
        nodes[i].add_pod(Arc::new(pod));
    }
    let constraint = |key: &str| TopologySpreadConstraint {
        min_domains,
        ..hard_spread(key, max_skew, "web")
    };
    let mut b = PodBuilder::new("p")
        .label("app", if self_match { "web" } else { "db" })
        .spread_constraint(constraint(LABEL_TOPOLOGY_ZONE));
    if host {
        b = b.spread_constraint(constraint(LABEL_HOSTNAME));
    }
    (b.build_info(), nodes)
}

/// Runs PodTopologySpread's PreFilter over `nodes`, then checks its hot
/// condition against Filter on every node. Returns how many nodes the
/// condition passed (`None`: no condition).
fn check_spread(pod: &PodInfo, nodes: Vec<NodeInfo>) -> Result<Option<usize>, TestCaseError> {
    let handle = Registry::in_tree()
        .build("PodTopologySpread", None)
        .expect("in tree");
    let lister = FakeLister::new(nodes);
    let mut state = CycleState::default();
    let (_, st) = handle
        .pre_filter
        .as_ref()
        .expect("PreFilter")
        .pre_filter(&mut state, pod, &lister);
    prop_assert_eq!(st.code, Code::Success);
    let f = handle.filter.as_ref().expect("Filter");
    let Some(cond) = f.hot_filter(&state, pod) else {
        return Ok(None);
    };
    let mut passed = 0;
    for n in lister.nodes() {
        if cond.passes(&NodeHot::of(n)) {
            let st = f.filter(&state, pod, n);
            prop_assert!(
                st.is_success(),
                "{}: the hot condition passed but Filter says {st:?}",
                n.name()
            );
            passed += 1;
        }
    }
    Ok(Some(passed))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// PodTopologySpread's zone condition passes no node its Filter
    /// rejects: full zones, nodes without a zone, `minDomains`, pods that
    /// do or do not match their own selector.
    #[test]
    fn the_zone_spread_condition_never_passes_a_node_filter_rejects(
        zones in proptest::collection::vec(proptest::option::of(0usize..4), 1..12),
        placed in proptest::collection::vec((0usize..12, any::<bool>()), 0..30),
        max_skew in 1i32..3,
        min_domains in proptest::option::of(1i32..6),
        self_match in any::<bool>(),
        host in any::<bool>(),
    ) {
        let (pod, nodes) = spread_case(&zones, &placed, max_skew, min_domains, self_match, host);
        let answered = check_spread(&pod, nodes)?;
        prop_assert_eq!(answered.is_some(), !host, "hostname spread has no condition");
    }
}

#[test]
fn the_zone_spread_condition_blocks_the_full_zone_only() {
    // Zone 0 holds 2 matching pods, zone 1 none: maxSkew 1 blocks zone 0
    // (2 + 1 - 0 > 1); zone 1's two nodes pass; the unlabelled node takes
    // the full check (and fails it: missing label).
    let zones = [Some(0), Some(0), Some(1), Some(1), None];
    let (pod, nodes) = spread_case(&zones, &[(0, true), (1, true)], 1, None, true, false);
    assert_eq!(check_spread(&pod, nodes).unwrap(), Some(2));
}

/// A node missing the cycle's combined hot condition gets only the Filters
/// whose own condition it misses, in order: the first rejection (and so
/// the FitError) is the whole chain's.
#[test]
fn nodes_missing_the_hot_condition_get_the_whole_chains_first_reason() {
    use flotilla_shared::topology_spread::LABEL_TOPOLOGY_ZONE;
    let zone = |n: NodeBuilder, z: &str| n.label(LABEL_TOPOLOGY_ZONE, z);
    let cache = cache_with([
        // Zone a is over the skew for one more web pod.
        zone(node("a1", "4", "8Gi"), "hot-chain-a").build_spec(),
        // Also in zone a, and too small: NodeResourcesFit comes first.
        zone(node("a2", "500m", "8Gi"), "hot-chain-a").build_spec(),
        // Zone b would do, but the node is cordoned.
        zone(node("b1", "4", "8Gi"), "hot-chain-b")
            .unschedulable()
            .build_spec(),
    ]);
    for i in 0..2 {
        cache.add_bound_pod(info(
            PodBuilder::new(&format!("web-{i}"))
                .label("app", "web")
                .node_name("a1"),
        ));
    }
    let snap = snapshot_of(&cache);
    let pod = info(
        PodBuilder::new("p")
            .cpu("1")
            .label("app", "web")
            .spread_constraint(hard_spread(LABEL_TOPOLOGY_ZONE, 1, "web")),
    );
    let msg = crate::expect_fit_error(default_framework().schedule(&pod, &snap)).to_string();
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology \
         spread constraints, 1 node(s) were unschedulable."
    );
}
