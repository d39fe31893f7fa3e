//! [`read_cluster`] against a mock API server (`tower-test`): what is read,
//! paging, optional kinds skipped with a note, errors naming the object or
//! the resource, and that every request is a `GET` list or discovery
//! (never a watch or a write).

use std::pin::pin;
use std::sync::{Arc, Mutex};

use http::{Request as HttpRequest, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

use super::*;
use flotilla_scheduler::simulate::{Outcome, explain, simulate};
use flotilla_scheduler::{Profile, Registry};

/// Requests seen by the mock server, as `(method, path?query)`.
#[derive(Default)]
struct Log(Mutex<Vec<(String, String)>>);

impl Log {
    fn push(&self, method: &str, uri: &str) {
        self.0
            .lock()
            .expect("log lock")
            .push((method.to_owned(), uri.to_owned()));
    }

    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.0.lock().expect("log lock"))
    }
}

const SERVER: &str = "https://10.0.0.1:6443";
/// What kube gives as the cluster URL (with a trailing `/`).
const SERVER_URL: &str = "https://10.0.0.1:6443/";

fn respond(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("valid code"))
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("json")))
        .expect("response")
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A client whose API server answers every request with `route(path,
/// query)`, logging it. Anything but `GET` gets 405 and is logged, so a
/// test can prove none was sent.
fn api_server(
    route: impl Fn(&str, &str) -> (u16, Value) + Send + 'static,
) -> (Client, Arc<Log>, tokio::task::JoinHandle<()>) {
    let (svc, handle) = mock::pair::<HttpRequest<Body>, Response<Body>>();
    let log = Arc::new(Log::default());
    let seen = log.clone();
    let server = tokio::spawn(async move {
        let mut handle = pin!(handle);
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().as_str().to_owned();
            let uri = req.uri().clone();
            seen.push(&method, &uri.to_string());
            if method != "GET" {
                send.send_response(respond(
                    405,
                    &status(405, "MethodNotAllowed", "read-only test server"),
                ));
                continue;
            }
            let (code, body) = route(uri.path(), uri.query().unwrap_or(""));
            send.send_response(respond(code, &body));
        }
    });
    (Client::new(svc, "default"), log, server)
}

/// Every request was a `GET` without `watch`.
fn assert_read_only(requests: &[(String, String)]) {
    assert!(!requests.is_empty(), "no request at all");
    for (method, uri) in requests {
        assert_eq!(method, "GET", "{method} {uri}: only GET may be sent");
        assert!(!uri.contains("watch"), "{uri}: no watch");
    }
}

fn node(name: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"kubernetes.io/hostname": name}},
           "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
                      "capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"}}})
}

fn pod(name: &str, cpu: &str, node: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "pause",
                                          "resources": {"requests": {"cpu": cpu}}}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    } else {
        spec["priorityClassName"] = json!("high");
    }
    json!({"metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}")},
           "spec": spec, "status": {"phase": if node.is_some() { "Running" } else { "Pending" }}})
}

fn list(kind: &str, api_version: &str, items: &[Value], cont: Option<&str>) -> Value {
    let mut metadata = json!({"resourceVersion": "42"});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items})
}

fn resources(group_version: &str, plural: &str) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
           "resources": [{"name": plural, "singularName": "", "namespaced": true, "kind": "X",
                          "verbs": ["get", "list", "watch"]}]})
}

