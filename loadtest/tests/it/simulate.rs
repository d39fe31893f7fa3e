//! `simulate` / `explain` end to end through the library: input files,
//! queue order, placements applied in turn, and the JSON document field by
//! field. Every expected value is derived by hand in the comments from
//! upstream's rules (LeastAllocated, BalancedAllocation, TaintToleration
//! normalization, FitError format).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use flotilla_loadtest::workload::{ClusterObjects, OnBadInput, load_cluster_objects};
use flotilla_scheduler::plugins::names;
use flotilla_scheduler::simulate::{self, Outcome, output};
use flotilla_scheduler::{Profile, Registry};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(path: &Path) -> ClusterObjects {
    load_cluster_objects(path, OnBadInput::Fail)
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// Writes `text` to a fresh file named `name` and loads it.
pub(crate) fn load_text(name: &str, text: &str) -> ClusterObjects {
    let dir = std::env::temp_dir().join(format!(
        "flotilla-simulate-it-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    let objects = load(&path);
    let _ = std::fs::remove_dir_all(&dir);
    objects
}

/// The plugins of today's default profile with upstream's weights, named
/// explicitly so these expectations do not move when plugins are added to
/// the default.
fn filter_and_score_profile() -> Profile {
    Profile::only(&[
        (names::NODE_UNSCHEDULABLE, 0),
        (names::NODE_NAME, 0),
        (names::TAINT_TOLERATION, 3),
        (names::NODE_AFFINITY, 2),
        (names::NODE_PORTS, 0),
        (names::NODE_RESOURCES_FIT, 1),
        (names::NODE_RESOURCES_BALANCED_ALLOCATION, 1),
    ])
}

fn simulate_json(objects: &ClusterObjects, profile: Profile) -> Value {
    let sim = simulate::simulate(objects, &[profile], &Registry::in_tree()).expect("simulate");
    let text = output::json(&sim.results).expect("json");
    serde_json::from_str(&text).expect("valid JSON")
}

/// Keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

#[test]
fn json_document_field_by_field() {
    // simulate-small.yaml, profile TaintToleration (weight 3) +
    // NodeResourcesFit (weight 1):
    // web-1 (1 cpu, 2Gi):
    //  node-1: 1500m of 2 cpu used, 1500 + 1000 > 2000 -> "Insufficient cpu",
    //          Unschedulable (1 cpu alone would fit the node).
    //  node-2: LeastAllocated cpu (500+1000)/4000 -> (4000-1500)*100/4000 = 62,
    //          memory (1+2)Gi of 8Gi -> 62; (62+62)/2 = 62. No PreferNoSchedule
    //          taint: raw 0.
    //  node-3: NoSchedule taint -> TaintToleration, UnschedulableAndUnresolvable.
    //  node-4: cpu 1200/4000 -> 70, memory 2.5Gi/8Gi -> 68; (70+68)/2 = 69.
    //          One PreferNoSchedule taint: raw 1.
    //  TaintToleration normalizes reversed against the max raw (1): node-2
    //  100, node-4 0. Totals: node-2 62 + 3*100 = 362, node-4 69 + 0 = 69.
    // web-2 (3 cpu, 1Gi), after web-1 is on node-2:
    //  node-1: 3 cpu > 2 allocatable -> UnschedulableAndUnresolvable.
    //  node-2: 1500 + 3000 > 4000 -> Unschedulable.
    //  node-4: cpu 3200/4000 -> 20, memory 1.5Gi/8Gi -> 81; 50. Taint raw 1 is
    //          the max -> 0. Total 50.
    // big (16 cpu): more than any node's allocatable everywhere but node-3,
    //  which its taint rejects first.
    let objects = load(&fixture("simulate-small.yaml"));
    let profile = Profile::only(&[(names::TAINT_TOLERATION, 3), (names::NODE_RESOURCES_FIT, 1)]);
    let doc = simulate_json(&objects, profile);

    assert_eq!(keys(&doc), ["results"]);
    let results = doc["results"].as_array().expect("results array");
    assert_eq!(results.len(), 3);
    for r in results {
        assert_eq!(keys(r), ["message", "node", "nodes", "pod", "status"]);
    }

    let web1 = &results[0];
    assert_eq!(web1["pod"], "default/web-1");
    assert_eq!(web1["status"], "Scheduled");
    assert_eq!(web1["node"], "node-2");
    assert_eq!(web1["message"], "");
    assert_eq!(
        keys(&web1["nodes"]),
        ["node-1", "node-2", "node-3", "node-4"]
    );
    assert_eq!(
        web1["nodes"]["node-1"],
        json!({"filter": {"code": "Unschedulable", "plugin": "NodeResourcesFit",
                          "reasons": ["Insufficient cpu"]}})
    );
    assert_eq!(
        web1["nodes"]["node-2"],
        json!({"filter": {"code": "Success"},
               "scores": {"NodeResourcesFit": 62, "TaintToleration": 100},
               "totalScore": 362})
    );
    assert_eq!(
        web1["nodes"]["node-3"],
        json!({"filter": {"code": "UnschedulableAndUnresolvable", "plugin": "TaintToleration",
                          "reasons": ["node(s) had untolerated taint(s)"]}})
    );
    assert_eq!(
        web1["nodes"]["node-4"],
        json!({"filter": {"code": "Success"},
               "scores": {"NodeResourcesFit": 69, "TaintToleration": 0},
               "totalScore": 69})
    );

    let web2 = &results[1];
    assert_eq!(web2["pod"], "default/web-2");
    assert_eq!(web2["status"], "Scheduled");
    assert_eq!(web2["node"], "node-4");
    assert_eq!(web2["message"], "");
    assert_eq!(
        web2["nodes"]["node-1"]["filter"],
        json!({"code": "UnschedulableAndUnresolvable", "plugin": "NodeResourcesFit",
               "reasons": ["Insufficient cpu"]})
    );
    assert_eq!(
        web2["nodes"]["node-2"]["filter"],
        json!({"code": "Unschedulable", "plugin": "NodeResourcesFit",
               "reasons": ["Insufficient cpu"]}),
        "web-1's placement on node-2 is applied before web-2's cycle"
    );
    assert_eq!(
        web2["nodes"]["node-4"],
        json!({"filter": {"code": "Success"},
               "scores": {"NodeResourcesFit": 50, "TaintToleration": 0},
               "totalScore": 50})
    );

    let big = &results[2];
    assert_eq!(big["pod"], "default/big");
    assert_eq!(big["status"], "Unschedulable");
    assert_eq!(big["node"], Value::Null);
    assert_eq!(
        big["message"],
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu."
    );
    assert_eq!(
        keys(&big["nodes"]),
        ["node-1", "node-2", "node-3", "node-4"]
    );
    for node in ["node-1", "node-2", "node-4"] {
        assert_eq!(
            big["nodes"][node],
            json!({"filter": {"code": "UnschedulableAndUnresolvable",
                              "plugin": "NodeResourcesFit", "reasons": ["Insufficient cpu"]}}),
            "{node}"
        );
    }
}

#[test]
fn one_plugin_alone_reports_exactly_that_plugin() {
    // Only NodeResourcesFit: the tainted node-3 is feasible now and scores
    // cpu 1000/4000 -> 75, memory 2Gi/8Gi -> 75: 75, the best; node-4 69,
    // node-2 62 (as derived above). Weight 1, so totals equal the scores.
    let objects = load(&fixture("simulate-small.yaml"));
    let doc = simulate_json(&objects, Profile::only(&[(names::NODE_RESOURCES_FIT, 1)]));
    let web1 = &doc["results"][0];
    assert_eq!(web1["pod"], "default/web-1");
    assert_eq!(web1["node"], "node-3");
    assert_eq!(
        web1["nodes"]["node-1"],
        json!({"filter": {"code": "Unschedulable", "plugin": "NodeResourcesFit",
                          "reasons": ["Insufficient cpu"]}})
    );
    for (node, score) in [("node-2", 62), ("node-3", 75), ("node-4", 69)] {
        assert_eq!(
            web1["nodes"][node],
            json!({"filter": {"code": "Success"},
                   "scores": {"NodeResourcesFit": score}, "totalScore": score}),
            "{node}"
        );
    }
    // big: every node rejected by NodeResourcesFit, none by a taint.
    let big = &doc["results"][2];
    assert_eq!(
        big["message"],
        "0/4 nodes are available: 4 Insufficient cpu."
    );
}

#[test]
fn kubectl_snapshot_round_trips_through_simulate() {
    // The fixture, as kubectl writes it: managedFields, status, system pods.
    // Nodes (allocatable): kind-control-plane 4 cpu / 8148604Ki, tainted
    // control-plane:NoSchedule; kind-worker and kind-worker2 4 cpu /
    // 8148604Ki; kind-worker3 8 cpu, cordoned.
    // Bound, holding room (requests; scoring counts 100m/200Mi for a
    // container without requests, so kube-proxy adds 100m/200Mi there):
    //  kind-worker:  kindnet 100m/50Mi, kube-proxy -, web x2 500m/512Mi;
    //                report-... Succeeded (1 cpu / 1Gi) holds nothing.
    //                requests 1100m / 1074Mi; for scoring 1200m / 1274Mi.
    //  kind-worker2: kindnet, kube-proxy, web 500m/512Mi, analytics-db-0 2/4Gi.
    //                requests 2600m / 4658Mi; for scoring 2700m / 4858Mi.
    // kubectl sorts by namespace then name, so the queue (all priority 0) is
    // default/analytics-db-1, default/web-...-pq8rs, ml/trainer-0; the
    // volcano pod is skipped.
    // analytics-db-1 (2 cpu, 4Gi): kind-worker2 2600 + 2000 > 4000 and
    //  4658 + 4096 Mi > 8148604Ki -> both reasons, Unschedulable. Only
    //  kind-worker fits: LeastAllocated cpu 3200/4000 -> 20, memory 5370Mi
    //  -> 32: 26; Balanced (upstream 1.36: the change in balance,
    //  50 + (50 + with - without) / 2): with the pod cpu 3100/4000 = .775,
    //  memory 5170Mi = .6497, std .0627 -> 93; without it 1100/4000 = .275,
    //  1074Mi = .135, std .07 -> 93: 50 + 50/2 = 75. Total 3*100 + 26 + 75 =
    //  401.
    // web-...-pq8rs (500m, 512Mi): kind-worker now 3700/5882Mi for scoring
    //  -> 7 and 26: 16; Balanced with .9/.7140 -> 90, without .775/.6497 ->
    //  93: 50 + 47/2 = 73; total 389.
    //  kind-worker2: 3200/5370Mi -> 26; Balanced with .775/.6497 -> 93,
    //  without 2600/4000 = .65, 4658Mi = .5854 -> 96: 50 + 47/2 = 73; total
    //  399, the higher.
    // trainer-0: nodeSelector matches no node.
    let path = fixture("kubectl-get-nodes-pods.yaml");
    let objects = load(&path);
    assert!(objects.warnings.is_empty(), "{:?}", objects.warnings);
    assert_eq!((objects.nodes.len(), objects.pods.len()), (4, 21));

    let sim = simulate::simulate(
        &objects,
        &[filter_and_score_profile()],
        &Registry::in_tree(),
    )
    .expect("simulate");
    let skipped: Vec<String> = sim
        .skipped
        .iter()
        .map(|s| format!("{}: {}", s.pod, s.reason))
        .collect();
    assert_eq!(
        skipped,
        ["batch/sim-job-0: spec.schedulerName \"volcano\" has no profile"]
    );
    assert!(sim.notes.is_empty(), "{:?}", sim.notes);

    let doc: Value =
        serde_json::from_str(&output::json(&sim.results).expect("json")).expect("JSON");
    let results = doc["results"].as_array().expect("results");
    let order: Vec<&str> = results.iter().filter_map(|r| r["pod"].as_str()).collect();
    assert_eq!(
        order,
        [
            "default/analytics-db-1",
            "default/web-5d4f8b7c9d-pq8rs",
            "ml/trainer-0"
        ]
    );

    let db = &results[0];
    assert_eq!(db["status"], "Scheduled");
    assert_eq!(db["node"], "kind-worker");
    assert_eq!(
        db["nodes"]["kind-worker2"]["filter"],
        json!({"code": "Unschedulable", "plugin": "NodeResourcesFit",
               "reasons": ["Insufficient cpu", "Insufficient memory"]})
    );
    assert_eq!(
        db["nodes"]["kind-control-plane"]["filter"],
        json!({"code": "UnschedulableAndUnresolvable", "plugin": "TaintToleration",
               "reasons": ["node(s) had untolerated taint(s)"]})
    );
    assert_eq!(
        db["nodes"]["kind-worker3"]["filter"],
        json!({"code": "UnschedulableAndUnresolvable", "plugin": "NodeUnschedulable",
               "reasons": ["node(s) were unschedulable"]})
    );
    assert_scores(&db["nodes"]["kind-worker"], 100, 26, 75, 401);

    let web = &results[1];
    assert_eq!(web["status"], "Scheduled");
    assert_eq!(web["node"], "kind-worker2");
    assert_scores(&web["nodes"]["kind-worker"], 100, 16, 73, 389);
    assert_scores(&web["nodes"]["kind-worker2"], 100, 26, 73, 399);

    let trainer = &results[2];
    assert_eq!(trainer["status"], "Unschedulable");
    assert_eq!(trainer["node"], Value::Null);
    assert_eq!(
        trainer["message"],
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were \
         unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
    );
    for node in ["kind-worker", "kind-worker2"] {
        assert_eq!(
            trainer["nodes"][node]["filter"],
            json!({"code": "UnschedulableAndUnresolvable", "plugin": "NodeAffinity",
                   "reasons": ["node(s) didn't match Pod's node affinity/selector"]})
        );
    }
}

/// A feasible node's scores: TaintToleration, NodeResourcesFit and
/// NodeResourcesBalancedAllocation as given; NodeAffinity (no preferred
/// terms) contributes nothing, whether it reports 0 or is skipped as
/// upstream's PreScore does.
fn assert_scores(node: &Value, taint: i64, fit: i64, balanced: i64, total: i64) {
    assert_eq!(node["filter"], json!({"code": "Success"}));
    let scores = &node["scores"];
    assert_eq!(scores["TaintToleration"], taint, "{node}");
    assert_eq!(scores["NodeResourcesFit"], fit, "{node}");
    assert_eq!(
        scores["NodeResourcesBalancedAllocation"], balanced,
        "{node}"
    );
    assert!(scores.get("NodeAffinity").is_none_or(|v| v == 0), "{node}");
    assert_eq!(node["totalScore"], total, "{node}");
}

const PRIORITY_CLUSTER: &str = r#"
# One node with room for two 1-cpu pods; four pending pods of different
# priorities in file order.
apiVersion: v1
kind: Node
metadata: {name: only}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: standard}
value: 100
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: critical}
value: 1000
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: apps}
data: {a: b}
---
apiVersion: v1
kind: PodList
items:
- metadata: {name: first, namespace: apps}
  spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
