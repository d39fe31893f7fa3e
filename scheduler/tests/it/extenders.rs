//! HTTP extenders in the scheduling cycle, against mock extenders on
//! loopback: the filter chain, ignorable vs not, timeouts, garbage replies,
//! managed resources, nodeCacheCapable, prioritize in parallel, preemption.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use flotilla_scheduler::extender::Extenders;
use flotilla_scheduler::framework::ScheduleError;
use flotilla_scheduler::preemption::{self, DefaultPreemptionArgs, PostFilterOutcome};
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::extender::{EXTENDER_NAME, ExtenderConfig, ManagedResource};
use flotilla_shared::framework::{ClusterEvent, Code};
use flotilla_shared::testing::PodBuilder;
use flotilla_shared::testing::http::{Canned, MockServer, Received};

use super::{cache_with, expect_fit_error, info, node, snapshot_of};

/// Node names of an `ExtenderArgs` request (whole nodes or names).
fn sent_names(req: &Received) -> Vec<String> {
    let body = req.json();
    if let Some(names) = body["NodeNames"].as_array() {
        return names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
    }
    body["Nodes"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// A filter extender that fails the nodes named in `fail` (reason
/// `"<node> says no"`), unresolvably for those in `unresolvable`.
fn filtering(fail: &'static [&'static str], unresolvable: &'static [&'static str]) -> MockServer {
    MockServer::start(move |req| {
        let names = sent_names(req);
        let mut failed = serde_json::Map::new();
        let mut hard = serde_json::Map::new();
        let mut passed = Vec::new();
        for n in names {
            if unresolvable.contains(&n.as_str()) {
                hard.insert(n.clone(), json!(format!("{n} is not Ready")));
            } else if fail.contains(&n.as_str()) {
                failed.insert(n.clone(), json!(format!("{n} says no")));
            } else {
                passed.push(n);
            }
        }
        Canned::json(&json!({"NodeNames": passed, "FailedNodes": failed,
                              "FailedAndUnresolvableNodes": hard, "Error": ""}))
    })
}

fn ext(url: &str) -> ExtenderConfig {
    ExtenderConfig {
        filter_verb: "filter".into(),
        node_cache_capable: true,
        ..ExtenderConfig::new(url)
    }
}

/// The default profile calling `configs`.
fn framework(configs: &[ExtenderConfig]) -> Framework {
    Framework::new(&Profile::default(), &Registry::in_tree())
        .expect("default profile")
        .with_extenders(Arc::new(Extenders::new(configs).expect("extenders")))
}

fn three_nodes() -> flotilla_scheduler::cache::NodeCache {
    cache_with(["n1", "n2", "n3"].map(|n| node(n, "4", "8Gi").build_spec()))
}

#[test]
fn filter_runs_after_the_plugins_and_each_extender_sees_what_the_last_left() {
    let first = filtering(&["n1"], &[]);
    let second = filtering(&["n2"], &[]);
    let fw = framework(&[ext(&first.url("")), ext(&second.url("/"))]);
    let cache = cache_with([
        node("n1", "4", "8Gi").build_spec(),
        node("n2", "4", "8Gi").build_spec(),
        node("n3", "4", "8Gi").build_spec(),
        // Too small: the plugins reject it, no extender sees it.
        node("tiny", "100m", "8Gi").build_spec(),
    ]);
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));
    let r = fw.schedule(&pod, &snap).expect("n3 is left");
    assert_eq!(&*r.node, "n3");
    let mut a = sent_names(&first.requests_to("/filter")[0]);
    a.sort();
    assert_eq!(a, ["n1", "n2", "n3"], "the plugins' feasible nodes");
    let mut b = sent_names(&second.requests_to("/filter")[0]);
    b.sort();
    assert_eq!(b, ["n2", "n3"], "what the first extender passed");
}

#[test]
fn a_pod_every_extender_rejects_gets_upstreams_fit_error_with_their_reasons() {
    let e = filtering(&["n1", "n2"], &["n3"]);
    let fw = framework(&[ext(&e.url(""))]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));
    let fit = expect_fit_error(fw.schedule(&pod, &snap));
    assert_eq!(
        fit.to_string(),
        "0/3 nodes are available: 1 n1 says no, 1 n2 says no, 1 n3 is not Ready."
    );
    assert!(fit.diagnosis.unschedulable_plugins.contains(EXTENDER_NAME));
    let code = |n: &str| {
        fit.diagnosis
            .node_to_status
            .iter()
            .find(|(name, _)| &**name == n)
            .map(|(_, st)| (st.code, st.plugin))
    };
    assert_eq!(code("n1"), Some((Code::Unschedulable, EXTENDER_NAME)));
    assert_eq!(
        code("n3"),
        Some((Code::UnschedulableAndUnresolvable, EXTENDER_NAME))
    );
    // Extenders register for no event: such a pod is retried on any.
    let interest = fw.event_interest();
    for ev in ClusterEvent::ALL {
        assert!(interest[&ev].contains(EXTENDER_NAME), "{ev:?}");
    }
}

