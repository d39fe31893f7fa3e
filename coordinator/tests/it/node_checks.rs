//! The bind arbiter re-checks the per-node rules of the profile's Filters
//! (taints and tolerations, `nodeSelector` and required node affinity,
//! host ports...) against its current view: a node that changed while a
//! proposal was in flight does not get a pod it no longer admits, and the
//! pods nominated to a node keep their room on every node-local rule.

use std::sync::Arc;

use flotilla_coordinator::cluster::{EmbeddedCluster, WatchEvent};
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_shared::framework::ServedProfile;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use k8s_openapi::api::core::v1::Pod;

use crate::{FakeWorker, Harness, STEP, assigned_names, default_profiles, profiles_of, within};

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

fn node(name: &str) -> NodeBuilder {
    NodeBuilder::new(name)
        .cpu("4")
        .memory("8Gi")
        .pods(110)
        .label("disk", "ssd")
}

/// A coordinator serving `profiles` over nodes n1 and n2 (as [`node`]), an
/// online worker, and `pods` dispatched to it.
async fn setup(profiles: Vec<ServedProfile>, pods: Vec<Pod>) -> (Harness, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        cluster.apply_node(node(n).build()).expect("node");
    }
    let h = Harness::serving(cluster, profiles).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    let n = pods.len();
    for p in pods {
        h.cluster.create_pod(p).expect("pod");
    }
    w.read_until(|e| assigned_names(e).len() == n).await;
    (h, w)
}

/// `n1` changes to `changed` in the cluster, and the coordinator has seen
/// it (applied directly; the watch brings the same object again).
fn change_n1(h: &Harness, changed: NodeBuilder) {
    let n = changed.build();
    h.cluster.apply_node(n.clone()).expect("node update");
    h.coordinator.apply(WatchEvent::NodeApplied(Arc::new(n)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_tainted_while_a_proposal_was_in_flight_does_not_get_the_pod() {
    let tolerant = PodBuilder::new("tolerant")
        .cpu("1")
        .toleration("dedicated", "Equal", "gpu", "NoSchedule")
        .build();
    let plain = PodBuilder::new("plain").cpu("1").build();
    let (h, w) = setup(default_profiles(), vec![plain, tolerant]).await;
    // The worker chose n1 on a snapshot without the taint.
    change_n1(&h, node("n1").taint("dedicated", "gpu", "NoSchedule"));
    let d = w.propose("plain", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert_eq!(d.reason, "node n1: node(s) had untolerated taint(s)");
    // Its next best node passes the same checks.
    let d = w.propose_with_alternatives("plain", "n1", &["n2"]).await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(d.node_name, "n2");
    // A pod tolerating the taint is not held to it.
    let d = w.propose("tolerant", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_relabelled_out_of_the_pods_node_selector_is_refused() {
    let ssd = PodBuilder::new("ssd")
        .cpu("1")
        .node_selector("disk", "ssd")
        .build();
    let (h, w) = setup(default_profiles(), vec![ssd]).await;
    change_n1(
        &h,
        NodeBuilder::new("n1")
            .cpu("4")
            .memory("8Gi")
            .pods(110)
            .label("disk", "hdd"),
    );
    let d = w.propose("ssd", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert_eq!(
        d.reason,
        "node n1: node(s) didn't match Pod's node affinity/selector"
    );
    let d = w.propose("ssd", "n2").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_without_taint_toleration_does_not_recheck_taints() {
    let profiles = profiles_of(
        "  - schedulerName: default-scheduler
    plugins:
      filter:
        disabled:
          - name: TaintToleration
",
    );
    let plain = PodBuilder::new("plain").cpu("1").build();
    let (h, w) = setup(profiles, vec![plain]).await;
    change_n1(&h, node("n1").taint("dedicated", "gpu", "NoSchedule"));
    let d = w.propose("plain", "n1").await;
    assert_eq!(
        outcome(&d),
        pb::BindOutcome::Bound,
        "its workers do not filter on taints, nor does the arbiter: {d:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nominated_pods_host_port_is_kept_from_lower_priority_pods() {
    let nominee = PodBuilder::new("nominee")
        .host_port(80)
        .priority(100)
        .build();
    let low = PodBuilder::new("low").host_port(80).priority(10).build();
    let (h, w) = setup(default_profiles(), vec![nominee, low]).await;
    let mut client = w.client.clone();
    let d = within(
        STEP,
        "ProposePreemption",
        client.propose_preemption(pb::PreemptionProposal {
            worker_id: w.id.clone(),
            pod: Some(crate::pod_ref("nominee")),
            node_name: "n1".into(),
            victims: Vec::new(),
        }),
    )
    .await
    .expect("ProposePreemption answers")
    .into_inner();
    assert_eq!(
        pb::PreemptionOutcome::try_from(d.outcome),
        Ok(pb::PreemptionOutcome::Granted),
        "{d:?}"
    );
    // n1's port 80 is free alone, not with the nominee: NodePorts' reason.
    let d = w.propose("low", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert_eq!(
        d.reason,
        "node n1: node(s) didn't have free ports for the requested pod ports \
         (room reserved for nominated pods default/nominee)"
    );
    let d = w.propose("low", "n2").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    h.shutdown().await;
}