/// A small cluster: nodes n1 (2 cpu, holding web-0 with 1500m) and n2
/// (500m, on a second list page), pending pod `big` (1 cpu, class
/// `high`), PriorityClass high = 1000, one PDB; PodGroups not served.
fn cluster_route(path: &str, query: &str) -> (u16, Value) {
    match path {
        "/api/v1/nodes" if query.contains("continue=page-2") => {
            (200, list("NodeList", "v1", &[node("n2", "500m")], None))
        }
        "/api/v1/nodes" => (
            200,
            list("NodeList", "v1", &[node("n1", "2")], Some("page-2")),
        ),
        "/api/v1/pods" => (
            200,
            list(
                "PodList",
                "v1",
                &[pod("web-0", "1500m", Some("n1")), pod("big", "1", None)],
                None,
            ),
        ),
        "/api/v1/namespaces" => (
            200,
            list(
                "NamespaceList",
                "v1",
                &[
                    json!({"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team"}}}),
                ],
                None,
            ),
        ),
        "/apis/scheduling.k8s.io/v1/priorityclasses" => (
            200,
            list(
                "PriorityClassList",
                "scheduling.k8s.io/v1",
                &[json!({"metadata": {"name": "high"}, "value": 1000})],
                None,
            ),
        ),
        "/apis/policy/v1" => (200, resources("policy/v1", "poddisruptionbudgets")),
        "/apis/policy/v1/poddisruptionbudgets" => (
            200,
            list(
                "PodDisruptionBudgetList",
                "policy/v1",
                &[json!({"metadata": {"name": "web", "namespace": "team"},
                         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})],
                None,
            ),
        ),
        "/apis/storage.k8s.io/v1" => {
            let plurals = [
                "storageclasses",
                "csinodes",
                "csidrivers",
                "volumeattachments",
            ];
            let resources: Vec<Value> = plurals
                .iter()
                .map(|p| {
                    json!({"name": p, "singularName": "", "namespaced": false, "kind": "X",
                           "verbs": ["get", "list", "watch"]})
                })
                .collect();
            (
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1",
                       "groupVersion": "storage.k8s.io/v1", "resources": resources}),
            )
        }
        "/api/v1/persistentvolumeclaims" => (
            200,
            list(
                "PersistentVolumeClaimList",
                "v1",
                &[json!({"metadata": {"name": "data", "namespace": "team"},
                         "spec": {"accessModes": ["ReadWriteOncePod"]}})],
                None,
            ),
        ),
        "/api/v1/persistentvolumes" => (200, list("PersistentVolumeList", "v1", &[], None)),
        "/apis/storage.k8s.io/v1/storageclasses" => (
            200,
            list(
                "StorageClassList",
                "storage.k8s.io/v1",
                &[json!({"metadata": {"name": "local"}, "provisioner": "p",
                         "volumeBindingMode": "WaitForFirstConsumer"})],
                None,
            ),
        ),
        "/apis/storage.k8s.io/v1/csinodes" => {
            (200, list("CSINodeList", "storage.k8s.io/v1", &[], None))
        }
        "/apis/storage.k8s.io/v1/csidrivers" => {
            (200, list("CSIDriverList", "storage.k8s.io/v1", &[], None))
        }
        "/apis/storage.k8s.io/v1/volumeattachments" => (
            200,
            list("VolumeAttachmentList", "storage.k8s.io/v1", &[], None),
        ),
        // What kube-apiserver answers for a group it does not serve.
        _ => (
            404,
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ),
    }
}

#[tokio::test]
async fn reads_every_kind_with_get_lists_only() {
    let (client, log, server) = api_server(cluster_route);
    let live = read_cluster(&client, SERVER_URL).await.expect("read");
    drop(client);
    server.await.expect("mock server");
    let requests = log.take();
    assert_read_only(&requests);
    let paths: Vec<&str> = requests
        .iter()
        .map(|(_, uri)| uri.split('?').next().unwrap_or(""))
        .collect();
    assert_eq!(
        paths,
        [
            "/api/v1/nodes",
            "/api/v1/nodes",
            "/api/v1/pods",
            "/api/v1/namespaces",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            "/apis/policy/v1",
            "/apis/policy/v1/poddisruptionbudgets",
            "/apis/scheduling.x-k8s.io/v1alpha1",
            "/apis/scheduling.k8s.io/v1beta1",
            "/apis/scheduling.k8s.io/v1alpha2",
            "/api/v1/persistentvolumeclaims",
            "/api/v1/persistentvolumes",
            "/apis/storage.k8s.io/v1",
            "/apis/storage.k8s.io/v1/storageclasses",
            "/apis/storage.k8s.io/v1",
            "/apis/storage.k8s.io/v1/csinodes",
            "/apis/storage.k8s.io/v1",
            "/apis/storage.k8s.io/v1/csidrivers",
            "/apis/storage.k8s.io/v1",
            "/apis/storage.k8s.io/v1/volumeattachments",
        ]
    );
    // Pages of PAGE_SIZE; the second page asked with the continue token.
    assert!(requests[0].1.contains("limit=500"), "{}", requests[0].1);
    assert!(
        requests[1].1.contains("continue=page-2"),
        "{}",
        requests[1].1
    );

    let o = &live.objects;
    assert_eq!(o.name, "cluster https://10.0.0.1:6443");
    let names = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<Vec<_>>();
    assert_eq!(
        names(o.nodes.iter().map(|n| n.metadata.name.clone()).collect()),
        ["n1", "n2"]
    );
    assert_eq!(
        names(o.pods.iter().map(|p| p.metadata.name.clone()).collect()),
        ["web-0", "big"]
    );
    assert_eq!(o.namespaces.len(), 1);
    assert_eq!(o.priority_classes.len(), 1);
    assert_eq!(o.pod_disruption_budgets.len(), 1);
    assert!(o.pod_groups.is_empty());
    assert!(o.workload_pod_groups.is_empty());
    let volumes: Vec<String> = o.volumes.iter().map(|v| v.key().to_string()).collect();
    assert_eq!(
        volumes,
        ["PersistentVolumeClaim team/data", "StorageClass local"]
    );
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    assert_eq!(
        live.notes,
        [
            format!(
                "PodGroups skipped: scheduling.x-k8s.io/v1alpha1 podgroups is not served by {SERVER}"
            ),
            format!(
                "PodGroups (scheduling.k8s.io) skipped: scheduling.k8s.io/v1beta1 or \
                 scheduling.k8s.io/v1alpha2 podgroups is not served by {SERVER}"
            ),
        ]
    );
}

