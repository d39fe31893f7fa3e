//! Builders for Kubernetes `Pod`s and `Node`s, for tests, examples and
//! synthetic workloads: `NodeBuilder::new("n1").cpu("4").build()`; and
//! [`http`], a mock HTTP(S) server for extender and webhook tests.

pub mod http;
pub mod volumes;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerImage, ContainerPort, EphemeralVolumeSource, Node, NodeAffinity,
    NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    NodeSpec as K8sNodeSpec, NodeStatus, PersistentVolumeClaimTemplate,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodStatus, PreferredSchedulingTerm, ResourceRequirements, Taint, Toleration,
    TopologySpreadConstraint, Volume, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::framework::{Code, CycleState, FilterPlugin, PreFilterPlugin, SharedLister, Status};
use crate::node_info::{NodeInfo, NodeSpec};
use crate::pod_info::PodInfo;
use crate::volumes::VolumeState;

/// Builds a Ready `Node` with capacity = allocatable.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A node with no resources, no labels but `kubernetes.io/hostname`.
    #[must_use]
    pub fn new(name: &str) -> Self {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    "kubernetes.io/hostname".into(),
                    name.into(),
                )])),
                ..Default::default()
            },
            spec: Some(K8sNodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::new()),
                capacity: Some(BTreeMap::new()),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        NodeBuilder { node }
    }

    /// Sets allocatable and capacity of `resource` to quantity `q`.
    #[must_use]
    pub fn resource(mut self, resource: &str, q: &str) -> Self {
        let st = self.node.status.get_or_insert_with(Default::default);
        for list in [&mut st.allocatable, &mut st.capacity] {
            list.get_or_insert_with(BTreeMap::new)
                .insert(resource.into(), Quantity(q.into()));
        }
        self
    }

    /// `count` GPUs of `model` (`nvidia.com/gpu` allocatable, label
    /// `alibabacloud.com/gpu-card-model`), as GpuShare reads them.
    #[must_use]
    pub fn gpus(self, count: u32, model: &str) -> Self {
        self.resource(crate::gpu::dialect::NVIDIA_GPU, &count.to_string())
            .label(crate::gpu::dialect::GPU_CARD_MODEL, model)
    }

    /// cpu quantity (`"4"`, `"3500m"`).
    #[must_use]
    pub fn cpu(self, q: &str) -> Self {
        self.resource("cpu", q)
    }

    /// memory quantity (`"32Gi"`).
    #[must_use]
    pub fn memory(self, q: &str) -> Self {
        self.resource("memory", q)
    }

    /// pod slots.
    #[must_use]
    pub fn pods(self, n: u32) -> Self {
        self.resource("pods", &n.to_string())
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Adds a taint.
    #[must_use]
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.into(),
                value: (!value.is_empty()).then(|| value.into()),
                effect: effect.into(),
                ..Default::default()
            });
        self
    }

    /// Reports an image in `status.images`: its names and size in bytes.
    #[must_use]
    pub fn image(mut self, names: &[&str], size_bytes: i64) -> Self {
        self.node
            .status
            .get_or_insert_with(Default::default)
            .images
            .get_or_insert_with(Vec::new)
            .push(ContainerImage {
                names: Some(names.iter().map(|n| (*n).to_owned()).collect()),
                size_bytes: Some(size_bytes),
            });
        self
    }

    /// Cordons the node (`spec.unschedulable: true`).
    #[must_use]
    pub fn unschedulable(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    /// The `Node`.
    #[must_use]
    pub fn build(self) -> Node {
        self.node
    }

    /// The compiled [`NodeSpec`].
    ///
    /// # Panics
    /// If a quantity given to the builder is malformed (builders are for tests).
    #[must_use]
    pub fn build_spec(self) -> NodeSpec {
        NodeSpec::from_node(Arc::new(self.node)).expect("builder node must be valid")
    }

    /// A [`NodeInfo`] of this node holding `pods`.
    ///
    /// # Panics
    /// As [`NodeBuilder::build_spec`].
    #[must_use]
    pub fn build_info_with(self, pods: impl IntoIterator<Item = PodInfo>) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(self.build_spec()));
        for p in pods {
            n.add_pod(Arc::new(p));
        }
        n
    }
}

/// A pod of `app` (label `app`) in namespace `ns`, with the
/// `scheduling.flotilla.dev/max-instances-per-node` annotation set to
/// `max` when given (any text, to test malformed values too).
#[must_use]
pub fn app_pod(name: &str, ns: &str, app: &str, max: Option<&str>) -> PodInfo {
    let mut b = PodBuilder::new(name).namespace(ns).label("app", app);
    if let Some(k) = max {
        b = b.annotation(crate::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE, k);
    }
    b.build_info()
}

