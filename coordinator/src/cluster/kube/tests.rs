//! The kube backend against a mock API server (`tower-test`): request
//! shapes, error mapping (409/404/5xx/connection refused), the status patch,
//! Events and the write fence.

use std::pin::pin;

use ::kube::client::Body;
use futures::StreamExt as _;
use http::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;
use crate::cluster::events::EventLimits;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

fn pod_ref() -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "u-1".into(),
    }
}

fn info(events_v1: bool) -> ServerInfo {
    ServerInfo {
        version: "v1.20.2".into(),
        events_v1,
        scheduling_gates: false,
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code,
    })
}

fn respond(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("valid code"))
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("json")))
        .expect("response")
}

fn mock_cluster(events_v1: bool, fence: WriteFence) -> (KubeCluster, Handle) {
    mock_cluster_with(events_v1, fence, DEFAULT_CONCURRENT_WRITES)
}

fn mock_cluster_with(
    events_v1: bool,
    fence: WriteFence,
    concurrent_writes: usize,
) -> (KubeCluster, Handle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let options = KubeOptions {
        events: EventLimits::default(),
        request_timeout: Duration::from_secs(5),
        reporting_instance: "flotilla.io/scheduler-test".into(),
        fence,
        write_limit: None,
        concurrent_writes,
    };
    (KubeCluster::new(client, info(events_v1), options), handle)
}

/// Serves one request: checks it with `check`, answers `code`/`body`.
fn serve_one(
    handle: Handle,
    code: u16,
    body: Value,
    check: impl FnOnce(&http::request::Parts, Value) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut handle = pin!(handle);
        let (req, send) = handle.next_request().await.expect("a request");
        let (parts, body_in) = req.into_parts();
        let bytes = http_body_util::BodyExt::collect(body_in)
            .await
            .expect("body")
            .to_bytes();
        let v: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON request body")
        };
        check(&parts, v);
        send.send_response(respond(code, &body));
    })
}

#[tokio::test]
async fn bind_posts_a_binding_to_the_subresource() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(handle, 201, status(201, "", ""), |req, body| {
        assert_eq!(req.method, http::Method::POST);
        assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p/binding");
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
            })
        );
    });
    c.bind(&pod_ref(), "n1", &[]).await.expect("bound");
    server.await.expect("server checks pass");
}

/// Five Bindings at once with room for two: the server sees two, the
/// third only once one is answered, and every one is written.
#[tokio::test]
async fn writes_in_flight_are_bounded_and_each_waits_its_turn() {
    let (c, handle) = mock_cluster_with(true, WriteFence::new(), 2);
    let c = Arc::new(c);
    let binds: Vec<_> = (0..5)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let pod = PodRef {
                    name: format!("p{i}"),
                    ..pod_ref()
                };
                c.bind(&pod, "n1", &[]).await
            })
        })
        .collect();
    let mut handle = pin!(handle);
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(handle.next_request().await.expect("a request"));
    }
    let third = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
    assert!(third.is_err(), "a third write went out with two in flight");
    // Answer one at a time: each answer lets exactly one more out.
    let mut received = 2;
    let mut answered = 0;
    while let Some((_, send)) = open.pop() {
        send.send_response(respond(201, &status(201, "", "")));
        answered += 1;
        if received < 5 {
            open.push(
                handle
                    .next_request()
                    .await
                    .expect("the next, once one is answered"),
            );
            received += 1;
        }
    }
    assert_eq!(answered, 5);
    for b in binds {
        b.await.expect("task").expect("bound");
    }
}