#[test]
fn a_failing_extender_fails_the_attempt_unless_it_is_ignorable() {
    let broken = MockServer::start(|_| Canned::status(500));
    let fine = filtering(&["n1"], &[]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));

    let fw = framework(&[ext(&broken.url("")), ext(&fine.url(""))]);
    match fw.schedule(&pod, &snap) {
        Err(ScheduleError::Internal { plugin, message }) => {
            assert_eq!(plugin, EXTENDER_NAME);
            assert!(
                message.contains("failed filter with extender at URL")
                    && message.contains("code 500"),
                "{message}"
            );
        }
        other => panic!("a non-ignorable extender's failure fails the attempt: {other:?}"),
    }

    // Listed first but ignorable: upstream moves it behind the others, and
    // its failure is skipped.
    let order = Arc::new(AtomicUsize::new(0));
    let (o1, o2) = (order.clone(), order.clone());
    let seen_ignorable = Arc::new(AtomicUsize::new(0));
    let seen_other = Arc::new(AtomicUsize::new(0));
    let (si, so) = (seen_ignorable.clone(), seen_other.clone());
    let ignorable = MockServer::start(move |_| {
        si.store(o1.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        Canned::status(503)
    });
    let other = MockServer::start(move |req| {
        so.store(o2.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        Canned::json(&json!({"NodeNames": sent_names(req)}))
    });
    let exts = Extenders::new(&[
        ExtenderConfig {
            ignorable: true,
            ..ext(&ignorable.url(""))
        },
        ext(&other.url("")),
    ])
    .expect("extenders");
    assert!(exts.list()[1].is_ignorable(), "ignorable extenders go last");
    let exts = Arc::new(exts);
    let fw = Framework::new(&Profile::default(), &Registry::in_tree())
        .expect("profile")
        .with_extenders(exts.clone());
    fw.schedule(&pod, &snap)
        .expect("the ignorable failure is skipped");
    assert_eq!(seen_other.load(Ordering::SeqCst), 1, "called first");
    assert_eq!(seen_ignorable.load(Ordering::SeqCst), 2, "called second");
    assert_eq!(exts.list()[1].stats().ignored.load(Ordering::Relaxed), 1);
}

#[test]
fn timeouts_and_garbage_replies_are_failures_never_panics() {
    let slow = MockServer::start(|req| {
        Canned::json(&json!({"NodeNames": sent_names(req)})).after(Duration::from_secs(3))
    });
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));
    let timed = |ignorable| ExtenderConfig {
        http_timeout: Duration::from_millis(150),
        ignorable,
        ..ext(&slow.url(""))
    };
    let started = Instant::now();
    match framework(&[timed(false)]).schedule(&pod, &snap) {
        Err(ScheduleError::Internal { message, .. }) => {
            assert!(message.contains("timed out after 150ms"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    framework(&[timed(true)])
        .schedule(&pod, &snap)
        .expect("an ignorable extender that times out is skipped");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "each call gave up at httpTimeout ({:?})",
        started.elapsed()
    );

    for garbage in [
        "<html>502</html>",
        "[]",
        r#"{"NodeNames": 7}"#,
        r#"{"NodeNames": ["n9"]}"#,
        r#"{"Error": "cache not warm"}"#,
    ] {
        let server = MockServer::start(move |_| Canned::ok(garbage));
        match framework(&[ext(&server.url(""))]).schedule(&pod, &snap) {
            Err(ScheduleError::Internal { plugin, message }) => {
                assert_eq!(plugin, EXTENDER_NAME);
                assert!(message.starts_with("extender http://"), "{message}");
            }
            other => panic!("{garbage}: {other:?}"),
        }
    }
}

#[test]
fn managed_resources_limit_which_pods_an_extender_sees() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let server = MockServer::start(move |req| {
        c.fetch_add(1, Ordering::SeqCst);
        Canned::json(&json!({"NodeNames": sent_names(req)}))
    });
    let fw = framework(&[ExtenderConfig {
        managed_resources: vec![ManagedResource {
            name: "example.com/gpu".into(),
            ignored_by_scheduler: false,
        }],
        ..ext(&server.url(""))
    }]);
    let cache = cache_with(["n1", "n2"].map(|n| {
        node(n, "4", "8Gi")
            .resource("example.com/gpu", "2")
            .build_spec()
    }));
    let snap = snapshot_of(&cache);
    fw.schedule(&info(PodBuilder::new("plain").cpu("1")), &snap)
        .expect("placed");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "not its pod");
    fw.schedule(
        &info(
            PodBuilder::new("gpu")
                .cpu("1")
                .request("example.com/gpu", "1"),
        ),
        &snap,
    )
    .expect("placed");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a pod requesting its resource"
    );
}

