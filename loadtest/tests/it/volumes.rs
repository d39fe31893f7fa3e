//! A `--trace k8s` run with volume objects: they are created in the
//! embedded cluster before the pods, flow to the workers, and the volume
//! Filters decide as `explain` says (tests/fixtures/volumes.yaml).

use std::path::Path;

use flotilla_loadtest::workload::{OnBadInput, load_k8s_list};
use flotilla_scheduler::config::SchedulerConfig;

use crate::{node_of, run_to_end, test_run, unschedulable_message};

#[tokio::test(flavor = "multi_thread")]
async fn a_k8s_trace_with_volume_objects_places_pods_by_their_volumes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes.yaml");
    let workload = load_k8s_list(&path, OnBadInput::Fail).expect("loads");
    assert_eq!(workload.volumes.len(), 7);
    let cfg = test_run(1, SchedulerConfig::default());
    let (report, cluster) = run_to_end(workload, cfg, "the run").await;
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
