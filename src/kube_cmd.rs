//! `flotilla run|coordinator` against a real API server: the flags, and the
//! run (connect, optionally elect a leader, serve, report).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use flotilla_coordinator::cluster::kube::{
    self as kube_backend, ConfigSource, KubeCluster, KubeOptions, WriteFence,
};
use flotilla_coordinator::leader::{self, DEFAULT_LEASE_NAME, LeaderConfig};
use flotilla_loadtest::live::StopReason;

use crate::live::{self, LiveConfig};
use flotilla_scheduler::config::SchedulerConfig;

/// Exit code when the lease was lost (writes stopped at once).
pub const EXIT_LEADERSHIP_LOST: u8 = 5;

/// Where the cluster is: the embedded one (no flag) or an API server.
#[derive(Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Schedule the cluster of this kubeconfig (its current context) instead
    /// of the embedded one; the workload flags do not apply then.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["trace", "nodes", "pods", "cluster", "placements"]
    )]
    pub kubeconfig: Option<PathBuf>,
    /// Schedule the cluster this pod runs in (service-account config).
    #[arg(long, conflicts_with_all = ["kubeconfig", "trace", "nodes", "pods", "cluster", "placements"])]
    pub in_cluster: bool,
    /// Schedule the cluster kube finds: `KUBECONFIG`, else `~/.kube/config`,
    /// else in-cluster.
    #[arg(long, conflicts_with_all = ["kubeconfig", "in_cluster", "trace", "nodes", "pods", "cluster", "placements"])]
    pub kube: bool,
    /// With a real cluster: stop once no pod has waited for a scheduling
    /// attempt for this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub exit_when_idle: Option<u64>,
}

impl ClusterArgs {
    /// The config source, when a real cluster was asked for.
    #[must_use]
    pub fn source(&self) -> Option<ConfigSource> {
        config_source(self.kubeconfig.as_ref(), self.in_cluster, self.kube)
    }
}

/// Where `simulate` / `explain` read the cluster: exactly one of a file
/// (`--cluster`) or a live API server (`--kubeconfig`, `--in-cluster`,
/// `--kube`), which is only read (lists, never a watch or a write).
/// clap refuses none or two of them with a usage error.
#[derive(Args, Debug, Clone, Default)]
#[group(id = "cluster_source", required = true, multiple = false)]
pub struct ReadSourceArgs {
    /// Cluster objects (YAML or JSON List, or multi-document YAML).
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// Read the live cluster of this kubeconfig (its current context),
    /// read-only: GET lists of Nodes, Pods, Namespaces, PriorityClasses,
    /// PodDisruptionBudgets and PodGroups, nothing written.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the live cluster this pod runs in (service-account config),
    /// read-only.
    #[arg(long)]
    pub in_cluster: bool,
    /// Read the live cluster kube finds (`KUBECONFIG`, else
    /// `~/.kube/config`, else in-cluster), read-only.
    #[arg(long)]
    pub kube: bool,
}

impl ReadSourceArgs {
    /// The live cluster's config source; `None` for `--cluster FILE`.
    #[must_use]
    pub fn live(&self) -> Option<ConfigSource> {
        config_source(self.kubeconfig.as_ref(), self.in_cluster, self.kube)
    }
}

/// `--kubeconfig FILE`, else `--in-cluster`, else `--kube`, else none.
fn config_source(
    kubeconfig: Option<&PathBuf>,
    in_cluster: bool,
    kube: bool,
) -> Option<ConfigSource> {
    if let Some(p) = kubeconfig {
        Some(ConfigSource::Kubeconfig(p.clone()))
    } else if in_cluster {
        Some(ConfigSource::InCluster)
    } else if kube {
        Some(ConfigSource::Infer)
    } else {
        None
    }
}

/// The config source of `flotilla coordinator`: as [`ClusterArgs::source`],
/// and `--leader-elect` alone means a real cluster with kube's inference
/// (in a pod: the service account), as a Deployment runs it.
#[must_use]
pub fn coordinator_source(cluster: &ClusterArgs, leader: &LeaderArgs) -> Option<ConfigSource> {
    cluster
        .source()
        .or_else(|| leader.leader_elect.then_some(ConfigSource::Infer))
}

/// Leader election between coordinator replicas (real clusters only).
#[derive(Args, Debug, Clone, Default)]
pub struct LeaderArgs {
    /// Elect one leader among coordinator replicas on a Lease; a standby
    /// waits (and does not listen) until it leads. Without --kubeconfig or
    /// --in-cluster it implies --kube.
    #[arg(long)]
    pub leader_elect: bool,
    /// Lease name.
    #[arg(long, default_value = DEFAULT_LEASE_NAME, requires = "leader_elect")]
    pub lease_name: String,
    /// Lease namespace (default: `POD_NAMESPACE`, else `default`).
    #[arg(long, requires = "leader_elect")]
    pub lease_namespace: Option<String>,
    /// Lease duration in seconds (a dead leader is replaced after at most
    /// this long).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600), requires = "leader_elect")]
    pub lease_duration: u64,
    /// This replica's identity in the Lease (default: `<host>_<pid>`).
    #[arg(long, requires = "leader_elect")]
    pub lease_identity: Option<String>,
}

