//! Scheduling cycles on the real openb trace (Alibaba GPU cluster v2023,
//! 1,523 nodes), in a cluster filled by placing the first 6,000 pods of the
//! trace with the default profile. Measures the next 200 pods' cycles
//! (without placing them), i.e. the cost of a cycle in a busy, heterogeneous
//! GPU cluster. Skipped when the trace is not beside the project.
//! Run with `cargo bench -p flotilla-loadtest`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use flotilla_loadtest::workload::{OnBadInput, default_openb_dir, load_openb, openb};
use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::PodInfo;
use flotilla_shared::node_info::NodeSpec;

fn bench_openb(c: &mut Criterion) {
    let Some(dir) = default_openb_dir() else {
        eprintln!("openb trace not found; skipping");
        return;
    };
    let w = load_openb(
        &dir.join(openb::NODES_ALL_FILE),
        &dir.join(openb::PODS_DEFAULT_FILE),
        OnBadInput::Fail,
    )
    .expect("openb loads");
    let cache = NodeCache::default();
    for n in w.nodes {
        cache.upsert_node(NodeSpec::from_node(Arc::new(n)).expect("node"));
    }
    let fw = Framework::new(&Profile::default(), &Registry::in_tree()).expect("profile");
    let pods: Vec<Arc<PodInfo>> = w
        .pods
        .into_iter()
        .map(|p| Arc::new(PodInfo::from_pod(Arc::new(p)).expect("pod")))
        .collect();
    let mut snap = Snapshot::default();
    for p in &pods[..6000] {
        cache.update_snapshot(&mut snap);
        if let Ok(r) = fw.schedule(p, &snap) {
            cache.assume(p.clone(), &r.node).expect("assume");
        }
    }
    cache.update_snapshot(&mut snap);
    let next = &pods[6000..6200];
    let mut g = c.benchmark_group("openb_cycle");
    g.throughput(Throughput::Elements(next.len() as u64));
    g.bench_function("next_200_pods_at_6000_placed", |b| {
        b.iter(|| {
            for p in next {
                let _ = black_box(fw.schedule(black_box(p), &snap));
            }
        });
    });
    g.finish();
}

criterion_group!(benches, bench_openb);
criterion_main!(benches);
