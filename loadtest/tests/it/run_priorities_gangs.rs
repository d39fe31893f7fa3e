//! `flotilla run --trace k8s` with PriorityClasses, a PodDisruptionBudget
//! and PodGroups in the file: the run creates them in its cluster, so
//! priorities resolve, gangs are placed whole (Coscheduling enabled by the
//! configuration) and a pod that fits nowhere preempts; the report counts
//! both.

use std::time::Duration;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::{OnBadInput, load_k8s_list};
use flotilla_scheduler::config;

use crate::{node_of, within};

const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: Coscheduling
"#;

/// Two 4-cpu nodes. First wave: a gang `train` of 3 × 2 cpu (minMember 3)
/// and `filler` (2 cpu, priority 0): 8 cpu, the cluster is full. Then, at
/// priority `urgent` (1000), `vip` (2 cpu) must preempt: the only victim
/// below its priority that frees 2 cpu alone is `filler` (the gang members
/// have priority 0 too, but one of them would do as well; the budget on the
/// gang makes upstream prefer the unprotected `filler`).
const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: urgent}
  value: 1000
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {name: train, namespace: ml}
  spec: {minAvailable: 3, selector: {matchLabels: {scheduling.x-k8s.io/pod-group: train}}}
  status: {disruptionsAllowed: 0, currentHealthy: 3, desiredHealthy: 3, expectedPods: 3}
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: PodGroup
  metadata: {name: train, namespace: ml}
  spec: {minMember: 3, scheduleTimeoutSeconds: 30}
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
  status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}, conditions: [{type: Ready, status: "True"}]}
- apiVersion: v1
  kind: Node
  metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
  status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}, conditions: [{type: Ready, status: "True"}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: w0, namespace: ml, uid: u-w0, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: w1, namespace: ml, uid: u-w1, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: w2, namespace: ml, uid: u-w2, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: filler, namespace: ml, uid: u-filler}
  spec: {terminationGracePeriodSeconds: 0, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}
"#;

const VIP: &str = r#"
- apiVersion: v1
  kind: Pod
  metadata: {name: vip, namespace: ml, uid: u-vip}
  spec: {priorityClassName: urgent, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_run_places_the_gang_whole_and_preempts_for_the_urgent_pod() {
    let dir = std::env::temp_dir().join(format!("flotilla-run-gangs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, format!("{CLUSTER}{VIP}")).expect("write");
    let mut workload = load_k8s_list(&path, OnBadInput::Fail).expect("loads");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(workload.warnings.is_empty(), "{:?}", workload.warnings);
    // vip comes after the first wave is placed.
    workload.barriers = vec![4];

    let cfg = RunConfig {
        in_process_workers: 2,
        expect_workers: 2,
        progress: false,
        timeout: Duration::from_secs(90),
        settle: Duration::from_millis(500),
        scheduler: config::parse(CONFIG, "gangs.yaml").expect("valid configuration"),
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(150),
        "the run with gangs and preemption",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());

    assert!(!report.timed_out);
    assert_eq!(report.gangs.scheduled, 1, "the gang bound whole, once");
    assert_eq!(report.preempted, 1);
    assert_eq!(report.preemption.victims, 1);
    assert_eq!(
        report.scheduled + report.unschedulable + report.preempted,
        5
    );
    let evicted: Vec<String> = cluster
        .evicted_pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(evicted, ["filler"], "the budget keeps the gang whole");
    // vip could preempt only with its class's priority (the coordinator
    // resolves priorityClassName for pods that admission did not see).
    let vip = cluster.pod("ml", "vip").expect("vip");
    assert!(node_of(&vip).is_some(), "vip landed");
    for w in ["w0", "w1", "w2"] {
        assert!(
            node_of(&cluster.pod("ml", w).expect("member")).is_some(),
            "{w}"
        );
    }
    assert_eq!(report.checks.overcommitted_nodes, 0);
}
