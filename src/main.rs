//! `flotilla`: the one user-facing binary.
//!
//! - `flotilla run`: coordinator + workers in one process (real gRPC over
//!   loopback) on the embedded cluster; prints a report.
//! - `flotilla coordinator`: the coordinator alone, waiting for
//!   `--workers N` separate `flotilla worker` processes.
//! - `flotilla worker`: one scheduler worker.
//! - `flotilla simulate` / `flotilla explain`: what the scheduler would do
//!   with a cluster's pending pods (one pod, for `explain`), in-process.
//! - `flotilla bench`: a named benchmark scenario, measured (`bench_cmd`).
//!
//! Each takes `--config FILE`, a `KubeSchedulerConfiguration`
//! (`flotilla_scheduler::config`); a bad one stops the process with exit 1.
//!
//! `run` and `coordinator` schedule a real cluster instead with
//! `--kubeconfig FILE`, `--in-cluster` or `--kube`: `kube_cmd` connects and
//! elects, `live` assembles the deployed process (the coordinator over the
//! `kube` backend, its gRPC service, workers in process for `run`).
//! `simulate` and `explain` read one with the same flags, read-only.

mod bench_cmd;
mod kube_cmd;
mod live;

/// mimalloc instead of glibc malloc: per-thread heaps, no arena lock
/// shared by the coordinator, the workers and the tokio threads. Built
/// with `no_thp`: with transparent huge pages, its purged-and-refaulted
/// pages were zeroed 2 MiB at a time (a third of a 4-worker run in
/// `clear_page`). docs/benchmarks.md has the measurements.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use flotilla_coordinator::server::ServeOptions;
use flotilla_coordinator::tls::ServerTls;
use flotilla_loadtest::report::{self, Report};
use flotilla_loadtest::run::{self, RunConfig};
use flotilla_loadtest::workload::{self, OnBadInput, Workload, openb, synthetic};
use flotilla_scheduler::Registry;
use flotilla_scheduler::config::{self, ConfigError, SchedulerConfig};
use flotilla_scheduler::simulate;
use flotilla_scheduler::worker::{self as sched_worker, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::tls::{ClientTlsMaterial, Pem, ServerTlsMaterial};

/// A safety check failed (a node over-committed, a pod bound twice).
const EXIT_SAFETY: u8 = 3;
/// `--timeout` passed with pods still pending (or every worker was lost).
const EXIT_TIMED_OUT: u8 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "flotilla",
    version,
    about = "Sharded multi-scheduler control plane for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Coordinator and workers in one process on the embedded cluster.
    Run(RunArgs),
    /// The coordinator alone; start `flotilla worker` processes against it.
    Coordinator(CoordinatorArgs),
    /// One scheduler worker connecting to a coordinator.
    Worker(WorkerArgs),
    /// Schedule a cluster's pending pods in-process and show every decision.
    #[command(long_about = SIMULATE_ABOUT)]
    Simulate(SimulateArgs),
    /// Why is this pod pending? One pod against the cluster, node by node.
    #[command(long_about = EXPLAIN_ABOUT)]
    Explain(ExplainArgs),
    /// Run a named benchmark scenario on the embedded cluster and measure
    /// it (pods/s, latency, conflicts, CPU, memory, API writes; SVG chart),
    /// or with --kubeconfig against a real API server, optionally beside
    /// upstream kube-scheduler.
    Bench(bench_cmd::BenchArgs),
}

const SIMULATE_ABOUT: &str = "\
Schedule a cluster's pending pods in-process, with the plugin code the workers
run, and show for each pod every node's filter result and every plugin's score.

