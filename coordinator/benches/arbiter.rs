//! The bind arbiter on a cluster of 5,000 nodes of 4 CPU / 32 Gi / 110 pods
//! in two zones, each node running 10 pods of 100m / 500 Mi (the
//! scheduler's `cycle.rs` cluster).
//!
//! `propose/*`: one `Coordinator::propose` over the embedded cluster, its
//! state fed directly with `Coordinator::apply` (no watch, no gRPC), on a
//! current-thread tokio runtime (`block_on` per proposal):
//! - `basic_pod`: a 100m / 500 Mi pod, granted: the fit check, the
//!   nomination check, the grant, the Binding written to the in-memory
//!   cluster and the record settled;
//! - `topology_spread`: the same with a hard zone spread constraint, which
//!   the arbiter re-counts over every node;
//! - `conflict`: a pod asking 3.9 CPU where 3 are free, refused (no write).
//!
//! For the granted ones each iteration proposes a fresh pending pod on the
//! next node; creating it and deleting it afterwards (so the cluster stays
//! the same) are outside the timing.
//!
//! `check/*`: `flotilla_coordinator::arbiter::check`, what the arbiter
//! runs under its lock, with the default profile's bind checks (its eight
//! Filters', in order), over the same 5,000 nodes: `basic_pod` (every
//! check looks at the pod and the node only), `cross_node_spread` and
//! `cross_node_anti_affinity` (a pod with a hard zone spread constraint, or
//! with required zone anti-affinity: both count over every node, cold or
//! from the kept counts).
//!
//! Run with `cargo bench -p flotilla-coordinator --bench arbiter`.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use k8s_openapi::api::core::v1::Pod;

use flotilla_coordinator::arbiter;
use flotilla_coordinator::cluster::{EmbeddedCluster, PodRef, WatchEvent};
use flotilla_coordinator::{Coordinator, Decision};
use flotilla_scheduler::Registry;
use flotilla_scheduler::config::SchedulerConfig;
use flotilla_shared::framework::{BindView, KeptCounts, ServedProfile};
use flotilla_shared::testing::{
    NodeBuilder, PodAffinityKind, PodBuilder, hard_spread, pod_affinity_term,
};
use flotilla_shared::{NodeInfo, WorkloadClass};

const NODES: usize = 5_000;

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

fn node(i: usize) -> NodeBuilder {
    NodeBuilder::new(&node_name(i))
        .cpu("4")
        .memory("32Gi")
        .pods(110)
        .label("zone", if i.is_multiple_of(2) { "a" } else { "b" })
}

/// The 10 pods already running on node `i`.
fn running(i: usize) -> impl Iterator<Item = PodBuilder> {
    let name = node_name(i);
    (0..10).map(move |j| {
        PodBuilder::new(&format!("p-{i}-{j}"))
            .cpu("100m")
            .memory("500Mi")
            .priority(0)
            .node_name(&name)
    })
}

/// Hard zone spread (maxSkew 1) over `app=web` pods.
fn spread_pod(name: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .memory("500Mi")
        .priority(0)
        .label("app", "web")
        .spread_constraint(hard_spread("zone", 1, "web"))
}

fn basic_pod(name: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .memory("500Mi")
        .priority(0)
}

/// A coordinator over an embedded cluster of [`NODES`] nodes: the cluster
/// holds the nodes (a Binding needs its node), the coordinator's view also
/// the running pods.
fn coordinator() -> (Arc<EmbeddedCluster>, Coordinator) {
    let cluster = Arc::new(EmbeddedCluster::new());
    let coord = Coordinator::with_profiles(cluster.clone(), default_profiles());
    for i in 0..NODES {
        let n = node(i).build();
        cluster.apply_node(n.clone()).expect("node");
        coord.apply(WatchEvent::NodeApplied(Arc::new(n)));
        for p in running(i) {
            coord.apply(WatchEvent::PodApplied(Arc::new(p.build())));
        }
    }
    (cluster, coord)
}

/// The default configuration's profile as the coordinator serves it.
fn default_profiles() -> Vec<ServedProfile> {
    SchedulerConfig::default()
        .served_profiles(&Registry::in_tree())
        .expect("the default profile builds")
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef::of(pod)
}

