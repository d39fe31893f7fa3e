//! `flotilla bench`: one named scenario on the embedded cluster, measured
//! (`flotilla_loadtest::bench`), printed as text or one JSON object, with an
//! SVG chart beside it; or, with `--kubeconfig`, against a real API server
//! (`flotilla_loadtest::bench::api`), optionally beside upstream
//! kube-scheduler (`--upstream-scheduler`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use flotilla_coordinator::cluster::kube::{self as kube_backend, ConfigSource};
use flotilla_coordinator::cluster::ratelimit::RateLimit;
use flotilla_loadtest::bench::api::{self, ApiBenchConfig, UpstreamScheduler};
use flotilla_loadtest::bench::scenarios::{self, ScenarioName, ScenarioParams};
use flotilla_loadtest::bench::{self, BenchConfig};
use flotilla_scheduler::config::SchedulerConfig;

use crate::{EXIT_SAFETY, EXIT_TIMED_OUT, Output};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The scenario: scheduling-basic, scheduling-basic-50k,
    /// pod-anti-affinity, topology-spreading, mixed-churn,
    /// preemption-basic, unschedulable, openb, godel-30k, dlrm, kube-lab,
    /// csi-pvs, wffc-pvs (docs/benchmarks.md describes each); or fgd, the
    /// FGD paper's GPU-sharing experiment (unallocated GPU % per policy:
    /// --pods, --policy, --seeds, --tune, --csv; the plot goes to --chart).
    #[arg(long, value_name = "NAME")]
    pub scenario: BenchScenario,
    /// fgd: the openb pod list (default: the `default` trace beside the
    /// project; give a variant's file, e.g. openb_pod_list_gpushare40.csv).
    #[arg(long, value_name = "FILE")]
    pub pods: Option<PathBuf>,
    /// fgd: a GPU policy to run (repeat for several; default the paper's
    /// six and Flotilla's): random, dotprod, clustering, packing, bestfit,
    /// fgd, flotilla, or the paper's names (01-Random ... 07-Flotilla).
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// fgd: the seeds, as "42-51" or "42,45,50-51".
    #[arg(long, default_value = "42-51")]
    pub seeds: String,
    /// fgd: GPU demand the pod stream is tuned to, as a multiple of the
    /// cluster's GPUs (the paper's 1.3).
    #[arg(long, default_value_t = flotilla_loadtest::bench::fgd::DEFAULT_TUNE)]
    pub tune: f64,
    /// fgd: write the allocation curves here in the authors' CSV layout
    /// (workload, sc_policy, tune, seed, total_gpus, 0..130).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub sched: crate::ConfigArgs,
    /// Scheduler workers, split between the online and batch pools.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// The in-house baseline: one worker and no bind arbitration (the
    /// coordinator writes whatever the worker decided, as a lone
    /// kube-scheduler binds).
    #[arg(long, conflicts_with_all = ["workers", "kubeconfig"])]
    pub single_scheduler: bool,
    /// Multiply every node and pod count (0.01 for a quick look; not openb, a fixed trace). Default
    /// 1; with --kubeconfig 0.1, except kube-lab and openb (1).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Run against the API server of this kubeconfig (its current
    /// context) instead of the embedded cluster: create the scenario's
    /// Nodes and Pods, start Flotilla, measure until every pod is bound,
    /// clean up. Scenarios without churn, PriorityClasses, budgets or
    /// PodGroups only.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: client-side limit on the schedulers' API writes,
    /// requests per second, as kube-scheduler's --kube-api-qps (default
    /// its default, 50; 0: Flotilla unlimited).
    #[arg(long, requires = "kubeconfig")]
    pub qps: Option<f64>,
    /// With --kubeconfig: the limit's burst, as kube-scheduler's
    /// --kube-api-burst (default 100).
    #[arg(long, requires = "kubeconfig")]
    pub burst: Option<u32>,
    /// With --kubeconfig: afterwards run the same scenario again under this
    /// kube-scheduler binary (schedulerName default-scheduler, the same
    /// --kube-api-qps/--kube-api-burst) and report both side by side.
    #[arg(long, value_name = "PATH", requires = "kubeconfig")]
    pub upstream_scheduler: Option<PathBuf>,
    /// The kubeconfig kube-scheduler uses (default: --kubeconfig).
    #[arg(long, value_name = "FILE", requires = "upstream_scheduler")]
    pub upstream_kubeconfig: Option<PathBuf>,
    /// Pods per second offered by godel-30k.
    #[arg(long, default_value_t = 5000.0)]
    pub rate: f64,
    /// Directory of the openb CSV files (default: beside the project).
    #[arg(long, value_name = "DIR")]
    pub openb_dir: Option<PathBuf>,
    /// Directory of the DLRM trace (default: beside the project).
    #[arg(long, value_name = "DIR")]
    pub dlrm_dir: Option<PathBuf>,
    /// Trace seconds per wall second of the dlrm replay (100,000: the 31
    /// days of arrivals in about 27 s).
    #[arg(long, default_value_t = flotilla_loadtest::workload::dlrm::DEFAULT_SPEEDUP)]
    pub speedup: f64,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Write the chart (throughput over time, latency CDF) here; default
    /// `target/bench/<scenario>-<N>w.svg` (`-single` for the baseline).
    /// No chart with --kubeconfig.
    #[arg(long, value_name = "FILE", conflicts_with = "kubeconfig")]
    pub chart: Option<PathBuf>,
    /// Do not write the chart.
    #[arg(long, conflicts_with = "chart")]
    pub no_chart: bool,
    /// Give up after this many seconds; unresolved pods count pending.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Hide the progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Coordinator and workers over mutual TLS on loopback, with a CA and
    /// certificates made in memory for the run (to compare with plaintext).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub tls: bool,
}