- metadata: {name: second, namespace: apps}
  spec:
    priorityClassName: batch
    containers: [{name: c, resources: {requests: {cpu: "1"}}}]
- metadata: {name: urgent, namespace: apps}
  spec:
    priorityClassName: critical
    containers: [{name: c, resources: {requests: {cpu: "1"}}}]
- metadata: {name: peer, namespace: apps}
  spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
- metadata: {name: orphan, namespace: apps}
  spec:
    priorityClassName: gold
    containers: [{name: c, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {ports: [{port: 80}]}
"#;

#[test]
fn queue_runs_by_priority_then_file_order_from_multi_document_yaml() {
    // Priorities: first and peer get the globalDefault class (100), second
    // 10, urgent 1000. Queue: urgent, first, peer (file order breaks the
    // tie), second. The node takes two: urgent and first; peer and second
    // find it full. orphan names a class that does not exist: an Error
    // result after the queue, not a failure of the run.
    const KEPT: &str = "only Node, Pod, Namespace, PriorityClass, PodDisruptionBudget, PodGroup \
                        and the volume kinds (PersistentVolumeClaim, PersistentVolume, \
                        StorageClass, CSINode, CSIDriver, VolumeAttachment)";
    let objects = load_text("priorities.yaml", PRIORITY_CLUSTER);
    let warnings: Vec<String> = objects.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            format!(
                "priorities.yaml: item 5 (ConfigMap apps/settings): skipped: kind ConfigMap is \
                 not loaded ({KEPT})"
            ),
            format!(
                "priorities.yaml: item 11 (Service apps/web): skipped: kind Service is not \
                 loaded ({KEPT})"
            ),
        ]
    );

    let sim = simulate::simulate(
        &objects,
        &[Profile::only(&[(names::NODE_RESOURCES_FIT, 1)])],
        &Registry::in_tree(),
    )
    .expect("simulate");
    let got: Vec<(String, Option<i32>, &str, Option<&str>)> = sim
        .results
        .iter()
        .map(|r| {
            (
                r.pod.to_string(),
                r.priority,
                r.outcome.status(),
                r.outcome.node(),
            )
        })
        .collect();
    let want: Vec<(String, Option<i32>, &str, Option<&str>)> = vec![
        ("apps/urgent".into(), Some(1000), "Scheduled", Some("only")),
        ("apps/first".into(), Some(100), "Scheduled", Some("only")),
        ("apps/peer".into(), Some(100), "Unschedulable", None),
        ("apps/second".into(), Some(10), "Unschedulable", None),
        ("apps/orphan".into(), None, "Error", None),
    ];
    assert_eq!(got, want);
    assert_eq!(
        sim.results[2].outcome.message(),
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    assert_eq!(
        sim.results[4].outcome,
        Outcome::Error {
            message: "spec.priorityClassName: no PriorityClass with name gold was found".into()
        }
    );
    assert!(sim.results[4].nodes.is_empty());
}

#[test]
fn explain_sees_bound_pods_only() {
    // simulate places web-1 on node-2 before web-2, so web-2 finds node-2
    // full. explain does not place other pending pods: node-2 (500m used)
    // has room for web-2's 3 cpu. Scores (TaintToleration x3 +
    // NodeResourcesFit): node-2 cpu 3500/4000 -> 12, memory 2Gi/8Gi -> 75:
    // 43, no soft taint -> 100: 343. node-4 50 + 0 = 50. Pick node-2.
    let objects = load(&fixture("simulate-small.yaml"));
    let profile = Profile::only(&[(names::TAINT_TOLERATION, 3), (names::NODE_RESOURCES_FIT, 1)]);
    let e = simulate::explain(&objects, &[profile], &Registry::in_tree(), "default/web-2")
        .expect("explain");
    assert_eq!(e.bound_pods, 3);
    assert!(e.notes.is_empty(), "{:?}", e.notes);
    assert_eq!(
        e.result.outcome,
        Outcome::Scheduled {
            node: "node-2".into()
        }
    );
    let node2 = &e.result.nodes["node-2"];
    assert_eq!(node2.total_score, Some(343));
    assert_eq!(
        node2.scores.as_deref(),
        Some(&[("TaintToleration", 100), ("NodeResourcesFit", 43)][..])
    );
    assert_eq!(e.result.nodes["node-4"].total_score, Some(50));
    let text = output::explain_text(&e, "simulate-small.yaml");
    assert!(
        text.contains("would pick: node-2 (total score 343)"),
        "{text}"
    );
}

#[test]
fn explain_of_a_bound_pod_leaves_out_its_own_placement() {
    // cache-0 (500m, 1Gi) is bound to node-2. Explained, it is taken off
    // node-2 first, so node-2 is empty for it: NodeResourcesFit cpu 500/4000
    // -> 87, memory 1Gi/8Gi -> 87: 87; node-3 likewise 87 (no TaintToleration
    // in this profile); node-4 (agent-4 200m/512Mi): cpu 700 -> 82, memory
    // 1.5Gi -> 81: 81; node-1 (1500m, 1Gi of 2/4Gi): cpu 2000 -> 0, memory
    // 2Gi/4Gi -> 50: 25.
    let objects = load(&fixture("simulate-small.yaml"));
    let e = simulate::explain(
        &objects,
        &[Profile::only(&[(names::NODE_RESOURCES_FIT, 1)])],
        &Registry::in_tree(),
        "default/cache-0",
    )
    .expect("explain");
    assert_eq!(e.bound_pods, 2);
    assert_eq!(e.notes.len(), 1);
    assert!(e.notes[0].contains("bound to node node-2"), "{:?}", e.notes);
    let totals: Vec<(&str, Option<i64>)> = e
        .result
        .nodes
        .iter()
        .map(|(n, r)| (n.as_str(), r.total_score))
        .collect();
    assert_eq!(
        totals,
        [
            ("node-1", Some(25)),
            ("node-2", Some(87)),
            ("node-3", Some(87)),
            ("node-4", Some(81))
        ]
    );
    let picked = e.result.outcome.node().expect("scheduled");
    assert!(
        ["node-2", "node-3"].contains(&picked),
        "a best node: {picked}"
    );
}

#[test]
fn explain_errors_name_the_problem() {
    let objects = load(&fixture("simulate-small.yaml"));
    let profiles = [Profile::default()];
    let registry = Registry::in_tree();
    let cases = [
        ("default/nope", "pod default/nope is not in simulate-small"),
        (
            "a/b/c",
            "\"a/b/c\" is not a pod name: give NAMESPACE/NAME (or NAME for namespace default)",
        ),
        (
            "/x",
            "\"/x\" is not a pod name: give NAMESPACE/NAME (or NAME for namespace default)",
        ),
    ];
    for (pod, want) in cases {
        let err = simulate::explain(&objects, &profiles, &registry, pod).expect_err(pod);
        assert_eq!(err.to_string(), want);
    }
    // NAME alone means namespace default.
    let e = simulate::explain(&objects, &profiles, &registry, "web-1").expect("web-1");
    assert_eq!(e.result.pod.to_string(), "default/web-1");

    let other = simulate::explain(
        &objects,
        &[Profile {
            scheduler_name: "flotilla".into(),
            ..Profile::default()
        }],
        &registry,
        "web-1",
    )
    .expect_err("no profile serves default-scheduler");
    assert_eq!(
        other.to_string(),
        "pod default/web-1: spec.schedulerName \"default-scheduler\" has no profile \
         (profiles: flotilla); no scheduler simulated here would place it"
    );
}

#[test]
fn simulate_and_explain_read_the_volume_objects() {
    let objects = load(&fixture("volumes.yaml"));
    assert_eq!(objects.volumes.len(), 7);
    // node-b has more room (NodeResourcesFit would pick it): the PV's zone
    // decides.
    let e = simulate::explain(
        &objects,
        &[Profile::default()],
        &Registry::in_tree(),
        "default/db",
    )
    .expect("explain db");
    assert_eq!(
        e.result.outcome,
        Outcome::Scheduled {
            node: "node-a".into()
        }
    );
    assert_eq!(
        e.notes,
        [
            "StorageClass odd: volumeBindingMode: unsupported value \"Sometimes\": supported \
             values: \"Immediate\", \"WaitForFirstConsumer\"; pods using it are unschedulable"
        ]
    );
    let e = simulate::explain(
        &objects,
        &[Profile::default()],
        &Registry::in_tree(),
        "default/tmp",
    )
    .expect("explain tmp");
    let Outcome::Unschedulable { message } = &e.result.outcome else {
        panic!("{:?}", e.result.outcome)
    };
    assert!(
        message.starts_with("0/2 nodes are available: StorageClass odd: volumeBindingMode"),
        "{message}"
    );
}