#[tokio::test]
async fn bind_errors_map_by_status_code() {
    // (HTTP code, reason, message, expected)
    let cases = [
        (
            409,
            "Conflict",
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n2\"",
            ClusterError::AlreadyBound {
                pod: "ns/p".into(),
                node: "n2".into(),
            },
        ),
        (
            409,
            "Conflict",
            "Operation cannot be fulfilled on pods/binding \"p\": Precondition failed: UID in precondition: u-1, UID in object meta: u-2",
            ClusterError::AlreadyBound {
                pod: "ns/p".into(),
                node: String::new(),
            },
        ),
        (
            404,
            "NotFound",
            "pods \"p\" not found",
            ClusterError::PodNotFound("ns/p".into()),
        ),
        (
            500,
            "InternalError",
            "etcdserver: request timed out",
            ClusterError::Unavailable(
                "binding ns/p to n1: HTTP 500 InternalError: etcdserver: request timed out".into(),
            ),
        ),
        (
            429,
            "TooManyRequests",
            "too many requests",
            ClusterError::Unavailable(
                "binding ns/p to n1: HTTP 429 TooManyRequests: too many requests".into(),
            ),
        ),
        (
            403,
            "Forbidden",
            "pods \"p\" is forbidden",
            ClusterError::Unavailable(
                "binding ns/p to n1: HTTP 403 Forbidden: pods \"p\" is forbidden".into(),
            ),
        ),
    ];
    for (code, reason, message, want) in cases {
        let (c, handle) = mock_cluster(true, WriteFence::new());
        let server = serve_one(handle, code, status(code, reason, message), |_, _| {});
        let got = c.bind(&pod_ref(), "n1", &[]).await;
        server.await.expect("served");
        assert_eq!(got, Err(want), "HTTP {code}: {message}");
    }
}

