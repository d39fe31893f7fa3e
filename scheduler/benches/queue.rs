//! The scheduling queue (`flotilla_scheduler::queue`) with the default
//! profile's event interest, for N = 1,000 and 10,000 pods of mixed
//! priorities (ten levels, 0 to 900, interleaved):
//! - `add`: N new pods into an empty queue (activeQ);
//! - `pop`: N pods out of activeQ, highest priority first, each reported
//!   `done` as after a successful cycle;
//! - `pop_with_backoff`: the same N pops while backoffQ also holds N pods
//!   whose backoff has not expired (each pop peeks at backoffQ first);
//! - `backoff_flush`: N pods whose backoff has just expired leave backoffQ
//!   on the next pop and are popped in turn;
//! - `on_event_move`: a cluster event (`AssignedPodDeleted`) that
//!   `NodeResourcesFit` registered for moves N pods it rejected from the
//!   unschedulable pool back to activeQ;
//! - `on_event_no_move`: an event that no rejecting plugin registered for
//!   (`NodeTaintChanged`) scans the N pods of the pool and moves none.
//!
//! Throughput is in pods. Each iteration starts from a freshly built queue
//! (built outside the timing). Run with
//! `cargo bench -p flotilla-scheduler --bench queue`.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main,
};

use flotilla_scheduler::plugins::names::NODE_RESOURCES_FIT;
use flotilla_scheduler::queue::{QueueConfig, SchedulingQueue};
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::PodInfo;
use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::testing::PodBuilder;

/// Queue sizes.
const SIZES: [usize; 2] = [1_000, 10_000];

/// `n` pending pods, priorities 0, 700, 400, 100, 800, ... (ten levels).
fn pods(n: usize) -> Vec<Arc<PodInfo>> {
    (0..n)
        .map(|i| {
            let level = i32::try_from((i * 7) % 10).expect("small");
            Arc::new(
                PodBuilder::new(&format!("pod-{i:06}"))
                    .cpu("100m")
                    .memory("500Mi")
                    .priority(level * 100)
                    .build_info(),
            )
        })
        .collect()
}

/// Adds `pods` one nanosecond apart from `t0` (distinct arrival times).
fn add_all(q: &SchedulingQueue, pods: &[Arc<PodInfo>], t0: Instant) {
    for (i, p) in pods.iter().enumerate() {
        q.add(p.clone(), t0 + Duration::from_nanos(i as u64));
    }
}

/// Pops every pod ready at `now`, reporting each done. Returns how many.
fn drain(q: &SchedulingQueue, now: Instant) -> usize {
    let mut n = 0;
    while let Some(p) = q.pop(now) {
        q.done(&p.pod.uid);
        n += 1;
    }
    n
}

/// The unschedulable pool's benchmarks: `n` pods of `parked` that
/// `NodeResourcesFit` rejected, moved back (or not) by one cluster event.
fn pool_benches(
    g: &mut BenchmarkGroup<'_, WallTime>,
    n: usize,
    parked: &[Arc<PodInfo>],
    new_queue: &dyn Fn() -> SchedulingQueue,
) {
    let fit = || BTreeSet::from([NODE_RESOURCES_FIT]);
    let with_pool = || {
        let q = new_queue();
        let t0 = Instant::now();
        add_all(&q, parked, t0);
        while let Some(p) = q.pop(t0) {
            q.add_unschedulable(&p.pod.uid, fit(), t0);
        }
        (q, t0)
    };
    g.bench_function(BenchmarkId::new("on_event_move", n), |b| {
        b.iter_batched(
            with_pool,
            |(q, t0)| {
                let later = t0 + Duration::from_secs(2);
                assert_eq!(q.on_event(ClusterEvent::AssignedPodDeleted, later), n);
                q
            },
            BatchSize::PerIteration,
        );
    });

    g.bench_function(BenchmarkId::new("on_event_no_move", n), |b| {
        b.iter_batched(
            with_pool,
            |(q, t0)| {
                let later = t0 + Duration::from_secs(2);
                let moved = q.on_event(black_box(ClusterEvent::NodeTaintChanged), later);
                assert_eq!(moved, 0);
                q
            },
            BatchSize::PerIteration,
        );
    });
}

fn bench_queue(c: &mut Criterion) {
    let fw = Framework::new(&Profile::default(), &Registry::in_tree()).expect("default profile");
    let interest = fw.event_interest();
    let new_queue = || SchedulingQueue::new(QueueConfig::default(), interest.clone());

    let mut g = c.benchmark_group("queue");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    for n in SIZES {
        let all = pods(2 * n);
        let (active, parked) = all.split_at(n);
        g.throughput(Throughput::Elements(n as u64));
        // Milliseconds an iteration at 10,000 pods, plus the untimed build
        // of each queue: flat sampling fits the measurement time.
        g.sampling_mode(if n >= 10_000 {
            SamplingMode::Flat
        } else {
            SamplingMode::Auto
        });

        g.bench_function(BenchmarkId::new("add", n), |b| {
            b.iter_batched(
                || (new_queue(), Instant::now()),
                |(q, t0)| {
                    add_all(&q, active, t0);
                    q
                },
                BatchSize::PerIteration,
            );
        });

        g.bench_function(BenchmarkId::new("pop", n), |b| {
            b.iter_batched(
                || {
                    let q = new_queue();
                    let t0 = Instant::now();
                    add_all(&q, active, t0);
                    (q, t0)
                },
                |(q, t0)| {
                    assert_eq!(drain(&q, t0 + Duration::from_millis(1)), n);
                    q
                },
                BatchSize::PerIteration,
            );
        });

        // N pods failed once (1 s backoff, not expired at `t0 + 1 ms`),
        // N pods fresh in activeQ.
        let with_backoff = || {
            let q = new_queue();
            let t0 = Instant::now();
            add_all(&q, parked, t0);
            while let Some(p) = q.pop(t0) {
                q.add_backoff(&p.pod.uid, t0);
            }
            add_all(&q, active, t0);
            (q, t0)
        };
        g.bench_function(BenchmarkId::new("pop_with_backoff", n), |b| {
            b.iter_batched(
                with_backoff,
                |(q, t0)| {
                    assert_eq!(drain(&q, t0 + Duration::from_millis(1)), n);
                    q
                },
                BatchSize::PerIteration,
            );
        });

        g.bench_function(BenchmarkId::new("backoff_flush", n), |b| {
            b.iter_batched(
                || {
                    let q = new_queue();
                    let t0 = Instant::now();
                    add_all(&q, parked, t0);
                    while let Some(p) = q.pop(t0) {
                        q.add_backoff(&p.pod.uid, t0);
                    }
                    (q, t0)
                },
                |(q, t0)| {
                    // Past the first backoff (1 s + 10 % jitter at most).
                    assert_eq!(drain(&q, t0 + Duration::from_secs(2)), n);
                    q
                },
                BatchSize::PerIteration,
            );
        });

        pool_benches(&mut g, n, parked, &new_queue);
    }
    g.finish();
}

criterion_group!(benches, bench_queue);
criterion_main!(benches);
