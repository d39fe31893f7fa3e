//! `NodeInfo`: a node plus the aggregate of the pods placed on it, the unit
//! every Filter and Score plugin reads (upstream `framework.NodeInfo`).
//!
//! The node's own fields (labels, taints, allocatable) sit behind an `Arc`
//! ([`NodeSpec`]) so cloning a `NodeInfo` (copy-on-write in the cache) costs
//! one Arc bump plus the small per-pod lists.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::gpu::dialect::NodeGpuSpec;
use crate::gpu::state::GpuState;
use crate::images::{NodeImages, node_images};
use crate::object_source::ObjectSource;
use crate::pod_info::{HostPort, PodInfo};
use crate::resources::Resources;
use crate::taints::Taint;

/// The immutable part of a node, rebuilt when the Node object changes.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.allocatable` (falling back to `status.capacity`): cpu
    /// millicores, memory bytes, pod slots, extended resources.
    pub allocatable: Resources,
    /// `status.images`: every reported image name with its size in bytes
    /// (empty when the kubelet reports none, e.g. `--node-status-max-images=0`).
    /// Behind an `Arc` so the fields every Filter reads stay in the first
    /// cache lines of the spec (an inline map would push
    /// `unschedulable` a line further).
    pub images: Arc<NodeImages>,
    /// Its GPU devices ([`crate::gpu::dialect::node_gpus`]); `None` for a
    /// node without GPUs.
    pub gpus: Option<NodeGpuSpec>,
    /// Why its GPU devices cannot be counted, when they cannot (the field
    /// and the problem: e.g. more than 64 devices, which is what HAMi's
    /// vGPU slots or time-slicing replicas look like). The node stays a
    /// node: only GPU pods are refused there (GpuShare names this).
    pub gpu_error: Option<Arc<str>>,
    /// The original object, whole or as JSON ([`NodeSpec::node`]).
    source: ObjectSource<Node>,
}

/// A node that cannot be read; names the node and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {node}: {message}")]
pub struct NodeError {
    /// Node name (or `<unnamed>`).
    pub node: String,
    /// Field path and problem.
    pub message: String,
}

impl NodeSpec {
    /// Compiles a `Node`.
    ///
    /// # Errors
    /// [`NodeError`] for a missing name, a malformed allocatable quantity, a
    /// negative image size or a taint effect the API server would refuse.
    pub fn from_node(node: Arc<Node>) -> Result<Self, NodeError> {
        let Some(name) = node.metadata.name.as_deref() else {
            return Err(NodeError {
                node: "<unnamed>".into(),
                message: "metadata.name: required".into(),
            });
        };
        let err = |message: String| NodeError {
            node: name.to_owned(),
            message,
        };
        let status = node.status.as_ref();
        let allocatable = match (
            status.and_then(|s| s.allocatable.as_ref()),
            status.and_then(|s| s.capacity.as_ref()),
        ) {
            (Some(a), _) => {
                Resources::from_list(a, "status.allocatable").map_err(|e| err(e.to_string()))?
            }
            (None, Some(c)) => {
                Resources::from_list(c, "status.capacity").map_err(|e| err(e.to_string()))?
            }
            (None, None) => Resources::default(),
        };
        let images = match status.and_then(|s| s.images.as_deref()) {
            Some(list) => Arc::new(node_images(list).map_err(err)?),
            None => Arc::default(),
        };
        let spec = node.spec.as_ref();
        // The API server accepts only these effects (core validation);
        // another would be tolerated by nothing and mean nothing here.
        for (i, t) in spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let known = [
                crate::taints::NO_SCHEDULE,
                crate::taints::PREFER_NO_SCHEDULE,
                crate::taints::NO_EXECUTE,
            ];
            if !known.contains(&t.effect.as_str()) {
                return Err(err(format!(
                    "spec.taints[{i}].effect: unsupported value {:?}: supported values: \
                     \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"",
                    t.effect
                )));
            }
        }
        let (gpus, gpu_error) = match crate::gpu::dialect::node_gpus(&node, &allocatable) {
            Ok(g) => (g, None),
            Err(e) => (None, Some(Arc::from(e.as_str()))),
        };
        Ok(NodeSpec {
            gpus,
            gpu_error,
            name: Arc::from(name),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec
                .and_then(|s| s.taints.as_ref())
                .map(|ts| ts.iter().map(Taint::from).collect())
                .unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable,
            images,
            source: ObjectSource::Object(node),
        })
    }

    /// Compiles a node from its JSON encoding, keeping the JSON rather than
    /// the decoded `Node` (several KB in memory, its JSON well under one):
    /// what workers do with every node they are sent. [`NodeSpec::node`]
    /// decodes it again on demand.
    ///
    /// # Errors
    /// [`NodeError`] when the JSON is not a `Node`, or as
    /// [`NodeSpec::from_node`].
    pub fn from_json(json: &[u8]) -> Result<Self, NodeError> {
        let node: Node = crate::object_source::decode(json).map_err(|message| NodeError {
            node: "<undecodable>".into(),
            message,
        })?;
        let mut spec = Self::from_node(Arc::new(node))?;
        spec.source = ObjectSource::json_of(json);
        Ok(spec)
    }

    /// The object this was compiled from; from [`NodeSpec::from_json`],
    /// decoded on the first call and kept. For what speaks Kubernetes
    /// objects (extenders, placement webhooks); the scheduling cycle reads
    /// the compiled fields.
    #[must_use]
    pub fn node(&self) -> Arc<Node> {
        self.source.object(|| Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(self.name.to_string()),
                labels: Some(self.labels.clone()),
                ..Default::default()
            },
            ..Node::default()
        })
    }

    /// The object's JSON encoding (the kept JSON, or encoded now).
    #[must_use]
    pub fn json(&self) -> Arc<[u8]> {
        self.source.json()
    }
}

