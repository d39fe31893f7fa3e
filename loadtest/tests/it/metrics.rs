//! The Prometheus metrics a run records (kube-scheduler's names and
//! labels, and Flotilla's), read from the process registry after a run of a
//! profile no other test uses, so its counts are this run's alone.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_loadtest::run::RunConfig;
use flotilla_loadtest::workload::Workload;
use flotilla_scheduler::config;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{run_to_end, test_run};

const PROFILE: &str = "metrics-test-scheduler";

/// Samples of the text exposition: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include every one of
/// `labels` (`key="value"`).
fn sum(s: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    s.iter()
        .filter(|(k, _)| {
            k.split_once('{').map_or(k.as_str() == name, |(n, rest)| {
                n == name && labels.iter().all(|l| rest.contains(l))
            })
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_records_kube_scheduler_and_omega_metrics() {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: {PROFILE}\n"
    );
    let scheduler = config::parse(&yaml, "metrics.yaml").expect("valid configuration");
    let mut pods = Vec::new();
    for i in 0..40 {
        let mut p = PodBuilder::new(&format!("m-{i}")).cpu("100m").build();
        p.spec.as_mut().expect("spec").scheduler_name = Some(PROFILE.into());
        pods.push(p);
    }
    for i in 0..2 {
        let mut p = PodBuilder::new(&format!("huge-{i}")).cpu("64").build();
        p.spec.as_mut().expect("spec").scheduler_name = Some(PROFILE.into());
        pods.push(p);
    }
    let workload = Workload {
        name: "metrics".into(),
        nodes: (0..10)
            .map(|i| {
                NodeBuilder::new(&format!("n{i}"))
                    .cpu("4")
                    .memory("16Gi")
                    .pods(110)
                    .build()
            })
            .collect(),
        pods,
        ..Default::default()
    };
    let cfg = RunConfig {
        settle: Duration::from_millis(300),
        metrics_listen: Some("127.0.0.1:0".into()),
        ..test_run(2, scheduler)
    };
    let (report, _) = run_to_end(workload, cfg, "the metrics run").await;
    assert_eq!((report.scheduled, report.unschedulable), (40, 2));

    let text = flotilla_shared::metrics::render();
    let s = samples(&text);
    let profile = format!("profile=\"{PROFILE}\"");
    assert_eq!(
        sum(
            &s,
            "scheduler_schedule_attempts_total",
            &[&profile, "result=\"scheduled\""]
        ),
        40.0,
        "one scheduled attempt per bound pod"
    );
    assert!(
        sum(
            &s,
            "scheduler_schedule_attempts_total",
            &[&profile, "result=\"unschedulable\""]
        ) >= 2.0
    );
    assert_eq!(
        sum(
            &s,
            "scheduler_scheduling_attempt_duration_seconds_count",
            &[&profile, "result=\"scheduled\""]
        ),
        40.0
    );
    for point in ["PreFilter", "Filter"] {
        assert!(
            sum(
                &s,
                "scheduler_framework_extension_point_duration_seconds_count",
                &[&profile, &format!("extension_point=\"{point}\"")]
            ) >= 42.0,
            "{point}: every attempt"
        );
    }
    assert!(
        sum(
            &s,
            "scheduler_framework_extension_point_duration_seconds_count",
            &[&profile, "extension_point=\"Bind\"", "status=\"Success\""]
        ) >= 40.0,
        "the coordinator times each Binding"
    );
    assert!(
        sum(
            &s,
            "scheduler_framework_extension_point_duration_seconds_count",
            &[&profile, "extension_point=\"PostFilter\""]
        ) >= 2.0,
        "preemption ran for the pods that fit nowhere"
    );
    for name in [
        "scheduler_pending_pods",
        "scheduler_cache_size",
        "scheduler_pod_scheduling_attempts_count",
        "scheduler_pod_scheduling_sli_duration_seconds_count",
        "scheduler_plugin_execution_duration_seconds_count",
        "flotilla_bind_proposals_total",
        "flotilla_scheduler_busy_seconds_total",
        "flotilla_pod_attempts_count",
        "flotilla_pods_bound_total",
        "flotilla_dispatched_pods_total",
    ] {
        assert!(
            s.keys().any(|k| k.starts_with(name)),
            "{name} is exported:\n{text}"
        );
    }
    assert!(sum(&s, "flotilla_api_writes_total", &["kind=\"binding\""]) >= 40.0);
    assert!(sum(&s, "flotilla_bind_proposals_total", &["outcome=\"bound\""]) >= 40.0);
    assert!(
        text.contains("# TYPE scheduler_scheduling_attempt_duration_seconds histogram"),
        "histograms keep their type"
    );
}