Input, exactly one of:
  --cluster FILE  YAML or JSON; a v1 List (what `kubectl get
                  nodes,pods,namespaces,priorityclasses,pdb,pvc,pv,
                  storageclasses,csinodes,csidrivers,volumeattachments
                  -A -o yaml` writes), typed lists, or multi-document YAML.
  --kubeconfig FILE, --in-cluster or --kube
                  a live cluster, read-only: GET lists (in pages of 500) of
                  the same kinds, never a watch or a write; nothing in the
                  cluster changes. PodDisruptionBudgets (policy/v1) and
                  PodGroups are skipped with a note when the server does not
                  serve them or they may not be listed.
Nodes and Pods (bound ones have spec.nodeName) make the
cluster; Namespaces feed namespaceSelectors; PriorityClasses resolve
spec.priorityClassName when spec.priority is unset (globalDefault honoured; a
missing class is an Error result for that pod). PodDisruptionBudgets guide
preemption's choice of victims; PodGroups (scheduling.x-k8s.io/v1alpha1) make
gangs in profiles that enable Coscheduling. Other kinds are skipped with a
warning on stderr. A bad object is an error naming the object and field.

Pending pods are scheduled one at a time in queue order (priority descending,
then file order), each placement applied before the next. A pod that fits
nowhere may preempt (DefaultPreemption): its result adds nominatedNode and
victims, the victims are evicted and the pod placed. Gangs are all or
nothing. Pods whose schedulerName has no profile, scheduling-gated,
terminal or deleting pods are listed as skipped on stderr. Profiles: those of
--config (a KubeSchedulerConfiguration), else the default profile
(default-scheduler). Ties between equally scored nodes are broken at random,
as upstream does.

Exit status: 0 done (whatever the pods' outcomes); 1 unreadable or invalid
input, or an unreachable or refusing API server; 2 bad command line.";

const EXPLAIN_ABOUT: &str = "\
Explain one pod against the cluster as the input shows it: bound pods only
(other pending pods are not placed first). Prints each node with the plugin
that rejected it and why, the scores of the feasible nodes (per plugin and
total), the node it would pick, or the FitError line if it fits nowhere.

Input as for `flotilla simulate`: exactly one of --cluster FILE or a live
cluster (--kubeconfig FILE, --in-cluster or --kube). A live cluster is only
read (GET lists; never a watch, a binding, a status patch or an Event), so
the pod and everything else stay as they are.

Exit status: 0 explained; 1 unreadable or invalid input (or an unreachable or
refusing API server), unknown pod, or a pod whose schedulerName has no
profile; 2 bad command line.";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum SimulateOutput {
    /// One block per pod, for a terminal.
    Table,
    /// One JSON object: {"results": [...]} (schema in the README).
    Json,
}