#[test]
fn whole_nodes_go_to_extenders_that_are_not_node_cache_capable() {
    let server = MockServer::start(|req| Canned::json(&json!({"Nodes": req.json()["Nodes"]})));
    let fw = framework(&[ExtenderConfig {
        node_cache_capable: false,
        ..ext(&server.url(""))
    }]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    fw.schedule(&info(PodBuilder::new("web").cpu("1")), &snap)
        .expect("every node passes back");
    let req = &server.requests()[0];
    let body = req.json();
    assert!(body.get("NodeNames").is_none(), "{body}");
    let items = body["Nodes"]["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["kind"], "Node");
    assert!(
        items[0]["status"]["allocatable"]["cpu"].is_string(),
        "{}",
        items[0]
    );
    assert_eq!(body["Pod"]["metadata"]["name"], "web");
}

/// A prioritize extender giving `best` 10 and every other node 0, after
/// `delay`.
fn prioritizing(best: &'static str, delay: Duration) -> MockServer {
    MockServer::start(move |req| {
        let scores: Vec<Value> = sent_names(req)
            .into_iter()
            .map(|n| json!({"Host": n, "Score": if n == best { 10 } else { 0 }}))
            .collect();
        Canned::json(&Value::Array(scores)).after(delay)
    })
}

fn prioritizer(url: &str, weight: i64) -> ExtenderConfig {
    ExtenderConfig {
        prioritize_verb: "prioritize".into(),
        weight,
        node_cache_capable: true,
        ..ExtenderConfig::new(url)
    }
}

#[test]
fn prioritize_adds_score_times_weight_times_ten_and_calls_extenders_in_parallel() {
    let a = prioritizing("n2", Duration::from_millis(400));
    let b = prioritizing("n2", Duration::from_millis(400));
    let fw = framework(&[prioritizer(&a.url(""), 5), prioritizer(&b.url(""), 1)]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));
    let started = Instant::now();
    let (r, detail) = fw.schedule_detailed(&pod, &snap);
    let took = started.elapsed();
    assert_eq!(&*r.expect("placed").node, "n2");
    assert!(
        took < Duration::from_millis(750),
        "two 400 ms extenders in parallel took {took:?}"
    );
    let n2 = detail.scored.iter().find(|s| &*s.node == "n2").expect("n2");
    let n1 = detail.scored.iter().find(|s| &*s.node == "n1").expect("n1");
    let ext_total: i64 = n2.extender_scores.iter().map(|(_, s)| s).sum();
    assert_eq!(
        ext_total,
        10 * 5 * 10 + 10 * 10,
        "score × weight × 10, per extender"
    );
    assert_eq!(n2.total - n1.total, ext_total, "identical nodes otherwise");
}

#[test]
fn a_failing_prioritize_is_ignored_and_one_feasible_node_is_not_ranked() {
    let broken = MockServer::start(|_| Canned::ok("not json"));
    let fw = framework(&[prioritizer(&broken.url(""), 3)]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("web").cpu("1"));
    fw.schedule(&pod, &snap)
        .expect("upstream ignores prioritize errors, ignorable or not");

    let counted = Arc::new(AtomicUsize::new(0));
    let c = counted.clone();
    let server = MockServer::start(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        Canned::ok("[]")
    });
    let fw = framework(&[prioritizer(&server.url(""), 1)]);
    let one = cache_with([node("only", "4", "8Gi").build_spec()]);
    fw.schedule(&pod, &snapshot_of(&one)).expect("placed");
    assert_eq!(counted.load(Ordering::SeqCst), 0, "nothing to rank");
}