/// A node and what is placed on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node itself.
    pub spec: Arc<NodeSpec>,
    /// Sum of the effective requests of the pods on the node.
    pub requested: Resources,
    /// Sum of the non-zero cpu requests (millicores), for scoring.
    pub non_zero_milli_cpu: i64,
    /// Sum of the non-zero memory requests (bytes), for scoring.
    pub non_zero_memory: i64,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// The pods on the node (bound, assumed or granted).
    pub pods: Vec<Arc<PodInfo>>,
    /// The pods of [`NodeInfo::pods`] with any pod affinity or anti-affinity
    /// term, required or preferred (upstream `PodsWithAffinity`).
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// The pods of [`NodeInfo::pods`] with a required anti-affinity term
    /// (upstream `PodsWithRequiredAntiAffinity`).
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    /// Bumped on every change; snapshots copy only nodes whose generation moved.
    pub generation: u64,
    /// The GPU devices and what the pods hold of them; `None` for a node
    /// without GPUs (pods asking for GPUs are then not counted here: the
    /// GPU Filter refuses them such a node).
    pub gpu: Option<Box<GpuState>>,
}

impl NodeInfo {
    /// An empty node.
    #[must_use]
    pub fn new(spec: Arc<NodeSpec>) -> Self {
        NodeInfo {
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            used_ports: Vec::new(),
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            generation: 0,
            gpu: spec.gpus.as_ref().map(|g| Box::new(GpuState::new(g))),
            spec,
        }
    }

