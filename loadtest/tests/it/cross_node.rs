//! Cross-node constraints through the whole pipeline with several workers:
//! the workers decide optimistically on their own snapshots, the arbiter
//! re-checks anti-affinity and topology spread against every grant, and
//! conflicting pods are re-queued until they settle. The final cluster is
//! checked independently of the report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::Workload;
use flotilla_shared::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};
use k8s_openapi::api::core::v1::{Node, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::{node_of, within};

const ZONE: &str = "topology.kubernetes.io/zone";
const CLASS_LABEL: &str = "flotilla.io/workload-class";

/// `zones` zones of `per_zone` roomy nodes each.
fn nodes(zones: usize, per_zone: usize) -> Vec<Node> {
    (0..zones)
        .flat_map(|z| {
            (0..per_zone).map(move |i| {
                NodeBuilder::new(&format!("z{z}-n{i}"))
                    .cpu("16")
                    .memory("64Gi")
                    .pods(110)
                    .label(ZONE, &format!("zone-{z}"))
                    .build()
            })
        })
        .collect()
}

/// Node name → zone label.
fn zone_map(nodes: &[std::sync::Arc<Node>]) -> BTreeMap<String, String> {
    nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                n.metadata.labels.as_ref().expect("labels")[ZONE].clone(),
            )
        })
        .collect()
}

fn config(workers: usize) -> RunConfig {
    RunConfig {
        in_process_workers: workers,
        expect_workers: workers,
        progress: false,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(500),
        ..RunConfig::default()
    }
}

/// Half the pods in each worker pool, so all 4 workers decide at once.
fn class(i: usize) -> &'static str {
    if i.is_multiple_of(2) {
        "online"
    } else {
        "batch"
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn four_workers_never_put_two_anti_affine_pods_in_one_zone() {
    let zones = 3;
    let pods = (0..12)
        .map(|i| {
            PodBuilder::new(&format!("db-{i}"))
                .cpu("100m")
                .label("app", "db")
                .label(CLASS_LABEL, class(i))
                .pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["db"], ZONE),
                )
                .build()
        })
        .collect();
    let workload = Workload {
        name: "anti-affinity race".into(),
        nodes: nodes(zones, 8),
        pods,
        warnings: Vec::new(),
        barriers: Vec::new(),
        ..Default::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(120),
        "the run",
        run_embedded_with_cluster(workload, config(4)),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());
    assert!(!report.timed_out);
    assert_eq!(report.scheduled, zones, "one db pod per zone");
    assert_eq!(report.unschedulable, 12 - zones);
    let zone_of = zone_map(&cluster.nodes());
    let used: Vec<&String> = cluster
        .pods()
        .iter()
        .filter_map(|p| node_of(p).map(|n| &zone_of[n]))
        .collect();
    let distinct: BTreeSet<&&String> = used.iter().collect();
    assert_eq!(
        used.len(),
        distinct.len(),
        "two db pods share a zone: {used:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn four_workers_keep_max_skew_across_zones() {
    let zones = 3;
    let n_pods = 30;
    let pods = (0..n_pods)
        .map(|i| {
            PodBuilder::new(&format!("web-{i}"))
                .cpu("100m")
                .label("app", "web")
                .label(CLASS_LABEL, class(i))
                .spread_constraint(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: ZONE.into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: Some(LabelSelector {
                        match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .build()
        })
        .collect();
    let workload = Workload {
        name: "spread race".into(),
        nodes: nodes(zones, 4),
        pods,
        warnings: Vec::new(),
        barriers: Vec::new(),
        ..Default::default()
    };
    let (report, cluster) = within(
        Duration::from_secs(120),
        "the run",
        run_embedded_with_cluster(workload, config(4)),
    )
    .await
    .expect("the run completes");
    println!("{}", report.to_text());
    assert!(!report.timed_out);
    assert_eq!(
        report.scheduled, n_pods,
        "maxSkew 1 over 3 zones fits 30 pods"
    );
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    let zone_of = zone_map(&cluster.nodes());
    for p in cluster.pods() {
        if let Some(n) = node_of(&p) {
            *per_zone.entry(zone_of[n].clone()).or_default() += 1;
        }
    }
    let (min, max) = (
        per_zone.values().min().copied().unwrap_or(0),
        per_zone.values().max().copied().unwrap_or(0),
    );
    assert!(max - min <= 1, "skew {} > 1: {per_zone:?}", max - min);
}
