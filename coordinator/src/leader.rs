//! Leader election between coordinator replicas on a `coordination.k8s.io/v1`
//! Lease, with `kube-lease-manager` (server-side apply on the Lease).
//!
//! Upstream kube-scheduler's contract, kept here:
//! - only the leader lists/watches, serves workers and writes Bindings; a
//!   standby waits for the lease;
//! - a leader that loses the lease stops writing at once (the
//!   [`WriteFence`] closes before anything else happens) and the process
//!   exits non-zero;
//! - a leader writes only until the renew deadline after it last confirmed
//!   the lease (the fence's deadline): one frozen (SIGSTOP, a hung host)
//!   while a standby took over writes nothing when it wakes, whatever runs
//!   first in it;
//! - a leader shutting down on a signal releases the lease, so a standby
//!   takes over without waiting for it to expire.
//!
//! Besides the lease manager's own renewals, a monitor reads the Lease every
//! [`LeaderConfig::retry_period`] and steps down when it no longer names us
//! or when it could not confirm that it does for the renew deadline
//! (`duration - grace`; upstream's `renewDeadline`): a leader cut off from
//! the API server must not assume it still leads.

use std::time::Duration;

use tokio::time::Instant;

use ::kube::Client;
use ::kube::api::Api;
use k8s_openapi::api::coordination::v1::Lease;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cluster::kube::WriteFence;

/// Default Lease name.
pub const DEFAULT_LEASE_NAME: &str = "flotilla-coordinator";