#[derive(Args, Debug)]
struct SimulateArgs {
    #[command(flatten)]
    sched: ConfigArgs,
    #[command(flatten)]
    source: kube_cmd::ReadSourceArgs,
    /// Format on stdout.
    #[arg(long, value_enum, default_value_t = SimulateOutput::Table)]
    output: SimulateOutput,
    #[command(flatten)]
    seed: SeedArgs,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The pod: NAMESPACE/NAME (NAME alone means namespace default).
    #[arg(value_name = "NAMESPACE/POD", value_parser = pod_name_arg)]
    pod: String,
    #[command(flatten)]
    sched: ConfigArgs,
    #[command(flatten)]
    source: kube_cmd::ReadSourceArgs,
    #[command(flatten)]
    seed: SeedArgs,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Trace {
    /// Generated, shaped like upstream scheduler_perf SchedulingBasic.
    Synthetic,
    /// Alibaba GPU cluster trace v2023 (CSV files).
    Openb,
    /// A Kubernetes List of Nodes and Pods (YAML or JSON).
    K8s,
    /// Generated, shaped like upstream scheduler_perf PreemptionBasic:
    /// `--synthetic-nodes` nodes filled by 4 low-priority pods each, then
    /// one high-priority pod per node that must preempt 3 of them.
    PreemptionBasic,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// Human-readable.
    Text,
    /// One JSON object (schema in the README).
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum BadInput {
    /// Report bad rows/objects and go on with the valid rest.
    Skip,
    /// Stop at the first bad row/object.
    Fail,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Class {
    /// Latency-sensitive services.
    Online,
    /// Batch and best-effort work.
    Batch,
}

#[derive(Args, Debug)]
struct WorkloadArgs {
    /// Input workload.
    #[arg(long, value_enum, default_value_t = Trace::Synthetic)]
    trace: Trace,
    /// openb node CSV (default: the trace beside the project, all 1,523 nodes).
    #[arg(long, value_name = "CSV")]
    nodes: Option<PathBuf>,
    /// openb pod CSV (default: the trace beside the project, 8,152 pods).
    #[arg(long, value_name = "CSV")]
    pods: Option<PathBuf>,
    /// Kubernetes List of Nodes and Pods, for `--trace k8s`.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Nodes of the synthetic workload (4 CPU / 32 Gi / 110 pods each).
    #[arg(long, default_value_t = synthetic::DEFAULT_NODES)]
    synthetic_nodes: usize,
    /// Pods of the synthetic workload (100m / 500 Mi each).
    #[arg(long, default_value_t = synthetic::DEFAULT_PODS)]
    synthetic_pods: usize,
    /// What to do with a malformed trace row or object.
    #[arg(long, value_enum, default_value_t = BadInput::Skip)]
    on_bad_input: BadInput,
    /// Grace period of pods the embedded cluster deletes (preemption's
    /// victims), overriding their terminationGracePeriodSeconds (default
    /// 30 s): no kubelet runs there, a victim just holds its room that long.
    /// 0 frees it at once.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(i64).range(0..))]
    grace_period: Option<i64>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Write every pod's outcome as JSON Lines: {"pod": "ns/name", "node": "n" | null},
    /// plus "preempted": true for pods evicted by preemption.
    #[arg(long, value_name = "FILE")]
    placements: Option<PathBuf>,
    /// Give up after this many seconds; unresolved pods are reported pending.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Hide the progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// `--metrics-listen`, shared by run, coordinator and worker.
#[derive(Args, Debug, Clone, Default)]
struct MetricsArgs {
    /// Serve Prometheus metrics (`/metrics`, kube-scheduler's names),
    /// `/healthz` and `/readyz` over HTTP on this address (e.g.
    /// 0.0.0.0:10251). Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
}

/// `--seed`, shared by the commands that run scheduling cycles.
#[derive(Args, Debug, Clone, Copy, Default)]
pub(crate) struct SeedArgs {
    /// Seed the cycles' random choices (which of equally scored nodes wins,
    /// where preemption's search starts), so runs repeat: `simulate` and a
    /// one-worker `run` given the same seed and objects draw the same
    /// numbers for each attempt. Default: random, as upstream.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

/// `--config`, shared by every command that schedules or dispatches.
#[derive(Args, Debug)]
pub(crate) struct ConfigArgs {
    /// Scheduler configuration: a kubescheduler.config.k8s.io/v1
    /// KubeSchedulerConfiguration (YAML or JSON; see the README). Without
    /// it, upstream's defaults (one `default-scheduler` profile).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// How the coordinator serves its workers: mutual TLS, or plaintext
/// (loopback; elsewhere only with `--insecure`).
#[derive(Args, Debug, Clone, Default)]
struct ServeTlsArgs {
    /// Serve the workers' gRPC under mutual TLS with this certificate (PEM,
    /// leaf first, then intermediates). Needs --tls-key and
    /// --tls-client-ca. The three files are read again when one changes (new
    /// connections use them; a change that cannot be used is logged and the
    /// previous certificates kept).
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_client_ca"])]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificate(s) (PEM) that workers' client certificates must chain
    /// to; a worker without one is refused at the handshake. The DNS names
    /// <class>.worker.flotilla.internal of a worker's certificate (class
    /// online, batch or any) say which pool it may register for.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve plaintext gRPC on a --listen address that is not loopback
    /// (refused without it). Only where a NetworkPolicy or a private network
    /// keeps everyone but the workers away from the port.
    #[arg(long, conflicts_with = "tls_cert")]
    insecure: bool,
}

impl ServeTlsArgs {
    /// The serving options, the certificates loaded now; plaintext on a
    /// `listen` address that is not loopback (an IP literal; a host name is
    /// checked once bound) refused unless `--insecure`.
    fn options(&self, listen: &str) -> anyhow::Result<ServeOptions> {
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_client_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(Arc::new(ServerTls::load(
                ServerTlsMaterial::files(cert, key, ca),
            )?)),
            _ => None,
        };
        let options = ServeOptions {
            tls,
            insecure: self.insecure,
            ..ServeOptions::default()
        };
        if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
            options.check(addr)?;
        }
        Ok(options)
    }
}

/// `--tls` of `run` and `bench`: the in-process workers over mutual TLS
/// on loopback, with certificates made in memory for the run.
fn loopback_tls(tls: bool) -> anyhow::Result<(ServeOptions, Option<ClientTlsMaterial>)> {
    if !tls {
        return Ok((ServeOptions::default(), None));
    }
    let (server, client) = flotilla_shared::tls::ephemeral::loopback()?;
    let serve = ServeOptions {
        tls: Some(Arc::new(ServerTls::load(server)?)),
        ..ServeOptions::default()
    };
    Ok((serve, Some(client)))
}

/// The worker's TLS to the coordinator.
#[derive(Args, Debug, Clone, Default)]
struct WorkerTlsArgs {
    /// CA certificate(s) (PEM) that signed the coordinator's certificate:
    /// connect over TLS (an address without a scheme becomes https://).
    /// Files are read again at every (re)connect, so rotated certificates
    /// are picked up.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// This worker's client certificate (PEM, leaf first), which a
    /// coordinator with --tls-client-ca requires; its DNS names
    /// <class>.worker.flotilla.internal must allow --class.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Verify the coordinator's certificate against this name (and send it
    /// as SNI) instead of the address's host.
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl WorkerTlsArgs {
    /// The material, checked now (each file read and parsed once, so a bad
    /// one stops the worker at start, naming it).
    fn material(&self) -> anyhow::Result<Option<ClientTlsMaterial>> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let ca = Pem::file("--tls-ca", ca);
        ca.certificates()?;
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let (cert, key) = (Pem::file("--tls-cert", cert), Pem::file("--tls-key", key));
                cert.certificates()?;
                key.private_key()?;
                Some((cert, key))
            }
            _ => None,
        };
        Ok(Some(ClientTlsMaterial {
            ca,
            identity,
            server_name: self.tls_server_name.clone(),
        }))
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    sched: ConfigArgs,
    /// Scheduler workers, split between the online and batch pools.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    kube: kube_cmd::ClusterArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    seed: SeedArgs,
    /// Coordinator and workers over mutual TLS on loopback, with a CA and
    /// certificates made in memory for this run (what `coordinator
    /// --tls-cert` and `worker --tls-ca` do across processes).
    #[arg(long)]
    tls: bool,
}

#[derive(Args, Debug)]
struct CoordinatorArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    sched: ConfigArgs,
    /// gRPC listen address. Plaintext only on loopback, unless --insecure;
    /// elsewhere give --tls-cert, --tls-key and --tls-client-ca.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    #[command(flatten)]
    tls: ServeTlsArgs,
    /// Workers to wait for before submitting pods.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    #[command(flatten)]
    report: ReportArgs,
    #[command(flatten)]
    kube: kube_cmd::ClusterArgs,
    #[command(flatten)]
    leader: kube_cmd::LeaderArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
}

#[derive(Args, Debug)]
struct WorkerArgs {
    #[command(flatten)]
    sched: ConfigArgs,
    /// Coordinator address (host:port, http://host:port, or
    /// https://host:port with --tls-ca); a comma-separated list names
    /// replicas, tried in order on (re)connect (the next 250 ms after the one
    /// before, without waiting for it to give up).
    #[arg(long, default_value = "127.0.0.1:7070")]
    coordinator: String,
    #[command(flatten)]
    tls: WorkerTlsArgs,
    /// Pool to serve.
    #[arg(long, value_enum, default_value_t = Class::Online)]
    class: Class,
    /// Name in logs and reports (default: <class>-<pid>).
    #[arg(long)]
    name: Option<String>,
    /// Keep trying to reach the coordinator this many seconds (at start, and
    /// after the connection breaks) before giving up with an error.
    #[arg(long, default_value_t = 60)]
    connect_timeout: u64,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    seed: SeedArgs,
}

fn load(args: &WorkloadArgs) -> anyhow::Result<Workload> {
    let on_bad = match args.on_bad_input {
        BadInput::Skip => OnBadInput::Skip,
        BadInput::Fail => OnBadInput::Fail,
    };
    if args.trace != Trace::Openb && (args.nodes.is_some() || args.pods.is_some()) {
        bail!("--nodes and --pods apply to --trace openb only");
    }
    if args.trace != Trace::K8s && args.cluster.is_some() {
        bail!("--cluster applies to --trace k8s only");
    }
    let w = match args.trace {
        Trace::Synthetic => synthetic::scheduling_basic(args.synthetic_nodes, args.synthetic_pods),
        Trace::PreemptionBasic => synthetic::preemption_basic(args.synthetic_nodes),
        Trace::Openb => {
            let dir = openb::default_openb_dir();
            let pick = |given: &Option<PathBuf>, file: &str| -> anyhow::Result<PathBuf> {
                match (given, &dir) {
                    (Some(p), _) => Ok(p.clone()),
                    (None, Some(d)) => Ok(d.join(file)),
                    (None, None) => bail!(
                        "--trace openb: no --nodes/--pods given and {} not found beside the project",
                        openb::OPENB_DATA_DIR
                    ),
                }
            };
            let nodes = pick(&args.nodes, openb::NODES_ALL_FILE)?;
            let pods = pick(&args.pods, openb::PODS_DEFAULT_FILE)?;
            workload::load_openb(&nodes, &pods, on_bad)?
        }
        Trace::K8s => {
            let Some(path) = &args.cluster else {
                bail!("--trace k8s needs --cluster FILE");
            };
            workload::load_k8s_list(path, on_bad)?
        }
    };
    let w = w.validate(on_bad)?;
    if w.nodes.is_empty() && w.pods.is_empty() {
        bail!(
            "the workload {:?} has no nodes and no pods: nothing to schedule",
            w.name
        );
    }
    if w.nodes.is_empty() {
        eprintln!("warning: the workload has no nodes: every pod will be unschedulable");
    }
    if w.pods.is_empty() {
        eprintln!("warning: the workload has no pods");
    }
    for warning in w.warnings.iter().take(20) {
        eprintln!("warning: skipped {warning}");
    }
    if w.warnings.len() > 20 {
        eprintln!(
            "warning: ... {} more skipped rows/objects",
            w.warnings.len() - 20
        );
    }
    Ok(w)
}

fn finish(report: &Report, args: &ReportArgs, placements: Option<&std::path::Path>) -> ExitCode {
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => match serde_json::to_string_pretty(report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    if let Some(p) = placements {
        eprintln!("placements written to {}", p.display());
    }
    if let Some(v) = report.checks.violation() {
        eprintln!("error: safety check failed: {v}");
        return ExitCode::from(EXIT_SAFETY);
    }
    if report.stopped_by_signal {
        // Drained on SIGINT/SIGTERM, as asked: not a failure.
        eprintln!(
            "stopped by a signal with {} pod(s) still pending",
            report.pending
        );
        return ExitCode::SUCCESS;
    }
    if report.timed_out {
        eprintln!(
            "error: timed out with {} pod(s) still pending",
            report.pending
        );
        return ExitCode::from(EXIT_TIMED_OUT);
    }
    ExitCode::SUCCESS
}

async fn run_job(
    workload: &WorkloadArgs,
    report_args: &ReportArgs,
    mut cfg: RunConfig,
) -> anyhow::Result<ExitCode> {
    cfg.stop = signal_token();
    let w = load(workload)?;
    if let Some(p) = &report_args.placements {
        // Fail now, not after the run, if the file cannot be written.
        std::fs::File::create(p)
            .with_context(|| format!("cannot write placements to {}", p.display()))?;
    }
    cfg.progress = !report_args.no_progress;
    cfg.timeout = Duration::from_secs(report_args.timeout);
    let placements = report_args.placements.clone();
    let (report, cluster) = run::run_embedded_with_cluster(w, cfg).await?;
    if let Some(p) = &placements {
        report::write_placements(&cluster, p)
            .with_context(|| format!("writing placements to {}", p.display()))?;
    }
    Ok(finish(&report, report_args, placements.as_deref()))
}

async fn worker(args: WorkerArgs, sched: SchedulerConfig) -> anyhow::Result<ExitCode> {
    let class = match args.class {
        Class::Online => WorkloadClass::Online,
        Class::Batch => WorkloadClass::Batch,
    };
    let tls = args.tls.material()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut addrs = Vec::new();
    for one in args.coordinator.split(',').map(str::trim) {
        let addr = if one.contains("://") {
            one.to_owned()
        } else {
            format!("{scheme}://{one}")
        };
        if tls.is_some() && addr.starts_with("http://") {
            bail!(
                "--coordinator {one:?} is plaintext (http://) but --tls-ca asks for TLS: write https://"
            );
        }
        if tls.is_none() && addr.starts_with("https://") {
            bail!(
                "--coordinator {one:?}: https:// needs --tls-ca FILE (the CA that signed the \
                 coordinator's certificate), and --tls-cert/--tls-key when it verifies workers"
            );
        }
        let has_port = addr
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.trim_end_matches('/').parse::<u16>().is_ok());
        if !has_port {
            bail!("--coordinator {one:?}: give host:port, e.g. 127.0.0.1:7070");
        }
        addrs.push(addr);
    }
    let addr = addrs.join(",");
    let name = args
        .name
        .unwrap_or_else(|| format!("{class}-{}", std::process::id()));
    let mut cfg = WorkerConfig::new(&addr, &name, class).configured(&sched);
    cfg.connect_timeout = Duration::from_secs(args.connect_timeout);
    cfg.seed = args.seed.seed;
    cfg.tls = tls;
    let token = signal_token();
    let stats = Arc::new(WorkerStats::default());
    if let Some(addr) = &args.metrics.metrics_listen {
        let st = stats.clone();
        let ready: flotilla_shared::telemetry::Readiness = Arc::new(move || {
            if st.ready.load(std::sync::atomic::Ordering::Acquire) {
                Ok(())
            } else {
                Err("not registered with a coordinator (or its view not replayed yet)".into())
            }
        });
        let t = token.clone();
        let endpoint =
            flotilla_shared::telemetry::start(addr, ready, async move { t.cancelled().await })
                .await
                .with_context(|| format!("--metrics-listen {addr}"))?;
        eprintln!("serving /metrics, /healthz, /readyz on {}", endpoint.addr());
    }
    let result = sched_worker::run(cfg, &Registry::in_tree(), stats.clone(), token).await;
    let counter = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "worker {name}: {} attempts, {} bound, {} conflicts, {} reconnects",
        counter(&stats.attempts),
        counter(&stats.bound),
        counter(&stats.conflicts),
        counter(&stats.reconnects)
    );
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Loads the cluster for simulate/explain, from `--cluster FILE` or,
/// read-only, from a live API server; prints warnings, notes and a summary
/// on stderr. Bad objects are errors (exit 1).
async fn load_cluster(
    source: &kube_cmd::ReadSourceArgs,
) -> anyhow::Result<workload::ClusterObjects> {
    let objects = match (&source.cluster, source.live()) {
        (Some(path), _) => workload::load_cluster_objects(path, OnBadInput::Fail)?,
        (None, Some(live)) => {
            let (client, url) = flotilla_coordinator::cluster::kube::client(&live)
                .await
                .context("connecting to the Kubernetes API server")?;
            let read = workload::live::read_cluster(&client, &url).await?;
            for note in &read.notes {
                eprintln!("note: {note}");
            }
            read.objects
        }
        (None, None) => bail!("give --cluster FILE, --kubeconfig FILE, --in-cluster or --kube"),
    };
    for warning in &objects.warnings {
        eprintln!("warning: {warning}");
    }
    eprintln!("{}", simulate::output::summary(&objects));
    Ok(objects)
}

async fn simulate_cmd(args: &SimulateArgs, sched: &SchedulerConfig) -> anyhow::Result<ExitCode> {
    let objects = load_cluster(&args.source).await?;
    let sim = simulate::simulate_with(
        &objects,
        &sched.profiles,
        &Registry::in_tree(),
        &simulate::Options {
            extenders: &sched.extenders,
            seed: args.seed.seed,
        },
    )?;
    for note in &sim.notes {
        eprintln!("note: {note}");
    }
    for s in &sim.skipped {
        eprintln!("skipped: pod {}: {}", s.pod, s.reason);
    }
    match args.output {
        SimulateOutput::Table => print!("{}", simulate::output::table(&sim)),
        SimulateOutput::Json => println!("{}", simulate::output::json(&sim.results)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// `explain`'s pod argument, checked on the command line (exit 2) rather
/// than after the cluster is loaded.
fn pod_name_arg(s: &str) -> Result<String, String> {
    simulate::parse_pod_key(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

async fn explain_cmd(args: &ExplainArgs, sched: &SchedulerConfig) -> anyhow::Result<ExitCode> {
    let objects = load_cluster(&args.source).await?;
    let e = simulate::explain_with(
        &objects,
        &sched.profiles,
        &Registry::in_tree(),
        &simulate::Options {
            extenders: &sched.extenders,
            seed: args.seed.seed,
        },
        &args.pod,
    )?;
    let source = match &args.source.cluster {
        Some(path) => path.display().to_string(),
        None => objects.name.clone(),
    };
    print!("{}", simulate::output::explain_text(&e, &source));
    Ok(ExitCode::SUCCESS)
}

/// A token cancelled by the first SIGINT (Ctrl-C) or SIGTERM (what the
/// kubelet sends a container it stops): every long-running command drains
/// on it (stops taking work, lets what is in flight settle) and exits.
pub(crate) fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    // The handlers are installed here, before the caller's start-up work
    // (loading a large workload can take seconds), so a signal during it is
    // caught and honoured once the run starts, instead of killing the
    // process without a report.
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        tokio::spawn(async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            t.cancel();
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        t.cancel();
    });
    token
}

/// The error and its causes joined by ": ", skipping a cause whose text the
/// message before it already contains (many errors quote their source).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The `--config` file, or upstream's defaults without one.
fn scheduler_config(path: Option<&Path>) -> Result<SchedulerConfig, ConfigError> {
    path.map_or_else(|| Ok(SchedulerConfig::default()), config::load_file)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let service = match &cli.command {
        Command::Run(_) => "flotilla-run",
        Command::Coordinator(_) => "flotilla-coordinator",
        Command::Worker(_) => "flotilla-worker",
        Command::Simulate(_) => "flotilla-simulate",
        Command::Explain(_) => "flotilla-explain",
        Command::Bench(_) => "flotilla-bench",
    };
    let config_path = match &cli.command {
        Command::Run(a) => a.sched.config.as_deref(),
        Command::Coordinator(a) => a.sched.config.as_deref(),
        Command::Worker(a) => a.sched.config.as_deref(),
        Command::Simulate(a) => a.sched.config.as_deref(),
        Command::Explain(a) => a.sched.config.as_deref(),
        Command::Bench(a) => a.sched.config.as_deref(),
    };
    // A bad configuration stops the process before anything starts.
    let sched = match scheduler_config(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !matches!(cli.command, Command::Coordinator(_))
        && let Err(e) = sched.build_global_thread_pool()
    {
        eprintln!(
            "error: cannot start {} scheduling threads: {e}",
            sched.parallelism
        );
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        // Logs on stderr, and spans over OTLP when OTEL_* asks for them
        // (flushed when the guard drops, at the end of the command).
        let _tracing = flotilla_shared::trace::init(service);
        match cli.command {
            Command::Run(a) if a.kube.source().is_some() => {
                let (serve, worker_tls) = loopback_tls(a.tls)?;
                kube_cmd::run(kube_cmd::LiveRun {
                    source: a.kube.source().expect("checked"),
                    workers: usize::from(a.workers),
                    listen: "127.0.0.1:0".into(),
                    serve,
                    worker_tls,
                    exit_when_idle: a.kube.exit_when_idle.map(Duration::from_secs),
                    leader: None,
                    json: a.report.output == Output::Json,
                    scheduler: sched,
                    metrics_listen: a.metrics.metrics_listen.clone(),
                    seed: a.seed.seed,
                })
                .await
            }
            Command::Coordinator(a)
                if kube_cmd::coordinator_source(&a.kube, &a.leader).is_some() =>
            {
                let serve = a.tls.options(&a.listen)?;
                kube_cmd::run(kube_cmd::LiveRun {
                    source: kube_cmd::coordinator_source(&a.kube, &a.leader).expect("checked"),
                    workers: 0,
                    listen: a.listen.clone(),
                    serve,
                    worker_tls: None,
                    exit_when_idle: a.kube.exit_when_idle.map(Duration::from_secs),
                    leader: a.leader.leader_elect.then(|| a.leader.clone()),
                    json: a.report.output == Output::Json,
                    scheduler: sched,
                    metrics_listen: a.metrics.metrics_listen.clone(),
                    seed: None,
                })
                .await
            }
            Command::Run(a) => {
                kube_cmd::check_embedded(&a.kube, None)?;
                let n = usize::from(a.workers);
                let (serve, worker_tls) = loopback_tls(a.tls)?;
                let cfg = RunConfig {
                    serve,
                    worker_tls,
                    in_process_workers: n,
                    expect_workers: n,
                    scheduler: sched,
                    grace_period: a.workload.grace_period,
                    metrics_listen: a.metrics.metrics_listen.clone(),
                    seed: a.seed.seed,
                    ..RunConfig::default()
                };
                run_job(&a.workload, &a.report, cfg).await
            }
            Command::Coordinator(a) => {
                kube_cmd::check_embedded(&a.kube, Some(&a.leader))?;
                let cfg = RunConfig {
                    in_process_workers: 0,
                    expect_workers: usize::from(a.workers),
                    listen: a.listen.clone(),
                    serve: a.tls.options(&a.listen)?,
                    scheduler: sched,
                    grace_period: a.workload.grace_period,
                    metrics_listen: a.metrics.metrics_listen.clone(),
                    ..RunConfig::default()
                };
                run_job(&a.workload, &a.report, cfg).await
            }
            Command::Worker(a) => worker(a, sched).await,
            Command::Simulate(a) => simulate_cmd(&a, &sched).await,
            Command::Explain(a) => explain_cmd(&a, &sched).await,
            Command::Bench(a) => bench_cmd::bench(&a, sched).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