#[tokio::test]
async fn explain_and_simulate_run_on_what_was_read() {
    let (client, _log, server) = api_server(cluster_route);
    let live = read_cluster(&client, SERVER_URL).await.expect("read");
    drop(client);
    server.await.expect("mock server");
    let profiles = [Profile::default()];
    let registry = Registry::in_tree();

    // big: 1 cpu; n1 has 500m left (web-0 holds 1500m), n2 has 500m.
    let e = explain(&live.objects, &profiles, &registry, "team/big").expect("explain");
    assert_eq!(e.bound_pods, 1);
    assert_eq!(e.result.priority, Some(1000), "PriorityClass high resolved");
    assert_eq!(
        e.result.outcome,
        Outcome::Unschedulable {
            message: "0/2 nodes are available: 2 Insufficient cpu.".into()
        }
    );
    for n in ["n1", "n2"] {
        let f = &e.result.nodes[n].filter;
        assert_eq!(f.plugin, "NodeResourcesFit", "{n}");
        assert_eq!(f.reasons, ["Insufficient cpu"], "{n}");
    }

    // simulate goes on where explain stops: big (priority 1000) preempts
    // web-0 (no class: priority 0) on n1 and lands there.
    let sim = simulate(&live.objects, &profiles, &registry).expect("simulate");
    assert_eq!(sim.results.len(), 1);
    let r = &sim.results[0];
    assert_eq!(r.nominated_node.as_deref(), Some("n1"));
    assert_eq!(r.victims.len(), 1);
    assert!(r.victims[0].ends_with("/web-0"), "{:?}", r.victims);
    assert_eq!(r.outcome.node(), Some("n1"));

    let err = explain(&live.objects, &profiles, &registry, "team/nope").expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "pod team/nope is not in cluster https://10.0.0.1:6443"
    );
}

#[tokio::test]
async fn a_bad_object_names_the_object_and_field() {
    let (client, log, server) = api_server(|path, query| match path {
        "/api/v1/nodes" => (200, list("NodeList", "v1", &[node("n1", "2 cores")], None)),
        _ => cluster_route(path, query),
    });
    let err = read_cluster(&client, SERVER_URL)
        .await
        .expect_err("bad node");
    drop(client);
    server.await.expect("mock server");
    assert_read_only(&log.take());
    assert_eq!(
        err.to_string(),
        "cluster https://10.0.0.1:6443: item 1 (Node n1): status.capacity.cpu: \
         invalid quantity \"2 cores\""
    );
}