/// A Binding sent and never answered may still be applied: its outcome is
/// unknown, not a failure (the coordinator keeps its room until it knows).
#[tokio::test(start_paused = true)]
async fn a_binding_without_an_answer_has_an_unknown_outcome() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    // The server takes the request and never answers.
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let (_req, send) = handle.next_request().await.expect("a request");
        std::future::pending::<()>().await;
        drop(send);
    });
    let got = c.bind(&pod_ref(), "n1", &[]).await;
    assert!(
        matches!(&got, Err(ClusterError::OutcomeUnknown(m)) if m.contains("no answer within 5s")),
        "{got:?}"
    );
    server.abort();
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    // Nothing listens on port 1.
    let config = Config::new("https://127.0.0.1:1".parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    let c = KubeCluster::new(client, info(true), KubeOptions::default());
    match c.bind(&pod_ref(), "n1", &[]).await {
        Err(ClusterError::Unavailable(m)) => {
            assert!(m.starts_with("binding ns/p to n1: "), "{m}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let pod = pod_with_conditions(vec![]);
    assert!(matches!(
        c.mark_unschedulable(&pod, "0/1 nodes are available.").await,
        Err(ClusterError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_closed_fence_stops_writes_before_they_leave() {
    let fence = WriteFence::new();
    let (c, handle) = mock_cluster(true, fence.clone());
    fence.set(false);
    let got = c.bind(&pod_ref(), "n1", &[]).await;
    assert!(
        matches!(&got, Err(ClusterError::Unavailable(m)) if m.contains("not the leader")),
        "{got:?}"
    );
    let pod = pod_with_conditions(vec![]);
    assert!(c.mark_unschedulable(&pod, "m").await.is_err());
    // No request reached the server.
    let mut handle = pin!(handle);
    let next = pin!(handle.next_request());
    assert!(futures::poll!(next).is_pending(), "a request went out");
}

/// A leader frozen past its renew deadline (the fence's deadline) writes
/// nothing when it wakes, before its elector runs again.
#[tokio::test(start_paused = true)]
async fn a_fence_past_its_deadline_stops_writes_until_confirmed_again() {
    let fence = WriteFence::new();
    let (c, handle) = mock_cluster(true, fence.clone());
    let now = tokio::time::Instant::now();
    fence.open_until(now + Duration::from_secs(10));
    assert!(fence.is_open());
    // The whole process "sleeps" past the deadline.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(!fence.is_open());
    let got = c.bind(&pod_ref(), "n1", &[]).await;
    assert!(
        matches!(&got, Err(ClusterError::Unavailable(m)) if m.contains("not confirmed in time")),
        "{got:?}"
    );
    let mut handle = pin!(handle);
    let next = pin!(handle.next_request());
    assert!(futures::poll!(next).is_pending(), "a request went out");
    // Confirmed again: writes may go out.
    fence.open_until(tokio::time::Instant::now() + Duration::from_secs(10));
    assert!(fence.is_open());
}

fn pod_with_conditions(conditions: Vec<PodCondition>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u-1".into()),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            conditions: Some(conditions),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn cond(status: &str, reason: &str, message: &str, ltt: &str) -> PodCondition {
    PodCondition {
        type_: "PodScheduled".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(Time(ts(ltt))),
        ..PodCondition::default()
    }
}

#[test]
fn the_condition_follows_upstreams_update_pod_condition() {
    let now = ts("2026-01-02T03:04:05Z");
    let earlier = "2026-01-01T00:00:00Z";
    let msg = "0/3 nodes are available: 3 Insufficient cpu.";
    let other = PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        ..PodCondition::default()
    };
    // (existing conditions, expected write: None = nothing to write)
    let cases: Vec<(&str, Vec<PodCondition>, Option<PodCondition>)> = vec![
        (
            "no condition yet: transition now",
            vec![other.clone()],
            Some(cond("False", "Unschedulable", msg, "2026-01-02T03:04:05Z")),
        ),
        (
            "the same condition: nothing to write",
            vec![cond("False", "Unschedulable", msg, earlier)],
            None,
        ),
        (
            "still False, new message: the transition time stays",
            vec![cond(
                "False",
                "Unschedulable",
                "0/3 nodes are available.",
                earlier,
            )],
            Some(cond("False", "Unschedulable", msg, earlier)),
        ),
        (
            "was True: transition now",
            vec![cond("True", "", "", earlier)],
            Some(cond("False", "Unschedulable", msg, "2026-01-02T03:04:05Z")),
        ),
    ];
    for (what, existing, want) in cases {
        let pod = pod_with_conditions(existing);
        assert_eq!(unschedulable_condition(&pod, msg, now), want, "{what}");
    }
}

#[tokio::test]
async fn mark_unschedulable_patches_the_status_by_condition_type() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let pod = pod_with_conditions(vec![]);
    let msg = "0/2 nodes are available: 2 Insufficient cpu.";
    let server = serve_one(
        handle,
        200,
        serde_json::to_value(&pod).expect("pod"),
        move |req, body| {
            assert_eq!(req.method, http::Method::PATCH);
            assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p/status");
            assert_eq!(
                req.headers.get("content-type").expect("content type"),
                "application/strategic-merge-patch+json"
            );
            let conds = body["status"]["conditions"].as_array().expect("a list");
            assert_eq!(conds.len(), 1, "only PodScheduled is sent: {body}");
            assert_eq!(conds[0]["type"], "PodScheduled");
            assert_eq!(conds[0]["status"], "False");
            assert_eq!(conds[0]["reason"], "Unschedulable");
            assert_eq!(conds[0]["message"], msg);
            assert!(conds[0]["lastTransitionTime"].is_string());
            assert_eq!(body.as_object().expect("object").len(), 1, "status only");
        },
    );
    c.mark_unschedulable(&pod, msg).await.expect("patched");
    server.await.expect("server checks pass");

    // Already so: no request at all.
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let same = pod_with_conditions(vec![cond(
        "False",
        "Unschedulable",
        msg,
        "2026-01-01T00:00:00Z",
    )]);
    c.mark_unschedulable(&same, msg)
        .await
        .expect("nothing to do");
    let mut handle = pin!(handle);
    let next = pin!(handle.next_request());
    assert!(futures::poll!(next).is_pending(), "a request went out");

    // Gone: 404 → PodNotFound.
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(
        handle,
        404,
        status(404, "NotFound", "pods \"p\" not found"),
        |_, _| {},
    );
    assert_eq!(
        c.mark_unschedulable(&pod, msg).await,
        Err(ClusterError::PodNotFound("ns/p".into()))
    );
    server.await.expect("served");
}

/// Waits (at most 5 s) until the cluster's event counts satisfy `done`;
/// panics with `what` otherwise.
async fn wait_for_events(c: &KubeCluster, done: impl Fn(&EventCounts) -> bool, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while !done(&c.event_counts()) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect(what);
}

async fn written_event(events_v1: bool, ev: SchedulingEvent) -> (http::request::Parts, Value) {
    let (c, handle) = mock_cluster(events_v1, WriteFence::new());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let server = serve_one(handle, 201, json!({}), move |req, body| {
        let _ = tx.send((req.clone(), body));
    });
    c.record_event(ev);
    let got = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("the event is written within 5 s")
        .expect("request seen");
    server.await.expect("served");
    // The writer counts it once the response is in.
    wait_for_events(&c, |n| n.written > 0, "counted").await;
    got
}

#[tokio::test]
async fn events_go_to_events_k8s_io_v1_when_served() {
    let ev = SchedulingEvent::failed_scheduling(
        &pod_ref(),
        "0/1 nodes are available: 1 Insufficient cpu.",
    );
    let (req, body) = written_event(true, ev).await;
    assert_eq!(req.method, http::Method::POST);
    assert_eq!(
        req.uri.path(),
        "/apis/events.k8s.io/v1/namespaces/ns/events"
    );
    assert_eq!(body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["reason"], "FailedScheduling");
    assert_eq!(body["action"], "Scheduling");
    assert_eq!(body["note"], "0/1 nodes are available: 1 Insufficient cpu.");
    assert_eq!(body["reportingController"], "flotilla.io/scheduler");
    assert_eq!(body["reportingInstance"], "flotilla.io/scheduler-test");
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "uid": "u-1"})
    );
    assert_eq!(body["metadata"]["namespace"], "ns");
    let name = body["metadata"]["name"].as_str().expect("a name");
    assert!(name.starts_with("p."), "{name}");
    assert!(body["eventTime"].is_string());
}

#[tokio::test]
async fn events_fall_back_to_core_v1() {
    let ev = SchedulingEvent::scheduled(&pod_ref(), "n1");
    let (req, body) = written_event(false, ev).await;
    assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/events");
    assert_eq!(body["kind"], "Event");
    assert_eq!(body["type"], "Normal");
    assert_eq!(body["reason"], "Scheduled");
    assert_eq!(body["message"], "Successfully assigned ns/p to n1");
    assert_eq!(body["involvedObject"]["name"], "p");
    assert_eq!(body["source"]["component"], "flotilla.io/scheduler");
    assert_eq!(body["count"], 1);
}

/// A try whose answer is lost may still land: the try after it writes the
/// same Event (name and eventTime fixed when it happened), and the
/// server's AlreadyExists counts as written, so one Event, not two.
#[tokio::test]
async fn an_event_tried_again_is_the_same_event_and_already_exists_counts_as_written() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        let mut bodies = Vec::new();
        for (code, reason) in [(503, "ServiceUnavailable"), (409, "AlreadyExists")] {
            let (req, send) = handle.next_request().await.expect("a request");
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .expect("body")
                .to_bytes();
            bodies.push(serde_json::from_slice::<Value>(&bytes).expect("JSON"));
            send.send_response(respond(code, &status(code, reason, "try")));
        }
        bodies
    });
    c.record_event(SchedulingEvent::scheduled(&pod_ref(), "n1"));
    let bodies = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("tried twice within 10 s")
        .expect("served");
    assert_eq!(bodies[0]["metadata"]["name"], bodies[1]["metadata"]["name"]);
    assert_eq!(bodies[0]["eventTime"], bodies[1]["eventTime"]);
    wait_for_events(
        &c,
        |n| n.written > 0,
        "the AlreadyExists answer counts as written",
    )
    .await;
    let counts = c.event_counts();
    assert_eq!((counts.written, counts.failed), (1, 0), "{counts:?}");
}

