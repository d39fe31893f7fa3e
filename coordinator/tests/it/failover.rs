//! A worker given several coordinator addresses joins whichever replica
//! serves: it skips an address nobody listens on (a standby), and re-joins
//! another replica when its coordinator closes the stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use tokio_util::sync::CancellationToken;

use crate::{Harness, OUTCOME, STEP, node_of, wait_until, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_moves_to_the_next_replica_when_its_coordinator_steps_down() {
    let cluster = Arc::new(EmbeddedCluster::new());
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    // Two replicas over the same cluster; the first address is a port
    // nobody listens on (a standby does not listen).
    let first = Harness::start_with(cluster.clone(), cluster.clone()).await;
    let second = Harness::start_with(cluster.clone(), cluster.clone()).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let addrs = format!("http://127.0.0.1:{closed},{},{}", first.url(), second.url());
    let mut cfg = WorkerConfig::new(&addrs, "online-0", WorkloadClass::Online);
    cfg.connect_timeout = STEP;
    let stats = Arc::new(WorkerStats::default());
    let token = CancellationToken::new();
    let (st, t) = (stats.clone(), token.clone());
    let handle = tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, t).await });

    let c1 = first.coordinator.clone();
    wait_until(STEP, "the worker joining the first live replica", || {
        c1.live_workers() == 1
    })
    .await;
    assert_eq!(second.coordinator.live_workers(), 0);
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    let c = cluster.clone();
    wait_until(OUTCOME, "pod a bound through the first replica", || {
        c.pod("default", "a").is_some_and(|p| node_of(&p).is_some())
    })
    .await;
    let c = first.coordinator.clone();
    wait_until(STEP, "the first replica recording its bind", || {
        c.summary().bound_by_us == 1
    })
    .await;

    // The first replica shuts down cleanly (ends the stream).
    first.shutdown().await;
    let c2 = second.coordinator.clone();
    wait_until(STEP, "the worker joining the second replica", || {
        c2.live_workers() == 1
    })
    .await;
    cluster
        .create_pod(PodBuilder::new("b").cpu("1").build())
        .expect("pod");
    let c = cluster.clone();
    wait_until(OUTCOME, "pod b bound through the second replica", || {
        c.pod("default", "b").is_some_and(|p| node_of(&p).is_some())
    })
    .await;
    let c = second.coordinator.clone();
    wait_until(STEP, "the second replica recording its bind", || {
        c.summary().bound_by_us == 1
    })
    .await;
    assert_eq!(stats.reconnects.load(Ordering::Relaxed), 1);
    // The Binding is in the cluster before the worker reads the decision.
    let st = stats.clone();
    wait_until(STEP, "the worker counting both binds", || {
        st.bound.load(Ordering::Relaxed) == 2
    })
    .await;

    token.cancel();
    within(STEP, "worker stopping", handle)
        .await
        .expect("no panic")
        .expect("worker stops cleanly");
    second.shutdown().await;
}