/// What `--scenario` names: a throughput scenario, or the FGD experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchScenario {
    /// A scenario measured for speed ([`ScenarioName`]).
    Throughput(ScenarioName),
    /// The FGD paper's GPU-sharing experiment.
    Fgd,
}

impl std::str::FromStr for BenchScenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "fgd" {
            return Ok(BenchScenario::Fgd);
        }
        s.parse()
            .map(BenchScenario::Throughput)
            .map_err(|e: String| format!("{e}, fgd"))
    }
}

/// Runs `flotilla bench`.
pub async fn bench(args: &BenchArgs, sched: SchedulerConfig) -> anyhow::Result<ExitCode> {
    let scenario_name = match args.scenario {
        BenchScenario::Fgd => return fgd_bench(args),
        BenchScenario::Throughput(n) => n,
    };
    anyhow::ensure!(
        args.pods.is_none() && args.policies.is_empty() && args.csv.is_none(),
        "--pods, --policy and --csv belong to --scenario fgd"
    );
    if let Some(kubeconfig) = &args.kubeconfig {
        return api_bench(args, kubeconfig, sched).await;
    }
    let scenario = scenarios::build(
        scenario_name,
        &ScenarioParams {
            scale: args.scale.unwrap_or(1.0),
            rate: args.rate,
            openb_dir: args.openb_dir.clone(),
            dlrm_dir: args.dlrm_dir.clone(),
            speedup: args.speedup,
        },
    )?;
    let cfg = BenchConfig {
        workers: usize::from(args.workers),
        single_scheduler: args.single_scheduler,
        timeout: Duration::from_secs(args.timeout),
        progress: !args.no_progress,
        scheduler: sched,
        tls: args.tls,
    };
    let chart = (!args.no_chart).then(|| {
        args.chart.clone().unwrap_or_else(|| {
            let suffix = if args.single_scheduler {
                "single".to_owned()
            } else {
                format!("{}w", args.workers)
            };
            PathBuf::from("target/bench").join(format!("{scenario_name}-{suffix}.svg"))
        })
    });
    if let Some(path) = &chart
        && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
    {
        // Fail now, not after the run.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {} for the chart", dir.display()))?;
    }
    let report = bench::run_bench(scenario, &cfg).await?;
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(path) = &chart {
        let svg = report.chart_svg()?;
        std::fs::write(path, svg)
            .with_context(|| format!("writing the chart to {}", path.display()))?;
        eprintln!("chart written to {}", path.display());
    }
    if let Some(v) = report.checks.violation() {
        eprintln!("error: safety check failed: {v}");
        return Ok(ExitCode::from(EXIT_SAFETY));
    }
    if report.timed_out {
        eprintln!(
            "error: timed out with {} pod(s) still pending",
            report.pending
        );
        return Ok(ExitCode::from(EXIT_TIMED_OUT));
    }
    Ok(ExitCode::SUCCESS)
}

