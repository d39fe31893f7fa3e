//! What an HTTP extender adds to one scheduling cycle: the same cycle as
//! `cycle.rs` (500 nodes of 4 CPU / 32 Gi, each running 10 pods; every node
//! fits, and upstream's adaptive search stops at 230 feasible ones, 46 %)
//! without extenders, then with a loopback
//! extender (in this process, its own thread) whose filter passes every
//! node it is sent and whose prioritize scores them all, decoding each
//! request as JSON as a real extender would. The difference is the round
//! trip: encoding the request, HTTP/1.1 over loopback, the extender's
//! decode and encode, and reading the reply.
//!
//! Run with `cargo bench -p flotilla-scheduler --bench extender`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

use flotilla_scheduler::cache::Snapshot;
mod common;

use flotilla_scheduler::extender::Extenders;
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::extender::ExtenderConfig;
use flotilla_shared::testing::PodBuilder;
use flotilla_shared::testing::http::{Canned, MockServer};

const NODES: usize = 500;

fn cluster() -> Snapshot {
    common::basic_cluster(NODES).1
}

/// Node names of a request, whole nodes or names.
fn names(body: &Value) -> Vec<Value> {
    if let Some(n) = body["NodeNames"].as_array() {
        return n.clone();
    }
    body["Nodes"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| n["metadata"]["name"].clone())
        .collect()
}

/// A light extender: every node passes, every node scores 5.
fn extender() -> MockServer {
    MockServer::start(|req| {
        let body = req.json();
        let nodes = names(&body);
        if req.path.ends_with("/prioritize") {
            let list: Vec<Value> = nodes
                .into_iter()
                .map(|n| json!({"Host": n, "Score": 5}))
                .collect();
            Canned::json(&Value::Array(list))
        } else {
            Canned::json(&json!({"NodeNames": nodes, "FailedNodes": {}, "Error": ""}))
        }
    })
}

fn framework(configs: &[ExtenderConfig]) -> Framework {
    Framework::new(&Profile::default(), &Registry::in_tree())
        .expect("default profile")
        .with_extenders(Arc::new(Extenders::new(configs).expect("extenders")))
}

fn bench_extender(c: &mut Criterion) {
    let snap = cluster();
    let pod = PodBuilder::new("incoming")
        .cpu("100m")
        .memory("500Mi")
        .build_info();
    let server = extender();
    let url = server.url("/scheduler");
    let filter = |cache_capable: bool| ExtenderConfig {
        filter_verb: "filter".into(),
        node_cache_capable: cache_capable,
        ..ExtenderConfig::new(&url)
    };
    let cases = [
        ("no extender", framework(&[])),
        ("filter, node names", framework(&[filter(true)])),
        ("filter, whole nodes", framework(&[filter(false)])),
        (
            "filter + prioritize, node names",
            framework(&[ExtenderConfig {
                prioritize_verb: "prioritize".into(),
                ..filter(true)
            }]),
        ),
    ];
    let mut g = c.benchmark_group(format!("cycle_with_extender/{NODES}_nodes"));
    for (name, fw) in &cases {
        // Warm the connection pool once.
        fw.schedule(&pod, &snap).expect("placed");
        g.bench_function(*name, |b| {
            b.iter(|| black_box(fw.schedule(&pod, &snap).expect("placed")));
        });
    }
    g.finish();
}

criterion_group!(benches, bench_extender);
criterion_main!(benches);
