//! An extender's bind verb: after the arbiter grants a placement, the
//! coordinator delegates the Binding to the extender (upstream
//! `extendersBinding`), falls back to the API Binding when an ignorable
//! binder fails, and frees the room when a non-ignorable one fails.

use std::time::Duration;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_shared::extender::{ExtenderConfig, ManagedResource};
use flotilla_shared::testing::http::{Canned, MockServer};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use serde_json::json;

use crate::{FakeWorker, Harness, assigned_names, node_of, profiles_of};

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

fn binder(url: &str) -> ExtenderConfig {
    ExtenderConfig {
        bind_verb: "bind".into(),
        ..ExtenderConfig::new(url)
    }
}

/// A coordinator over one node (2 CPU) whose worker got `pods` (1 CPU each).
async fn setup(binder: ExtenderConfig, pods: &[PodBuilder]) -> (Harness, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("2").pods(110).build())
        .expect("node");
    // As `flotilla run` serves it: NodeResourcesFit ignores what the
    // extender manages with `ignoredByScheduler` (the configuration loader
    // writes it into the plugin's `ignoredResources`).
    let ignored: Vec<&str> = binder
        .managed_resources
        .iter()
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| r.name.as_str())
        .collect();
    let profiles = profiles_of(&format!(
        "  - schedulerName: default-scheduler
    pluginConfig:
      - name: NodeResourcesFit
        args:
          ignoredResources: {ignored:?}
"
    ));
    let h = Harness::serving(cluster, profiles).await;
    h.coordinator
        .set_extenders(&[binder])
        .expect("binder client");
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    for p in pods {
        h.cluster.create_pod(p.clone().build()).expect("pod");
    }
    let n = pods.len();
    w.read_until(|e| assigned_names(e).len() == n).await;
    (h, w)
}

fn bound_to(h: &Harness, name: &str) -> Option<String> {
    h.cluster
        .pod("default", name)
        .and_then(|p| node_of(&p).map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binder_extender_writes_the_binding_of_the_pods_it_manages() {
    let server = MockServer::start(|_| Canned::ok(r#"{"Error": ""}"#));
    let gpu = ManagedResource {
        name: "example.com/gpu".into(),
        ignored_by_scheduler: true,
    };
    let cfg = ExtenderConfig {
        managed_resources: vec![gpu],
        ..binder(&server.url("/scheduler"))
    };
    let (h, w) = setup(
        cfg,
        &[
            PodBuilder::new("gpu")
                .cpu("1")
                .request("example.com/gpu", "1"),
            PodBuilder::new("plain").cpu("1"),
        ],
    )
    .await;
    let d = w.propose("gpu", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    let binds = server.requests_to("/scheduler/bind");
    assert_eq!(binds.len(), 1);
    assert_eq!(
        binds[0].json(),
        json!({"PodName": "gpu", "PodNamespace": "default", "PodUID": "uid-gpu", "Node": "n1"}),
        "upstream's ExtenderBindingArgs"
    );
    // The embedded cluster records the extender's Binding.
    assert_eq!(bound_to(&h, "gpu").as_deref(), Some("n1"));
    // A pod the binder does not manage: the API Binding, no call.
    let d = w.propose("plain", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(server.requests_to("/bind").len(), 1);
    assert_eq!(bound_to(&h, "plain").as_deref(), Some("n1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_binder_frees_the_room_unless_it_is_ignorable() {
    let server = MockServer::start(|_| Canned::ok(r#"{"Error": "device allocation failed"}"#));
    let (h, w) = setup(binder(&server.url("")), &[PodBuilder::new("a").cpu("2")]).await;
    let d = w.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Error, "{d:?}");
    assert!(
        d.reason.contains("device allocation failed"),
        "{}",
        d.reason
    );
    assert_eq!(bound_to(&h, "a"), None, "nothing bound");
    // Upstream's binding failure: the pod says why.
    let want = format!(
        "Binding rejected: extender {} bind: device allocation failed",
        server.url("")
    );
    let p = h.cluster.pod("default", "a").expect("pod");
    let cond = crate::pod_scheduled(&p).expect("PodScheduled");
    assert_eq!(
        (
            cond.status.as_str(),
            cond.reason.as_deref(),
            cond.message.as_deref()
        ),
        ("False", Some("SchedulerError"), Some(want.as_str()))
    );
    assert!(
        h.cluster
            .events()
            .iter()
            .any(|e| e.reason == "FailedScheduling" && e.note == want),
        "{:?}",
        h.cluster.events()
    );
    // The grant's room was freed: the same placement is granted again
    // (and fails again at the extender), never refused as taken.
    let again = w.propose("a", "n1").await;
    assert_eq!(outcome(&again), pb::BindOutcome::Error, "{again:?}");
    assert!(!again.reason.contains("Insufficient"), "{}", again.reason);

    let slow = MockServer::start(|_| Canned::ok("{}").after(Duration::from_secs(3)));
    let cfg = ExtenderConfig {
        ignorable: true,
        http_timeout: Duration::from_millis(100),
        ..binder(&slow.url(""))
    };
    let (h, w) = setup(cfg, &[PodBuilder::new("b").cpu("1")]).await;
    let d = w.propose("b", "n1").await;
    assert_eq!(
        outcome(&d),
        pb::BindOutcome::Bound,
        "an ignorable binder that times out: the API Binding instead ({d:?})"
    );
    assert_eq!(bound_to(&h, "b").as_deref(), Some("n1"));
    let b = h.coordinator.binder().expect("binder");
    assert_eq!(
        b.stats().ignored.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// The extender's Binding carries no annotations (upstream's
/// `ExtenderBindingArgs` has no field for them), so the GPU devices a pod
/// was granted are written on it first: a share bound by the extender
/// still has its `gpu-index`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_pod_bound_by_the_extender_has_its_devices_written_first() {
    use flotilla_shared::gpu::dialect::{ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI};
    let server = MockServer::start(|_| Canned::ok(r#"{"Error": ""}"#));
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(
            NodeBuilder::new("n1")
                .cpu("2")
                .pods(110)
                .resource("nvidia.com/gpu", "2")
                .build(),
        )
        .expect("node");
    let h = Harness::start(cluster).await;
    h.coordinator
        .set_extenders(&[binder(&server.url(""))])
        .expect("binder client");
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    h.cluster
        .create_pod(
            PodBuilder::new("share")
                .cpu("100m")
                .annotation(ANNOTATION_GPU_MILLI, "500")
                .build(),
        )
        .expect("pod");
    w.read_until(|e| assigned_names(e).contains(&"share".to_owned()))
        .await;
    let d = w.propose_gpus("share", "n1", 0b10).await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(
        server.requests_to("/bind").len(),
        1,
        "the extender bound it"
    );
    let p = h.cluster.pod("default", "share").expect("pod");
    assert_eq!(node_of(&p), Some("n1"));
    assert_eq!(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_GPU_INDEX))
            .map(String::as_str),
        Some("1")
    );
}
