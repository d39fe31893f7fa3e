//! One scheduling cycle (PreFilter → Filter → Score → select) over a
//! SchedulingBasic-shaped cluster: nodes of 4 CPU / 32 Gi / 110 pods, each
//! already running 10 pods of 100m / 500 Mi, and a 100m / 500 Mi pod to
//! place, at 1,000, 5,000 and 30,000 nodes. Upstream's adaptive
//! `percentageOfNodesToScore` applies (1,000 nodes → 420 feasible nodes
//! searched, 5,000 → 500, 30,000 → 1,500); the unschedulable pod is
//! checked against every node. Run with
//! `cargo bench -p flotilla-scheduler --bench cycle`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};

mod common;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::testing::PodBuilder;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn cluster(nodes: usize) -> (NodeCache, Snapshot) {
    common::basic_cluster(nodes)
}

fn bench_cycle(c: &mut Criterion) {
    let fw = Framework::new(&Profile::default(), &Registry::in_tree()).expect("default profile");
    let pod = PodBuilder::new("incoming")
        .cpu("100m")
        .memory("500Mi")
        .build_info();
    let picky = PodBuilder::new("picky")
        .cpu("100m")
        .memory("500Mi")
        .preferred_affinity(10, "zone", "In", &["a"])
        .build_info();
    // Needs 3.9 cpu; every node has 3 free: rejected everywhere, full scan
    // plus the FitError (the unschedulable path).
    let too_big = PodBuilder::new("too-big").cpu("3900m").build_info();
    // Hard zone spread (maxSkew 1) + soft hostname spread: PodTopologySpread
    // counts every node's pods in PreFilter and PreScore.
    let web = || {
        Some(LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: None,
        })
    };
    let spread = PodBuilder::new("spread")
        .cpu("100m")
        .memory("500Mi")
        .label("app", "web")
        .spread_constraint(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: web(),
            ..Default::default()
        })
        .spread_constraint(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: web(),
            ..Default::default()
        })
        .build_info();
    let mut g = c.benchmark_group("scheduling_cycle");
    // 12 benchmarks, up to tens of ms an iteration at 30,000 nodes: fewer,
    // shorter samples (flat at 30,000 nodes, so they fit the measurement
    // time) keep the whole run to a few minutes on 2 cores.
    g.sample_size(20);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    for nodes in [1_000usize, 5_000, 30_000] {
        let (_cache, snap) = cluster(nodes);
        g.sampling_mode(if nodes >= 30_000 {
            SamplingMode::Flat
        } else {
            SamplingMode::Auto
        });
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("basic_pod", nodes), &snap, |b, snap| {
            b.iter(|| black_box(fw.schedule(black_box(&pod), snap).expect("fits")));
        });
        g.bench_with_input(
            BenchmarkId::new("preferred_affinity", nodes),
            &snap,
            |b, snap| {
                b.iter(|| black_box(fw.schedule(black_box(&picky), snap).expect("fits")));
            },
        );
        g.bench_with_input(
            BenchmarkId::new("topology_spread", nodes),
            &snap,
            |b, snap| {
                b.iter(|| black_box(fw.schedule(black_box(&spread), snap).expect("fits")));
            },
        );
        g.bench_with_input(
            BenchmarkId::new("unschedulable", nodes),
            &snap,
            |b, snap| {
                b.iter(|| {
                    black_box(
                        fw.schedule(black_box(&too_big), snap)
                            .expect_err("fits nowhere"),
                    )
                });
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench_cycle);
criterion_main!(benches);
