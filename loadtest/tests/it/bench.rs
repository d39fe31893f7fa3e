//! `flotilla_loadtest::bench`: scenarios at small scale run to the end and
//! their figures agree with the cluster's final state; the timeline
//! (arrivals, deletions, churn) is applied; the single-scheduler baseline
//! binds without arbitration.

use std::time::Duration;

use flotilla_loadtest::bench::scenarios::{self, ScenarioName, ScenarioParams};
use flotilla_loadtest::bench::{BenchConfig, BenchError, run_bench};
use flotilla_loadtest::run::run_embedded_full;
use flotilla_loadtest::workload::{Op, TimedOp, Workload};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{test_run, within};

fn params(scale: f64) -> ScenarioParams {
    ScenarioParams {
        scale,
        ..ScenarioParams::default()
    }
}

/// `godel-30k` at `scale`, pods offered at `rate` per second.
fn godel_at(scale: f64, rate: f64) -> scenarios::Scenario {
    scenarios::build(
        ScenarioName::Godel30k,
        &ScenarioParams {
            scale,
            rate,
            ..ScenarioParams::default()
        },
    )
    .expect("built")
}

fn cfg(workers: usize) -> BenchConfig {
    BenchConfig {
        workers,
        timeout: Duration::from_secs(60),
        ..BenchConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_basic_measures_only_the_pods_after_the_init_barrier() {
    // 100 nodes, 20 init pods, 200 measured pods.
    let s = scenarios::build(ScenarioName::SchedulingBasic, &params(0.02)).expect("built");
    assert_eq!((s.init_pods, s.measured_pods), (20, 200));
    assert_eq!(s.workload.nodes.len(), 100);
    let r = within(Duration::from_secs(90), "bench", run_bench(s, &cfg(2)))
        .await
        .expect("ran");
    assert_eq!(r.scenario, "scheduling-basic");
    assert_eq!(
        (r.pods, r.init_pods, r.scheduled),
        (200, 20, 200),
        "{}",
        r.to_text()
    );
    assert_eq!(r.checks.pods_bound_by_flotilla, 220, "init pods bound too");
    assert_eq!(r.checks.bindings_written, 220);
    assert_eq!(r.checks.overcommitted_nodes, 0);
    assert!(r.pods_per_second_avg > 0.0);
    // Pigeonhole: the busiest window holds at least its share of the
    // pods. (Not `peak >= avg`: the windows cover a little more than the
    // phase, up to a third more when it is shorter than 100 ms and the
    // windows are at their 10 ms floor.)
    #[allow(clippy::cast_precision_loss)]
    let windows = r.throughput.windows.len() as f64;
    assert!(
        r.pods_per_second_peak * r.throughput.window_seconds * windows >= 200.0 - 1e-6,
        "{}",
        r.to_text()
    );
    let counted: f64 = r
        .throughput
        .windows
        .iter()
        .map(|w| w.pods_per_second * r.throughput.window_seconds)
        .sum();
    assert!(
        (counted - 200.0).abs() < 1e-6,
        "windows count every measured bind: {counted}"
    );
    assert!(r.latency_ms.p50 <= r.latency_ms.p99 && r.latency_ms.p99 <= r.latency_ms.max);
    // One Binding and one Scheduled event per pod.
    assert!(
        (r.api_writes_per_pod - 2.0).abs() < 1e-9,
        "{}",
        r.api_writes_per_pod
    );
    assert_eq!(r.upstream_floor_pods_per_second, Some(680.0));
    let svg = r.chart_svg().expect("chart");
    assert!(svg.contains("scheduling-basic, 2 workers, sharded"));
    let json = serde_json::to_value(&r).expect("json");
    for key in [
        "scenario",
        "workers",
        "pods",
        "podsPerSecondAvg",
        "podsPerSecondPeak",
        "latencyMs",
        "conflictFraction",
        "peakRssBytes",
        "attemptsPerPod",
        "cpuSecondsPer1000Pods",
        "apiWritesPerPod",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    for p in ["p50", "p90", "p99"] {
        assert!(json["latencyMs"][p].is_f64(), "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_runs_beside_the_measured_pods_and_stops_after_them() {
    // 50 nodes, 100 measured pods; a zero-capacity node and a 9-CPU pod
    // recreated every second.
    let s = scenarios::build(ScenarioName::MixedChurn, &params(0.01)).expect("built");
    assert_eq!((s.init_pods, s.measured_pods), (0, 100));
    let r = within(Duration::from_secs(90), "bench", run_bench(s, &cfg(1)))
        .await
        .expect("ran");
    assert_eq!(r.scheduled, 100, "{}", r.to_text());
    // The churn pod of the first tick fits nowhere (9 CPU on 4-CPU nodes).
    assert!(r.unschedulable >= 1, "{}", r.to_text());
    assert!(
        !r.timed_out,
        "the churn stops once the measured pods are done"
    );
    assert!(r.wall_seconds < 30.0, "{}", r.wall_seconds);
    assert!(r.timeline_errors.is_empty(), "{:?}", r.timeline_errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_offered_at_a_rate_are_bound_no_faster_than_offered() {
    // 300 nodes, 1,000 pods offered at 2,000 pods/s: 0.5 s of arrivals.
    let s = godel_at(0.01, 2000.0);
    assert_eq!((s.workload.nodes.len(), s.measured_pods), (300, 1000));
    assert!(
        s.workload.pods.is_empty(),
        "every pod arrives on the timeline"
    );
    let r = within(Duration::from_secs(90), "bench", run_bench(s, &cfg(2)))
        .await
        .expect("ran");
    assert_eq!(r.scheduled, 1000, "{}", r.to_text());
    // The last pod arrives at 0.4995 s: the phase cannot be shorter.
    assert!(r.throughput.duration_seconds >= 0.499, "{}", r.to_text());
    assert!(r.pods_per_second_avg <= 2002.0, "{}", r.to_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_not_yet_offered_when_the_run_times_out_count_pending() {
    // 1,000 pods offered at 10 pods/s, a 2 s timeout: most are never
    // created, and every measured pod is still accounted for.
    let s = godel_at(0.01, 10.0);
    let quick = BenchConfig {
        timeout: Duration::from_secs(2),
        ..cfg(1)
    };
    let r = within(Duration::from_secs(60), "bench", run_bench(s, &quick))
        .await
        .expect("ran");
    assert!(r.timed_out, "{}", r.to_text());
    assert!(r.scheduled < 100, "{}", r.to_text());
    assert_eq!(
        r.scheduled + r.unschedulable + r.pending,
        1000,
        "{}",
        r.to_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_without_a_profile_for_the_scenario_pods_is_refused() {
    let s = scenarios::build(ScenarioName::SchedulingBasic, &params(0.01)).expect("built");
    let mut other = cfg(1);
    for p in &mut other.scheduler.profiles {
        p.scheduler_name = "my-scheduler".to_owned();
    }
    let e = run_bench(s, &other).await.unwrap_err();
    assert!(matches!(e, BenchError::NoProfileForPods { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("default-scheduler"), "{msg}");
    assert!(msg.contains("my-scheduler"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_single_scheduler_baseline_is_one_worker_without_arbitration() {
    let s = scenarios::build(ScenarioName::SchedulingBasic, &params(0.01)).expect("built");
    let two = BenchConfig {
        single_scheduler: true,
        ..cfg(2)
    };
    assert!(matches!(
        run_bench(s.clone(), &two).await,
        Err(BenchError::SingleSchedulerWorkers(2))
    ));
    let one = BenchConfig {
        single_scheduler: true,
        ..cfg(1)
    };
    let r = within(Duration::from_secs(90), "bench", run_bench(s, &one))
        .await
        .expect("ran");
    assert_eq!(r.mode, "single-scheduler");
    assert_eq!(r.scheduled, 100, "{}", r.to_text());
    assert_eq!(r.conflict_fraction, 0.0);
    assert_eq!(
        r.checks.overcommitted_nodes, 0,
        "one worker never over-commits"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_ops_create_and_delete_in_time_order() {
    // One node with room for one pod: `a` is bound, deleted at 300 ms,
    // and `b` (arriving at 100 ms, unschedulable until then) takes its room.
    let ms = Duration::from_millis;
    let workload = Workload {
        name: "timeline".into(),
        nodes: vec![
            NodeBuilder::new("n1")
                .cpu("1")
                .memory("1Gi")
                .pods(110)
                .build(),
        ],
        timeline: vec![
            TimedOp {
                at: ms(300),
                op: Op::DeletePod {
                    namespace: "default".into(),
                    name: "a".into(),
                },
                background: false,
            },
            TimedOp {
                at: ms(0),
                op: Op::CreatePod(Box::new(PodBuilder::new("a").cpu("1").build())),
                background: false,
            },
            TimedOp {
                at: ms(100),
                op: Op::CreatePod(Box::new(PodBuilder::new("b").cpu("1").build())),
                background: false,
            },
            TimedOp {
                at: ms(200),
                op: Op::DeletePod {
                    namespace: "default".into(),
                    name: "missing".into(),
                },
                background: false,
            },
        ],
        ..Workload::default()
    };
    let mut cfg = test_run(1, flotilla_scheduler::config::SchedulerConfig::default());
    cfg.bind_log = true;
    let started = std::time::Instant::now();
    let out = within(
        Duration::from_secs(60),
        "run",
        run_embedded_full(workload, cfg),
    )
    .await
    .expect("ran");
    let log = out.coordinator.bind_log();
    let names: Vec<&str> = log.iter().map(|b| &*b.pod.name).collect();
    assert_eq!(names, ["a", "b"], "a first, b once a is gone");
    assert!(log[1].bound_at.duration_since(started) >= ms(300));
    let pods = out.cluster.pods();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].metadata.name.as_deref(), Some("b"));
    assert_eq!(out.timeline_errors.len(), 1, "{:?}", out.timeline_errors);
    assert!(
        out.timeline_errors[0].contains("missing"),
        "{:?}",
        out.timeline_errors
    );
}

#[test]
fn scenario_parameters_and_names_are_checked() {
    for bad in [0.0, -1.0, f64::NAN, 11.0] {
        let e = scenarios::build(ScenarioName::SchedulingBasic, &params(bad)).unwrap_err();
        assert!(e.to_string().contains("--scale"), "{e}");
    }
    let e = scenarios::build(
        ScenarioName::Godel30k,
        &ScenarioParams {
            rate: 0.5,
            ..ScenarioParams::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("--rate"), "{e}");
    let e = "scheduling-basics".parse::<ScenarioName>().unwrap_err();
    assert!(e.contains("scheduling-basic, scheduling-basic-50k"), "{e}");
    for n in ScenarioName::ALL {
        assert_eq!(n.as_str().parse::<ScenarioName>(), Ok(n));
    }
    let e = scenarios::build(
        ScenarioName::Openb,
        &ScenarioParams {
            openb_dir: Some("/nonexistent".into()),
            ..ScenarioParams::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent"), "{e}");
    // The openb trace is replayed whole: a scale is refused, not ignored.
    let e = scenarios::build(ScenarioName::Openb, &params(0.05)).unwrap_err();
    assert!(e.to_string().contains("--scale 0.05"), "{e}");
    assert!(e.to_string().contains("cannot be scaled"), "{e}");
}

/// The DLRM trace's folder beside the project, or `None` with a message
/// (the data is not in the repository).
fn dlrm_dir() -> Option<std::path::PathBuf> {
    let d = flotilla_loadtest::workload::dlrm::default_dlrm_dir();
    if d.is_none() {
        eprintln!("skipped: ../shared/data/alibaba-gpu-v2025-dlrm not found beside the project");
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlrm_sample_replays_with_every_app_within_its_cap_and_no_node_overcommitted() {
    let Some(dir) = dlrm_dir() else { return };
    // 2 % of the trace (145 init pods, ~332 arrivals), the 31 days in ~4 s.
    let s = scenarios::build(
        ScenarioName::Dlrm,
        &ScenarioParams {
            scale: 0.02,
            speedup: 700_000.0,
            dlrm_dir: Some(dir),
            ..ScenarioParams::default()
        },
    )
    .expect("built");
    assert_eq!(s.plugins, ["MaxInstancesPerNode"]);
    assert_eq!(s.init_pods, 145, "2 % of 7,280: {}", s.description);
    assert!(s.measured_pods > 300, "{}", s.description);
    let sched = s.configure(flotilla_scheduler::config::SchedulerConfig::default());
    assert!(
        sched.profiles[0]
            .plugins
            .multi_point
            .enabled
            .iter()
            .any(|p| p.name == "MaxInstancesPerNode")
    );
    let r = within(Duration::from_secs(120), "bench", run_bench(s, &cfg(2)))
        .await
        .expect("ran");
    assert!(!r.timed_out, "{}", r.to_text());
    assert!(r.timeline_errors.is_empty(), "{:?}", r.timeline_errors);
    assert_eq!(r.checks.overcommitted_nodes, 0, "{}", r.to_text());
    assert_eq!(r.checks.over_instance_cap_nodes, 0, "{}", r.to_text());
    assert_eq!(r.checks.violation(), None);
    assert!(r.scheduled > 0, "{}", r.to_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_cap_holds_in_the_final_state_of_a_dense_app() {
    // Ten pods of one app capped at 2 per node on five nodes: exactly two
    // per node. Without the cap the big node would take most of them
    // (least allocated); with 2 workers the arbiter keeps the cap.
    use flotilla_shared::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE;
    let nodes = (0..5)
        .map(|i| {
            NodeBuilder::new(&format!("n{i}"))
                .cpu(if i == 0 { "8" } else { "500m" })
                .memory("8Gi")
                .pods(110)
                .build()
        })
        .collect();
    let pods = (0..10)
        .map(|i| {
            PodBuilder::new(&format!("p{i}"))
                .cpu("100m")
                .label("app", "dense")
                .label(
                    "flotilla.io/workload-class",
                    if i % 2 == 0 { "online" } else { "batch" },
                )
                .annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, "2")
                .build()
        })
        .collect();
    let workload = Workload {
        name: "dense".into(),
        nodes,
        pods,
        ..Workload::default()
    };
    let mut sched = flotilla_scheduler::config::SchedulerConfig::default();
    sched.profiles[0].plugins.multi_point.enabled.push(
        flotilla_scheduler::framework::PluginRef::new("MaxInstancesPerNode", 0),
    );
    let cfg = flotilla_loadtest::run::RunConfig {
        in_process_workers: 2,
        expect_workers: 2,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(300),
        scheduler: sched,
        ..flotilla_loadtest::run::RunConfig::default()
    };
    let out = within(
        Duration::from_secs(90),
        "run",
        run_embedded_full(workload, cfg),
    )
    .await
    .expect("ran");
    assert_eq!(out.report.scheduled, 10, "{}", out.report.to_text());
    assert_eq!(out.report.checks.over_instance_cap_nodes, 0);
    let mut per_node = std::collections::HashMap::<String, usize>::new();
    for p in out.cluster.pods() {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(n).or_default() += 1;
        }
    }
    assert_eq!(per_node.len(), 5, "{per_node:?}");
    assert!(per_node.values().all(|&c| c == 2), "{per_node:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_volume_scenarios_bind_every_pod_with_its_claims() {
    // csi-pvs: 50 nodes, 50 init + 50 measured pods, each with a bound CSI
    // claim; wffc-pvs: 50 nodes, 10 init + 50 measured pods, each claim
    // provisioned at PreBind.
    for (name, init) in [(ScenarioName::CsiPvs, 50), (ScenarioName::WffcPvs, 10)] {
        let s = scenarios::build(name, &params(0.01)).expect("built");
        assert_eq!((s.init_pods, s.measured_pods), (init, 50), "{name}");
        let claims = s
            .workload
            .volumes
            .iter()
            .filter(|v| matches!(v, flotilla_shared::volumes::VolumeObject::Claim(_)))
            .count();
        assert_eq!(claims, if init == 50 { 100 } else { 50 }, "{name}");
        let r = within(Duration::from_secs(90), "bench", run_bench(s, &cfg(2)))
            .await
            .expect("ran");
        assert_eq!((r.pods, r.scheduled), (50, 50), "{name}: {}", r.to_text());
        assert_eq!(r.checks.overcommitted_nodes, 0, "{name}");
        assert_eq!(
            r.checks.bindings_written, r.checks.pods_bound_by_flotilla as u64,
            "{name}"
        );
    }
}