/// Builds a pending `Pod` with one container.
#[derive(Debug, Clone)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// Pod `default/<name>`, uid `uid-<name>`, one container without requests.
    #[must_use]
    pub fn new(name: &str) -> Self {
        PodBuilder {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    uid: Some(format!("uid-{name}")),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                status: Some(PodStatus {
                    phase: Some("Pending".into()),
                    ..Default::default()
                }),
            },
        }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    /// Sets the namespace.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }

    /// Sets a request of the first container.
    #[must_use]
    pub fn request(mut self, resource: &str, q: &str) -> Self {
        self.spec().containers[0]
            .resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.into(), Quantity(q.into()));
        self
    }

    /// cpu request.
    #[must_use]
    pub fn cpu(self, q: &str) -> Self {
        self.request("cpu", q)
    }

    /// memory request.
    #[must_use]
    pub fn memory(self, q: &str) -> Self {
        self.request("memory", q)
    }

    /// Sets the first container's image.
    #[must_use]
    pub fn image(mut self, image: &str) -> Self {
        self.spec().containers[0].image = Some(image.into());
        self
    }

    /// Adds an app container (no requests) running `image`.
    #[must_use]
    pub fn container(mut self, image: &str) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            image: Some(image.into()),
            ..Default::default()
        });
        self
    }

    /// Adds an init container (no requests) running `image`.
    #[must_use]
    pub fn init_container(mut self, image: &str) -> Self {
        let list = self.spec().init_containers.get_or_insert_with(Vec::new);
        let n = list.len();
        list.push(Container {
            name: format!("init{n}"),
            image: Some(image.into()),
            ..Default::default()
        });
        self
    }

    /// `spec.priority`.
    #[must_use]
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    /// Sets `spec.schedulingGroup.podGroupName` (a `scheduling.k8s.io`
    /// PodGroup gang).
    #[must_use]
    pub fn pod_group_name(mut self, name: &str) -> Self {
        self.spec().scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(name.into()),
        });
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Adds an annotation.
    #[must_use]
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Adds a host port (TCP, all addresses) to the first container.
    #[must_use]
    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                ..Default::default()
            });
        self
    }

    /// Adds a `spec.nodeSelector` entry.
    #[must_use]
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    fn node_affinity(&mut self) -> &mut NodeAffinity {
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
    }

    /// Adds a required node affinity term with one expression
    /// (`key op values`); terms are ORed.
    #[must_use]
    pub fn required_affinity(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        self.node_affinity()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(NodeSelectorTerm {
                match_expressions: Some(vec![requirement(key, op, values)]),
                match_fields: None,
            });
        self
    }

    /// Adds a preferred node affinity term with one expression.
    #[must_use]
    pub fn preferred_affinity(mut self, weight: i32, key: &str, op: &str, values: &[&str]) -> Self {
        self.node_affinity()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![requirement(key, op, values)]),
                    match_fields: None,
                },
            });
        self
    }

    /// Adds a toleration (`operator` `Equal` or `Exists`).
    #[must_use]
    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: (!key.is_empty()).then(|| key.into()),
                operator: Some(operator.into()),
                value: (!value.is_empty()).then(|| value.into()),
                effect: (!effect.is_empty()).then(|| effect.into()),
                ..Default::default()
            });
        self
    }

    /// Adds an inter-pod affinity term of `kind` (see [`pod_affinity_term`]).
    #[must_use]
    pub fn pod_affinity(mut self, kind: PodAffinityKind, term: PodAffinityTerm) -> Self {
        let affinity = self.spec().affinity.get_or_insert_with(Affinity::default);
        match kind {
            PodAffinityKind::Required => affinity
                .pod_affinity
                .get_or_insert_with(PodAffinity::default)
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(term),
            PodAffinityKind::RequiredAnti => affinity
                .pod_anti_affinity
                .get_or_insert_with(PodAntiAffinity::default)
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(term),
            PodAffinityKind::Preferred(weight) => affinity
                .pod_affinity
                .get_or_insert_with(PodAffinity::default)
                .preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(WeightedPodAffinityTerm {
                    weight,
                    pod_affinity_term: term,
                }),
            PodAffinityKind::PreferredAnti(weight) => affinity
                .pod_anti_affinity
                .get_or_insert_with(PodAntiAffinity::default)
                .preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(WeightedPodAffinityTerm {
                    weight,
                    pod_affinity_term: term,
                }),
        }
        self
    }

    /// Appends a `spec.topologySpreadConstraints` entry.
    #[must_use]
    pub fn spread_constraint(mut self, c: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(c);
        self
    }

    /// `spec.nodeName`.
    #[must_use]
    pub fn node_name(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    /// Appends a volume to `spec.volumes`.
    #[must_use]
    pub fn volume(mut self, v: Volume) -> Self {
        self.spec().volumes.get_or_insert_with(Vec::new).push(v);
        self
    }

    /// A `persistentVolumeClaim` volume `volume` using claim `claim`.
    #[must_use]
    pub fn pvc_volume(self, volume: &str, claim: &str) -> Self {
        self.volume(Volume {
            name: volume.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        })
    }

    /// One `persistentVolumeClaim` volume per claim, named `v0`, `v1`, ...
    #[must_use]
    pub fn pvc_volumes(self, claims: &[&str]) -> Self {
        claims
            .iter()
            .enumerate()
            .fold(self, |b, (i, c)| b.pvc_volume(&format!("v{i}"), c))
    }

    /// A generic ephemeral volume `volume` (its claim is
    /// `<pod>-<volume>`).
    #[must_use]
    pub fn ephemeral_volume(self, volume: &str) -> Self {
        self.volume(Volume {
            name: volume.into(),
            ephemeral: Some(EphemeralVolumeSource {
                volume_claim_template: Some(PersistentVolumeClaimTemplate::default()),
            }),
            ..Default::default()
        })
    }

    /// `status.phase`.
    #[must_use]
    pub fn phase(mut self, phase: &str) -> Self {
        self.pod.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self
    }

    /// Appends `spec.schedulingGates[].name`.
    #[must_use]
    pub fn scheduling_gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::PodSchedulingGate { name: name.into() });
        self
    }

    /// `status.nominatedNodeName`.
    #[must_use]
    pub fn nominated_node_name(mut self, node: &str) -> Self {
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some(node.into());
        self
    }

    /// The `Pod`.
    #[must_use]
    pub fn build(self) -> Pod {
        self.pod
    }

    /// The compiled [`PodInfo`].
    ///
    /// # Panics
    /// If the builder produced an invalid pod (builders are for tests).
    #[must_use]
    pub fn build_info(self) -> PodInfo {
        PodInfo::from_pod(Arc::new(self.pod)).expect("builder pod must be valid")
    }
}