fn bench_propose(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (cluster, coord) = coordinator();
    let (worker, _epoch) = coord.register("bench", WorkloadClass::Online);

    let mut g = c.benchmark_group("arbiter");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(1));

    let mut next = 0usize;
    let mut granted = |iters: u64, make: &dyn Fn() -> Pod| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let pod = make();
            let r = pod_ref(&pod);
            let node = node_name(next % NODES);
            next += 1;
            cluster.create_pod(pod.clone()).expect("create");
            coord.apply(WatchEvent::PodApplied(Arc::new(pod)));
            let start = Instant::now();
            let d = rt.block_on(coord.propose(worker, black_box(&r), &node));
            total += start.elapsed();
            assert_eq!(d, Decision::Bound);
            let bound = cluster.pod(&r.namespace, &r.name).expect("bound pod");
            cluster.delete_pod(&r.namespace, &r.name).expect("delete");
            coord.apply(WatchEvent::PodDeleted(bound));
        }
        total
    };
    g.bench_function(BenchmarkId::new("propose/basic_pod", NODES), |b| {
        b.iter_custom(|iters| granted(iters, &|| basic_pod("incoming").build()));
    });
    // Milliseconds an iteration: flat sampling fits the measurement time.
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function(BenchmarkId::new("propose/topology_spread", NODES), |b| {
        b.iter_custom(|iters| granted(iters, &|| spread_pod("spread").build()));
    });
    g.sampling_mode(SamplingMode::Auto);

    let too_big = PodBuilder::new("too-big").cpu("3900m").priority(0).build();
    let too_big_ref = pod_ref(&too_big);
    cluster.create_pod(too_big.clone()).expect("create");
    coord.apply(WatchEvent::PodApplied(Arc::new(too_big)));
    let target = node_name(0);
    g.bench_function(BenchmarkId::new("propose/conflict", NODES), |b| {
        b.iter(|| {
            let d = rt.block_on(coord.propose(worker, black_box(&too_big_ref), &target));
            assert!(matches!(d, Decision::Conflict(_)), "{d:?}");
        });
    });
    g.finish();
}

fn bench_checks(c: &mut Criterion) {
    let nodes: HashMap<Arc<str>, NodeInfo> = (0..NODES)
        .map(|i| {
            let mut info = NodeInfo::new(Arc::new(node(i).build_spec()));
            for p in running(i) {
                info.add_pod(Arc::new(p.build_info()));
            }
            (Arc::from(node_name(i)), info)
        })
        .collect();
    let namespaces = BTreeMap::new();
    let target = &nodes[node_name(0).as_str()];
    let basic = basic_pod("incoming").build_info();
    let spread = spread_pod("spread").build_info();
    let anti = basic_pod("anti")
        .label("app", "db")
        .pod_affinity(
            PodAffinityKind::RequiredAnti,
            pod_affinity_term("app", "In", &["db"], "zone"),
        )
        .build_info();

    let mut g = c.benchmark_group("arbiter");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    g.throughput(Throughput::Elements(1));
    let profile = default_profiles().remove(0);
    let checks = &profile.bind_checks;
    let mut kept = KeptCounts::default();
    g.bench_function("check/basic_pod", |b| {
        b.iter(|| {
            let mut view = BindView::new(&nodes, &namespaces, 0, &mut kept);
            arbiter::check(checks, black_box(&basic), target, &[], &mut view).expect("fits");
        });
    });
    g.sampling_mode(SamplingMode::Flat);
    // Cold: every check counts the whole view (a fresh index each time,
    // as before the index existed). Warm: the index made once, kept.
    for (id, pod, warm) in [
        ("check/cross_node_spread", &spread, false),
        ("check/cross_node_spread_indexed", &spread, true),
        ("check/cross_node_anti_affinity", &anti, false),
        ("check/cross_node_anti_affinity_indexed", &anti, true),
    ] {
        let mut kept = KeptCounts::default();
        g.bench_function(BenchmarkId::new(id, NODES), |b| {
            b.iter(|| {
                let mut cold = KeptCounts::default();
                let kept = if warm { &mut kept } else { &mut cold };
                let mut view = BindView::new(&nodes, &namespaces, 0, kept);
                arbiter::check(checks, black_box(pod), target, &[], &mut view).expect("fits");
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench_propose, bench_checks);
criterion_main!(benches);
