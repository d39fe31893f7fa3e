//! Kubernetes' own gangs (`scheduling.k8s.io` PodGroups, the shape
//! `kubectl get podgroups,pods,nodes -o yaml` prints on 1.36/1.37) through
//! `simulate` and `flotilla run --trace k8s`, with the default profile
//! (GangScheduling is in it): a gang that fits is placed whole, one that
//! does not is placed not at all, a `basic` group pod by pod; members of a
//! group that may not be scheduled get the reason.

use std::time::Duration;

use serde_json::Value;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::{OnBadInput, load_k8s_list};
use flotilla_scheduler::simulate::{self, output};
use flotilla_scheduler::{Profile, Registry, config};

use crate::simulate::load_text;
use crate::{node_of, within};

/// Two 4-cpu nodes (8 cpu). `train` (v1beta1, minCount 3) of 3 × 2 cpu fits
/// (6 cpu); `big` (v1alpha2, minCount 3) of 3 × 1 cpu comes after it and
/// finds 2 cpu left: two members could be placed, the third not, so none
/// is. `web` (basic) has one 1-cpu pod, placed on its own once `big`'s room
/// is free again.
const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: train, namespace: ml, uid: pg-train}
  spec:
    podGroupTemplateRef: {workload: {workloadName: training, podGroupTemplateName: workers}}
    schedulingPolicy: {gang: {minCount: 3}}
- apiVersion: scheduling.k8s.io/v1alpha2
  kind: PodGroup
  metadata: {name: big, namespace: ml, uid: pg-big}
  spec: {schedulingPolicy: {gang: {minCount: 3}}}
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: web, namespace: ml, uid: pg-web}
  spec: {schedulingPolicy: {basic: {}}}
- apiVersion: v1
  kind: Node
  metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
  status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}, conditions: [{type: Ready, status: "True"}]}
- apiVersion: v1
  kind: Node
  metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
  status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}, conditions: [{type: Ready, status: "True"}]}
- {apiVersion: v1, kind: Pod, metadata: {name: t0, namespace: ml, uid: u-t0}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: t1, namespace: ml, uid: u-t1}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: t2, namespace: ml, uid: u-t2}, spec: {schedulingGroup: {podGroupName: train}, containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b0, namespace: ml, uid: u-b0}, spec: {schedulingGroup: {podGroupName: big}, containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b1, namespace: ml, uid: u-b1}, spec: {schedulingGroup: {podGroupName: big}, containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b2, namespace: ml, uid: u-b2}, spec: {schedulingGroup: {podGroupName: big}, containers: [{name: c, resources: {requests: {cpu: "3", memory: 1Gi}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: w0, namespace: ml, uid: u-w0}, spec: {schedulingGroup: {podGroupName: web}, containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}}
"#;

/// Pods whose group may not be scheduled: no PodGroup, an invalid one, one
/// whose pods name two schedulers.
const BAD: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: zero, namespace: ml}
  spec: {schedulingPolicy: {gang: {minCount: 0}}}
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata: {name: mixed, namespace: ml}
  spec: {schedulingPolicy: {gang: {minCount: 2}}}
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
- {apiVersion: v1, kind: Pod, metadata: {name: lost, namespace: ml}, spec: {schedulingGroup: {podGroupName: nowhere}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: z0, namespace: ml}, spec: {schedulingGroup: {podGroupName: zero}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: x0, namespace: ml}, spec: {schedulingGroup: {podGroupName: mixed}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: x1, namespace: ml}, spec: {schedulerName: other, schedulingGroup: {podGroupName: mixed}, containers: [{name: c}]}}
"#;

fn simulate_default(name: &str, yaml: &str) -> Vec<Value> {
    let objects = load_text(name, yaml);
    assert!(objects.warnings.is_empty(), "{:?}", objects.warnings);
    let sim = simulate::simulate(&objects, &[Profile::default()], &Registry::in_tree())
        .expect("simulate");
    let doc: Value =
        serde_json::from_str(&output::json(&sim.results).expect("json")).expect("JSON");
    doc["results"].as_array().expect("results").clone()
}

/// A pod's result: `status` (`Scheduled`, `Unschedulable`, ...), `message`.
fn outcome<'a>(results: &'a [Value], pod: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["pod"] == pod)
        .unwrap_or_else(|| panic!("no result for {pod}: {results:#?}"))
}

#[test]
fn simulate_places_an_upstream_gang_all_or_none() {
    let results = simulate_default("gangs.yaml", CLUSTER);
    for t in ["ml/t0", "ml/t1", "ml/t2"] {
        assert_eq!(
            outcome(&results, t)["status"],
            "Scheduled",
            "{t}: {results:#?}"
        );
    }
    // b0 and b1 were placed and waited at Permit; b2 fits nowhere, so the
    // group is rejected whole: none is placed, each says why.
    for b in ["ml/b0", "ml/b1", "ml/b2"] {
        let o = outcome(&results, b);
        assert_eq!(o["status"], "Unschedulable", "{b}: {o}");
        assert!(
            o["message"]
                .as_str()
                .is_some_and(|m| m.contains("Insufficient cpu")),
            "{b}: {o}"
        );
    }
    // The basic group's pod goes on its own in the room big did not take.
    assert_eq!(outcome(&results, "ml/w0")["status"], "Scheduled");
}

