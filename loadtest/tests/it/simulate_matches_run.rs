//! `flotilla simulate` and a one-worker `flotilla run` decide through the
//! same cycle (`flotilla_scheduler::cycle`): given the same objects and the
//! same `--seed`, they place the same pods on the same nodes and preempt
//! the same victims, ties and preemption's starting offset included.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_loadtest::run::RunConfig;
use flotilla_loadtest::workload::{OnBadInput, load_cluster_objects, load_k8s_list};
use flotilla_scheduler::simulate::{self, Options, Outcome};
use flotilla_scheduler::{Registry, config};

use crate::{node_of, run_to_end, test_run};

/// Coscheduling on top of the default profile (DefaultPreemption included).
const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: Coscheduling
"#;

/// Four identical 3-cpu nodes `a1`..`a4` (every placement there is a draw
/// among tied nodes), and two identical 4-cpu nodes `b1`, `b2`, each full
/// with two 2-cpu pods of priority 0. Pending, in queue order: `vip`
/// (priority 1000, 4 cpu) fits nowhere and preempts both pods of `b1` or
/// of `b2` (a tie, so preemption's starting offset decides), filling that
/// node; then the gang `train` (two 2-cpu members, minMember 2) and four
/// 1-cpu `web` pods share the `a` nodes. No placement depends on when
/// `vip`'s victims go: the node it nominates is full for everyone else
/// either way.
const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: urgent}
  value: 1000
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: PodGroup
  metadata: {name: train, namespace: default}
  spec: {minMember: 2, scheduleTimeoutSeconds: 30}