    /// Node name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Number of pods on the node.
    #[must_use]
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Whether a pod with this uid is on the node.
    #[must_use]
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.iter().any(|p| &*p.uid == uid)
    }

    /// Places a pod (no fit check: callers decide). Terminal pods hold nothing
    /// and are ignored. Returns false when the pod is already there.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) -> bool {
        if pod.terminal || self.has_pod(&pod.uid) {
            return false;
        }
        self.requested.add(&pod.requests);
        self.non_zero_milli_cpu += pod.non_zero_milli_cpu;
        self.non_zero_memory += pod.non_zero_memory;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if let (Some(state), Some(g)) = (self.gpu.as_deref_mut(), pod.gpu.as_deref()) {
            state.add(&pod.uid, g);
        }
        if let Some(a) = pod.pod_affinity.as_deref() {
            self.pods_with_affinity.push(pod.clone());
            if !a.required_anti_affinity.is_empty() {
                self.pods_with_required_anti_affinity.push(pod.clone());
            }
        }
        self.pods.push(pod);
        self.generation += 1;
        true
    }

    /// Removes the pod with `uid`, returning it when it was there.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| &*p.uid == uid)?;
        let pod = self.pods.swap_remove(i);
        if let Some(state) = self.gpu.as_deref_mut() {
            state.remove(uid);
        }
        self.requested.sub(&pod.requests);
        self.non_zero_milli_cpu -= pod.non_zero_milli_cpu;
        self.non_zero_memory -= pod.non_zero_memory;
        for hp in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        if pod.pod_affinity.is_some() {
            for list in [
                &mut self.pods_with_affinity,
                &mut self.pods_with_required_anti_affinity,
            ] {
                if let Some(j) = list.iter().position(|p| p.uid == pod.uid) {
                    list.swap_remove(j);
                }
            }
        }
        self.generation += 1;
        Some(pod)
    }

    /// Replaces the pod with `pod`'s uid by `pod` when nothing the node
    /// counts differs between the two copies (requests, host ports, pod
    /// affinity): a newer copy of the same pod, such as the bound one that
    /// comes back after the Binding, so the older copy can be freed. Returns
    /// `false` (and changes nothing) when the pod is not on the node or a
    /// counted field differs; then remove and add it instead.
    pub fn swap_pod(&mut self, pod: Arc<PodInfo>) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid == pod.uid) else {
            return false;
        };
        let old = &self.pods[i];
        let same_counts = old.requests == pod.requests
            && old.non_zero_milli_cpu == pod.non_zero_milli_cpu
            && old.non_zero_memory == pod.non_zero_memory
            && old.host_ports == pod.host_ports
            && same_gpu_hold(old.gpu.as_deref(), pod.gpu.as_deref())
            && old.pod_affinity.is_some() == pod.pod_affinity.is_some()
            && old.pod_affinity.as_deref().is_none_or(|a| {
                pod.pod_affinity.as_deref().is_some_and(|b| {
                    a.required_anti_affinity.is_empty() == b.required_anti_affinity.is_empty()
                })
            });
        if !same_counts || pod.terminal {
            return false;
        }
        for list in [
            &mut self.pods_with_affinity,
            &mut self.pods_with_required_anti_affinity,
        ] {
            if let Some(p) = list.iter_mut().find(|p| p.uid == pod.uid) {
                *p = pod.clone();
            }
        }
        self.pods[i] = pod;
        self.generation += 1;
        true
    }

    /// Replaces the node object, keeping the pods (counted again on the
    /// devices when the node's GPUs changed).
    pub fn set_spec(&mut self, spec: Arc<NodeSpec>) {
        if spec.gpus != self.spec.gpus {
            self.gpu = spec.gpus.as_ref().map(|g| Box::new(GpuState::new(g)));
            if let Some(state) = self.gpu.as_deref_mut() {
                for p in &self.pods {
                    if let Some(g) = p.gpu.as_deref() {
                        state.add(&p.uid, g);
                    }
                }
            }
        }
        self.spec = spec;
        self.generation += 1;
    }
}

/// Whether a newer copy of a pod holds what the older one held: the same
/// request, and the same devices when the newer names them (a bound copy
/// without the annotation keeps the devices counted for the older).
fn same_gpu_hold(
    old: Option<&crate::gpu::state::PodGpu>,
    new: Option<&crate::gpu::state::PodGpu>,
) -> bool {
    match (old, new) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.request == b.request && (b.devices.is_none() || a.devices == b.devices)
        }
        _ => false,
    }
}

/// Bound pods whose node is not known: the pod event came before the node's,
/// or the Node object was deleted while pods were still bound to it (in
/// Kubernetes they stay bound). They keep holding the node's room: when the
/// node (re)appears, [`Orphans::take`] hands them back to be placed on it.
/// Used by both the worker's cache and the coordinator's view.
#[derive(Debug, Clone, Default)]
pub struct Orphans {
    by_node: std::collections::HashMap<Arc<str>, Vec<Arc<PodInfo>>>,
}

impl Orphans {
    /// Parks a pod bound to `node`.
    pub fn park(&mut self, node: &Arc<str>, pod: Arc<PodInfo>) {
        self.by_node.entry(node.clone()).or_default().push(pod);
    }

    /// Parks every pod of a node that is going away.
    pub fn park_all(&mut self, info: &NodeInfo) {
        if !info.pods.is_empty() {
            self.by_node
                .entry(info.spec.name.clone())
                .or_default()
                .extend(info.pods.iter().cloned());
        }
    }

    /// Removes a parked pod, returning it if it was parked on `node`.
    pub fn remove(&mut self, node: &str, uid: &str) -> Option<Arc<PodInfo>> {
        let list = self.by_node.get_mut(node)?;
        let i = list.iter().position(|p| &*p.uid == uid)?;
        let pod = list.swap_remove(i);
        if list.is_empty() {
            self.by_node.remove(node);
        }
        Some(pod)
    }

