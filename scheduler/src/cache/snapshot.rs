//! The scheduling cycle's private, consistent view of the cache.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use flotilla_shared::NodeInfo;
use flotilla_shared::framework::SharedLister;

/// All nodes as of the last [`super::NodeCache::update_snapshot`], the worker's
/// partition first: `nodes()[..partition_len()]` are the nodes this worker
/// searches first, the rest follow (both parts ordered by name).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
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
        self.index = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.spec.name.clone(), i))
            .collect();
        self.generation = generation;
    }

    pub(super) fn replace(&mut self, info: &Arc<NodeInfo>) {
        if let Some(&i) = self.index.get(info.name()) {
            self.nodes[i] = info.clone();
        }
    }

    /// Every node, partition first.
    #[must_use]
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
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
}