/// A 409 that is not AlreadyExists (an admission webhook's Conflict) says
/// nothing of an earlier try: not counted as written, tried again.
#[tokio::test]
async fn a_conflict_on_an_event_is_not_taken_as_written() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(
        handle,
        409,
        status(409, "Conflict", "denied by webhook"),
        |_, _| {},
    );
    c.record_event(SchedulingEvent::scheduled(&pod_ref(), "n1"));
    server.await.expect("served");
    wait_for_events(&c, |n| n.retried > 0, "tried again").await;
    assert_eq!(c.event_counts().written, 0);
}

#[test]
fn reporting_instance_is_cut_to_128_characters() {
    assert_eq!(reporting_instance("h"), "flotilla.io/scheduler-h");
    assert_eq!(reporting_instance(&"x".repeat(300)).len(), 128);
}

#[tokio::test]
async fn the_watch_maps_kube_watcher_events_to_list_markers() {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let server = tokio::spawn(async move {
        let mut handle = Box::pin(handle);
        let (req, send) = handle.next_request().await.expect("a list");
        assert_eq!(req.uri().path(), "/api/v1/nodes");
        let list = json!({
            "apiVersion": "v1", "kind": "NodeList",
            "metadata": {"resourceVersion": "10"},
            "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "9"}}],
        });
        send.send_response(respond(200, &list));
        // The watch that follows: one deletion, then the stream stays open.
        let (req, send) = handle.next_request().await.expect("a watch");
        let q = req.uri().query().unwrap_or_default().to_owned();
        assert!(
            q.contains("watch=true") && q.contains("resourceVersion=10"),
            "{q}"
        );
        let ev = json!({"type": "DELETED", "object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "11"}}});
        let mut line = serde_json::to_vec(&ev).expect("json");
        line.push(b'\n');
        send.send_response(
            Response::builder()
                .status(200)
                .body(Body::from(line))
                .expect("response"),
        );
        handle
    });
    let mut s = watch_stream(
        Api::<Node>::all(client),
        watcher::Config::default(),
        Kind::Node,
        WatchEvent::NodeApplied,
        WatchEvent::NodeDeleted,
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        let e = tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .expect("an event within 5 s")
            .expect("stream open")
            .expect("no error");
        got.push(match e {
            WatchEvent::Relisting(k) => format!("relisting {k}"),
            WatchEvent::NodeApplied(n) => {
                format!("applied {}", n.metadata.name.as_deref().unwrap_or(""))
            }
            WatchEvent::Listed(k) => format!("listed {k}"),
            WatchEvent::NodeDeleted(n) => {
                format!("deleted {}", n.metadata.name.as_deref().unwrap_or(""))
            }
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        got,
        [
            "relisting nodes",
            "applied n1",
            "listed nodes",
            "deleted n1"
        ]
    );
    drop(s);
    let _ = server.await;
}

fn pod_json() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    })
}

#[tokio::test]
async fn delete_pod_sends_the_grace_period_and_a_uid_precondition() {
    // (grace given, expected gracePeriodSeconds in the body)
    let cases = [
        (Some(5), Some(json!(5))),
        (None, None),
        (Some(-3), Some(json!(0))),
    ];
    for (grace, want) in cases {
        let (c, handle) = mock_cluster(true, WriteFence::new());
        let server = serve_one(handle, 200, pod_json(), move |req, body| {
            assert_eq!(req.method, http::Method::DELETE);
            assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p");
            assert_eq!(body["preconditions"], json!({"uid": "u-1"}), "{body}");
            assert_eq!(body.get("gracePeriodSeconds").cloned(), want, "{body}");
        });
        c.delete_pod(&pod_ref(), grace).await.expect("deleted");
        server.await.expect("server checks pass");
    }
}

#[tokio::test]
async fn delete_errors_map_by_status_code() {
    // (HTTP code, reason, message, expected)
    let cases = [
        (
            404,
            "NotFound",
            "pods \"p\" not found",
            ClusterError::PodNotFound("ns/p".into()),
        ),
        (
            409,
            "Conflict",
            "Precondition failed: UID in precondition: u-1, UID in object meta: u-2",
            ClusterError::PodNotFound("ns/p".into()),
        ),
        (
            500,
            "InternalError",
            "etcdserver: request timed out",
            ClusterError::Unavailable(
                "deleting ns/p: HTTP 500 InternalError: etcdserver: request timed out".into(),
            ),
        ),
    ];
    for (code, reason, message, want) in cases {
        let (c, handle) = mock_cluster(true, WriteFence::new());
        let server = serve_one(handle, code, status(code, reason, message), |_, _| {});
        let got = c.delete_pod(&pod_ref(), None).await;
        server.await.expect("served");
        assert_eq!(got, Err(want), "HTTP {code}: {message}");
    }
}

#[tokio::test]
async fn set_nominated_node_merge_patches_the_status() {
    // (node, expected value of status.nominatedNodeName in the patch)
    let cases = [(Some("n1"), json!("n1")), (None, Value::Null)];
    for (node, want) in cases {
        let (c, handle) = mock_cluster(true, WriteFence::new());
        let server = serve_one(handle, 200, pod_json(), move |req, body| {
            assert_eq!(req.method, http::Method::PATCH);
            assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p/status");
            assert_eq!(
                req.headers.get("content-type").expect("content type"),
                "application/merge-patch+json"
            );
            assert_eq!(body, json!({"status": {"nominatedNodeName": want}}));
        });
        let pod = pod_with_conditions(vec![]);
        c.set_nominated_node(&pod, node).await.expect("patched");
        server.await.expect("server checks pass");
    }
}

#[tokio::test]
async fn a_preemption_victim_gets_upstreams_disruption_target_condition() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(handle, 200, pod_json(), |req, body| {
        assert_eq!(req.method, http::Method::PATCH);
        assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p/status");
        assert_eq!(
            req.headers.get("content-type").expect("content type"),
            "application/strategic-merge-patch+json"
        );
        assert_eq!(
            body,
            json!({"status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod"
            }]}})
        );
    });
    c.mark_preemption_victim(&pod_ref(), "default-scheduler")
        .await
        .expect("patched");
    server.await.expect("server checks pass");
}

