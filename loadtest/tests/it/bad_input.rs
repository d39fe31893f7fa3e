//! A run whose input holds one unreadable pod.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::scheduling_basic;

use crate::{node_of, unschedulable_message, within};

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_an_invalid_cpu_quantity_is_reported_invalid_and_the_rest_are_scheduled() {
    let mut workload = scheduling_basic(5, 20);
    let bad = &mut workload.pods[7];
    assert_eq!(bad.metadata.name.as_deref(), Some("pod-00007"));
    bad.spec.as_mut().expect("spec").containers[0]
        .resources
        .as_mut()
        .expect("resources")
        .requests
        .as_mut()
        .expect("requests")
        .insert("cpu".into(), Quantity("lots".into()));

    let cfg = RunConfig {
        in_process_workers: 2,
        expect_workers: 2,
        progress: false,
        timeout: Duration::from_secs(60),
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(120),
        "the scheduling-basic run",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());

    assert!(!report.timed_out);
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    let inv = &report.invalid[0];
    assert!(inv.contains("default/pod-00007"), "names the pod: {inv}");
    assert!(
        inv.contains("spec.containers[0].resources.requests.cpu"),
        "names the field: {inv}"
    );
    assert!(inv.contains("lots"), "quotes the value: {inv}");
    assert_eq!(report.pods, 20);
    assert_eq!(report.scheduled, 19);
    assert_eq!(report.unschedulable, 0);
    assert_eq!(report.pending, 0);
    assert_eq!(report.checks.overcommitted_nodes, 0);
    assert_eq!(report.checks.bindings_written, 19);
    // One Scheduled Event per Binding; the invalid pod gets none.
    assert_eq!(report.checks.events_recorded, 19);
    assert!(
        cluster
            .events()
            .iter()
            .all(|e| e.reason == "Scheduled" && e.pod.name != "pod-00007")
    );

    for p in cluster.pods() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if name == "pod-00007" {
            assert_eq!(node_of(&p), None, "the invalid pod is never bound");
            assert_eq!(unschedulable_message(&p), None, "nor marked unschedulable");
        } else {
            assert!(node_of(&p).is_some(), "{name} is bound");
        }
    }
}
