//! Pipeline-level integration tests of the scheduler worker: the real
//! in-tree plugins run through `Framework::schedule` over a `NodeCache`
//! snapshot, without gRPC.

mod adaptive_search;
mod bind_checks;
mod config;
mod extender_config;
mod extenders;
mod fit_error;
mod fit_strategies;
mod gpu_preemption;
mod hot_path;
mod image_locality;
mod inter_pod_affinity;
mod node_cache;
mod nominated;
mod partition;
mod plugin_points;
mod pod_topology_spread;
mod preemption;
mod queue_starvation;
mod scoring;

use std::sync::Arc;
use std::time::Duration;

use flotilla_scheduler::cache::{NodeCache, Snapshot};
use flotilla_scheduler::framework::ScheduleError;
use flotilla_scheduler::{Framework, Profile, Registry};
use flotilla_shared::framework::FitError;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use flotilla_shared::{NodeSpec, PodInfo};

/// The default profile with the in-tree plugins.
pub fn default_framework() -> Framework {
    framework_with(&Profile::default())
}

/// A framework for `profile` with the in-tree plugins.
pub fn framework_with(profile: &Profile) -> Framework {
    Framework::new(profile, &Registry::in_tree()).expect("in-tree profile must build")
}

/// A cache holding `nodes`.
pub fn cache_with(nodes: impl IntoIterator<Item = NodeSpec>) -> NodeCache {
    let cache = NodeCache::new(Duration::from_secs(30));
    for n in nodes {
        cache.upsert_node(n);
    }
    cache
}

/// A fresh snapshot of `cache`.
pub fn snapshot_of(cache: &NodeCache) -> Snapshot {
    let mut snap = Snapshot::default();
    cache.update_snapshot(&mut snap);
    snap
}

/// A node with cpu / memory / 110 pod slots.
pub fn node(name: &str, cpu: &str, memory: &str) -> NodeBuilder {
    NodeBuilder::new(name).cpu(cpu).memory(memory).pods(110)
}

/// Adds a pod already bound to `node` to the cache.
pub fn bind_in_cache(cache: &NodeCache, pod: PodBuilder, node: &str) {
    cache.add_bound_pod(Arc::new(pod.node_name(node).build_info()));
}

/// Unwraps the FitError of a cycle that must find no node.
pub fn expect_fit_error(result: Result<impl std::fmt::Debug, ScheduleError>) -> Box<FitError> {
    match result {
        Err(ScheduleError::Unschedulable(fit)) => fit,
        other => panic!("expected the pod to be unschedulable, got {other:?}"),
    }
}

/// Compiles a pod.
pub fn info(pod: PodBuilder) -> Arc<PodInfo> {
    Arc::new(pod.build_info())
}

/// Node specs to put in a cache.
pub type NodeCacheNodes = Vec<NodeSpec>;