#[tokio::test]
async fn a_required_list_failing_is_an_error_naming_the_resource() {
    let (client, log, server) = api_server(|path, query| match path {
        "/api/v1/pods" => (
            403,
            status(
                403,
                "Forbidden",
                "pods is forbidden: User \"viewer\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
            ),
        ),
        _ => cluster_route(path, query),
    });
    let err = read_cluster(&client, SERVER_URL)
        .await
        .expect_err("forbidden");
    drop(client);
    server.await.expect("mock server");
    let requests = log.take();
    assert_read_only(&requests);
    assert_eq!(requests.len(), 3, "stops at the failing list: {requests:?}");
    assert_eq!(
        err.to_string(),
        "listing pods from https://10.0.0.1:6443: HTTP 403 Forbidden: pods is forbidden: \
         User \"viewer\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
}

#[tokio::test]
async fn optional_kinds_not_served_or_forbidden_are_skipped_with_a_note() {
    let (client, log, server) = api_server(|path, query| match path {
        // A 1.20 server: no policy/v1 (404, plain text as kube-apiserver).
        "/apis/policy/v1" => (404, json!("404 page not found")),
        "/apis/scheduling.x-k8s.io/v1alpha1" => {
            (200, resources("scheduling.x-k8s.io/v1alpha1", "podgroups"))
        }
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups" => (
            403,
            status(
                403,
                "Forbidden",
                "podgroups.scheduling.x-k8s.io is forbidden",
            ),
        ),
        _ => cluster_route(path, query),
    });
    let live = read_cluster(&client, SERVER_URL).await.expect("read");
    drop(client);
    server.await.expect("mock server");
    let requests = log.take();
    assert_read_only(&requests);
    assert!(
        !requests
            .iter()
            .any(|(_, uri)| uri.starts_with("/apis/policy/v1/poddisruptionbudgets")),
        "an unserved kind is not listed: {requests:?}"
    );
    assert!(live.objects.pod_disruption_budgets.is_empty());
    assert!(live.objects.pod_groups.is_empty());
    assert_eq!(live.objects.pods.len(), 2);
    assert_eq!(
        live.notes,
        [
            format!(
                "PodDisruptionBudgets skipped: policy/v1 poddisruptionbudgets is not served by {SERVER}"
            ),
            format!(
                "PodGroups skipped: cannot list scheduling.x-k8s.io/v1alpha1 podgroups from {SERVER}: \
                 HTTP 403 Forbidden: podgroups.scheduling.x-k8s.io is forbidden"
            ),
            format!(
                "PodGroups (scheduling.k8s.io) skipped: scheduling.k8s.io/v1beta1 or \
                 scheduling.k8s.io/v1alpha2 podgroups is not served by {SERVER}"
            ),
        ]
    );
}

#[tokio::test]
async fn scheduling_k8s_io_pod_groups_are_read_in_the_first_served_version() {
    // A 1.36 server: scheduling.k8s.io/v1beta1 serves only PriorityClasses,
    // v1alpha2 serves PodGroups (list items without apiVersion or kind).
    let (client, log, server) = api_server(|path, query| match path {
        "/apis/scheduling.k8s.io/v1beta1" => (
            200,
            resources("scheduling.k8s.io/v1beta1", "priorityclasses"),
        ),
        "/apis/scheduling.k8s.io/v1alpha2" => {
            (200, resources("scheduling.k8s.io/v1alpha2", "podgroups"))
        }
        "/apis/scheduling.k8s.io/v1alpha2/podgroups" => (
            200,
            list(
                "PodGroupList",
                "scheduling.k8s.io/v1alpha2",
                &[json!({"metadata": {"name": "workers", "namespace": "team"},
                         "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})],
                None,
            ),
        ),
        _ => cluster_route(path, query),
    });
    let live = read_cluster(&client, SERVER_URL).await.expect("read");
    drop(client);
    server.await.expect("mock server");
    let requests = log.take();
    assert_read_only(&requests);
    assert!(
        !requests
            .iter()
            .any(|(_, uri)| uri.starts_with("/apis/scheduling.k8s.io/v1beta1/podgroups")),
        "an unserved version is not listed: {requests:?}"
    );
    let groups = &live.objects.workload_pod_groups;
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].api_version, "scheduling.k8s.io/v1alpha2");
    assert_eq!(groups[0].key(), "podgroups.scheduling.k8s.io/team/workers");
    assert_eq!(groups[0].min_count(), Ok(Some(2)));
    assert!(live.objects.pod_groups.is_empty());
    assert_eq!(
        live.notes,
        [format!(
            "PodGroups skipped: scheduling.x-k8s.io/v1alpha1 podgroups is not served by {SERVER}"
        )]
    );
}