/// Rejects real-cluster flags on an embedded run.
///
/// # Errors
/// `--exit-when-idle` or `--leader-elect` without a real cluster.
pub fn check_embedded(cluster: &ClusterArgs, leader: Option<&LeaderArgs>) -> anyhow::Result<()> {
    if cluster.exit_when_idle.is_some() {
        anyhow::bail!(
            "--exit-when-idle applies to a real cluster (--kubeconfig, --in-cluster or --kube)"
        );
    }
    if leader.is_some_and(|l| l.leader_elect) {
        anyhow::bail!(
            "--leader-elect applies to a real cluster (--kubeconfig, --in-cluster or --kube)"
        );
    }
    Ok(())
}

/// What the command asks for.
pub struct LiveRun {
    /// Where the cluster is.
    pub source: ConfigSource,
    /// Workers in this process.
    pub workers: usize,
    /// gRPC listen address.
    pub listen: String,
    /// Plaintext (loopback, or `--insecure`) or mutual TLS.
    pub serve: flotilla_coordinator::server::ServeOptions,
    /// In-process workers' TLS (`run --tls`).
    pub worker_tls: Option<flotilla_shared::tls::ClientTlsMaterial>,
    /// Idle limit.
    pub exit_when_idle: Option<Duration>,
    /// Leader election, if asked.
    pub leader: Option<LeaderArgs>,
    /// JSON report instead of text.
    pub json: bool,
    /// The scheduler configuration: its profiles' `schedulerName`s select
    /// the pods to schedule.
    pub scheduler: SchedulerConfig,
    /// `--metrics-listen`: served from the start (a standby replica is live
    /// but not ready until it leads).
    pub metrics_listen: Option<String>,
    /// `--seed` for in-process workers.
    pub seed: Option<u64>,
}

/// Connects, elects (if asked), serves and reports.
///
/// # Errors
/// Connection, leader-election and listen failures, with context.
pub async fn run(r: LiveRun) -> anyhow::Result<ExitCode> {
    let stop = crate::signal_token();
    let telemetry = match &r.metrics_listen {
        None => None,
        Some(addr) => {
            let why = if r.leader.is_some() {
                "waiting to lead (leader election)"
            } else {
                "connecting to the Kubernetes API server"
            };
            let t = stop.clone();
            let endpoint = flotilla_shared::telemetry::start(
                addr,
                flotilla_shared::telemetry::not_ready(why),
                async move { t.cancelled().await },
            )
            .await
            .with_context(|| format!("--metrics-listen {addr}"))?;
            eprintln!("serving /metrics, /healthz, /readyz on {}", endpoint.addr());
            Some(endpoint)
        }
    };
    let (client, url) = kube_backend::client(&r.source)
        .await
        .context("connecting to the Kubernetes API server")?;
    let fence = WriteFence::new();
    let mut leadership = None;
    if let Some(l) = &r.leader {
        let identity = l
            .lease_identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        let mut cfg = LeaderConfig::new(&identity);
        cfg.lease_name.clone_from(&l.lease_name);
        if let Some(ns) = &l.lease_namespace {
            cfg.namespace.clone_from(ns);
        }
        cfg.duration = Duration::from_secs(l.lease_duration);
        cfg.grace = Duration::from_secs((l.lease_duration / 3).max(1));
        cfg.retry_period = Duration::from_secs((l.lease_duration / 7).max(1));
        eprintln!(
            "leader election on Lease {}/{} as {identity}: waiting to lead",
            cfg.namespace, cfg.lease_name
        );
        match leader::acquire(client.clone(), cfg, fence.clone(), stop.clone()).await? {
            Some(l) => {
                eprintln!("leading");
                // As kube-scheduler: losing the lease ends the process at
                // once (the fence already stopped every write).
                let lost = l.lost_token();
                tokio::spawn(async move {
                    lost.cancelled().await;
                    eprintln!("error: leadership lost; exiting so a new leader takes over");
                    std::process::exit(i32::from(EXIT_LEADERSHIP_LOST));
                });
                leadership = Some(l);
            }
            None => {
                eprintln!("stopped before leading");
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let options = KubeOptions {
        fence,
        ..KubeOptions::default()
    };
    let cluster = Arc::new(
        KubeCluster::connect(client, &url, options)
            .await
            .context("discovering the API server")?,
    );
    let cfg = LiveConfig {
        in_process_workers: r.workers,
        listen: r.listen.clone(),
        serve: r.serve.clone(),
        worker_tls: r.worker_tls.clone(),
        exit_when_idle: r.exit_when_idle,
        scheduler: r.scheduler,
        registry: flotilla_scheduler::Registry::in_tree(),
        telemetry,
        seed: r.seed,
    };
    let result = live::serve(cluster, cfg, stop, leadership.as_ref()).await;
    let lost = leadership.as_ref().is_some_and(leader::Leadership::is_lost);
    if let Some(l) = leadership
        && !lost
    {
        l.release().await;
    }
    let report = result?;
    if r.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if report.stop_reason == StopReason::LeadershipLost {
        eprintln!("error: leadership lost; exiting so a new leader takes over");
        return Ok(ExitCode::from(EXIT_LEADERSHIP_LOST));
    }
    Ok(ExitCode::SUCCESS)
}
