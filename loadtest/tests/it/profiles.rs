//! A run with a two-profile `KubeSchedulerConfiguration`: the coordinator
//! serves both scheduler names (and dispatches one profile's pods to the
//! pool its `workloadClass` names), each worker runs the profile a pod
//! selects, and pods of other scheduler names are left alone.

use std::time::Duration;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::Workload;
use flotilla_scheduler::config;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{node_of, within};

const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
  - schedulerName: default-scheduler
  - schedulerName: tolerant-scheduler
    workloadClass: batch
    plugins:
      filter:
        disabled:
          - name: TaintToleration
"#;

fn pod(name: &str, scheduler: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
    let mut p = PodBuilder::new(name).cpu("100m").memory("100Mi").build();
    p.spec.as_mut().expect("spec").scheduler_name = scheduler.map(str::to_owned);
    p
}

#[tokio::test(flavor = "multi_thread")]
async fn each_pod_runs_the_profile_it_selects_and_the_profile_class_picks_the_pool() {
    let scheduler = config::parse(CONFIG, "two-profiles.yaml").expect("valid configuration");
    let mut pods = Vec::new();
    for i in 0..4 {
        pods.push(pod(&format!("plain-{i}"), None));
        pods.push(pod(&format!("tolerant-{i}"), Some("tolerant-scheduler")));
    }
    pods.push(pod("foreign", Some("someone-else")));
    let workload = Workload {
        name: "two-profiles".into(),
        nodes: vec![
            NodeBuilder::new("tainted")
                .cpu("4")
                .memory("8Gi")
                .pods(110)
                .taint("dedicated", "gpu", "NoSchedule")
                .build(),
        ],
        pods,
        warnings: Vec::new(),
        barriers: Vec::new(),
        ..Default::default()
    };
    let cfg = RunConfig {
        in_process_workers: 2,
        expect_workers: 2,
        progress: false,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(500),
        scheduler,
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(120),
        "the two-profile run",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());

    assert!(!report.timed_out);
    assert_eq!(report.scheduled, 4, "the tolerant-scheduler pods");
    assert_eq!(report.unschedulable, 4, "the default-scheduler pods");
    assert_eq!(report.other_scheduler, 1);
    for p in cluster.pods() {
        let name = p.metadata.name.clone().unwrap_or_default();
        let want = name.starts_with("tolerant-").then_some("tainted");
        assert_eq!(node_of(&p), want, "{name}");
    }
    // workloadClass: batch sent every tolerant-scheduler pod to the batch
    // pool, although the pods themselves classify as online.
    let bound_by = |class: &str| -> u64 {
        report
            .pods_per_worker
            .iter()
            .filter(|w| w.class == class)
            .map(|w| w.pods)
            .sum()
    };
    assert_eq!((bound_by("batch"), bound_by("online")), (4, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_without_the_pods_profile_reports_them_unschedulable() {
    use std::sync::Arc;

    use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
    use flotilla_scheduler::{Profile, Registry};
    use flotilla_shared::WorkloadClass;
    use tokio_util::sync::CancellationToken;

    use crate::unschedulable_message;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // The coordinator serves default-scheduler (no --config)...
    let cfg = RunConfig {
        in_process_workers: 0,
        expect_workers: 1,
        listen: format!("127.0.0.1:{port}"),
        progress: false,
        timeout: Duration::from_secs(30),
        settle: Duration::from_millis(500),
        ..RunConfig::default()
    };
    let workload = flotilla_loadtest::workload::scheduling_basic(2, 3);
    let run = tokio::spawn(run_embedded_with_cluster(workload, cfg));
    // ...but the worker was given a configuration without that profile.
    let own = CancellationToken::new();
    let mut wcfg = WorkerConfig::new(
        &format!("http://127.0.0.1:{port}"),
        "ext-0",
        WorkloadClass::Online,
    );
    wcfg.profiles = vec![Profile {
        scheduler_name: "another-scheduler".into(),
        ..Profile::default()
    }];
    wcfg.connect_timeout = Duration::from_secs(20);
    let t = own.clone();
    let ext = tokio::spawn(async move {
        worker::run(
            wcfg,
            &Registry::in_tree(),
            Arc::new(WorkerStats::default()),
            t,
        )
        .await
    });

    let (report, cluster) = within(Duration::from_secs(60), "the run finishing", run)
        .await
        .expect("no panic")
        .expect("the run completes");
    own.cancel();
    let _ = within(Duration::from_secs(20), "the worker stopping", ext).await;
    assert!(!report.timed_out, "{}", report.to_text());
    assert_eq!((report.scheduled, report.unschedulable), (0, 3));
    for p in cluster.pods() {
        assert_eq!(
            unschedulable_message(&p),
            Some(
                "no profile for schedulerName \"default-scheduler\" in this worker's configuration"
            ),
            "{:?}",
            p.metadata.name
        );
    }
}