- {apiVersion: v1, kind: Node, metadata: {name: a1, labels: {kubernetes.io/hostname: a1}}, status: {allocatable: {cpu: "3", memory: 12Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a2, labels: {kubernetes.io/hostname: a2}}, status: {allocatable: {cpu: "3", memory: 12Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a3, labels: {kubernetes.io/hostname: a3}}, status: {allocatable: {cpu: "3", memory: 12Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: a4, labels: {kubernetes.io/hostname: a4}}, status: {allocatable: {cpu: "3", memory: 12Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {kubernetes.io/hostname: b1}}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: b2, labels: {kubernetes.io/hostname: b2}}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-1, namespace: default, uid: u-low-1}, spec: {nodeName: b1, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-2, namespace: default, uid: u-low-2}, spec: {nodeName: b1, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-3, namespace: default, uid: u-low-3}, spec: {nodeName: b2, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-4, namespace: default, uid: u-low-4}, spec: {nodeName: b2, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: vip, namespace: default, uid: u-vip}, spec: {priorityClassName: urgent, containers: [{name: c, resources: {requests: {cpu: "4", memory: 8Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: train-0, namespace: default, uid: u-train-0, labels: {scheduling.x-k8s.io/pod-group: train}}, spec: {containers: [{name: c, resources: {requests: {cpu: "2", memory: 2Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: train-1, namespace: default, uid: u-train-1, labels: {scheduling.x-k8s.io/pod-group: train}}, spec: {containers: [{name: c, resources: {requests: {cpu: "2", memory: 2Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-0, namespace: default, uid: u-web-0}, spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: default, uid: u-web-1}, spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-2, namespace: default, uid: u-web-2}, spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-3, namespace: default, uid: u-web-3}, spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
"#;

/// The pending pods, in queue order.
const PENDING: [&str; 7] = [
    "vip", "train-0", "train-1", "web-0", "web-1", "web-2", "web-3",
];

/// Placements (pod → node) and victims of one decision-maker.
#[derive(Debug, PartialEq, Eq)]
struct Decisions {
    placed: BTreeMap<String, String>,
    victims: Vec<String>,
}

fn write_cluster(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "flotilla-simulate-matches-run-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, text).expect("write");
    path
}

fn simulated(path: &std::path::Path, seed: u64) -> Decisions {
    let objects = load_cluster_objects(path, OnBadInput::Fail).expect("loads");
    let cfg = config::parse(CONFIG, "gang.yaml").expect("valid configuration");
    let sim = simulate::simulate_with(
        &objects,
        &cfg.profiles,
        &Registry::in_tree(),
        &Options {
            extenders: &[],
            seed: Some(seed),
        },
    )
    .expect("simulates");
    let mut placed = BTreeMap::new();
    let mut victims = Vec::new();
    for r in &sim.results {
        match &r.outcome {
            Outcome::Scheduled { node } => {
                placed.insert(r.pod.name.to_string(), node.clone());
            }
            Outcome::Unschedulable { .. } => {}
            other => panic!("{}: {other:?}", r.pod),
        }
        victims.extend(
            r.victims
                .iter()
                .map(|v| v.trim_start_matches("default/").to_owned()),
        );
    }
    victims.sort();
    Decisions { placed, victims }
}

async fn run(path: &std::path::Path, seed: u64, pending: &[&str]) -> Decisions {
    let workload = load_k8s_list(path, OnBadInput::Fail).expect("loads");
    let cfg = RunConfig {
        seed: Some(seed),
        backlog: true,
        grace_period: Some(0),
        timeout: Duration::from_secs(60),
        ..test_run(1, config::parse(CONFIG, "gang.yaml").expect("valid"))
    };
    let (report, cluster) = run_to_end(workload, cfg, "the one-worker run").await;
    assert!(!report.timed_out, "{}", report.to_text());
    assert_eq!(report.checks.overcommitted_nodes, 0);
    let placed = pending
        .iter()
        .filter_map(|name| {
            let pod = cluster.pod("default", name).expect(name);
            node_of(&pod).map(|node| ((*name).to_owned(), node.to_owned()))
        })
        .collect();
    let mut victims: Vec<String> = cluster
        .evicted_pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    victims.sort();
    Decisions { placed, victims }
}

#[tokio::test(flavor = "multi_thread")]
async fn simulate_and_a_one_worker_run_with_the_same_seed_decide_alike() {
    let path = write_cluster("ties", CLUSTER);
    let by_seed: Vec<(u64, Decisions)> =
        (1..=6).map(|seed| (seed, simulated(&path, seed))).collect();
    for (seed, d) in &by_seed {
        assert_eq!(d.placed.len(), PENDING.len(), "seed {seed}: {d:?}");
        assert_eq!(
            d.victims.len(),
            2,
            "seed {seed}: vip evicts one b node's pods"
        );
    }
    // The seed decides: the three seeds the runs use broke ties three
    // ways (else this test could not tell a shared cycle from two that
    // happen to agree, or a run that ignored its seed), and preemption's
    // offset picked each b node for some seed.
    let runs = &by_seed[..3];
    for (i, (a, da)) in runs.iter().enumerate() {
        for (b, db) in &runs[i + 1..] {
            assert_ne!(da.placed, db.placed, "seeds {a} and {b} placed alike");
        }
    }
    assert!(
        by_seed
            .iter()
            .any(|(_, d)| d.victims != by_seed[0].1.victims),
        "every seed preempted on the same node: {by_seed:?}"
    );
    // Same seed, same decisions; and again for the same seed.
    assert_eq!(simulated(&path, 3), by_seed[2].1);
    for (seed, sim) in runs {
        let ran = run(&path, *seed, &PENDING).await;
        assert_eq!(
            &ran, sim,
            "seed {seed}: the run (left) and simulate (right) differ"
        );
    }
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}

/// Node `b1` (4 cpu) full with two 2-cpu pods of priority 0. Pending, in
/// queue order: `hi` (priority 2000, 1 cpu, `preemptionPolicy: Never`)
/// fits nowhere and may not preempt; `vip` (priority 1000, 3 cpu) preempts
/// both pods. Their deletion moves `hi` back to the active queue, and it
/// fits beside `vip`.
const AFTER_EVICTION: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: top}, value: 2000, preemptionPolicy: Never}
- {apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: urgent}, value: 1000}
- {apiVersion: v1, kind: Node, metadata: {name: b1, labels: {kubernetes.io/hostname: b1}}, status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-1, namespace: default, uid: u-low-1}, spec: {nodeName: b1, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: low-2, namespace: default, uid: u-low-2}, spec: {nodeName: b1, terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 4Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: hi, namespace: default, uid: u-hi}, spec: {priorityClassName: top, containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: vip, namespace: default, uid: u-vip}, spec: {priorityClassName: urgent, containers: [{name: c, resources: {requests: {cpu: "3", memory: 4Gi}}}]}}
"#;

/// A pod found unschedulable is tried again once a preemption evicted
/// pods, by simulate as by the worker's queue: both bind `hi`, which only
/// the victims' deletion made room for.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_an_eviction_made_room_for_is_placed_by_simulate_as_by_a_run() {
    let path = write_cluster("after-eviction", AFTER_EVICTION);
    let sim = simulated(&path, 1);
    let want = Decisions {
        placed: [("hi", "b1"), ("vip", "b1")]
            .into_iter()
            .map(|(p, n)| (p.to_owned(), n.to_owned()))
            .collect(),
        victims: vec!["low-1".to_owned(), "low-2".to_owned()],
    };
    assert_eq!(sim, want, "simulate");
    assert_eq!(run(&path, 1, &["hi", "vip"]).await, want, "the run");
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}
