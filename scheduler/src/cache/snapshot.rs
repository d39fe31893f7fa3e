//! The scheduling cycle's private, consistent view of the cache.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use flotilla_shared::framework::SharedLister;
use flotilla_shared::{NodeHot, NodeInfo, PodInfo};

/// Node name → pods nominated to it (upstream nominator's
/// `nominatedPods`), each list in nomination order.
pub type NominatedPods = HashMap<Arc<str>, Vec<Arc<PodInfo>>>;

/// All nodes as of the last [`super::NodeCache::update_snapshot`], the worker's
/// partition first: `nodes()[..partition_len()]` are the nodes this worker
/// searches first, the rest follow (both parts ordered by name).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
    /// `NodeHot::of(nodes[i])` for every `i`: the fields the default
    /// Filters and Scores read, contiguous (struct-of-arrays style), so the
    /// cycle's scan streams memory instead of chasing two pointers per node.
    hot: Vec<NodeHot>,
    index: HashMap<Arc<str>, usize>,
    partition_len: usize,
    /// Cache generation this snapshot reflects.
    pub generation: u64,
    /// Cache layout (node set, partition) this snapshot reflects; 0 = none.
    pub layout_generation: u64,
    /// Namespace name → labels.
    pub(super) namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// Image name → number of nodes reporting it (shared with the cache).
    pub(super) images: Arc<HashMap<Arc<str>, usize>>,
    /// Positions in `nodes` of the nodes with pods that have pod
    /// (anti-)affinity terms, ascending (upstream
    /// `havePodsWithAffinityNodeInfoList`).
    with_affinity: Vec<usize>,
    /// Positions of the nodes with pods that have required anti-affinity
    /// terms, ascending.
    with_required_anti_affinity: Vec<usize>,
    /// Pods nominated to nodes (shared with the cache, copied on write).
    pub(super) nominated: Arc<NominatedPods>,
}

/// Keeps position `i` in the ascending list iff `member`.
fn set_membership(list: &mut Vec<usize>, i: usize, member: bool) {
    match list.binary_search(&i) {
        Ok(at) if !member => {
            list.remove(at);
        }
        Err(at) if member => list.insert(at, i),
        _ => {}
    }
}

impl Snapshot {
    pub(super) fn rebuild(
        &mut self,
        nodes: &HashMap<Arc<str>, Arc<NodeInfo>>,
        partition: &HashSet<Arc<str>>,
        generation: u64,
    ) {
        let mut owned: Vec<&Arc<NodeInfo>> = Vec::new();
        let mut rest: Vec<&Arc<NodeInfo>> = Vec::new();
        for (name, info) in nodes {
            if partition.contains(name) {
                owned.push(info);
            } else {
                rest.push(info);
            }
        }
        owned.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        rest.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        self.partition_len = owned.len();
        self.nodes = owned.into_iter().chain(rest).cloned().collect();
        self.hot = self.nodes.iter().map(|n| NodeHot::of(n)).collect();
        self.index = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.spec.name.clone(), i))
            .collect();
        self.with_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_affinity.is_empty())
            .collect();
        self.with_required_anti_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_required_anti_affinity.is_empty())
            .collect();
        self.generation = generation;
    }

    /// Puts `info` in place of the node of the same name (nothing when the
    /// snapshot has no such node). The cache uses it for copy-on-write
    /// updates; preemption's dry run swaps changed nodes into a copy.
    pub(crate) fn replace(&mut self, info: &Arc<NodeInfo>) {
        if let Some(&i) = self.index.get(info.name()) {
            self.nodes[i] = info.clone();
            self.hot[i] = NodeHot::of(info);
            set_membership(
                &mut self.with_affinity,
                i,
                !info.pods_with_affinity.is_empty(),
            );
            set_membership(
                &mut self.with_required_anti_affinity,
                i,
                !info.pods_with_required_anti_affinity.is_empty(),
            );
        }
    }

    /// Every node, partition first.
    #[must_use]
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// The hot fields of every node, same order as [`Snapshot::nodes`].
    #[must_use]
    pub fn hot(&self) -> &[NodeHot] {
        &self.hot
    }

    /// How many leading entries of [`Snapshot::nodes`] are this worker's partition.
    #[must_use]
    pub fn partition_len(&self) -> usize {
        self.partition_len
    }

    /// Number of nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Position of a node in [`Snapshot::nodes`].
    #[must_use]
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A node by name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// Whether any pod is nominated to any node (the cycle's fast path
    /// skips the nominated-pods check when not).
    #[must_use]
    pub fn has_nominated_pods(&self) -> bool {
        !self.nominated.is_empty()
    }

    /// Pods nominated to `node` (upstream `NominatedPodsForNode`), in
    /// nomination order; empty when none.
    #[must_use]
    pub fn nominated_pods_for_node(&self, node: &str) -> &[Arc<PodInfo>] {
        self.nominated.get(node).map_or(&[], Vec::as_slice)
    }
}