#[tokio::test]
async fn preemption_writes_stop_at_a_closed_fence() {
    let fence = WriteFence::new();
    let (c, handle) = mock_cluster(true, fence.clone());
    fence.set(false);
    assert!(matches!(
        c.delete_pod(&pod_ref(), Some(30)).await,
        Err(ClusterError::Unavailable(m)) if m.contains("not the leader")
    ));
    let pod = pod_with_conditions(vec![]);
    assert!(c.set_nominated_node(&pod, Some("n1")).await.is_err());
    let mut handle = pin!(handle);
    let next = pin!(handle.next_request());
    assert!(futures::poll!(next).is_pending(), "a request went out");
}

/// The next event of a volume stream, as text.
async fn next_volume_event(s: &mut BoxStream<'static, Result<WatchEvent, ClusterError>>) -> String {
    match tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("an event within 5 s")
        .expect("stream open")
        .expect("no error")
    {
        WatchEvent::Relisting(k) => format!("relisting {k}"),
        WatchEvent::Listed(k) => format!("listed {k}"),
        WatchEvent::VolumeApplied(o) => format!("applied {}", o.key()),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn a_volume_kind_not_served_is_listed_empty_and_a_served_one_maps_its_objects() {
    use flotilla_shared::volumes::VolumeKind;
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let server = tokio::spawn(async move {
        let mut handle = Box::pin(handle);
        // CSINodes: the probe answers 404 (not served).
        let (req, send) = handle.next_request().await.expect("a probe");
        assert_eq!(req.uri().path(), "/apis/storage.k8s.io/v1/csinodes");
        send.send_response(respond(404, &status(404, "NotFound", "not found")));
        // StorageClasses: the probe, then the watcher's list.
        for what in ["a probe", "a list"] {
            let (req, send) = handle.next_request().await.expect(what);
            assert_eq!(req.uri().path(), "/apis/storage.k8s.io/v1/storageclasses");
            let list = json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClassList",
                "metadata": {"resourceVersion": "5"},
                "items": [{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                           "metadata": {"name": "local"}, "provisioner": "p"}],
            });
            send.send_response(respond(200, &list));
        }
        handle
    });
    let mut csi = volume_stream::<CSINode>(&client, VolumeKind::CsiNode, "not served");
    assert_eq!(next_volume_event(&mut csi).await, "relisting csinodes");
    assert_eq!(next_volume_event(&mut csi).await, "listed csinodes");
    drop(csi);
    let mut classes =
        volume_stream::<StorageClass>(&client, VolumeKind::StorageClass, "not served");
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next_volume_event(&mut classes).await);
    }
    assert_eq!(
        got,
        [
            "relisting storageclasses",
            "applied StorageClass local",
            "listed storageclasses"
        ]
    );
    drop(classes);
    let _ = server.await;
}

