//! Runs the coordinator: cluster sync + watch, and the gRPC service.
//!
//! The service is served in plaintext or under mutual TLS
//! ([`ServeOptions`], [`crate::tls`]). Plaintext is refused on any address
//! that is not loopback unless the caller says `insecure`: whoever reaches
//! the port can register as a worker, read every Pod and Node on its
//! stream, and have the coordinator write Bindings with its own rights.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::Liveness;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::grpc::CoordinatorService;
use crate::state::Coordinator;
use crate::tls::ServerTls;

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
    /// Plaintext on an address other than loopback, without `insecure`.
    #[error(
        "refusing to serve the workers' gRPC in plaintext on {addr}, which is not a loopback \
         address: anyone reaching it could register as a worker, read every Pod and Node and \
         have Bindings written. Give --tls-cert, --tls-key and --tls-client-ca (mutual TLS: \
         workers must present a certificate signed by that CA), or --insecure to serve \
         plaintext anyway (only where a NetworkPolicy or a private network keeps everyone \
         else out)"
    )]
    Plaintext {
        /// The address.
        addr: String,
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

/// How the service is served and treats its peers.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Keepalive toward workers: a worker that does not answer is dropped
    /// (its session ends, its pods go to others) within
    /// [`Liveness::bound`].
    pub liveness: Liveness,
    /// Once `shutdown` fired, how long the server waits for workers to
    /// drain and hang up before it closes their connections itself: no
    /// shutdown waits on a peer that does not answer. Default 10 s.
    pub shutdown_grace: Duration,
    /// Mutual TLS: the coordinator's certificate, and workers must present
    /// a client certificate signed by the client CA. `None`: plaintext.
    pub tls: Option<Arc<ServerTls>>,
    /// Serve plaintext on a non-loopback address anyway (`--insecure`).
    pub insecure: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            liveness: Liveness::DEFAULT,
            shutdown_grace: Duration::from_secs(10),
            tls: None,
            insecure: false,
        }
    }
}

impl ServeOptions {
    /// Whether serving on `addr` is allowed: TLS anywhere, plaintext on
    /// loopback or when `insecure`.
    ///
    /// # Errors
    /// [`ServeError::Plaintext`], naming the flags that fix it.
    pub fn check(&self, addr: SocketAddr) -> Result<(), ServeError> {
        if self.tls.is_some() || self.insecure || addr.ip().is_loopback() {
            return Ok(());
        }
        Err(ServeError::Plaintext {
            addr: addr.to_string(),
        })
    }
}

/// Binds `addr` (use port 0 for an ephemeral port), syncs the cluster and
/// serves until `shutdown` fires, with the default [`ServeOptions`]
/// (plaintext, so only on a loopback address).
///
/// # Errors
/// See [`start_with`].
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
/// [`ServeError::Listen`] when the address cannot be bound;
/// [`ServeError::Plaintext`] when it is not loopback and `options` has
/// neither TLS nor `insecure` (checked on the bound address, so a host
/// name is judged by what it resolved to).
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
    options.check(local)?;
    let tls = options.tls.clone();
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
        let router = tonic::transport::Server::builder()
            // Wide HTTP/2 windows: the watch streams carry the whole cluster
            // and workers send many small proposals (h2 sizes its flood
            // guard from the connection window).
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(16 << 20)
            .http2_keepalive_interval(Some(options.liveness.interval))
            .http2_keepalive_timeout(Some(options.liveness.timeout))
            .add_service(svc);
        let serve = async move {
            match tls {
                // Handshakes (and certificate reloads) in `tls::incoming`.
                Some(tls) => {
                    router
                        .serve_with_incoming_shutdown(crate::tls::incoming(listener, tls), stop)
                        .await
                }
                None => {
                    router
                        .serve_with_incoming_shutdown(
                            // TCP_NODELAY, as `Server::serve` sets it:
                            // without it Nagle holds small frames for the
                            // peer's delayed ACK (up to 40 ms per pod on
                            // loopback).
                            tonic::transport::server::TcpIncoming::from(listener)
                                .with_nodelay(Some(true)),
                            stop,
                        )
                        .await
                }
            }
        };
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
