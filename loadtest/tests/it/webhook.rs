//! A profile delegating placement to a webhook, end to end (coordinator,
//! real worker over gRPC, embedded cluster): the service's choices, its
//! failures and the fallbacks, a decline, and the batched mode.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use flotilla_loadtest::report::Report;
use flotilla_loadtest::workload::Workload;
use flotilla_scheduler::config;
use flotilla_shared::testing::http::{Canned, MockServer, Received};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{node_of, run_to_end, test_run, unschedulable_message};

/// `nodes` nodes of 4 CPU, `pods` pods of 1 CPU (`decline` labelled
/// `placement=decline`).
fn workload(nodes: usize, pods: usize, decline: &[usize]) -> Workload {
    Workload {
        name: "webhook".into(),
        nodes: (1..=nodes)
            .map(|i| {
                NodeBuilder::new(&format!("n{i}"))
                    .cpu("4")
                    .memory("16Gi")
                    .pods(110)
                    .build()
            })
            .collect(),
        pods: (0..pods)
            .map(|i| {
                let p = PodBuilder::new(&format!("p{i}")).cpu("1").memory("1Gi");
                if decline.contains(&i) {
                    p.label("placement", "decline").build()
                } else {
                    p.build()
                }
            })
            .collect(),
        ..Default::default()
    }
}

/// What a run left: the report, each pod's node, the `PodScheduled=False`
/// messages, and the `FailedScheduling` events' notes.
struct Outcome {
    report: Report,
    placed: HashMap<String, Option<String>>,
    messages: Vec<String>,
    failed_events: Vec<String>,
}

/// Runs `workload` with one worker and a profile whose webhook is `hook`
/// (the YAML under `placementWebhook:`).
async fn run(hook: &str, workload: Workload) -> Outcome {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 1\nprofiles:\n\
         - schedulerName: default-scheduler\n  placementWebhook:\n{hook}"
    );
    let scheduler = config::parse(&yaml, "webhook.yaml").expect("valid configuration");
    let (report, cluster) = run_to_end(workload, test_run(1, scheduler), "the webhook run").await;
    assert!(!report.timed_out, "{}", report.to_text());
    assert_eq!(report.checks.overcommitted_nodes, 0, "{}", report.to_text());
    let mut placed = HashMap::new();
    let mut messages = Vec::new();
    for p in cluster.pods() {
        placed.insert(
            p.metadata.name.clone().unwrap_or_default(),
            node_of(&p).map(str::to_owned),
        );
        if let Some(m) = unschedulable_message(&p) {
            messages.push(m.to_owned());
        }
    }
    let failed_events = cluster
        .events()
        .into_iter()
        .filter(|e| e.reason == "FailedScheduling")
        .map(|e| e.note)
        .collect();
    Outcome {
        report,
        placed,
        messages,
        failed_events,
    }
}

fn per_node(placed: &HashMap<String, Option<String>>) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for n in placed.values().flatten() {
        *out.entry(n.clone()).or_default() += 1;
    }
    out
}

