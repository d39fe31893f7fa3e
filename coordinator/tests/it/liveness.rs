//! Liveness between coordinator and workers: HTTP/2 keepalive both ways
//! ([`Liveness`]). A worker that stops answering (frozen, or behind a
//! network that silently drops) loses its session and its pods within the
//! bound; one that wakes can place nothing with its old credential; a
//! worker leaves a coordinator that stops answering for the next replica;
//! no shutdown waits on a peer that does not answer.
//!
//! A frozen peer is played by [`Relay`]: a TCP relay that, frozen, moves no
//! byte either way while the kernel still accepts connections, as a
//! stopped process on a live host.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_coordinator::server::ServeOptions;
use flotilla_proto::Liveness;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_proto::v1::watch_event::Event;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{Harness, OUTCOME, STEP, default_profiles, node_of, pod_ref, wait_until, within};

/// Keepalive short enough for a test, long enough that a live peer on a
/// busy 2-core machine always answers: a silent peer is dropped within
/// 1.5 s.
const QUICK: Liveness = Liveness {
    interval: Duration::from_millis(500),
    timeout: Duration::from_secs(1),
};

/// Keepalive that never fires within a test.
const NEVER: Liveness = Liveness {
    interval: Duration::from_secs(3600),
    timeout: Duration::from_secs(3600),
};