#[test]
fn simulate_holds_the_members_of_groups_that_may_not_be_scheduled() {
    let results = simulate_default("bad.yaml", BAD);
    let message = |pod: &str| {
        let o = outcome(&results, pod);
        assert_eq!(o["status"], "Unschedulable", "{pod}: {o}");
        o["message"].as_str().expect("message").to_owned()
    };
    assert_eq!(
        message("ml/lost"),
        "waiting for pods's pod group \"nowhere\" to appear in scheduling queue"
    );
    assert_eq!(
        message("ml/z0"),
        "PodGroup ml/zero: spec.schedulingPolicy.gang.minCount: Invalid value: 0: must be \
         greater than zero"
    );
    assert_eq!(
        message("ml/x0"),
        "all pods in a single pod group should have the same .spec.schedulerName set, got: \
         \"other\" and \"default-scheduler\""
    );
}

#[test]
fn a_gang_short_of_min_count_waits_with_upstreams_message() {
    // Two members of a minCount-3 gang exist: upstream's PreEnqueue keeps
    // them waiting for the third.
    let yaml = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g, namespace: ml}, spec: {schedulingPolicy: {gang: {minCount: 3}}}}
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ml}, spec: {schedulingGroup: {podGroupName: g}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: ml}, spec: {schedulingGroup: {podGroupName: g}, containers: [{name: c}]}}
"#;
    let results = simulate_default("short.yaml", yaml);
    for p in ["ml/a", "ml/b"] {
        let o = outcome(&results, p);
        assert_eq!(o["status"], "Unschedulable", "{p}: {o}");
        assert_eq!(
            o["message"],
            "waiting for minCount pods from a gang to appear in scheduling queue"
        );
    }
}

#[test]
fn members_waiting_for_a_gated_sibling_time_out_after_five_minutes() {
    // Three members exist (minCount met), but one is scheduling-gated: the
    // other two are placed and wait at Permit for it until upstream's fixed
    // 5-minute timeout (simulate's clock jumps to the end), then both are
    // released; nothing is placed.
    let yaml = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g, namespace: ml}, spec: {schedulingPolicy: {gang: {minCount: 3}}}}
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ml}, spec: {schedulingGroup: {podGroupName: g}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: ml}, spec: {schedulingGroup: {podGroupName: g}, containers: [{name: c}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: gated, namespace: ml}, spec: {schedulingGroup: {podGroupName: g}, schedulingGates: [{name: wait}], containers: [{name: c}]}}
"#;
    let results = simulate_default("gated.yaml", yaml);
    for p in ["ml/a", "ml/b"] {
        let o = outcome(&results, p);
        assert_eq!(o["status"], "Unschedulable", "{p}: {o}");
        assert_eq!(
            o["message"],
            "rejected due to timeout after waiting 5m0s at plugin GangScheduling"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_places_the_upstream_gang_whole_and_the_other_not_at_all() {
    let dir = std::env::temp_dir().join(format!("flotilla-upstream-gangs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, CLUSTER).expect("write");
    let workload = load_k8s_list(&path, OnBadInput::Fail).expect("loads");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(workload.warnings.is_empty(), "{:?}", workload.warnings);

    let cfg = RunConfig {
        in_process_workers: 2,
        expect_workers: 2,
        progress: false,
        timeout: Duration::from_secs(20),
        settle: Duration::from_millis(500),
        scheduler: config::parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 2\n",
            "default.yaml",
        )
        .expect("valid configuration"),
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(90),
        "the run with upstream gangs",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());
    assert!(
        !report.timed_out,
        "the run settles: the rejected gang waits for an event"
    );

    let bound = |p: &str| node_of(&cluster.pod("ml", p).expect("pod")).is_some();
    assert!(["t0", "t1", "t2"].iter().all(|p| bound(p)), "train whole");
    assert!(
        ["b0", "b1", "b2"].iter().all(|p| !bound(p)),
        "big not at all"
    );
    assert!(bound("w0"), "the basic group's pod");
    assert_eq!(report.gangs.scheduled, 1, "one gang bound whole");
    assert_eq!(report.checks.overcommitted_nodes, 0);
    let train = cluster.workload_pod_group("ml", "train").expect("train");
    let c = train.scheduled_condition().expect("condition written");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Scheduled")
    );
    let big = cluster.workload_pod_group("ml", "big").expect("big");
    let c = big.scheduled_condition().expect("condition written");
    assert_eq!(c.type_, "PodGroupScheduled", "v1alpha2's condition type");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "Unschedulable")
    );
}
