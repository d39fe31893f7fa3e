//! `flotilla bench`: one named scenario on the embedded cluster, measured
//! (`flotilla_loadtest::bench`), printed as text or one JSON object, with an
//! SVG chart beside it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use flotilla_loadtest::bench::scenarios::{self, ScenarioName, ScenarioParams};
use flotilla_loadtest::bench::{self, BenchConfig};
use flotilla_scheduler::config::SchedulerConfig;

use crate::{EXIT_SAFETY, EXIT_TIMED_OUT, Output};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The scenario: scheduling-basic, scheduling-basic-50k,
    /// pod-anti-affinity, topology-spreading, mixed-churn,
    /// preemption-basic, unschedulable, openb, godel-30k, dlrm (docs/benchmarks.md
    /// describes each).
    #[arg(long, value_name = "NAME")]
    pub scenario: ScenarioName,
    #[command(flatten)]
    pub sched: crate::ConfigArgs,
    /// Scheduler workers, split between the online and batch pools.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// The in-house baseline: one worker and no bind arbitration (the
    /// coordinator writes whatever the worker decided, as a lone
    /// kube-scheduler binds).
    #[arg(long, conflicts_with = "workers")]
    pub single_scheduler: bool,
    /// Multiply every node and pod count (0.01 for a quick look).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
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
    #[arg(long, value_name = "FILE")]
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
}

/// Runs `flotilla bench`.
pub async fn bench(args: &BenchArgs, sched: SchedulerConfig) -> anyhow::Result<ExitCode> {
    let scenario = scenarios::build(
        args.scenario,
        &ScenarioParams {
            scale: args.scale,
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
    };
    let chart = (!args.no_chart).then(|| {
        args.chart.clone().unwrap_or_else(|| {
            let suffix = if args.single_scheduler {
                "single".to_owned()
            } else {
                format!("{}w", args.workers)
            };
            PathBuf::from("target/bench").join(format!("{}-{suffix}.svg", args.scenario))
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