fn candidates(item: &Value) -> Vec<String> {
    item["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_chooses_and_an_infeasible_choice_falls_back_in_process() {
    // Always n1: four pods fit there; then n1 is no candidate any more and
    // the answer is infeasible, so the in-process choice places the rest.
    let server = MockServer::start(|_| Canned::json(&json!({"nodeName": "n1", "reason": "pack"})));
    let Outcome { report, placed, .. } = run(
        &format!("    url: {}\n", server.url("/placement")),
        workload(3, 6, &[]),
    )
    .await;
    assert_eq!(report.scheduled, 6);
    let counts = per_node(&placed);
    assert_eq!(counts.get("n1"), Some(&4), "{counts:?}");
    let requests: Vec<Value> = server.requests().iter().map(Received::json).collect();
    assert_eq!(requests.len(), 6, "one call per pod");
    let first = &requests[0];
    assert_eq!(first["apiVersion"], "flotilla.io/v1alpha1");
    assert_eq!(first["kind"], "PlacementRequest");
    assert_eq!(first["shard"]["worker"], "online-0");
    assert_eq!(first["shard"]["workloadClass"], "online");
    assert_eq!(first["shard"]["profile"], "default-scheduler");
    assert_eq!(first["timeoutMillis"], 1000);
    assert!(
        first["requestTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{}",
        first["requestTime"]
    );
    assert_eq!(first["pod"]["kind"], "Pod");
    let mut names = candidates(first);
    names.sort();
    assert_eq!(names, ["n1", "n2", "n3"]);
    assert!(first["nodes"][0]["score"].is_i64(), "{first}");
    assert!(
        first["nodes"][0].get("node").is_none(),
        "names and scores only"
    );
    assert!(first["inProcessChoice"].is_string());
    // Once n1 is full it is no longer among the candidates.
    assert!(
        requests
            .iter()
            .skip(4)
            .all(|r| !candidates(r).contains(&"n1".to_owned())),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_time_outs_and_garbage_fall_back_to_the_in_process_choice() {
    for (what, canned) in [
        ("500", Canned::status(500)),
        ("garbage", Canned::ok("<html>bad gateway</html>")),
        ("unknown node", Canned::json(&json!({"nodeName": "n9"}))),
        (
            "slow",
            Canned::json(&json!({"nodeName": "n1"})).after(Duration::from_secs(3)),
        ),
    ] {
        let reply = canned.clone();
        let server = MockServer::start(move |_| reply.clone());
        let started = std::time::Instant::now();
        let Outcome { report, placed, .. } = run(
            &format!(
                "    url: {}\n    timeout: 200ms\n    nodeObjects: true\n",
                server.url("/placement")
            ),
            workload(2, 4, &[]),
        )
        .await;
        assert_eq!(report.scheduled, 4, "{what}: {}", report.to_text());
        assert!(placed.values().all(Option::is_some), "{what}");
        if what == "slow" {
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{what}: four 200 ms deadlines, not four 3 s replies"
            );
        }
        let req = server.requests()[0].json();
        assert_eq!(
            req["nodes"][0]["node"]["kind"], "Node",
            "nodeObjects: true sends the Node"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_pending_and_a_decline_leave_pods_pending_with_the_reason() {
    // Down for its first three calls, then answering: with `fallback:
    // Pending` the pods wait (reported with the failure), back off, and are
    // placed by the service once it answers.
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let server = MockServer::start(move |req| {
        if c.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 {
            Canned::status(503)
        } else {
            Canned::json(&json!({"nodeName": req.json()["inProcessChoice"]}))
        }
    });
    let url = server.url("/placement");
    let out = run(
        &format!("    url: {url}\n    fallback: Pending\n"),
        workload(2, 2, &[]),
    )
    .await;
    assert_eq!(out.report.scheduled, 2, "{}", out.report.to_text());
    assert!(out.placed.values().all(Option::is_some));
    let want = format!("placement webhook {url}: POST {url} answered with status 503");
    assert!(!out.failed_events.is_empty());
    assert!(
        out.failed_events.iter().all(|m| m.starts_with(&want)),
        "{:?}",
        out.failed_events
    );

    // A decline is a decision: no fallback, the service's reason shown.
    let server = MockServer::start(|req| {
        let body = req.json();
        if body["pod"]["metadata"]["labels"]["placement"] == "decline" {
            Canned::json(&json!({"nodeName": null, "reason": "quota exhausted"}))
        } else {
            Canned::json(&json!({"nodeName": body["inProcessChoice"]}))
        }
    });
    let out = run(
        &format!("    url: {}\n", server.url("/placement")),
        workload(2, 3, &[1]),
    )
    .await;
    assert_eq!((out.report.scheduled, out.report.unschedulable), (2, 1));
    assert_eq!(out.placed["p1"], None);
    assert_eq!(
        out.messages,
        [format!(
            "placement webhook {}: declined to place the pod: quota exhausted",
            server.url("/placement")
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_mode_decides_many_pods_per_call_and_rechecks_each_node() {
    // Every pod of a batch gets the batch's first candidate: more pods than
    // it holds, so the worker's re-check sends the rest to the fallback.
    let server = MockServer::start(|req| {
        let body = req.json();
        let items = body["items"].as_array().cloned().unwrap_or_default();
        let decisions: Vec<Value> = items
            .iter()
            .map(|it| {
                json!({"nodeName": it["nodes"][0]["name"], "reason": "first",
                       "uid": it["pod"]["metadata"]["uid"]})
            })
            .collect();
        Canned::json(&json!({"decisions": decisions}))
    });
    let Outcome { report, placed, .. } = run(
        &format!(
            "    url: {}\n    batch:\n      maxPods: 8\n      maxWait: 50ms\n",
            server.url("/placement")
        ),
        workload(5, 20, &[]),
    )
    .await;
    assert_eq!(report.scheduled, 20, "{}", report.to_text());
    assert!(placed.values().all(Option::is_some));
    let calls: Vec<Value> = server.requests().iter().map(Received::json).collect();
    assert!(calls.len() < 20, "{} calls for 20 pods", calls.len());
    let mut items = 0;
    for c in &calls {
        assert_eq!(c["kind"], "BatchPlacementRequest");
        let n = c["items"].as_array().map_or(0, Vec::len);
        assert!((1..=8).contains(&n), "{n} items");
        items += n;
    }
    assert_eq!(items, 20, "every pod asked about once");
}

#[test]
fn simulate_asks_the_webhook_and_shows_what_it_changed() {
    use flotilla_loadtest::workload::ClusterObjects;
    use flotilla_scheduler::Registry;
    use flotilla_scheduler::simulate::{self, Outcome as SimOutcome};

    // The service sends every pod but `p1` to the node Flotilla would not
    // pick (the last candidate it lists); `p1` is declined.
    let server = MockServer::start(|req| {
        let body = req.json();
        if body["pod"]["metadata"]["name"] == "p1" {
            return Canned::json(&json!({"reason": "quota exhausted"}));
        }
        let others: Vec<String> = candidates(&body)
            .into_iter()
            .filter(|n| body["inProcessChoice"] != *n)
            .collect();
        Canned::json(&json!({"nodeName": others.last(), "reason": "not the obvious one"}))
    });
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: default-scheduler\n  placementWebhook:\n    url: {}\n",
        server.url("/placement")
    );
    let cfg = config::parse(&yaml, "webhook.yaml").expect("valid configuration");
    let w = workload(3, 3, &[]);
    let objects = ClusterObjects {
        name: "webhook".into(),
        nodes: w.nodes,
        pods: w.pods,
        ..ClusterObjects::default()
    };
    let sim = simulate::simulate_with(
        &objects,
        &cfg.profiles,
        &Registry::in_tree(),
        &simulate::Options::default(),
    )
    .expect("simulate");
    assert_eq!(sim.results.len(), 3);
    for r in &sim.results {
        let hook = r
            .webhook
            .as_ref()
            .expect("every pod fit somewhere in-process");
        if r.pod.name.as_ref() == "p1" {
            assert_eq!(hook.decided_by, "pending");
            assert_eq!(
                r.outcome,
                SimOutcome::Unschedulable {
                    message: format!(
                        "placement webhook {}: declined to place the pod: quota exhausted",
                        server.url("/placement")
                    )
                }
            );
        } else {
            assert_eq!(hook.decided_by, "webhook", "{r:?}");
            assert_eq!(hook.message, "not the obvious one");
            assert_ne!(
                r.outcome.node(),
                Some(hook.in_process_choice.as_str()),
                "the service's choice, not Flotilla's"
            );
        }
    }
    assert_eq!(server.requests().len(), 3, "one call per pod");
}