/// A TCP relay to `target` that can be frozen.
struct Relay {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: SocketAddr) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("address"), target).await
    }

    /// A relay listening on `at`.
    async fn start_at(at: SocketAddr, target: SocketAddr) -> Self {
        let listener = TcpListener::bind(at).await.expect("relay port");
        let addr = listener.local_addr().expect("relay address");
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let f = f.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::join!(pump(ri, wo, f.clone()), pump(ro, wi, f));
                });
            }
        });
        Relay { addr, frozen, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding every byte while `frozen`.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    let thawed = || async {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    loop {
        thawed().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // A chunk read just before the freeze waits for the thaw.
        thawed().await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A real worker named `name` at `url` with keepalive `liveness`, as a
/// task ending when `token` fires.
fn spawn_worker(
    url: &str,
    name: &str,
    liveness: Liveness,
    token: &CancellationToken,
) -> tokio::task::JoinHandle<Result<(), worker::WorkerError>> {
    let mut cfg = WorkerConfig::new(url, name, WorkloadClass::Online);
    cfg.connect_timeout = STEP;
    cfg.liveness = liveness;
    let t = token.clone();
    tokio::spawn(async move {
        worker::run(
            cfg,
            &Registry::in_tree(),
            Arc::new(WorkerStats::default()),
            t,
        )
        .await
    })
}

async fn harness(cluster: &Arc<EmbeddedCluster>, options: ServeOptions) -> Harness {
    Harness::start_options(
        cluster.clone(),
        cluster.clone(),
        default_profiles(),
        options,
    )
    .await
}

fn cluster_with_node(cpu: &str) -> Arc<EmbeddedCluster> {
    let cluster = Arc::new(EmbeddedCluster::new());
    cluster
        .apply_node(NodeBuilder::new("n1").cpu(cpu).pods(110).build())
        .expect("node");
    cluster
}

/// A worker that stops answering loses its session within the liveness
/// bound: its pod goes to the next worker, and once it wakes, its old
/// credential places nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_worker_loses_its_session_and_its_pods() {
    let cluster = cluster_with_node("4");
    let h = harness(
        &cluster,
        ServeOptions {
            liveness: QUICK,
            ..ServeOptions::default()
        },
    )
    .await;
    let relay = Relay::start(h.addr).await;
    let mut client = within(STEP, "connect", CoordinatorClient::connect(relay.url()))
        .await
        .expect("the relay connects");
    let credential = client
        .register(pb::RegisterRequest {
            worker_name: "frozen".into(),
            workload_class: pb::WorkloadClass::Online.into(),
            profiles_fingerprint: 0,
        })
        .await
        .expect("Register")
        .into_inner()
        .worker_id;
    let mut stream = client
        .watch(pb::WatchRequest {
            worker_id: credential.clone(),
        })
        .await
        .expect("Watch")
        .into_inner();
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    // Its pod arrives; then the worker freezes with the pod in hand.
    within(STEP, "pod a dispatched", async {
        loop {
            let e = stream.message().await.expect("stream").expect("open");
            if let Some(Event::AssignedPod(_)) = e.event {
                return;
            }
        }
    })
    .await;
    relay.freeze(true);
    let c = h.coordinator.clone();
    wait_until(STEP, "the frozen worker dropped", || c.live_workers() == 0).await;

    // Another worker gets the pod.
    let mut other = crate::FakeWorker::join(&h, "other", pb::WorkloadClass::Online).await;
    let events = other
        .read_until(|es| !crate::assigned_names(es).is_empty())
        .await;
    assert_eq!(crate::assigned_names(&events), vec!["a".to_owned()]);

    // The frozen worker wakes and proposes the pod it held: refused (once
    // its channel has reconnected: the first calls may meet the connection
    // the coordinator closed, as Internal, Unavailable or Cancelled).
    relay.freeze(false);
    let status = within(STEP, "the late proposal's answer", async {
        loop {
            let late = client
                .propose_bind(pb::BindProposal {
                    worker_id: credential.clone(),
                    pod: Some(pod_ref("a")),
                    node_name: "n1".into(),
                    alternatives: Vec::new(),
                    gpu_devices: 0,
                })
                .await;
            match late {
                Err(s)
                    if matches!(
                        s.code(),
                        tonic::Code::Internal | tonic::Code::Unavailable | tonic::Code::Cancelled
                    ) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other.expect_err("a late proposal of an ended session is refused"),
            }
        }
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let decision = other.propose("a", "n1").await;
    assert_eq!(decision.outcome(), pb::BindOutcome::Bound);
}

/// Real workers: one freezes with pods dispatched to it; they are bound by
/// the other, each once, and the frozen one binds nothing when it wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_worker_s_pods_are_bound_by_the_other_once() {
    let cluster = cluster_with_node("6");
    let h = harness(
        &cluster,
        ServeOptions {
            liveness: QUICK,
            ..ServeOptions::default()
        },
    )
    .await;
    let relay = Relay::start(h.addr).await;
    let token = CancellationToken::new();
    // The frozen worker must not notice its own freeze.
    let handles = [
        spawn_worker(&relay.url(), "online-0", NEVER, &token),
        spawn_worker(&h.url(), "online-1", NEVER, &token),
    ];
    let c = h.coordinator.clone();
    wait_until(STEP, "both workers joined", || c.live_workers() == 2).await;
    relay.freeze(true);
    for i in 0..6 {
        cluster
            .create_pod(PodBuilder::new(&format!("p{i}")).cpu("1").build())
            .expect("pod");
    }
    let cl = cluster.clone();
    wait_until(OUTCOME, "all six pods bound", || {
        (0..6).all(|i| {
            cl.pod("default", &format!("p{i}"))
                .is_some_and(|p| node_of(&p).is_some())
        })
    })
    .await;
    relay.freeze(false);
    // The woken worker joins again with a new session; nothing moves.
    wait_until(STEP, "the woken worker joined again", || {
        c.live_workers() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let summary = h.coordinator.summary();
    assert_eq!(summary.bound_by_us, 6, "each pod bound once");
    token.cancel();
    for handle in handles {
        within(STEP, "worker drains", handle)
            .await
            .expect("no panic")
            .expect("worker ends cleanly");
    }
}

/// A worker leaves a coordinator that stops answering and joins the next
/// replica it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_leaves_a_frozen_coordinator_for_the_next_replica() {
    let cluster = cluster_with_node("4");
    let quick = ServeOptions {
        liveness: QUICK,
        ..ServeOptions::default()
    };
    let first = harness(&cluster, quick.clone()).await;
    let second = harness(&cluster, quick).await;
    let relay = Relay::start(first.addr).await;
    let token = CancellationToken::new();
    let handle = spawn_worker(
        &format!("{},{}", relay.url(), second.url()),
        "online-0",
        QUICK,
        &token,
    );
    let c1 = first.coordinator.clone();
    wait_until(STEP, "the worker joined the first replica", || {
        c1.live_workers() == 1
    })
    .await;
    relay.freeze(true);
    let c2 = second.coordinator.clone();
    wait_until(STEP, "the worker joined the second replica", || {
        c2.live_workers() == 1
    })
    .await;
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    wait_until(OUTCOME, "pod a bound through the second replica", || {
        c2.summary().bound_by_us == 1
    })
    .await;
    token.cancel();
    within(STEP, "worker drains", handle)
        .await
        .expect("no panic")
        .expect("worker ends cleanly");
}

/// A frozen replica listed first does not hold up the join: the worker
/// handshakes with every replica at once and registers on the first that
/// answers, long before the frozen one's liveness bound (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_replica_listed_first_does_not_delay_the_join() {
    let cluster = cluster_with_node("4");
    let frozen = harness(&cluster, ServeOptions::default()).await;
    let live = harness(&cluster, ServeOptions::default()).await;
    let relay = Relay::start(frozen.addr).await;
    relay.freeze(true);
    joins_the_second_replica(&relay.url(), &frozen, &live).await;
}

/// A replica stuck between the two calls of a join (it answers
/// `Register`, never `Watch`, as a leader frozen right after registering
/// the worker) does not hold up the join either: the worker watches the
/// next replica long before the stuck one's liveness bound (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_never_answers_watch_does_not_delay_the_join() {
    let cluster = cluster_with_node("4");
    let stuck = harness(&cluster, ServeOptions::default()).await;
    let live = harness(&cluster, ServeOptions::default()).await;
    let stuck_url = serve_without_watch(stuck.coordinator.clone()).await;
    joins_the_second_replica(&stuck_url, &stuck, &live).await;
}

/// A worker given `first_url` (the replica `first`, which does not answer
/// in full), then `live`'s, watches `live` within [`STEP`] (its own
/// liveness bound is an hour) and nothing at `first`; then drains.
async fn joins_the_second_replica(first_url: &str, first: &Harness, live: &Harness) {
    let token = CancellationToken::new();
    let handle = spawn_worker(
        &format!("{first_url},{}", live.url()),
        "online-0",
        NEVER,
        &token,
    );
    let c = live.coordinator.clone();
    wait_until(STEP, "the worker joined the answering replica", || {
        c.live_workers() == 1
    })
    .await;
    assert_eq!(first.coordinator.live_workers(), 0);
    token.cancel();
    within(STEP, "worker drains", handle)
        .await
        .expect("no panic")
        .expect("worker ends cleanly");
}

/// Serves `coordinator`'s gRPC API on a port of its own, except that a
/// `Watch` is never answered; returns its URL.
async fn serve_without_watch(coordinator: Arc<flotilla_coordinator::Coordinator>) -> String {
    use flotilla_coordinator::grpc::CoordinatorService;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("port");
    let addr = listener.local_addr().expect("address");
    let svc = NoWatch(CoordinatorService::new(coordinator).into_server());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// A gRPC service whose `Watch` calls never end (the others pass through).
#[derive(Clone)]
struct NoWatch<S>(S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for NoWatch<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tonic::codegen::Service<http::Request<tonic::body::Body>> for NoWatch<S>
where
    S: tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path().ends_with("/Watch") {
            Box::pin(futures::future::pending())
        } else {
            Box::pin(self.0.call(req))
        }
    }
}

/// A replica that starts listening while the one listed before it is
/// frozen (a standby taking over from a frozen leader) is joined at its
/// next try, not once the frozen one's try runs out (an hour here): each
/// address is tried in its own loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_starts_listening_is_joined_while_a_frozen_one_hangs() {
    let cluster = cluster_with_node("4");
    let frozen = harness(&cluster, ServeOptions::default()).await;
    let leader = harness(&cluster, ServeOptions::default()).await;
    let relay = Relay::start(frozen.addr).await;
    relay.freeze(true);
    // The standby's address, not listening yet.
    let standby: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("its address")
    };
    let token = CancellationToken::new();
    let handle = spawn_worker(
        &format!("{},http://{standby}", relay.url()),
        "online-0",
        NEVER,
        &token,
    );
    // Its first tries are refused; then it starts leading.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _listening = Relay::start_at(standby, leader.addr).await;
    let c = leader.coordinator.clone();
    wait_until(STEP, "the worker joined the replica now listening", || {
        c.live_workers() == 1
    })
    .await;
    assert_eq!(frozen.coordinator.live_workers(), 0);
    token.cancel();
    within(STEP, "worker drains", handle)
        .await
        .expect("no panic")
        .expect("worker ends cleanly");
}

/// A coordinator shutting down closes the connection of a worker that does
/// not answer after the grace, even with keepalive far off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_does_not_wait_on_a_frozen_worker() {
    let cluster = cluster_with_node("4");
    let h = harness(
        &cluster,
        ServeOptions {
            liveness: NEVER,
            shutdown_grace: Duration::from_millis(300),
            ..ServeOptions::default()
        },
    )
    .await;
    let relay = Relay::start(h.addr).await;
    let token = CancellationToken::new();
    let worker = spawn_worker(&relay.url(), "online-0", NEVER, &token);
    let c = h.coordinator.clone();
    wait_until(STEP, "the worker joined", || c.live_workers() == 1).await;
    relay.freeze(true);
    // Enough to fill the stream's window and the sockets: the frozen
    // worker's stream cannot end cleanly.
    for i in 0..3000 {
        let node = (0..60).fold(NodeBuilder::new(&format!("big-{i:04}")).cpu("4"), |n, j| {
            n.label(&format!("padding-{j}"), &"x".repeat(60))
        });
        cluster.apply_node(node.build()).expect("node");
    }
    h.shutdown().await;
    token.cancel();
    worker.abort();
}