/// `flotilla bench --kubeconfig`: the scenario against a real API server.
async fn api_bench(
    args: &BenchArgs,
    kubeconfig: &std::path::Path,
    sched: SchedulerConfig,
) -> anyhow::Result<ExitCode> {
    let BenchScenario::Throughput(scenario_name) = args.scenario else {
        anyhow::bail!("--scenario fgd runs in-process: no --kubeconfig");
    };
    let default_scale = if matches!(scenario_name, ScenarioName::KubeLab | ScenarioName::Openb) {
        1.0
    } else {
        0.1
    };
    let scenario = scenarios::build(
        scenario_name,
        &ScenarioParams {
            scale: args.scale.unwrap_or(default_scale),
            rate: args.rate,
            openb_dir: args.openb_dir.clone(),
            dlrm_dir: args.dlrm_dir.clone(),
            speedup: args.speedup,
        },
    )?;
    let qps = args.qps.unwrap_or(api::DEFAULT_LIMIT.qps);
    anyhow::ensure!(
        qps.is_finite() && qps >= 0.0,
        "--qps {qps}: must be 0 (no limit) or more"
    );
    let limit = (qps > 0.0).then(|| RateLimit {
        qps,
        burst: args.burst.unwrap_or(api::DEFAULT_LIMIT.burst).max(1),
    });
    let source = ConfigSource::Kubeconfig(kubeconfig.to_path_buf());
    let (client, url) = kube_backend::client(&source)
        .await
        .context("connecting to the Kubernetes API server")?;
    let cfg = ApiBenchConfig {
        client,
        url,
        workers: usize::from(args.workers),
        limit,
        timeout: Duration::from_secs(args.timeout),
        scheduler: sched,
        upstream: args
            .upstream_scheduler
            .as_ref()
            .map(|binary| UpstreamScheduler {
                binary: binary.clone(),
                kubeconfig: args
                    .upstream_kubeconfig
                    .clone()
                    .unwrap_or_else(|| kubeconfig.to_path_buf()),
            }),
        progress: !args.no_progress,
        flotilla: crate::live::bench_starter(),
    };
    let report = api::run_api_bench(scenario, &cfg).await?;
    match args.output {
        Output::Text => print!("{}", report.to_text()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(v) = report.violation() {
        eprintln!("error: safety check failed: {v}");
        return Ok(ExitCode::from(EXIT_SAFETY));
    }
    if report.timed_out() {
        eprintln!("error: timed out with pod(s) still pending");
        return Ok(ExitCode::from(EXIT_TIMED_OUT));
    }
    Ok(ExitCode::SUCCESS)
}

/// `flotilla bench --scenario fgd`: the FGD paper's protocol through the
/// scheduler's plugins, for each policy; a table of unallocated GPU % at
/// 100 % and 130 % arrived, the CSV (`--csv`) and the plot (`--chart`).
fn fgd_bench(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    use flotilla_loadtest::bench::fgd;
    use flotilla_loadtest::workload::openb;
    use flotilla_shared::gpu::policy::Policy;

    let dir = match &args.openb_dir {
        Some(d) => d.clone(),
        None => openb::default_openb_dir()
            .context("the openb trace folder was not found beside the project: give --openb-dir")?,
    };
    let pods_csv = args
        .pods
        .clone()
        .unwrap_or_else(|| dir.join(openb::PODS_DEFAULT_FILE));
    let policies: Vec<Policy> = if args.policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        args.policies
            .iter()
            .map(|p| {
                p.parse::<Policy>()
                    .map_err(|e| anyhow::anyhow!("--policy: {e}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let seeds = fgd::parse_seeds(&args.seeds).map_err(|e| anyhow::anyhow!("--seeds: {e}"))?;
    anyhow::ensure!(
        args.tune.is_finite() && args.tune > 0.0,
        "--tune {}: must be a positive number",
        args.tune
    );
    // The paper's cluster: the GPU nodes only (§2.1).
    let w = openb::load_openb(
        &dir.join(openb::NODES_GPU_FILE),
        &pods_csv,
        flotilla_loadtest::workload::OnBadInput::Fail,
    )?;
    let nodes = fgd::with_paper_pod_slots(w.nodes);
    let workload = pods_csv
        .file_stem()
        .map(|s| {
            s.to_string_lossy()
                .trim_start_matches("openb_pod_list_")
                .to_owned()
        })
        .unwrap_or_default();
    let started = std::time::Instant::now();
    let results = fgd::run_policies(&nodes, &w.pods, &policies, &seeds, args.tune)?;
    eprintln!(
        "fgd: {} polic{} x {} seed(s) on {workload} in {:.1} s",
        policies.len(),
        if policies.len() == 1 { "y" } else { "ies" },
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
    let named: Vec<(&str, Vec<fgd::SeedCurve>)> = results
        .into_iter()
        .map(|(p, c)| (p.paper_name(), c))
        .collect();
    let summaries: Vec<_> = named.iter().map(|(p, c)| fgd::summarize(p, c)).collect();
    print!("{}", fgd::summary_table(&summaries));
    if let Some(path) = &args.csv {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        fgd::write_alloc_csv(std::io::BufWriter::new(file), &workload, &named)?;
        eprintln!("curves written to {}", path.display());
    }
    if !args.no_chart {
        let path = args
            .chart
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("target/bench/fgd-{workload}.svg")));
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let svg = fgd::render_alloc_svg(&format!("openb {workload}: unallocated GPU"), &named)?;
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
