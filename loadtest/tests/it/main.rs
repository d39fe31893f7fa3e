//! End-to-end runs of `flotilla_loadtest::run`: coordinator and in-process
//! workers over loopback gRPC on the embedded cluster, checked against the
//! cluster's final state independently of the report.

mod bad_input;
mod bench;
mod cross_node;
mod extenders;
mod external_workers;
mod metrics;
mod openb;
mod profiles;
mod run_priorities_gangs;
mod simulate;
mod simulate_matches_run;
mod simulate_preemption;
mod upstream_gangs;
mod volumes;
mod webhook;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use flotilla_shared::quantity;
use k8s_openapi::api::core::v1::{Node, Pod};

/// A test run's settings: `workers` in-process workers (and expected), no
/// progress bar, a 60 s timeout, 500 ms to settle, `scheduler`.
pub fn test_run(
    workers: usize,
    scheduler: flotilla_scheduler::config::SchedulerConfig,
) -> flotilla_loadtest::run::RunConfig {
    flotilla_loadtest::run::RunConfig {
        in_process_workers: workers,
        expect_workers: workers,
        progress: false,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(500),
        scheduler,
        ..flotilla_loadtest::run::RunConfig::default()
    }
}

/// Runs `workload` with `cfg` to the end, failing after 120 s.
pub async fn run_to_end(
    workload: flotilla_loadtest::workload::Workload,
    cfg: flotilla_loadtest::run::RunConfig,
    what: &str,
) -> (
    flotilla_loadtest::report::Report,
    std::sync::Arc<flotilla_coordinator::cluster::EmbeddedCluster>,
) {
    within(
        Duration::from_secs(120),
        what,
        flotilla_loadtest::run::run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes")
}

/// Awaits `f`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out after {limit:?}, likely deadlocked"))
}

/// Resources tracked by the independent over-commit check.
pub const CHECKED: [&str; 4] = [
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "alibabacloud.com/gpu-milli",
];

/// A resource amount in the unit the scheduler compares: millicores for cpu,
/// integer units (bytes, devices, milli-GPU) for the rest.
pub fn amount(resource: &str, q: &str) -> i64 {
    let v = if resource == "cpu" {
        quantity::milli_value(q)
    } else {
        quantity::value(q)
    };
    v.unwrap_or_else(|e| panic!("{resource}: {e}"))
}

/// A node's allocatable for [`CHECKED`] plus `pods`.
pub fn allocatable(n: &Node) -> HashMap<String, i64> {
    let list = n
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .expect("nodes carry allocatable");
    CHECKED
        .iter()
        .chain(&["pods"])
        .map(|r| (r.to_string(), list.get(*r).map_or(0, |q| amount(r, &q.0))))
        .collect()
}

/// A pod's requests for [`CHECKED`]: the sum over its containers (the
/// workloads here have neither init containers nor overhead).
pub fn requests(p: &Pod) -> HashMap<String, i64> {
    let spec = p.spec.as_ref().expect("pods have a spec");
    assert!(
        spec.init_containers.as_ref().is_none_or(Vec::is_empty) && spec.overhead.is_none(),
        "the independent check only sums containers"
    );
    let mut out: HashMap<String, i64> = HashMap::new();
    for c in &spec.containers {
        for (r, q) in c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
        {
            if CHECKED.contains(&r.as_str()) {
                *out.entry(r.clone()).or_default() += amount(r, &q.0);
            }
        }
    }
    out
}

/// Its `spec.nodeName`, if bound.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// The message of its `PodScheduled=False` condition, if any.
pub fn unschedulable_message(p: &Pod) -> Option<&str> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .and_then(|c| c.message.as_deref())
}

/// `namespace/name`.
pub fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}
