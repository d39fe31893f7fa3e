//! The Alibaba openb trace (8,152 pods on 1,523 nodes) with a coordinator
//! and three workers.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::openb::{NODES_ALL_FILE, PODS_DEFAULT_FILE, PRIORITY_ONLINE};
use flotilla_loadtest::workload::{OnBadInput, default_openb_dir, load_openb};

use crate::{CHECKED, allocatable, key, node_of, requests, unschedulable_message, within};

const OPENB_PODS: usize = 8152;
const OPENB_NODES: usize = 1523;

#[tokio::test(flavor = "multi_thread")]
async fn openb_trace_with_coordinator_and_three_workers_accounts_for_every_pod() {
    let Some(dir) = default_openb_dir() else {
        eprintln!("note: openb trace not found (shared/data/alibaba-gpu-v2023-openb); skipping");
        return;
    };
    let workload = load_openb(
        &dir.join(NODES_ALL_FILE),
        &dir.join(PODS_DEFAULT_FILE),
        OnBadInput::Fail,
    )
    .expect("the trace loads");
    assert_eq!(
        (workload.nodes.len(), workload.pods.len()),
        (OPENB_NODES, OPENB_PODS)
    );
    let cfg = RunConfig {
        in_process_workers: 3,
        expect_workers: 3,
        progress: false,
        timeout: Duration::from_secs(540),
        // Victims free their room at once (the grace period itself is
        // covered by the embedded cluster's tests), so the run stays short.
        grace_period: Some(0),
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(660),
        "the openb run",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());

    // The report accounts for every pod.
    assert!(!report.timed_out, "the run settled before its timeout");
    assert_eq!(report.pods, OPENB_PODS);
    assert_eq!(report.nodes, OPENB_NODES);
    // LS pods (priority 1000) may preempt Burstable (500) and BE (0) pods
    // once the GPUs run out: those victims are deleted (nothing re-creates
    // them).
    assert_eq!(
        report.scheduled + report.unschedulable + report.preempted,
        OPENB_PODS
    );
    assert_eq!(report.preemption.victims, report.preempted as u64);
    assert_eq!(report.pending, 0);
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);
    assert!(
        report.load_warnings.is_empty(),
        "{:?}",
        report.load_warnings
    );
    assert_eq!(report.checks.overcommitted_nodes, 0);
    assert_eq!(
        report.checks.bindings_written,
        report.checks.pods_bound_by_flotilla as u64
    );
    assert_eq!(
        report.checks.pods_bound_by_flotilla,
        report.scheduled + report.preempted
    );
    for victim in cluster.evicted_pods() {
        let p = victim.spec.as_ref().and_then(|s| s.priority);
        assert!(
            p.is_some_and(|p| p < PRIORITY_ONLINE),
            "{}: only pods below the top priority are victims",
            key(&victim)
        );
    }

    // Independently, from the cluster's final state.
    let pods = cluster.pods();
    let nodes = cluster.nodes();
    assert_eq!(pods.len(), OPENB_PODS - report.preempted);
    let alloc: HashMap<String, HashMap<String, i64>> = nodes
        .iter()
        .map(|n| (n.metadata.name.clone().expect("named"), allocatable(n)))
        .collect();
    let mut used: HashMap<&str, HashMap<String, i64>> = HashMap::new();
    let mut bound_keys = HashSet::new();
    let mut bound = 0usize;
    let mut refused = 0usize;
    for p in &pods {
        match node_of(p) {
            Some(n) => {
                bound += 1;
                assert!(bound_keys.insert(key(p)), "{} bound twice", key(p));
                assert!(
                    alloc.contains_key(n),
                    "{} bound to unknown node {n}",
                    key(p)
                );
                assert!(
                    unschedulable_message(p).is_none(),
                    "{} bound yet unschedulable",
                    key(p)
                );
                let u = used.entry(n).or_default();
                for (r, v) in requests(p) {
                    *u.entry(r).or_default() += v;
                }
                *u.entry("pods".into()).or_default() += 1;
            }
            None => {
                refused += 1;
                let msg = unschedulable_message(p)
                    .unwrap_or_else(|| panic!("{} is neither bound nor unschedulable", key(p)));
                assert!(
                    msg.starts_with("0/1523 nodes are available:"),
                    "{}: {msg}",
                    key(p)
                );
            }
        }
    }
    assert_eq!(bound, report.scheduled);
    assert_eq!(refused, report.unschedulable);
    assert_eq!(
        cluster.write_counts().0,
        (bound + report.preempted) as u64,
        "one Binding per bound (or bound, then preempted) pod"
    );
    let mut over = Vec::new();
    for (node, u) in &used {
        for r in CHECKED.iter().chain(&["pods"]) {
            let (want, have) = (u.get(*r).copied().unwrap_or(0), alloc[*node][*r]);
            if want > have {
                over.push(format!("{node}: {r} requested {want} > allocatable {have}"));
            }
        }
    }
    assert!(over.is_empty(), "over-committed: {over:#?}");
}
