//! `flotilla coordinator` mode: no in-process workers, the workers connect
//! from elsewhere with their own lifetimes.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::scheduling_basic;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;

use crate::within;

#[tokio::test(flavor = "multi_thread")]
async fn a_coordinator_run_with_an_external_worker_finishes_and_reports() {
    // A free loopback port the external worker can be told about.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let cfg = RunConfig {
        in_process_workers: 0,
        expect_workers: 1,
        listen: format!("127.0.0.1:{port}"),
        progress: false,
        timeout: Duration::from_secs(30),
        ..RunConfig::default()
    };
    let run = tokio::spawn(run_embedded_with_cluster(scheduling_basic(3, 10), cfg));

    // The external worker: its own shutdown signal, never fired here.
    let own = CancellationToken::new();
    let mut wcfg = WorkerConfig::new(
        &format!("http://127.0.0.1:{port}"),
        "ext-0",
        WorkloadClass::Online,
    );
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

    let outcome = within(
        Duration::from_secs(60),
        "the coordinator run finishing",
        run,
    )
    .await;
    let (report, _) = outcome.expect("no panic").expect("the run completes");
    assert!(!report.timed_out);
    assert_eq!(report.scheduled, 10, "{}", report.to_text());
    assert_eq!(report.checks.bindings_written, 10);
    // The worker stops because the coordinator ended its stream, not
    // because its own signal fired.
    let stopped = within(
        Duration::from_secs(20),
        "the external worker stopping on its own",
        ext,
    )
    .await;
    own.cancel();
    stopped
        .expect("no panic")
        .expect("the worker stops cleanly");
}
