//! Stopping: workers leaving and the coordinator shutting down.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::testing::NodeBuilder;
use tokio_util::sync::CancellationToken;

use crate::{FakeWorker, Harness, STEP, wait_until, within};

fn one_node() -> EmbeddedCluster {
    let c = EmbeddedCluster::new();
    c.apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_stopping_on_its_own_leaves_the_coordinator() {
    let h = Harness::start(one_node()).await;
    let own = CancellationToken::new();
    let stats = Arc::new(WorkerStats::default());
    let (cfg, st, t) = (
        WorkerConfig::new(&h.url(), "online-0", WorkloadClass::Online),
        stats.clone(),
        own.clone(),
    );
    let handle = tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, t).await });
    let c = h.coordinator.clone();
    wait_until(STEP, "the worker connecting", || c.live_workers() == 1).await;
    wait_until(STEP, "the worker replaying", || {
        stats.ready.load(Ordering::Acquire)
    })
    .await;

    own.cancel();
    within(STEP, "the worker stopping", handle)
        .await
        .expect("no panic")
        .expect("the worker stops cleanly");
    wait_until(STEP, "the coordinator noticing", || c.live_workers() == 0).await;
    let s = h.coordinator.summary();
    assert_eq!(
        s.workers.len(),
        1,
        "the departed worker stays in the report"
    );
    assert_eq!(&*s.workers[0].0, "online-0");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutting_down_the_coordinator_ends_every_worker_stream() {
    let h = Harness::start(one_node()).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;

    h.token.cancel();
    let stream = w.stream.as_mut().expect("watching");
    let end = within(
        STEP,
        "the Watch stream ending after shutdown",
        stream.message(),
    )
    .await;
    assert!(
        !matches!(end, Ok(Some(_))),
        "no more events once the coordinator stopped: {end:?}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_with_its_own_shutdown_signal_stops_when_the_coordinator_stops() {
    let h = Harness::start(one_node()).await;
    let own = CancellationToken::new();
    let stats = Arc::new(WorkerStats::default());
    let (cfg, st, t) = (
        WorkerConfig::new(&h.url(), "online-0", WorkloadClass::Online),
        stats.clone(),
        own.clone(),
    );
    let handle = tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, t).await });
    let c = h.coordinator.clone();
    wait_until(STEP, "the worker connecting", || c.live_workers() == 1).await;
    wait_until(STEP, "the worker replaying", || {
        stats.ready.load(Ordering::Acquire)
    })
    .await;

    // Only the coordinator is told to stop, as when `flotilla coordinator`
    // finishes its run while `flotilla worker` processes are connected.
    h.token.cancel();
    let stopped = within(STEP, "the external worker stopping", handle).await;
    own.cancel();
    stopped
        .expect("no panic")
        .expect("the worker stops cleanly");
    h.shutdown().await;
}
