//! `simulate` with preemption (DefaultPreemption, PodDisruptionBudgets,
//! `preemptionPolicy: Never`) and gangs (Coscheduling PodGroups): the JSON
//! a person reads, checked field by field. Expected values follow from
//! upstream's rules, derived in the comments.

use serde_json::Value;

use flotilla_scheduler::framework::PluginRef;
use flotilla_scheduler::plugins::names;
use flotilla_scheduler::simulate::{self, output};
use flotilla_scheduler::{Profile, Registry};

use crate::simulate::load_text;

fn run(name: &str, yaml: &str, profile: Profile) -> Vec<Value> {
    let objects = load_text(name, yaml);
    let sim = simulate::simulate(&objects, &[profile], &Registry::in_tree()).expect("simulate");
    let doc: Value =
        serde_json::from_str(&output::json(&sim.results).expect("json")).expect("JSON");
    doc["results"].as_array().expect("results").clone()
}

fn by_pod<'a>(results: &'a [Value], pod: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["pod"] == pod)
        .unwrap_or_else(|| panic!("no result for {pod}: {results:#?}"))
}

/// n1 holds low-a (started first) and low-b, both priority 0; n2 holds two
/// `mid` (100) pods. Every node is full; `high` (1000) needs 1 cpu.
const PREEMPTION: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: mid}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: n2}
  status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
- apiVersion: v1
  kind: Pod
  metadata: {name: low-a, namespace: default, uid: u-low-a, labels: {app: plain}}
  spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
  status: {phase: Running, startTime: "2026-01-01T00:00:00Z"}
- apiVersion: v1
  kind: Pod
  metadata: {name: low-b, namespace: default, uid: u-low-b, labels: {app: protected}}
  spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
  status: {phase: Running, startTime: "2026-01-02T00:00:00Z"}
- apiVersion: v1
  kind: Pod
  metadata: {name: mid-a, namespace: default, uid: u-mid-a}
  spec: {nodeName: n2, priorityClassName: mid, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: mid-b, namespace: default, uid: u-mid-b}
  spec: {nodeName: n2, priorityClassName: mid, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
  status: {phase: Running}
- apiVersion: v1
  kind: Pod
  metadata: {name: high, namespace: default, uid: u-high}
  spec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
"#;

const PDB: &str = r#"
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: keep-protected, namespace: default}
spec: {minAvailable: 1, selector: {matchLabels: {app: protected}}}
status: {disruptionsAllowed: 0, currentHealthy: 1, desiredHealthy: 1, expectedPods: 1}
"#;

#[test]
fn a_pod_that_fits_nowhere_preempts_the_least_important_victim_and_lands() {
    // Candidates: n1 (victim priority 0) and n2 (victim priority 100): the
    // lowest highest-victim priority wins, n1. On n1 one victim is enough;
    // upstream reprieves the more important pod first (equal priority, so
    // the earlier start: low-a), so low-b is evicted.
    let results = run("preempt.yaml", PREEMPTION, Profile::default());
    assert_eq!(results.len(), 1);
    let high = by_pod(&results, "default/high");
    assert_eq!(high["status"], "Scheduled", "{high:#}");
    assert_eq!(high["node"], "n1");
    assert_eq!(high["nominatedNode"], "n1");
    assert_eq!(high["victims"], serde_json::json!(["default/low-b"]));
    assert_eq!(high["message"], "");
}

#[test]
fn a_pod_disruption_budget_moves_the_eviction_to_an_unprotected_pod() {
    // low-b is covered by a budget that allows no disruption: upstream
    // tries to reprieve budget-violating victims first, so low-b stays and
    // low-a goes.
    let yaml = format!("{PREEMPTION}{PDB}");
    let results = run("preempt-pdb.yaml", &yaml, Profile::default());
    let high = by_pod(&results, "default/high");
    assert_eq!(high["node"], "n1");
    assert_eq!(high["victims"], serde_json::json!(["default/low-a"]));
}

#[test]
fn preemption_policy_never_leaves_the_pod_unschedulable_with_upstreams_reason() {
    let yaml = PREEMPTION.replace(
        "spec: {priorityClassName: high, containers",
        "spec: {priorityClassName: high, preemptionPolicy: Never, containers",
    );
    let results = run("never.yaml", &yaml, Profile::default());
    let high = by_pod(&results, "default/high");
    assert_eq!(high["status"], "Unschedulable");
    assert_eq!(
        high["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to \
         preemptionPolicy=Never."
    );
    assert!(high.get("nominatedNode").is_none() && high.get("victims").is_none());
}

#[test]
fn without_lower_priority_pods_the_message_says_no_victims_were_found() {
    // Every bound pod has the preemptor's priority: nothing to evict.
    let yaml = PREEMPTION
        .replace("value: 1000", "value: 0")
        .replace("value: 100\n", "value: 0\n");
    let results = run("no-victims.yaml", &yaml, Profile::default());
    let high = by_pod(&results, "default/high");
    assert_eq!(
        high["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: \
         2 No preemption victims found for incoming pod."
    );
}

/// The default profile plus Coscheduling, as the example config enables it.
fn gang_profile() -> Profile {
    let mut p = Profile::default();
    p.plugins
        .multi_point
        .enabled
        .push(PluginRef::new(names::COSCHEDULING, 0));
    p
}

/// One 4-cpu node; a PodGroup `train` of minMember 3 whose members ask 2
/// cpu each (room for two), then a 1-cpu pod.
const GANG: &str = r#"
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train, namespace: ml}
spec: {minMember: 3, scheduleTimeoutSeconds: 30}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
- apiVersion: v1
  kind: Pod
  metadata: {name: w0, namespace: ml, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: w1, namespace: ml, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: w2, namespace: ml, labels: {scheduling.x-k8s.io/pod-group: train}}
  spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: small, namespace: ml}
  spec: {containers: [{name: c, resources: {requests: {cpu: "3"}}}]}
