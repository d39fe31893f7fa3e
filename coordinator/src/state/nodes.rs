//! Nodes and namespaces as the cluster shows them, the pods placed on each
//! node (orphans while their node is unknown), and the partition of the
//! nodes among each pool's workers.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node};
use tracing::warn;

use flotilla_shared::node_info::{NodeInfo, NodeSpec};
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::{PodKey, WorkloadClass};

use super::stream::{WorkerEvent, json, namespace_event};
use super::{Coordinator, Inner};
use crate::arbiter;
use crate::partition::{self, WorkerId};

impl Inner {
    /// Splits the nodes among each pool's live workers again and sends
    /// each worker whose partition changed its new one.
    pub(super) fn repartition(&mut self) {
        self.partition_dirty = false;
        // One partition per pool (online, batch): the pools overlap, so the
        // arbiter settles cross-pool conflicts, and each pool searches the
        // whole cluster first (an online worker half of it with 4 workers,
        // not a quarter). One partition over all workers was measured twice
        // on openb with 4 workers: first 11 -> 8 % conflicts but worse
        // packing; later (before bind alternatives and the linear window)
        // 4-6 -> 1.6-3.3 %, the rest being fallbacks into other workers'
        // nodes. With both, the pools' overlap costs under 1 %.
        let mut pools: BTreeMap<WorkloadClass, Vec<WorkerId>> = BTreeMap::new();
        for (id, w) in &self.workers {
            if w.tx.is_some() {
                pools.entry(w.class).or_default().push(*id);
            }
        }
        let parts = partition::partition(self.nodes.keys(), &pools);
        let epoch = self.epoch;
        for (id, names) in parts {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if w.partition == names {
                continue;
            }
            w.partition = names;
            let msg = WorkerEvent::Partition {
                epoch,
                node_names: w.partition.iter().map(ToString::to_string).collect(),
            };
            if let Some(tx) = &w.tx {
                let _ = tx.send(msg);
            }
        }
    }

    /// Counts `info` on `node` (an orphan while the node is unknown).
    pub(super) fn place(&mut self, node: &Arc<str>, info: &Arc<PodInfo>) {
        let added = match self.nodes.get_mut(node) {
            Some(n) => {
                let added = n.add_pod(info.clone());
                if added {
                    self.kept.pod_placed(info, n);
                }
                added
            }
            None => {
                self.orphans.park(node, info.clone());
                true
            }
        };
        if added && arbiter::has_required_anti_affinity(info) {
            self.anti_affinity_pods += 1;
        }
    }

    /// Swaps the newer copy `info` of a pod placed on `node` in for the
    /// placed one, which nothing counted differs from (checked by the
    /// caller with [`placement_changed`]): the granted copy is freed once
    /// the bound one comes back, rather than kept for the pod's lifetime.
    pub(super) fn swap_placed(&mut self, node: &Arc<str>, info: &Arc<PodInfo>) {
        if let Some(n) = self.nodes.get_mut(node)
            && !n.swap_pod(info.clone())
        {
            self.unplace(node, &info.uid);
            self.place(node, info);
        }
    }

    /// Stops counting pod `uid` on `node` (or among its orphans).
    pub(super) fn unplace(&mut self, node: &Arc<str>, uid: &str) {
        self.unreserve_volumes(uid);
        let removed = match self.orphans.remove(node, uid) {
            Some(p) => Some(p),
            None => self.nodes.get_mut(node).and_then(|n| {
                let p = n.remove_pod(uid)?;
                self.kept.pod_removed(&p, n);
                Some(p)
            }),
        };
        if removed.is_some_and(|p| arbiter::has_required_anti_affinity(&p)) {
            self.anti_affinity_pods -= 1;
        }
    }

    /// A Node was created or changed (or listed): its spec is taken in
    /// (a new node takes in its orphans) and the workers are told.
    pub(super) fn node_applied(&mut self, node: Arc<Node>) {
        let spec = match NodeSpec::from_node(node.clone()) {
            Ok(s) => Arc::new(s),
            Err(err) => {
                warn!(error = %err, "ignoring node that cannot be read");
                self.invalid_nodes.insert(err.node.clone(), err.to_string());
                return;
            }
        };
        let name = spec.name.clone();
        // Said once, not at every status update of the node.
        if let Some(e) = &spec.gpu_error
            && self.nodes.get(&name).map(|n| &n.spec.gpu_error) != Some(&spec.gpu_error)
        {
            warn!(node = %name, error = %e, "GPU pods are refused on this node: its GPUs cannot be counted");
        }
        match self.nodes.get_mut(&name) {
            Some(n) => {
                if n.spec.labels != spec.labels {
                    self.kept.invalidate();
                }
                n.set_spec(spec);
            }
            None => {
                self.kept.invalidate();
                let mut info = NodeInfo::new(spec);
                for pod in self.orphans.take(&name) {
                    info.add_pod(pod);
                }
                self.nodes.insert(name, info);
                self.partition_dirty = true;
            }
        }
        self.broadcast(&WorkerEvent::NodeUpsert(json(&*node)));
    }

    /// A Node was deleted: the pods bound to it become orphans and the
    /// workers are told.
    pub(super) fn node_deleted(&mut self, node: Arc<Node>) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        if let Some((name, info)) = self.nodes.remove_entry(name) {
            self.kept.invalidate();
            // Pods bound to it still hold its room (a deleted and
            // re-created Node keeps them in Kubernetes).
            self.orphans.park_all(&info);
            self.partition_dirty = true;
            self.broadcast(&WorkerEvent::NodeDeleted(name));
        }
    }

    /// A Namespace was created or changed: the workers are told when its
    /// labels changed.
    pub(super) fn namespace_applied(&mut self, ns: Arc<Namespace>) {
        let Some(name) = ns.metadata.name.clone() else {
            return;
        };
        let labels = ns.metadata.labels.clone().unwrap_or_default();
        if self.namespaces.get(&name) != Some(&labels) {
            let msg = namespace_event(&name, &labels);
            self.namespaces.insert(name, labels);
            self.broadcast(&msg);
        }
    }

    /// A Namespace was deleted: the workers are told.
    pub(super) fn namespace_deleted(&mut self, ns: Arc<Namespace>) {
        if let Some(name) = ns.metadata.name.as_deref()
            && self.namespaces.remove(name).is_some()
        {
            self.broadcast(&WorkerEvent::NamespaceDeleted(name.to_owned()));
        }
    }
}

impl Coordinator {
    /// Pods on a node in the authoritative view, and whether the node exists.
    #[must_use]
    pub fn node_pods(&self, node: &str) -> Option<Vec<PodKey>> {
        self.inner
            .lock()
            .nodes
            .get(node)
            .map(|n| n.pods.iter().map(|p| p.key.clone()).collect())
    }
}
