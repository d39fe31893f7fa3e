//! An extender managing a device resource end to end (coordinator, real
//! workers over gRPC, embedded cluster): filter, prioritize and bind verbs
//! for the pods requesting it, `ignoredByScheduler` honoured by the
//! worker's Filter and by the bind arbiter, other pods untouched.

use serde_json::{Value, json};

use flotilla_loadtest::workload::Workload;
use flotilla_scheduler::config;
use flotilla_shared::testing::http::{Canned, MockServer};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{node_of, run_to_end, test_run};

/// The device extender: nodes labelled `gpu=true` pass, `g2` scores 10.
fn device_extender() -> MockServer {
    MockServer::start(|req| {
        let body = req.json();
        let nodes: Vec<Value> = body["Nodes"]["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let name = |n: &Value| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        if req.path.ends_with("/filter") {
            let (pass, fail): (Vec<Value>, Vec<Value>) = nodes
                .into_iter()
                .partition(|n| n["metadata"]["labels"]["gpu"] == "true");
            let failed: serde_json::Map<String, Value> = fail
                .iter()
                .map(|n| (name(n), json!("no device plugin")))
                .collect();
            Canned::json(&json!({"Nodes": {"items": pass}, "FailedAndUnresolvableNodes": failed}))
        } else if req.path.ends_with("/prioritize") {
            let scores: Vec<Value> = nodes
                .iter()
                .map(|n| json!({"Host": name(n), "Score": if name(n) == "g2" { 10 } else { 0 }}))
                .collect();
            Canned::json(&Value::Array(scores))
        } else {
            Canned::json(&json!({"Error": ""}))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_extender_filters_scores_and_binds_the_pods_it_manages() {
    let ext = device_extender();
    let yaml = format!(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: {}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 10
  managedResources:
  - name: example.com/gpu
    ignoredByScheduler: true
"#,
        ext.url("/device")
    );
    let scheduler = config::parse(&yaml, "device.yaml").expect("valid configuration");
    let node = |name: &str, gpu: bool| {
        let b = NodeBuilder::new(name).cpu("8").memory("16Gi").pods(110);
        // The device is the extender's to account for: no allocatable.
        if gpu { b.label("gpu", "true") } else { b }.build()
    };
    let mut pods = Vec::new();
    for i in 0..3 {
        pods.push(
            PodBuilder::new(&format!("train-{i}"))
                .cpu("100m")
                .request("example.com/gpu", "1")
                .build(),
        );
        pods.push(PodBuilder::new(&format!("web-{i}")).cpu("100m").build());
    }
    let workload = Workload {
        name: "device".into(),
        nodes: vec![node("g1", true), node("g2", true), node("c1", false)],
        pods,
        ..Default::default()
    };
    let (report, cluster) = run_to_end(workload, test_run(2, scheduler), "the device run").await;
    println!("{}", report.to_text());
    assert!(!report.timed_out);
    assert_eq!(report.scheduled, 6, "{}", report.to_text());
    assert_eq!(
        report.checks.overcommitted_nodes, 0,
        "the device is the extender's to account for (ignoredByScheduler)"
    );
    assert_eq!(
        report.checks.bindings_written, report.checks.pods_bound_by_flotilla as u64,
        "the extender's Bindings count once each"
    );
    for p in cluster.pods() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if name.starts_with("train-") {
            assert_eq!(node_of(&p), Some("g2"), "{name}: the extender's pick");
        }
    }
    let binds = ext.requests_to("/device/bind");
    let mut bound: Vec<String> = binds
        .iter()
        .map(|r| r.json()["PodName"].as_str().unwrap_or_default().to_owned())
        .collect();
    bound.sort();
    assert_eq!(bound, ["train-0", "train-1", "train-2"], "only its pods");
    for r in ext.requests_to("/device/filter") {
        let pod = r.json()["Pod"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(pod.starts_with("train-"), "{pod} does not use the device");
    }
    let e = &report.extenders[0];
    assert_eq!(e.extender, ext.url("/device"));
    assert!(
        e.calls >= 9,
        "filter, prioritize and bind for 3 pods: {e:?}"
    );
    assert_eq!(e.failures, 0, "{e:?}");
}

/// A run that cannot settle (its pods keep retrying) with a short timeout.
async fn run_failing(yaml: &str, workload: Workload) -> flotilla_loadtest::report::Report {
    let scheduler = config::parse(yaml, "failing.yaml").expect("valid configuration");
    let cfg = flotilla_loadtest::run::RunConfig {
        timeout: std::time::Duration::from_secs(3),
        ..test_run(1, scheduler)
    };
    let started = std::time::Instant::now();
    let (report, _) = run_to_end(workload, cfg, "the failing-extender run").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(12),
        "--timeout is kept although a call is in flight ({:?})",
        started.elapsed()
    );
    assert!(report.timed_out, "{}", report.to_text());
    assert_eq!(report.checks.overcommitted_nodes, 0);
    report
}

fn small_workload(pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Workload {
    Workload {
        name: "failing".into(),
        nodes: vec![
            NodeBuilder::new("n1")
                .cpu("4")
                .memory("8Gi")
                .pods(110)
                .build(),
        ],
        pods,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_extender_leaves_pods_pending_with_its_error_until_the_timeout() {
    // Hangs far longer than the run may take; its calls time out at 1.5 s.
    let hung = MockServer::start(|_| Canned::ok("{}").after(std::time::Duration::from_secs(30)));
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         extenders:\n- urlPrefix: {}\n  filterVerb: filter\n  httpTimeout: 1500ms\n",
        hung.url("")
    );
    let pods = (0..3)
        .map(|i| PodBuilder::new(&format!("p{i}")).cpu("100m").build())
        .collect();
    let report = run_failing(&yaml, small_workload(pods)).await;
    assert_eq!(
        (report.scheduled, report.unschedulable, report.pending),
        (0, 0, 3),
        "an error is not a fit: the pods are pending, retrying\n{}",
        report.to_text()
    );
    let err = &report.top_errors[0];
    assert!(
        err.reason.contains("filter: POST") && err.reason.contains("timed out after 1.5s"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_preempt_verb_fails_the_attempt_with_its_error() {
    let broken = MockServer::start(|_| Canned::ok("[1, 2, 3]"));
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         extenders:\n- urlPrefix: {}\n  preemptVerb: preempt\n",
        broken.url("")
    );
    let mut w = small_workload(vec![
        PodBuilder::new("low").cpu("4").priority(1).build(),
        PodBuilder::new("high").cpu("4").priority(100).build(),
    ]);
    w.barriers = vec![1];
    let report = run_failing(&yaml, w).await;
    assert_eq!(
        (report.scheduled, report.pending),
        (1, 1),
        "{}",
        report.to_text()
    );
    assert!(
        report.top_errors[0]
            .reason
            .contains("preempt: ExtenderPreemptionResult: (body): expected a JSON object"),
        "{:?}",
        report.top_errors
    );
}