"#;

#[test]
fn a_gang_that_cannot_reach_min_member_is_unschedulable_whole_and_frees_its_room() {
    // w0 and w1 fit and wait at Permit; w2 fits nowhere (4 cpu held), and
    // with 2 of 3 placed (a third missing, more than 10 %) Coscheduling's
    // PostFilter rejects the waiting siblings: their room is released, so
    // `small` (3 cpu) fits afterwards.
    let results = run("gang.yaml", GANG, gang_profile());
    for w in ["ml/w0", "ml/w1"] {
        let r = by_pod(&results, w);
        assert_eq!(r["status"], "Unschedulable", "{w}: {r:#}");
        assert_eq!(
            r["message"],
            "PodGroup ml/train gets rejected due to Pod w2 is unschedulable even after PostFilter"
        );
    }
    let w2 = by_pod(&results, "ml/w2");
    assert_eq!(w2["status"], "Unschedulable");
    let msg = w2["message"].as_str().expect("message");
    assert!(
        msg.starts_with("0/1 nodes are available: 1 Insufficient cpu.")
            && msg.ends_with(
                "PodGroup ml/train gets rejected due to Pod w2 is unschedulable even after PostFilter"
            ),
        "{msg}"
    );
    let small = by_pod(&results, "ml/small");
    assert_eq!(small["status"], "Scheduled", "{small:#}");
    assert_eq!(small["node"], "n1");
}

#[test]
fn a_gang_that_fits_is_scheduled_whole() {
    let yaml = GANG.replace("cpu: \"2\"", "cpu: \"1\"");
    let results = run("gang-fits.yaml", &yaml, gang_profile());
    for w in ["ml/w0", "ml/w1", "ml/w2"] {
        assert_eq!(by_pod(&results, w)["status"], "Scheduled", "{w}");
    }
    // 3 cpu taken by the gang: the 3-cpu pod no longer fits.
    assert_eq!(by_pod(&results, "ml/small")["status"], "Unschedulable");
}

#[test]
fn a_gang_with_too_few_pods_never_places_any_member() {
    // minMember 4 but only three pods exist: Coscheduling's PreFilter
    // rejects each member; both PostFilters add their message (joined with
    // ", " as upstream joins PostFilter messages).
    let yaml = GANG.replace("minMember: 3", "minMember: 4");
    let results = run("gang-short.yaml", &yaml, gang_profile());
    for (w, name) in [("ml/w0", "w0"), ("ml/w1", "w1"), ("ml/w2", "w2")] {
        let r = by_pod(&results, w);
        assert_eq!(r["status"], "Unschedulable");
        assert_eq!(
            r["message"],
            format!(
                "0/1 nodes are available: pre-filter pod {name} cannot find enough sibling pods, \
                 current pods number: 3, minMember of group: 4. preemption: 0/1 nodes are \
                 available: 1 Preemption is not helpful for scheduling., PodGroup ml/train gets \
                 rejected due to Pod {name} is unschedulable even after PostFilter"
            )
        );
    }
    assert_eq!(by_pod(&results, "ml/small")["status"], "Scheduled");
}

#[test]
fn a_gang_waiting_when_the_queue_ends_times_out_whole() {
    // minMember 3, three pods of 1 cpu, but w2 is gated: it counts as a
    // member (PreFilter passes) but is never tried, so w0 and w1 wait at
    // Permit until the end, then time out.
    let yaml = GANG.replace("cpu: \"2\"", "cpu: \"1\"").replace(
        "metadata: {name: w2, namespace: ml, labels: {scheduling.x-k8s.io/pod-group: train}}\n  spec: {containers",
        "metadata: {name: w2, namespace: ml, labels: {scheduling.x-k8s.io/pod-group: train}}\n  spec: {schedulingGates: [{name: hold}], containers",
    );
    let results = run("gang-gated.yaml", &yaml, gang_profile());
    for w in ["ml/w0", "ml/w1"] {
        let r = by_pod(&results, w);
        assert_eq!(r["status"], "Unschedulable", "{w}: {r:#}");
        assert_eq!(
            r["message"],
            "rejected due to timeout after waiting 30s at plugin Coscheduling"
        );
    }
    assert!(
        results.iter().all(|r| r["pod"] != "ml/w2"),
        "gated: skipped"
    );
}