    /// Takes the pods parked on `node` (it appeared).
    pub fn take(&mut self, node: &str) -> Vec<Arc<PodInfo>> {
        self.by_node.remove(node).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn a_taint_effect_the_api_server_refuses_is_an_error_naming_the_field() {
        let json = br#"{"metadata":{"name":"n1"},"spec":{"taints":[
            {"key":"a","effect":"NoSchedule"},{"key":"b","effect":"Bogus"}]}}"#;
        let e = NodeSpec::from_json(json).expect_err("Bogus is not an effect");
        assert_eq!(e.node, "n1");
        assert!(
            e.message
                .starts_with("spec.taints[1].effect: unsupported value \"Bogus\""),
            "{e}"
        );
        let ok = br#"{"metadata":{"name":"n1"},"spec":{"taints":[
            {"key":"a","effect":"NoExecute"},{"key":"b","effect":"PreferNoSchedule"}]}}"#;
        assert_eq!(NodeSpec::from_json(ok).expect("valid").taints.len(), 2);
    }

    #[test]
    fn from_json_compiles_the_same_and_decodes_the_node_on_demand() {
        let node = NodeBuilder::new("n1").cpu("4").label("zone", "a").build();
        let json = serde_json::to_vec(&node).unwrap();
        let a = NodeSpec::from_node(Arc::new(node.clone())).unwrap();
        let b = NodeSpec::from_json(&json).unwrap();
        assert_eq!(
            (&a.name, &a.labels, &a.allocatable, a.unschedulable),
            (&b.name, &b.labels, &b.allocatable, b.unschedulable)
        );
        assert_eq!(*b.node(), node, "the object decodes back as it was");
        assert_eq!(&*b.json(), &json[..], "the JSON it was sent is kept");
        assert_eq!(*a.node(), node);

        let e = NodeSpec::from_json(br#"{"metadata":{"name":7}}"#).unwrap_err();
        assert!(e.message.contains("metadata.name"), "{e}");
        let e = NodeSpec::from_json(
            br#"{"metadata":{"name":"n2"},"status":{"allocatable":{"cpu":"lots"}}}"#,
        )
        .unwrap_err();
        assert_eq!(e.node, "n2");
        assert!(e.message.contains("status.allocatable.cpu"), "{e}");
    }

    #[test]
    fn swap_pod_replaces_the_copy_only_when_nothing_counted_differs() {
        let mut n = NodeInfo::new(Arc::new(NodeBuilder::new("n1").cpu("4").build_spec()));
        let granted = Arc::new(PodBuilder::new("a").cpu("1").host_port(80).build_info());
        assert!(n.add_pod(granted.clone()));
        let (requested, g) = (n.requested.clone(), n.generation);

        let bound = Arc::new(
            PodBuilder::new("a")
                .cpu("1")
                .host_port(80)
                .node_name("n1")
                .build_info(),
        );
        assert!(n.swap_pod(bound.clone()));
        assert!(Arc::ptr_eq(&n.pods[0], &bound), "the newer copy is held");
        assert_eq!(Arc::strong_count(&granted), 1, "the older copy is freed");
        assert_eq!(n.requested, requested);
        assert_eq!(n.used_ports.len(), 1);
        assert!(n.generation > g);

        let resized = Arc::new(PodBuilder::new("a").cpu("2").host_port(80).build_info());
        assert!(!n.swap_pod(resized), "a counted field differs");
        assert!(Arc::ptr_eq(&n.pods[0], &bound));
        assert!(
            !n.swap_pod(Arc::new(PodBuilder::new("b").build_info())),
            "not on the node"
        );
        assert_eq!(n.pods.len(), 1);
    }

    #[test]
    fn add_and_remove_keep_aggregates_exact() {
        let mut n = NodeInfo::new(Arc::new(NodeBuilder::new("n1").cpu("4").build_spec()));
        let a = Arc::new(
            PodBuilder::new("a")
                .cpu("1")
                .memory("1Gi")
                .host_port(80)
                .build_info(),
        );
        let b = Arc::new(PodBuilder::new("b").build_info());
        assert!(n.add_pod(a.clone()));
        assert!(!n.add_pod(a.clone()), "adding twice is a no-op");
        assert!(n.add_pod(b));
        assert_eq!(n.requested.milli_cpu, 1000);
        assert_eq!(n.non_zero_milli_cpu, 1100, "b counts 100m for scoring");
        assert_eq!(n.used_ports.len(), 1);
        let g = n.generation;
        assert!(n.remove_pod(&a.uid).is_some());
        assert!(n.remove_pod(&a.uid).is_none());
        assert!(n.generation > g);
        assert_eq!(n.requested.milli_cpu, 0);
        assert_eq!(n.non_zero_memory, crate::resources::DEFAULT_MEMORY_REQUEST);
        assert!(n.used_ports.is_empty());
    }

    #[test]
    fn pods_with_affinity_are_tracked_through_add_and_remove() {
        use crate::testing::{PodAffinityKind, pod_affinity_term};
        let mut n = NodeInfo::new(Arc::new(NodeBuilder::new("n1").build_spec()));
        let plain = Arc::new(PodBuilder::new("plain").build_info());
        let preferred = Arc::new(
            PodBuilder::new("preferred")
                .pod_affinity(
                    PodAffinityKind::Preferred(10),
                    pod_affinity_term("app", "In", &["a"], "zone"),
                )
                .build_info(),
        );
        let anti = Arc::new(
            PodBuilder::new("anti")
                .pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["a"], "zone"),
                )
                .build_info(),
        );
        for p in [&plain, &preferred, &anti] {
            assert!(n.add_pod(p.clone()));
        }
        let uids = |v: &[Arc<PodInfo>]| v.iter().map(|p| p.uid.to_string()).collect::<Vec<_>>();
        assert_eq!(uids(&n.pods_with_affinity), ["uid-preferred", "uid-anti"]);
        assert_eq!(uids(&n.pods_with_required_anti_affinity), ["uid-anti"]);
        let g = n.generation;
        assert!(n.remove_pod(&anti.uid).is_some());
        assert!(n.generation > g);
        assert_eq!(uids(&n.pods_with_affinity), ["uid-preferred"]);
        assert!(n.pods_with_required_anti_affinity.is_empty());
        assert!(n.remove_pod(&plain.uid).is_some());
        assert_eq!(uids(&n.pods_with_affinity), ["uid-preferred"]);
    }

    #[test]
    fn orphans_wait_for_their_node_and_can_be_removed() {
        let mut o = Orphans::default();
        let n: Arc<str> = Arc::from("n1");
        o.park(&n, Arc::new(PodBuilder::new("a").build_info()));
        o.park(&n, Arc::new(PodBuilder::new("b").build_info()));
        assert!(o.remove("n2", "uid-a").is_none());
        assert!(o.remove("n1", "uid-a").is_some());
        assert!(o.remove("n1", "uid-a").is_none());
        let back = o.take("n1");
        assert_eq!(back.len(), 1);
        assert!(o.take("n1").is_empty());
    }

    #[test]
    fn terminal_pods_hold_nothing() {
        let mut n = NodeInfo::new(Arc::new(NodeBuilder::new("n1").build_spec()));
        let p = Arc::new(
            PodBuilder::new("done")
                .cpu("1")
                .phase("Succeeded")
                .build_info(),
        );
        assert!(!n.add_pod(p));
        assert_eq!(n.requested.milli_cpu, 0);
    }

    #[test]
    fn reported_images_are_read_and_a_negative_size_names_node_and_field() {
        let s = NodeBuilder::new("n1")
            .image(&["gcr.io/40:latest", "gcr.io/40:v1"], 40 << 20)
            .build_spec();
        assert_eq!(s.images.len(), 2);
        assert_eq!(s.images["gcr.io/40:v1"], 40 << 20);
        let bad = NodeBuilder::new("n2").image(&["x:latest"], -3).build();
        let e = NodeSpec::from_node(Arc::new(bad)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node n2: status.images[0].sizeBytes: -3 must not be negative"
        );
    }

    #[test]
    fn allocatable_falls_back_to_capacity_and_bad_quantity_is_named() {
        let s = NodeBuilder::new("n1")
            .cpu("2")
            .memory("8Gi")
            .pods(110)
            .build_spec();
        assert_eq!(s.allocatable.milli_cpu, 2000);
        assert_eq!(s.allocatable.allowed_pod_number, 110);
        let bad = NodeBuilder::new("n2").cpu("two").build();
        let e = NodeSpec::from_node(Arc::new(bad)).unwrap_err();
        assert_eq!(e.node, "n2");
        assert!(e.message.contains("status.allocatable.cpu"), "{e}");
    }
}