/// `annotate_pod`: a merge patch of the pod's annotations carrying its uid
/// (so a namesake is refused: 409 → `PodNotFound`).
#[tokio::test]
async fn annotate_pod_merge_patches_the_annotations_guarded_by_uid() {
    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(handle, 200, json!({}), |req, body| {
        assert_eq!(req.method, http::Method::PATCH);
        assert_eq!(req.uri.path(), "/api/v1/namespaces/ns/pods/p");
        assert_eq!(
            req.headers.get("content-type").map(|v| v.to_str().unwrap()),
            Some("application/merge-patch+json")
        );
        assert_eq!(
            body,
            json!({"metadata": {"uid": "u-1", "annotations": {"alibabacloud.com/gpu-index": "0-3"}}})
        );
    });
    c.annotate_pod(&pod_ref(), &[("alibabacloud.com/gpu-index", "0-3".into())])
        .await
        .expect("annotated");
    server.await.expect("server checks pass");

    let (c, handle) = mock_cluster(true, WriteFence::new());
    let server = serve_one(
        handle,
        409,
        status(
            409,
            "Conflict",
            "Precondition failed: UID in precondition: u-1",
        ),
        |_, _| {},
    );
    assert!(matches!(
        c.annotate_pod(&pod_ref(), &[("k", "v".into())]).await,
        Err(ClusterError::PodNotFound(_))
    ));
    server.await.expect("server checks pass");
}