/// Preemption with a preempt extender: `reply` answers the candidates.
fn preemption_case(
    reply: impl Fn(&Value) -> Value + Send + Sync + 'static,
) -> (MockServer, PostFilterOutcome) {
    let server = MockServer::start(move |req| Canned::json(&reply(&req.json())));
    let fw = framework(&[ExtenderConfig {
        preempt_verb: "preempt".into(),
        node_cache_capable: true,
        ..ExtenderConfig::new(&server.url(""))
    }]);
    let cache = cache_with(["n1", "n2"].map(|n| node(n, "2", "8Gi").build_spec()));
    for (n, v) in [("n1", "low-1"), ("n2", "low-2")] {
        super::bind_in_cache(&cache, PodBuilder::new(v).cpu("2").priority(1), n);
    }
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("high").cpu("2").priority(100));
    let fit = expect_fit_error(fw.schedule(&pod, &snap));
    let outcome = preemption::preempt(
        &fw,
        &pod,
        &snap,
        &fit,
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    )
    .expect("preemption runs");
    (server, outcome)
}

#[test]
fn preempt_verb_sees_the_candidates_and_may_drop_them() {
    // The extender keeps only n2.
    let (server, outcome) = preemption_case(|body| {
        let victims = &body["NodeNameToMetaVictims"];
        json!({"NodeNameToMetaVictims": {"n2": victims["n2"]}})
    });
    let sent = server.requests()[0].json();
    let nodes: Vec<&String> = sent["NodeNameToMetaVictims"]
        .as_object()
        .expect("candidates by uid (nodeCacheCapable)")
        .keys()
        .collect();
    assert_eq!(nodes, ["n1", "n2"]);
    match outcome {
        PostFilterOutcome::Nominate(c) => {
            assert_eq!(&*c.node, "n2");
            assert_eq!(c.victims.len(), 1);
            assert_eq!(&*c.victims[0].key.name, "low-2");
        }
        other => panic!("{other:?}"),
    }
    // Dropping every candidate: no preemption.
    let (_, outcome) = preemption_case(|_| json!({"NodeNameToMetaVictims": {}}));
    match outcome {
        PostFilterOutcome::NotHelpful(msg) => {
            assert_eq!(msg, "preemption: no candidate node for preemption");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_preempt_reply_naming_unknown_pods_is_an_error() {
    let server = MockServer::start(|_| {
        Canned::json(&json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "nobody"}]}}}))
    });
    let fw = framework(&[ExtenderConfig {
        preempt_verb: "preempt".into(),
        ..ExtenderConfig::new(&server.url(""))
    }]);
    let cache = cache_with([node("n1", "2", "8Gi").build_spec()]);
    super::bind_in_cache(&cache, PodBuilder::new("low").cpu("2").priority(1), "n1");
    let snap = snapshot_of(&cache);
    let pod = info(PodBuilder::new("high").cpu("2").priority(100));
    let fit = expect_fit_error(fw.schedule(&pod, &snap));
    let err = preemption::preempt(
        &fw,
        &pod,
        &snap,
        &fit,
        &[],
        &DefaultPreemptionArgs::default(),
        0,
    )
    .expect_err("the extender named a pod that is not on n1");
    let text = err.to_string();
    assert!(
        text.contains("claims to preempt pod (UID: nobody) on node: n1"),
        "{text}"
    );
    // Not nodeCacheCapable: the victims went whole.
    let sent = server.requests()[0].json();
    assert_eq!(
        sent["NodeNameToVictims"]["n1"]["Pods"][0]["metadata"]["name"],
        "low"
    );
}

#[test]
fn absurd_prioritize_scores_saturate_instead_of_overflowing() {
    // The same host twice at i64::MAX, with a large weight: the sums
    // saturate (upstream would overflow), the cycle goes on.
    let server = MockServer::start(|req| {
        let names = sent_names(req);
        let list: Vec<Value> = names
            .iter()
            .flat_map(|n| {
                [
                    json!({"Host": n, "Score": i64::MAX}),
                    json!({"Host": n, "Score": i64::MAX}),
                ]
            })
            .collect();
        Canned::json(&Value::Array(list))
    });
    let fw = framework(&[prioritizer(&server.url(""), 1_000_000)]);
    let cache = three_nodes();
    let snap = snapshot_of(&cache);
    let (r, detail) = fw.schedule_detailed(&info(PodBuilder::new("web").cpu("1")), &snap);
    r.expect("placed");
    for s in &detail.scored {
        assert_eq!(s.extender_scores[0].1, i64::MAX, "{s:?}");
        assert_eq!(s.total, i64::MAX, "{s:?}");
    }
}
