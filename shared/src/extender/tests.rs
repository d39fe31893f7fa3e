//! [`HttpExtender`] against a loopback extender: what goes on the wire,
//! and how replies and failures come back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::*;
use crate::http::run_blocking;
use crate::testing::http::{Canned, MockServer};

fn pod(json: Value) -> Pod {
    serde_json::from_value(json).expect("pod")
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone": "a"}}}))
        .expect("node")
}

/// An extender answering every verb with `reply(path, request)`, recording
/// the requests.
/// The requests an extender received: (path, body).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

fn extender(reply: impl Fn(&str, &Value) -> Canned + Send + Sync + 'static) -> (String, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let server = MockServer::start(move |r| {
        let body = r.json();
        assert_eq!(r.content_type, "application/json");
        let canned = reply(&r.path, &body);
        log.lock().expect("log").push((r.path.clone(), body));
        canned
    });
    (server.url("/scheduler"), seen)
}

fn config(url: &str) -> ExtenderConfig {
    ExtenderConfig {
        filter_verb: "filter".into(),
        prioritize_verb: "prioritize".into(),
        bind_verb: "bind".into(),
        preempt_verb: "preempt".into(),
        ..ExtenderConfig::new(url)
    }
}

fn web() -> Pod {
    pod(
        json!({"metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
               "spec": {"containers": [{"name": "c"}]}}),
    )
}

#[test]
fn filter_sends_whole_nodes_or_names_and_reads_the_verdict() {
    let (url, seen) = extender(|_, _| {
        Canned::ok(
            r#"{"NodeNames":["n2"],"FailedNodes":{"n1":"label exclude-from-scheduling=true"},
                "FailedAndUnresolvableNodes":{"n3":"node not Ready"},"Error":""}"#,
        )
    });
    let (n1, n2, n3) = (node("n1"), node("n2"), node("n3"));
    let ext = HttpExtender::new(config(&url)).expect("extender");
    let out = run_blocking(ext.filter(&web(), &[&n1, &n2, &n3]))
        .expect("task")
        .expect("filtered");
    assert_eq!(out.passed, ["n2"]);
    assert_eq!(out.failed["n1"], "label exclude-from-scheduling=true");
    assert_eq!(out.failed_and_unresolvable["n3"], "node not Ready");
    {
        let log = seen.lock().expect("log");
        let (path, body) = &log[0];
        assert_eq!(path, "/scheduler/filter", "urlPrefix + / + verb");
        assert_eq!(body["Pod"]["metadata"]["name"], "web");
        assert_eq!(body["Nodes"]["items"][1]["metadata"]["name"], "n2");
        assert_eq!(body["Nodes"]["items"][0]["metadata"]["labels"]["zone"], "a");
        assert!(body.get("NodeNames").is_none(), "{body}");
    }
    // nodeCacheCapable: names only.
    let cached = HttpExtender::new(ExtenderConfig {
        node_cache_capable: true,
        ..config(&format!("{url}/"))
    })
    .expect("extender");
    run_blocking(cached.filter(&web(), &[&n1, &n2]))
        .expect("task")
        .expect("filtered");
    let log = seen.lock().expect("log");
    let (path, body) = &log[1];
    assert_eq!(
        path, "/scheduler/filter",
        "a trailing / in urlPrefix is trimmed"
    );
    assert_eq!(body["NodeNames"], json!(["n1", "n2"]));
    assert!(body.get("Nodes").is_none(), "{body}");
}

