//! Runs the coordinator: cluster sync + watch, and the gRPC service.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::Liveness;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::grpc::CoordinatorService;
use crate::state::Coordinator;

/// Errors starting or running the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding the listen address failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The cluster could not be listed.
    #[error("cluster: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
}

/// A running coordinator.
#[derive(Debug)]
pub struct RunningCoordinator {
    /// The address the gRPC service listens on.
    pub addr: SocketAddr,
    /// The coordinator (for summaries).
    pub coordinator: Arc<Coordinator>,
    /// Resolves once the cluster is listed and loaded.
    pub synced: tokio::sync::oneshot::Receiver<()>,
    /// Completes when the server stops.
    pub handle: tokio::task::JoinHandle<Result<(), ServeError>>,
}

/// How the service treats its peers.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Keepalive toward workers: a worker that does not answer is dropped
    /// (its session ends, its pods go to others) within
    /// [`Liveness::bound`].
    pub liveness: Liveness,
    /// Once `shutdown` fired, how long the server waits for workers to
    /// drain and hang up before it closes their connections itself: no
    /// shutdown waits on a peer that does not answer. Default 10 s.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            liveness: Liveness::DEFAULT,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Binds `addr` (use port 0 for an ephemeral port), syncs the cluster and
/// serves until `shutdown` fires, with the default [`ServeOptions`].
///
/// # Errors
/// [`ServeError::Listen`] when the address cannot be bound.
pub async fn start(
    coordinator: Arc<Coordinator>,
    addr: &str,
    shutdown: CancellationToken,
) -> Result<RunningCoordinator, ServeError> {
    start_with(coordinator, addr, shutdown, ServeOptions::default()).await
}

/// [`start`] with `options`.
///
/// # Errors
/// [`ServeError::Listen`] when the address cannot be bound.
pub async fn start_with(
    coordinator: Arc<Coordinator>,
    addr: &str,
    shutdown: CancellationToken,
    options: ServeOptions,
) -> Result<RunningCoordinator, ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen {
            addr: addr.to_owned(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: addr.to_owned(),
        source,
    })?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sync = tokio::spawn(coordinator.clone().sync_and_watch(shutdown.clone(), tx));
    let svc = CoordinatorService::new(coordinator.clone()).into_server();
    let token = shutdown.clone();
    let closing = coordinator.clone();
    let handle = tokio::spawn(async move {
        let stopping = token.clone();
        let stop = async move {
            token.cancelled().await;
            // End the worker streams, or graceful shutdown waits on them.
            closing.close_streams();
        };
        let serve = tonic::transport::Server::builder()
            // Wide HTTP/2 windows: the watch streams carry the whole cluster
            // and workers send many small proposals (h2 sizes its flood
            // guard from the connection window).
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(16 << 20)
            .http2_keepalive_interval(Some(options.liveness.interval))
            .http2_keepalive_timeout(Some(options.liveness.timeout))
            .add_service(svc)
            .serve_with_incoming_shutdown(
                // TCP_NODELAY, as `Server::serve` sets it: without it Nagle
                // holds small frames for the peer's delayed ACK (up to
                // 40 ms per pod on loopback).
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                stop,
            );
        let grace = options.shutdown_grace;
        tokio::select! {
            served = serve => served?,
            () = async {
                stopping.cancelled().await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!(
                    ?grace,
                    "workers still connected after the shutdown grace; closing their connections"
                );
            }
        }
        sync.abort();
        Ok(())
    });
    Ok(RunningCoordinator {
        addr: local,
        coordinator,
        synced: rx,
        handle,
    })
}
