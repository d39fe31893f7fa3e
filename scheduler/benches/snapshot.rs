//! The node cache's snapshot (`NodeCache::update_snapshot`) at 1,000, 5,000
//! and 30,000 nodes, each node of 4 CPU / 32 Gi / 110 pods running 10 pods
//! of 100m / 500 Mi (the `cycle.rs` cluster):
//! - `build`: a full snapshot into an empty `Snapshot` (what a worker pays
//!   at start and whenever nodes join or leave or its partition changes:
//!   every node ordered by name and indexed); throughput in nodes;
//! - `update_unchanged`: the refresh before a cycle when nothing changed;
//! - `update_one_node`: the refresh after one pod was assumed on one node
//!   (the common case between two cycles), the refresh alone timed;
//! - `assume_and_update`: `assume` of one pod (its copy-on-write of the
//!   node's `NodeInfo`, which the snapshot still shares) plus that refresh.
//!
//! In the last two, each iteration assumes the pod on the next node and,
//! outside the timing, forgets it again and refreshes, so the cluster stays
//! the same. The last three count throughput in refreshes. Run with
//! `cargo bench -p flotilla-scheduler --bench snapshot`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};

mod common;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_shared::testing::PodBuilder;

fn cluster(nodes: usize) -> NodeCache {
    common::basic_cache(nodes)
}

/// `iters` rounds of: assume `pod` on the next node (timed when
/// `time_assume`), refresh `snap` (timed), then forget and refresh again
/// (untimed). Returns the timed total.
fn assume_rounds(
    cache: &NodeCache,
    snap: &mut Snapshot,
    names: &[String],
    next: &mut usize,
    iters: u64,
    time_assume: bool,
) -> Duration {
    let pod = Arc::new(
        PodBuilder::new("incoming")
            .cpu("100m")
            .memory("500Mi")
            .build_info(),
    );
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let node = &names[*next % names.len()];
        *next += 1;
        let assume_start = Instant::now();
        cache.assume(pod.clone(), node).expect("assume");
        let update_start = Instant::now();
        cache.update_snapshot(black_box(&mut *snap));
        total += if time_assume {
            assume_start.elapsed()
        } else {
            update_start.elapsed()
        };
        assert!(cache.forget(&pod.uid));
        cache.update_snapshot(snap);
    }
    total
}

fn bench_snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    for nodes in [1_000usize, 5_000, 30_000] {
        let cache = cluster(nodes);
        let names: Vec<String> = (0..nodes).map(|i| format!("node-{i:05}")).collect();
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert_eq!(snap.len(), nodes);

        // Milliseconds an iteration at 30,000 nodes: flat sampling fits
        // the samples in the measurement time.
        g.throughput(Throughput::Elements(nodes as u64));
        g.sampling_mode(SamplingMode::Flat);
        g.bench_function(BenchmarkId::new("build", nodes), |b| {
            b.iter_with_large_drop(|| {
                let mut s = Snapshot::default();
                cache.update_snapshot(&mut s);
                s
            });
        });
        g.sampling_mode(SamplingMode::Auto);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("update_unchanged", nodes), |b| {
            b.iter(|| cache.update_snapshot(black_box(&mut snap)));
        });
        let mut next = 0;
        g.bench_function(BenchmarkId::new("update_one_node", nodes), |b| {
            b.iter_custom(|iters| {
                assume_rounds(&cache, &mut snap, &names, &mut next, iters, false)
            });
        });
        g.bench_function(BenchmarkId::new("assume_and_update", nodes), |b| {
            b.iter_custom(|iters| assume_rounds(&cache, &mut snap, &names, &mut next, iters, true));
        });
    }
    g.finish();
}

criterion_group!(benches, bench_snapshot);
criterion_main!(benches);
