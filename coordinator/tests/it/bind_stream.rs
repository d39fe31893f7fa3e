//! Bind arbitration over `BindStream` (proposals and answers of a whole
//! session on one stream), and the short `pod_bound` confirmation the
//! proposer gets instead of the whole bound pod.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use flotilla_coordinator::cluster::{Cluster, EmbeddedCluster};
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_proto::v1::watch_event::Event;
use flotilla_scheduler::worker::bind_stream::{Answer, BindStream};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{FakeWorker, Harness, STEP, assigned_names, decode_pod, node_of, pod_ref, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

/// A raw `BindStream` call: the sender of its request messages and its
/// answers.
async fn open_raw(
    w: &FakeWorker,
) -> (
    mpsc::UnboundedSender<pb::BindRequests>,
    tonic::Streaming<pb::BindResults>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut client = w.client.clone();
    let answers = within(
        STEP,
        "BindStream",
        client.bind_stream(UnboundedReceiverStream::new(rx)),
    )
    .await
    .expect("BindStream opens")
    .into_inner();
    (tx, answers)
}

fn request(id: u64, pod: &str, node: &str) -> pb::BindRequest {
    pb::BindRequest {
        id,
        pod: Some(pod_ref(pod)),
        node_name: node.into(),
        trace_context: HashMap::new(),
        alternatives: Vec::new(),
        gpu_devices: 0,
    }
}

/// Reads answers until `n` have arrived; returns them by id.
async fn answers_by_id(
    answers: &mut tonic::Streaming<pb::BindResults>,
    n: usize,
) -> HashMap<u64, (pb::BindOutcome, String)> {
    let mut got = HashMap::new();
    while got.len() < n {
        let batch = within(STEP, "bind answers", answers.message())
            .await
            .expect("the stream does not fail")
            .expect("the stream does not end");
        for r in batch.results {
            let outcome = pb::BindOutcome::try_from(r.outcome).expect("a known outcome");
            assert!(
                got.insert(r.id, (outcome, r.reason)).is_none(),
                "proposal {} answered twice",
                r.id
            );
        }
    }
    got
}

/// One node with room for one 1-cpu pod, pods `a` and `b` (1 cpu each)
/// pending with one online worker, synced.
async fn one_room_two_pods() -> (Harness, FakeWorker) {
    rooms_and_two_pods(&["n1"]).await
}

/// [`one_room_two_pods`] with one such node per name.
async fn rooms_and_two_pods(nodes: &[&str]) -> (Harness, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    for n in nodes {
        cluster
            .apply_node(NodeBuilder::new(n).cpu("1").pods(110).build())
            .expect("node");
    }
    for name in ["a", "b"] {
        cluster
            .create_pod(PodBuilder::new(name).cpu("1").build())
            .expect("pod");
    }
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    (h, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proposals_in_one_message_are_arbitrated_in_order_and_answered_by_id() {
    let (h, w) = one_room_two_pods().await;
    let (tx, mut answers) = open_raw(&w).await;
    let no_pod = pb::BindRequest {
        pod: None,
        ..request(9, "", "n1")
    };
    let no_node = request(10, "a", "");
    tx.send(pb::BindRequests {
        worker_id: w.id.clone(),
        proposals: vec![
            request(7, "a", "n1"),
            request(8, "b", "n1"),
            no_pod,
            no_node,
        ],
    })
    .expect("request sent");
    let got = answers_by_id(&mut answers, 4).await;
    // `a` came first, so it took the room; `b` was checked after it.
    assert_eq!(got[&7], (pb::BindOutcome::Bound, String::new()));
    assert_eq!(got[&8].0, pb::BindOutcome::Conflict, "{:?}", got[&8]);
    assert!(got[&8].1.contains("Insufficient cpu"), "{:?}", got[&8]);
    assert_eq!(got[&9].0, pb::BindOutcome::Error);
    assert!(got[&9].1.contains("pod: required"), "{:?}", got[&9]);
    assert_eq!(got[&10].0, pb::BindOutcome::Error);
    assert!(got[&10].1.contains("node_name: required"), "{:?}", got[&10]);

    let pod_a = h.cluster.pod("default", "a").expect("a exists");
    assert_eq!(node_of(&pod_a), Some("n1"));
    assert_eq!(h.cluster.write_counts().0, 1, "one Binding written");
    let s = h.coordinator.summary();
    assert_eq!(
        (
            s.counters.proposals,
            s.counters.grants,
            s.counters.conflicts
        ),
        (2, 1, 1),
        "only the readable proposals are arbitrated"
    );

    // Re-proposing the bound placement is idempotent on the stream too.
    tx.send(pb::BindRequests {
        worker_id: w.id.clone(),
        proposals: vec![request(11, "a", "n1")],
    })
    .expect("request sent");
    let got = answers_by_id(&mut answers, 1).await;
    assert_eq!(got[&11].0, pb::BindOutcome::Bound);
    assert_eq!(h.cluster.write_counts().0, 1, "still one Binding");

    // The worker closing its side ends the answers.
    drop(tx);
    let end = within(STEP, "the stream's end", answers.message()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_s_worker_id_ends_the_stream_unauthenticated() {
    let (h, w) = one_room_two_pods().await;
    let (tx, mut answers) = open_raw(&w).await;
    // The live worker's id without its session's secret.
    tx.send(pb::BindRequests {
        worker_id: w.id.split('.').next().expect("id").into(),
        proposals: vec![request(1, "a", "n1")],
    })
    .expect("request sent");
    let status = within(STEP, "the stream's error", answers.message())
        .await
        .expect_err("a bad worker id fails the stream");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    assert!(status.message().contains("worker_id"), "{status}");
    assert_eq!(h.cluster.write_counts().0, 0, "nothing was bound");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutting_down_ends_an_open_bind_stream() {
    let (h, w) = one_room_two_pods().await;
    let (_tx, mut answers) = open_raw(&w).await;
    // The worker keeps its side open; the coordinator's graceful shutdown
    // must not wait on it.
    let mut w = w;
    w.leave();
    h.shutdown().await;
    let end = within(STEP, "the stream's end", answers.message()).await;
    assert!(
        !matches!(end, Ok(Some(_))),
        "no answer after shutdown: {end:?}"
    );
}

/// The worker's end of a stream opened as worker `id`: the stream, the
/// payloads handed back with their answers, and the reader task.
async fn worker_side(
    w: &FakeWorker,
    id: &str,
) -> (
    Arc<BindStream<&'static str>>,
    mpsc::UnboundedReceiver<(&'static str, Answer)>,
    tokio::task::JoinHandle<()>,
) {
    let mut client = w.client.clone();
    let (stream, answers) = within(STEP, "BindStream", BindStream::open(&mut client, id))
        .await
        .expect("BindStream opens");
    let (done_tx, done) = mpsc::unbounded_channel();
    let reader = tokio::spawn(stream.clone().run_answers(answers, move |p, a| {
        let _ = done_tx.send((p, a));
    }));
    (stream, done, reader)
}

/// The next `n` payloads handed back by a [`worker_side`], with their answers.
async fn payload_answers(
    done: &mut mpsc::UnboundedReceiver<(&'static str, Answer)>,
    n: usize,
) -> HashMap<&'static str, Answer> {
    let mut got = HashMap::new();
    for _ in 0..n {
        let (p, a) = within(STEP, "an answer", done.recv())
            .await
            .expect("answer");
        got.insert(p, a);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_worker_side_hands_every_payload_back_once() {
    let (h, w) = one_room_two_pods().await;
    let (stream, mut done, reader) = worker_side(&w, &w.id).await;
    stream
        .propose(
            pod_ref("a"),
            "n1".into(),
            Vec::new(),
            0,
            HashMap::new(),
            "a",
        )
        .expect("stream open");
    stream
        .propose(
            pod_ref("b"),
            "n1".into(),
            Vec::new(),
            0,
            HashMap::new(),
            "b",
        )
        .expect("stream open");
    let got = payload_answers(&mut done, 2).await;
    assert_eq!(got["a"].outcome, pb::BindOutcome::Bound);
    assert_eq!(got["b"].outcome, pb::BindOutcome::Conflict);
    assert!(!got["a"].stream_failed && !got["b"].stream_failed);
    assert_eq!(stream.in_flight(), 0);

    // Closed: the reader ends, and later proposals come back to the caller.
    stream.close();
    within(STEP, "the reader's end", reader)
        .await
        .expect("reader does not panic");
    assert_eq!(
        stream.propose(
            pod_ref("b"),
            "n1".into(),
            Vec::new(),
            0,
            HashMap::new(),
            "late"
        ),
        Err("late")
    );
    assert!(done.try_recv().is_err(), "nothing answered twice");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_bound_to_an_alternative_says_where_and_is_confirmed_there() {
    let (h, mut w) = rooms_and_two_pods(&["n1", "n2"]).await;
    let (stream, mut done, _reader) = worker_side(&w, &w.id).await;
    for (pod, alternatives) in [("a", vec![]), ("b", vec!["n2".to_owned()])] {
        stream
            .propose(
                pod_ref(pod),
                "n1".into(),
                alternatives,
                0,
                HashMap::new(),
                pod,
            )
            .expect("stream open");
    }
    let got = payload_answers(&mut done, 2).await;
    assert_eq!(
        (got["a"].outcome, got["a"].granted_node.as_deref()),
        (pb::BindOutcome::Bound, None)
    );
    assert_eq!(
        (got["b"].outcome, got["b"].granted_node.as_deref()),
        (pb::BindOutcome::Bound, Some("n2")),
        "{:?}",
        got["b"]
    );
    // The proposer's short confirmation names the node it was bound to.
    match bound_event_of(&mut w, "b").await {
        Event::PodBound(b) => assert_eq!(b.node_name, "n2"),
        other => panic!("the proposer gets pod_bound, not {other:?}"),
    }
    assert_eq!(h.coordinator.summary().counters.alternatives_granted, 1);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proposals_in_flight_when_the_stream_breaks_come_back_as_errors() {
    let (h, w) = one_room_two_pods().await;
    // A stream the coordinator fails on its first message (a worker id it
    // cannot read): the proposal in it is never answered.
    let (stream, mut done, reader) = worker_side(&w, "bogus").await;
    stream
        .propose(
            pod_ref("a"),
            "n1".into(),
            Vec::new(),
            0,
            HashMap::new(),
            "a",
        )
        .expect("stream open");
    let (p, a) = within(STEP, "the payload back", done.recv())
        .await
        .expect("payload handed back");
    assert_eq!(p, "a");
    assert_eq!(a.outcome, pb::BindOutcome::Error);
    assert!(a.stream_failed, "{a:?}");
    assert!(a.reason.contains("worker_id"), "{a:?}");
    within(STEP, "the reader's end", reader)
        .await
        .expect("reader does not panic");
    assert_eq!(stream.in_flight(), 0);
    assert_eq!(
        stream.propose(
            pod_ref("b"),
            "n1".into(),
            Vec::new(),
            0,
            HashMap::new(),
            "b"
        ),
        Err("b"),
        "a broken stream refuses proposals"
    );
    assert_eq!(h.cluster.write_counts().0, 0, "nothing was bound");
    h.shutdown().await;
}

/// Waits for the first bound-pod event of `name` on `w`'s stream.
async fn bound_event_of(w: &mut FakeWorker, name: &str) -> Event {
    let uid = format!("uid-{name}");
    let events = w
        .read_until(|evs| {
            evs.last().is_some_and(|e| match e {
                Event::PodBound(b) => b.pod.as_ref().is_some_and(|p| p.uid == uid),
                Event::BoundPod(raw) => decode_pod(raw).metadata.uid.as_deref() == Some(&uid),
                _ => false,
            })
        })
        .await;
    events.into_iter().last().expect("an event")
}

/// Node `n1` (4 cpu) and the `workers`, synced.
async fn one_node(workers: &[(&str, pb::WorkloadClass)]) -> (Harness, Vec<FakeWorker>) {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    let h = Harness::start(cluster).await;
    let mut joined = Vec::new();
    for (name, class) in workers {
        joined.push(FakeWorker::join(&h, name, *class).await);
    }
    for w in &mut joined {
        w.until_synced().await;
    }
    (h, joined)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proposer_gets_a_short_confirmation_and_other_workers_the_whole_pod() {
    let (h, workers) = one_node(&[("online-0", Online), ("batch-0", Batch)]).await;
    let [mut online, mut batch] =
        <[FakeWorker; 2]>::try_from(workers).unwrap_or_else(|_| unreachable!("two workers joined"));
    h.cluster
        .create_pod(
            PodBuilder::new("a")
                .cpu("1")
                .label(CLASS_LABEL, "online")
                .build(),
        )
        .expect("pod");
    let got = online.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["a"]);

    let d = online.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    match bound_event_of(&mut online, "a").await {
        Event::PodBound(b) => {
            assert_eq!(b.pod, Some(pod_ref("a")));
            assert_eq!(b.node_name, "n1");
        }
        other => panic!("the proposer gets pod_bound, not {other:?}"),
    }
    match bound_event_of(&mut batch, "a").await {
        Event::BoundPod(raw) => {
            let pod = decode_pod(&raw);
            assert_eq!(node_of(&pod), Some("n1"));
            assert_eq!(
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(CLASS_LABEL)),
                Some(&"online".to_owned()),
                "the whole pod"
            );
        }
        other => panic!("another worker gets the whole bound pod, not {other:?}"),
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_changed_since_the_worker_got_it_is_confirmed_whole() {
    let (h, mut workers) = one_node(&[("online-0", Online)]).await;
    let w = &mut workers[0];
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    w.read_until(|e| !assigned_names(e).is_empty()).await;
    // A status write the worker is not sent (neither spec nor labels
    // changed): the coordinator's copy is newer than the worker's.
    let pod = h.cluster.pod("default", "a").expect("pod a");
    Cluster::mark_unschedulable(&*h.cluster, &pod, "0/1 nodes are available: test.")
        .await
        .expect("status written");
    let c = h.coordinator.clone();
    crate::wait_until(STEP, "the coordinator seeing the status", || {
        c.record("default", "a").is_some_and(|r| {
            r.info
                .pod()
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| !c.is_empty())
        })
    })
    .await;

    let d = w.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    match bound_event_of(w, "a").await {
        Event::BoundPod(raw) => assert_eq!(node_of(&decode_pod(&raw)), Some("n1")),
        other => panic!("a changed pod is confirmed whole, not {other:?}"),
    }
    h.shutdown().await;
}