/// Lease settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Lease name (default [`DEFAULT_LEASE_NAME`]).
    pub lease_name: String,
    /// Lease namespace (default `POD_NAMESPACE`, else `default`).
    pub namespace: String,
    /// `holderIdentity` of this replica (default `<host>_<pid>`).
    pub identity: String,
    /// `leaseDurationSeconds`: how long a lease lasts without renewal.
    /// Default 15 s (upstream's `leaseDuration`).
    pub duration: Duration,
    /// The holder renews this long before expiry, and steps down when it
    /// could not confirm its lease for `duration - grace`. Default 5 s
    /// (upstream's renewDeadline is 10 s of a 15 s lease). Must be below
    /// `duration`.
    pub grace: Duration,
    /// How often the monitor reads the Lease. Default 2 s (upstream's
    /// `retryPeriod`).
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Defaults for `identity`, reading `POD_NAMESPACE`.
    #[must_use]
    pub fn new(identity: &str) -> Self {
        LeaderConfig {
            lease_name: DEFAULT_LEASE_NAME.into(),
            namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
            identity: identity.to_owned(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The renew deadline: `duration - grace`.
    #[must_use]
    pub fn renew_deadline(&self) -> Duration {
        self.duration.saturating_sub(self.grace)
    }
}

/// The default identity: `<host>_<pid>` (upstream: `<host>_<uuid>`).
#[must_use]
pub fn default_identity() -> String {
    format!(
        "{}_{}",
        crate::cluster::kube::hostname(),
        std::process::id()
    )
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The settings are inconsistent.
    #[error("leader election: {0}")]
    Config(String),
    /// The lease manager failed to start (e.g. the Lease cannot be read or
    /// created: RBAC, or a server without `coordination.k8s.io/v1`).
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// A held lease. Dropping it closes the lease manager's channel, which
/// releases the lease in the background; [`Leadership::release`] waits for
/// that.
#[derive(Debug)]
pub struct Leadership {
    state: watch::Receiver<bool>,
    manager: Option<JoinHandle<kube_lease_manager::Result<LeaseManager>>>,
    monitor: JoinHandle<()>,
    lost: CancellationToken,
    fence: WriteFence,
    config: LeaderConfig,
}

impl Leadership {
    /// Resolves once the lease is lost (the fence is already closed then).
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// A token cancelled when the lease is lost.
    #[must_use]
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lease was lost.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Closes the fence and gives the lease up (a standby may take it at
    /// once).
    pub async fn release(mut self) {
        self.fence.set(false);
        self.monitor.abort();
        // Closing the state channel makes the manager release and return.
        drop(std::mem::replace(&mut self.state, watch::channel(false).1));
        if let Some(task) = self.manager.take() {
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(_))) => info!(lease = %self.config.lease_name, "lease released"),
                Ok(Ok(Err(e))) => warn!(error = %e, "releasing the lease failed"),
                Ok(Err(e)) => warn!(error = %e, "lease manager task failed"),
                Err(_) => warn!("releasing the lease timed out"),
            }
        }
    }
}

/// Waits until this replica holds the lease (or `stop` fires: `Ok(None)`),
/// then opens `fence` and returns the [`Leadership`]. The fence is closed
/// while waiting.
///
/// # Errors
/// [`LeaderError::Config`], [`LeaderError::Lease`].
pub async fn acquire(
    client: Client,
    config: LeaderConfig,
    fence: WriteFence,
    stop: CancellationToken,
) -> Result<Option<Leadership>, LeaderError> {
    fence.set(false);
    if config.grace >= config.duration || config.duration.as_secs() == 0 {
        return Err(LeaderError::Config(format!(
            "the lease duration ({:?}) must be longer than its grace ({:?})",
            config.duration, config.grace
        )));
    }
    let lease_err = |source| LeaderError::Lease {
        namespace: config.namespace.clone(),
        name: config.lease_name.clone(),
        source,
    };
    let manager = LeaseManagerBuilder::new(client.clone(), &config.lease_name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration.as_secs())
        .with_grace(config.grace.as_secs().max(1))
        .build()
        .await
        .map_err(lease_err)?;
    let (mut state, task) = manager.watch().await;
    info!(
        lease = %config.lease_name,
        namespace = %config.namespace,
        identity = %config.identity,
        "waiting to acquire the lease"
    );
    loop {
        if *state.borrow_and_update() {
            break;
        }
        tokio::select! {
            () = stop.cancelled() => {
                drop(state);
                let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
                return Ok(None);
            }
            changed = state.changed() => {
                if changed.is_err() {
                    // The manager task ended: report why.
                    return match task.await {
                        Ok(Err(e)) => Err(lease_err(e)),
                        _ => Err(LeaderError::Config("the lease manager stopped".into())),
                    };
                }
            }
        }
    }
    info!(lease = %config.lease_name, identity = %config.identity, "acquired the lease; leading");
    fence.open_until(Instant::now() + config.renew_deadline());
    let lost = CancellationToken::new();
    let monitor = tokio::spawn(monitor(
        client,
        config.clone(),
        state.clone(),
        fence.clone(),
        lost.clone(),
    ));
    Ok(Some(Leadership {
        state,
        manager: Some(task),
        monitor,
        lost,
        fence,
        config,
    }))
}

/// Steps down (fence closed, `lost` cancelled) when the manager reports the
/// lease gone, when the Lease names another holder, or when it could not be
/// confirmed for the renew deadline.
async fn monitor(
    client: Client,
    config: LeaderConfig,
    mut state: watch::Receiver<bool>,
    fence: WriteFence,
    lost: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut confirmed = Instant::now();
    let mut tick = tokio::time::interval(config.retry_period);
    let reason = loop {
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() || !*state.borrow_and_update() {
                    break "the lease manager reports the lease lost".to_owned();
                }
            }
            _ = tick.tick() => {
                match tokio::time::timeout(config.retry_period, api.get(&config.lease_name)).await {
                    Ok(Ok(lease)) => {
                        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
                        if holder.as_deref() == Some(config.identity.as_str()) {
                            confirmed = Instant::now();
                            // Writes go out until the renew deadline unless
                            // confirmed again: a leader frozen past it
                            // wakes fenced off.
                            fence.open_until(confirmed + config.renew_deadline());
                        } else {
                            break format!("the lease is held by {}", holder.as_deref().unwrap_or("nobody"));
                        }
                    }
                    Ok(Err(e)) => warn!(error = %e, "cannot read the lease"),
                    Err(_) => warn!("reading the lease timed out"),
                }
                if confirmed.elapsed() > config.renew_deadline() {
                    break format!(
                        "the lease could not be confirmed for {:?} (renew deadline)",
                        config.renew_deadline()
                    );
                }
            }
        }
    };
    // First stop writing, then tell.
    fence.set(false);
    warn!(lease = %config.lease_name, %reason, "leadership lost; writes stopped");
    lost.cancel();
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use ::kube::client::Body;
    use http::{Request, Response};
    use serde_json::json;
    use tower_test::mock;

    use super::*;

    fn config() -> LeaderConfig {
        LeaderConfig {
            lease_name: "l".into(),
            namespace: "ns".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
            grace: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
        }
    }

    /// A mock API server answering every Lease GET with `answer()`.
    fn api(answer: fn() -> (u16, serde_json::Value)) -> (Client, tokio::task::JoinHandle<()>) {
        let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut handle = pin!(handle);
            while let Some((req, send)) = handle.next_request().await {
                assert_eq!(
                    req.uri().path(),
                    "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
                );
                let (code, body) = answer();
                send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&body).expect("json")))
                        .expect("response"),
                );
            }
        });
        (Client::new(svc, "ns"), server)
    }

    fn lease(holder: &str) -> serde_json::Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "l", "namespace": "ns"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    }

    async fn run_monitor(
        client: Client,
        state: watch::Receiver<bool>,
    ) -> (WriteFence, CancellationToken) {
        let fence = WriteFence::new();
        let lost = CancellationToken::new();
        tokio::spawn(monitor(
            client,
            config(),
            state,
            fence.clone(),
            lost.clone(),
        ));
        (fence, lost)
    }

    #[tokio::test(start_paused = true)]
    async fn another_holder_in_the_lease_closes_the_fence() {
        let (client, _server) = api(|| (200, lease("someone-else")));
        let (_tx, rx) = watch::channel(true);
        let (fence, lost) = run_monitor(client, rx).await;
        lost.cancelled().await;
        assert!(!fence.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unconfirmed_lease_is_given_up_after_the_renew_deadline() {
        let (client, _server) = api(|| {
            (
                500,
                json!({"kind": "Status", "code": 500, "message": "etcd down"}),
            )
        });
        let (_tx, rx) = watch::channel(true);
        let started = Instant::now();
        let (fence, lost) = run_monitor(client, rx).await;
        lost.cancelled().await;
        assert!(!fence.is_open());
        // Not before the renew deadline (15 s - 5 s), at the first check after it.
        let waited = started.elapsed();
        assert!(waited > Duration::from_secs(10), "{waited:?}");
        assert!(waited <= Duration::from_secs(12), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_confirmed_lease_is_kept_until_the_manager_reports_it_lost() {
        let (client, _server) = api(|| (200, lease("me")));
        let (tx, rx) = watch::channel(true);
        let (fence, lost) = run_monitor(client, rx).await;
        // Well past the renew deadline, confirmed all along.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!lost.is_cancelled());
        assert!(fence.is_open());
        tx.send(false).expect("monitor listening");
        lost.cancelled().await;
        assert!(!fence.is_open());
    }
}