/// Which list of `spec.affinity` a [`PodBuilder::pod_affinity`] term joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodAffinityKind {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    Required,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    RequiredAnti,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution` with this weight.
    Preferred(i32),
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution` with this weight.
    PreferredAnti(i32),
}

/// A `PodAffinityTerm` whose `labelSelector` has one expression
/// (`key op values`; no values for `Exists` / `DoesNotExist`), in the pod's
/// own namespace; set `namespaces`, `namespace_selector` or
/// `match_label_keys` on the result for more.
#[must_use]
pub fn pod_affinity_term(
    key: &str,
    op: &str,
    values: &[&str],
    topology_key: &str,
) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|s| (*s).to_owned()).collect()),
            }]),
            match_labels: None,
        }),
        topology_key: topology_key.into(),
        ..Default::default()
    }
}

/// A hard (`DoNotSchedule`) `TopologySpreadConstraint` over `topology_key`
/// selecting pods labelled `app=<app>`; set `min_domains` and the policies
/// on the result for more.
#[must_use]
pub fn hard_spread(topology_key: &str, max_skew: i32, app: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: topology_key.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_owned(), app.to_owned())].into()),
            match_expressions: None,
        }),
        ..Default::default()
    }
}

fn requirement(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// A [`SharedLister`] over a plain list of nodes and namespace labels, for
/// plugin tests. `image_node_count` is the trait's default scan of the nodes.
#[derive(Debug, Default, Clone)]
pub struct FakeLister {
    /// The nodes, in the order `nodes()` returns them.
    pub nodes: Vec<Arc<NodeInfo>>,
    /// Namespace name → labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The volume objects ([`SharedLister::volumes`]); empty by default.
    pub volumes: Arc<VolumeState>,
}

impl FakeLister {
    /// A lister over `nodes`.
    #[must_use]
    pub fn new(nodes: Vec<NodeInfo>) -> Self {
        FakeLister {
            nodes: nodes.into_iter().map(Arc::new).collect(),
            namespaces: BTreeMap::new(),
            volumes: Arc::default(),
        }
    }
}

impl SharedLister for FakeLister {
    fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.nodes.iter().find(|n| n.name() == name)
    }

    fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(namespace)
    }

    fn volumes(&self) -> Arc<VolumeState> {
        Arc::clone(&self.volumes)
    }
}

/// Runs `plugin`'s PreFilter over `lister`, then its Filter on each of
/// `lister`'s nodes, as the framework does: `Err(status)` when PreFilter
/// does not return `Success` (`Skip` included), else each node's status in
/// `lister.nodes` order.
///
/// # Errors
/// PreFilter's status when it is not `Success`.
pub fn pre_filter_then_filter<P: PreFilterPlugin + FilterPlugin>(
    plugin: &P,
    pod: &PodInfo,
    lister: &FakeLister,
) -> Result<Vec<Status>, Status> {
    let mut state = CycleState::default();
    let (_, st) = plugin.pre_filter(&mut state, pod, lister);
    if st.code != Code::Success {
        return Err(st);
    }
    Ok(lister
        .nodes
        .iter()
        .map(|n| plugin.filter(&state, pod, n))
        .collect())
}