#[test]
fn filter_failures_are_errors_in_upstreams_words() {
    let cases: Vec<(Canned, FailureKind, &str)> = vec![
        (
            Canned {
                status: 500,
                ..Canned::ok("boom")
            },
            FailureKind::Status(500),
            "failed filter with extender at URL http://",
        ),
        (
            Canned::ok(r#"{"Error":"node cache not ready"}"#),
            FailureKind::Refused,
            "node cache not ready",
        ),
        (
            Canned::ok(r#"{"NodeNames":["n9"]}"#),
            FailureKind::Refused,
            "claims a filtered node \"n9\" which is not found in the input node list",
        ),
        (
            Canned::ok("<html>bad gateway</html>"),
            FailureKind::Malformed,
            "ExtenderFilterResult: (body)",
        ),
        (
            Canned::ok(r#"{"NodeNames":"n1"}"#),
            FailureKind::Malformed,
            "ExtenderFilterResult: NodeNames: invalid type",
        ),
    ];
    let n1 = node("n1");
    for (canned, kind, want) in cases {
        let reply = canned.clone();
        let (url, _) = extender(move |_, _| reply.clone());
        let ext = HttpExtender::new(config(&url)).expect("extender");
        let err = run_blocking(ext.filter(&web(), &[&n1]))
            .expect("task")
            .expect_err(want);
        assert_eq!(err.kind, kind, "{err}");
        assert_eq!(err.verb, "filter");
        assert!(err.to_string().contains(want), "{err} / want {want}");
        assert!(
            err.to_string()
                .starts_with(&format!("extender {url} filter: ")),
            "{err}"
        );
        assert_eq!(ext.stats().failures.load(Ordering::Relaxed), 1);
    }
}

#[test]
fn a_slow_extender_times_out_at_http_timeout() {
    let (url, _) = extender(|_, _| Canned {
        delay: Duration::from_secs(3),
        ..Canned::ok("{}")
    });
    let ext = HttpExtender::new(ExtenderConfig {
        http_timeout: Duration::from_millis(150),
        ..config(&url)
    })
    .expect("extender");
    let n1 = node("n1");
    let started = std::time::Instant::now();
    let err = run_blocking(ext.filter(&web(), &[&n1]))
        .expect("task")
        .expect_err("slow");
    assert_eq!(err.kind, FailureKind::Timeout, "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(err.to_string().contains("timed out after 150ms"), "{err}");
}

#[test]
fn verbs_left_out_are_not_called() {
    let (url, seen) = extender(|_, _| Canned::ok("{}"));
    let ext = HttpExtender::new(ExtenderConfig::new(&url)).expect("extender");
    let (n1, n2) = (node("n1"), node("n2"));
    let out = run_blocking(ext.filter(&web(), &[&n1, &n2]))
        .expect("task")
        .expect("no filter verb: all pass");
    assert_eq!(out.passed, ["n1", "n2"]);
    let scores = run_blocking(ext.prioritize(&web(), &[&n1]))
        .expect("task")
        .expect("no prioritize verb");
    assert!(scores.is_empty());
    assert!(
        run_blocking(ext.bind("default", "web", "u-1", "n1"))
            .expect("task")
            .is_err()
    );
    assert!(seen.lock().expect("log").is_empty(), "nothing was sent");
    assert!(!ext.is_binder() && !ext.supports_preemption() && !ext.is_filter());
}

#[test]
fn prioritize_bind_and_preempt_speak_upstreams_shapes() {
    let (url, seen) = extender(|path, _| match path {
        "/scheduler/prioritize" => {
            Canned::ok(r#"[{"Host":"n1","Score":10},{"host":"n2","score":3}]"#)
        }
        "/scheduler/bind" => Canned::ok(r#"{"Error":""}"#),
        "/scheduler/preempt" => Canned::ok(
            r#"{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"v-1"}],"NumPDBViolations":1}}}"#,
        ),
        _ => Canned {
            status: 404,
            ..Canned::ok("")
        },
    });
    let ext = HttpExtender::new(config(&url)).expect("extender");
    let (n1, n2) = (node("n1"), node("n2"));
    let scores = run_blocking(ext.prioritize(&web(), &[&n1, &n2]))
        .expect("task")
        .expect("scores");
    assert_eq!(
        scores
            .iter()
            .map(|h| (h.host.as_str(), h.score))
            .collect::<Vec<_>>(),
        [("n1", 10), ("n2", 3)]
    );
    run_blocking(ext.bind("default", "web", "u-1", "n1"))
        .expect("task")
        .expect("bound");
    let victim = pod(json!({"metadata": {"name": "low", "namespace": "default", "uid": "v-1"}}));
    let victims = BTreeMap::from([("n1".to_owned(), (vec![&victim], 1))]);
    let kept = run_blocking(ext.process_preemption(&web(), &victims))
        .expect("task")
        .expect("kept");
    assert_eq!(kept["n1"].pods, [MetaPod { uid: "v-1".into() }]);
    assert_eq!(kept["n1"].num_pdb_violations, 1);

    let cached = HttpExtender::new(ExtenderConfig {
        node_cache_capable: true,
        ..config(&url)
    })
    .expect("extender");
    run_blocking(cached.process_preemption(&web(), &victims))
        .expect("task")
        .expect("kept");

    let log = seen.lock().expect("log");
    assert_eq!(log[1].0, "/scheduler/bind");
    assert_eq!(
        log[1].1,
        json!({"PodName": "web", "PodNamespace": "default", "PodUID": "u-1", "Node": "n1"})
    );
    assert_eq!(log[2].0, "/scheduler/preempt");
    assert_eq!(
        log[2].1["NodeNameToVictims"]["n1"]["Pods"][0]["metadata"]["uid"], "v-1",
        "not nodeCacheCapable: whole pods"
    );
    assert_eq!(log[2].1["NodeNameToVictims"]["n1"]["NumPDBViolations"], 1);
    assert!(log[2].1.get("NodeNameToMetaVictims").is_none());
    assert_eq!(
        log[3].1["NodeNameToMetaVictims"],
        json!({"n1": {"Pods": [{"UID": "v-1"}], "NumPDBViolations": 1}}),
        "nodeCacheCapable: uids"
    );
    assert!(log[3].1.get("NodeNameToVictims").is_none());
    assert_eq!(ext.stats().calls.load(Ordering::Relaxed), 3);
    assert_eq!(ext.stats().failures.load(Ordering::Relaxed), 0);
}

#[test]
fn bind_errors_come_back() {
    let (url, _) = extender(|_, _| Canned::ok(r#"{"Error":"node n1 is full"}"#));
    let ext = HttpExtender::new(config(&url)).expect("extender");
    let err = run_blocking(ext.bind("default", "web", "u-1", "n1"))
        .expect("task")
        .expect_err("refused");
    assert_eq!(err.kind, FailureKind::Refused);
    assert!(err.to_string().ends_with("bind: node n1 is full"), "{err}");
}

#[test]
fn managed_resources_select_the_pods_an_extender_sees() {
    let ext = HttpExtender::new(ExtenderConfig {
        managed_resources: vec![ManagedResource {
            name: "example.com/gpu".into(),
            ignored_by_scheduler: true,
        }],
        ..ExtenderConfig::new("http://127.0.0.1:1")
    })
    .expect("extender");
    let requests = pod(json!({"spec": {"containers": [
        {"name": "a"},
        {"name": "b", "resources": {"requests": {"example.com/gpu": "1"}}}]}}));
    let limits = pod(json!({"spec": {"containers": [
        {"name": "a", "resources": {"limits": {"example.com/gpu": "1"}}}]}}));
    let init = pod(
        json!({"spec": {"containers": [{"name": "a"}], "initContainers": [
        {"name": "i", "resources": {"requests": {"example.com/gpu": "1"}}}]}}),
    );
    let other = pod(json!({"spec": {"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1", "example.com/fpga": "1"}}}]}}));
    assert!(ext.is_interested(&requests));
    assert!(ext.is_interested(&limits));
    assert!(ext.is_interested(&init));
    assert!(!ext.is_interested(&other));
    assert!(!ext.is_interested(&Pod::default()));
    let all = HttpExtender::new(ExtenderConfig::new("http://127.0.0.1:1")).expect("extender");
    assert!(all.is_interested(&other), "no managedResources: every pod");
}

#[test]
fn enable_https_without_a_ca_skips_verification_as_upstream() {
    let mut c = ExtenderConfig::new("https://x");
    assert_eq!(c.effective_tls(), None, "plain: system roots");
    c.enable_https = true;
    assert!(c.effective_tls().expect("tls").insecure);
    c.tls = Some(crate::http::TlsConfig {
        ca_file: "/etc/ca.pem".into(),
        ..Default::default()
    });
    assert!(!c.effective_tls().expect("tls").insecure, "a CA: verified");
}
