//! What a worker pays for each pod another worker bound (the coordinator's
//! `bound_pod` watch event), on the `cycle.rs` cluster of 5,000 nodes:
//! - `from_json`: compiling the pod from the JSON the coordinator sends
//!   (a SchedulingBasic pod of 100m / 500 Mi, bound: `spec.nodeName` and
//!   the `PodScheduled` condition set), decode and compile;
//! - `add_and_refresh`: [`NodeCache::add_bound_pod`] of that pod on the
//!   next node (its copy-on-write of the node's `NodeInfo`, which the
//!   snapshot still shares) plus the snapshot refresh before the next
//!   cycle, which copies that node.
//!
//! With N workers each pod costs this N - 1 times: the fan-out that makes
//! 4 workers on 2 cores slower than 1 (docs/benchmarks.md, where the time
//! goes). Throughput in pods. Run with
//! `cargo bench -p flotilla-scheduler --bench bound_pod`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

mod common;

use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::testing::PodBuilder;

const NODES: usize = 5_000;

/// The JSON of pod `i`, bound to `node`, as the coordinator forwards it.
fn bound_json(i: usize, node: &str) -> Vec<u8> {
    let mut pod = PodBuilder::new(&format!("pod-{i}"))
        .namespace("sched-0")
        .cpu("100m")
        .memory("500Mi")
        .image("registry.k8s.io/pause:3.10")
        .node_name(node)
        .build();
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    serde_json::to_vec(&pod).expect("encode")
}

fn bench_bound_pod(c: &mut Criterion) {
    let mut g = c.benchmark_group("bound_pod");
    g.throughput(Throughput::Elements(1));
    let json = bound_json(0, "node-00042");
    g.bench_function("from_json", |b| {
        b.iter(|| PodInfo::from_json(black_box(&json)).expect("compiles"));
    });

    let (cache, mut snap) = common::basic_cluster(NODES);
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i:05}")).collect();
    let mut next = 0usize;
    g.bench_function("add_and_refresh", |b| {
        b.iter_custom(|iters| {
            let pods: Vec<Arc<PodInfo>> = (0..iters as usize)
                .map(|k| {
                    let node = &names[(next + k) % NODES];
                    Arc::new(PodInfo::from_json(&bound_json(next + k, node)).expect("compiles"))
                })
                .collect();
            let mut total = Duration::ZERO;
            for pod in &pods {
                let start = Instant::now();
                cache.add_bound_pod(pod.clone());
                cache.update_snapshot(black_box(&mut snap));
                total += start.elapsed();
            }
            // Untimed: leave the cluster as it was.
            for pod in &pods {
                assert!(cache.remove_pod(&pod.uid));
            }
            cache.update_snapshot(&mut snap);
            next += iters as usize;
            total
        });
    });
    g.finish();
}

criterion_group!(benches, bench_bound_pod);
criterion_main!(benches);