impl SharedLister for Snapshot {
    fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        Snapshot::get(self, name)
    }

    fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(namespace)
    }

    /// O(1): the node cache keeps the counts.
    fn image_node_count(&self, image: &str) -> usize {
        self.images.get(image).copied().unwrap_or(0)
    }

    fn have_pods_with_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.with_affinity.iter().map(|&i| &self.nodes[i]).collect()
    }

    fn have_pods_with_required_anti_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.with_required_anti_affinity
            .iter()
            .map(|&i| &self.nodes[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use flotilla_shared::framework::SharedLister;
    use flotilla_shared::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};

    use super::Snapshot;
    use crate::cache::NodeCache;

    fn names(v: Vec<&Arc<flotilla_shared::NodeInfo>>) -> Vec<String> {
        v.iter().map(|n| n.name().to_owned()).collect()
    }

    #[test]
    fn nodes_with_affinity_pods_follow_incremental_updates() {
        let cache = NodeCache::new(Duration::from_secs(30));
        for n in ["n1", "n2", "n3"] {
            cache.upsert_node(NodeBuilder::new(n).build_spec());
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert!(snap.have_pods_with_affinity().is_empty());
        let anti = |name: &str, node: &str| {
            Arc::new(
                PodBuilder::new(name)
                    .node_name(node)
                    .pod_affinity(
                        PodAffinityKind::RequiredAnti,
                        pod_affinity_term("app", "In", &["web"], "zone"),
                    )
                    .build_info(),
            )
        };
        let preferred = Arc::new(
            PodBuilder::new("pref")
                .node_name("n1")
                .pod_affinity(
                    PodAffinityKind::Preferred(1),
                    pod_affinity_term("app", "In", &["web"], "zone"),
                )
                .build_info(),
        );
        cache.add_bound_pod(anti("a3", "n3"));
        cache.add_bound_pod(preferred);
        cache.add_bound_pod(Arc::new(
            PodBuilder::new("plain").node_name("n2").build_info(),
        ));
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n1", "n3"]);
        assert_eq!(names(snap.have_pods_with_required_anti_affinity()), ["n3"]);
        // The listed NodeInfo is the current one, not a stale copy.
        assert_eq!(snap.have_pods_with_affinity()[1].pods.len(), 1);
        cache.add_bound_pod(anti("a3b", "n3"));
        cache.update_snapshot(&mut snap);
        assert_eq!(
            snap.have_pods_with_required_anti_affinity()[0].pods.len(),
            2
        );

        assert!(cache.remove_pod("uid-a3"));
        assert!(cache.remove_pod("uid-a3b"));
        assert!(cache.remove_pod("uid-pref"));
        cache.add_bound_pod(anti("a2", "n2"));
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n2"]);
        assert_eq!(names(snap.have_pods_with_required_anti_affinity()), ["n2"]);

        // A re-layout (new node) rebuilds the lists with the new positions.
        cache.upsert_node(NodeBuilder::new("n0").build_spec());
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n2"]);
        // Same answer as the trait's default (filtering every node).
        let all: Vec<String> = snap
            .nodes()
            .iter()
            .filter(|n| !n.pods_with_affinity.is_empty())
            .map(|n| n.name().to_owned())
            .collect();
        assert_eq!(all, ["n2"]);
    }
}
