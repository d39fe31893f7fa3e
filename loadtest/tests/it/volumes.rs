//! A `--trace k8s` run with volume objects: they are created in the
//! embedded cluster before the pods, flow to the workers, and the volume
//! Filters decide as `explain` says (tests/fixtures/volumes.yaml).

use std::path::Path;
use std::time::Duration;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::{OnBadInput, load_k8s_list};

use crate::{node_of, unschedulable_message, within};

#[tokio::test(flavor = "multi_thread")]
async fn a_k8s_trace_with_volume_objects_places_pods_by_their_volumes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes.yaml");
    let workload = load_k8s_list(&path, OnBadInput::Fail).expect("loads");
    assert_eq!(workload.volumes.len(), 7);
    let cfg = RunConfig {
        in_process_workers: 1,
        expect_workers: 1,
        progress: false,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(300),
        ..RunConfig::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(120),
        "the run",
        run_embedded_with_cluster(workload, cfg),
    )
    .await
    .expect("the run completes");
    assert!(!report.timed_out);
    assert_eq!((report.scheduled, report.unschedulable), (1, 1));
    for p in cluster.pods() {
        match p.metadata.name.as_deref() {
            // node-b has more room; the PV's zone decides.
            Some("db") => assert_eq!(node_of(&p), Some("node-a")),
            Some("tmp") => {
                let m = unschedulable_message(&p).unwrap_or_default();
                assert!(m.contains("StorageClass odd: volumeBindingMode"), "{m}");
            }
            other => panic!("unexpected pod {other:?}"),
        }
    }
}
