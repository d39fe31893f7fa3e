//! `PodInfo`: the compact, pre-computed view of a Kubernetes `Pod` that the
//! scheduling pipeline reads (requests summed, selectors compiled once).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::gpu::{self, DeviceSet, state::PodGpu};
use crate::images;
use crate::object_source::ObjectSource;
use crate::pod_affinity::PodAffinity;
use crate::resources::{self, Resources};
use crate::selector::{self, Selector, Term};
use crate::taints::Toleration;
use crate::topology_spread::{self, TopologySpreadConstraint};
use crate::volumes::PodVolumes;
use crate::workload::{self, WorkloadClass};

/// The scheduler name pods get when they name none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// `namespace/name`, the identity people use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// Namespace (`default` when unset).
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl PodKey {
    /// Builds a key.
    #[must_use]
    pub fn new(namespace: &str, name: &str) -> Self {
        PodKey {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host IP; `0.0.0.0` (the default) means every address.
    pub ip: Arc<str>,
    /// `TCP` (default), `UDP` or `SCTP`.
    pub protocol: Arc<str>,
    /// Port number, 1..=65535.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot coexist on one node: same protocol and
    /// port, and the same IP or either one is the wildcard `0.0.0.0`
    /// (upstream `HostPortInfo.CheckConflict`).
    #[must_use]
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || &*self.ip == "0.0.0.0" || &*other.ip == "0.0.0.0")
    }
}

/// A preferred node affinity term with its weight (1..=100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedTerm {
    /// Added to a node's raw score when the term matches.
    pub weight: i64,
    /// The term.
    pub term: Term,
}

/// Everything the scheduler needs about a pod, computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: PodKey,
    /// `metadata.uid` (synthesized from the key when missing).
    pub uid: Arc<str>,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Effective request: cpu millicores, memory bytes, extended resources.
    pub requests: Resources,
    /// cpu millicores counted by scoring (100m per container without a request).
    pub non_zero_milli_cpu: i64,
    /// memory bytes counted by scoring (200 MiB per container without a request).
    pub non_zero_memory: i64,
    /// `spec.nodeName`: set when the pod is bound (or asks for a node).
    pub node_name: Option<Arc<str>>,
    /// `spec.schedulerName`.
    pub scheduler_name: Arc<str>,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity, if any.
    pub required_affinity: Option<Selector>,
    /// Preferred node affinity terms.
    pub preferred_affinity: Vec<WeightedTerm>,
    /// Pod affinity and anti-affinity terms (`spec.affinity.podAffinity`,
    /// `podAntiAffinity`); `None` when the pod has no such term (most pods).
    pub pod_affinity: Option<Arc<PodAffinity>>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Host ports requested by containers (and sidecars).
    pub host_ports: Vec<HostPort>,
    /// `spec.topologySpreadConstraints`, compiled (`matchLabelKeys` merged
    /// into the selectors), in spec order.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// One normalized image name per container, init containers first
    /// (upstream ImageLocality counts both; see
    /// [`images::normalized_image_name`]). Its length is the container count.
    pub images: Vec<Arc<str>>,
    /// Online or batch pool.
    pub class: WorkloadClass,
    /// Succeeded or Failed: holds no resources.
    pub terminal: bool,
    /// The object it was compiled from ([`PodInfo::pod`]).
    source: ObjectSource<Pod>,
    /// `spec.schedulingGates[*].name`, in spec order; empty for most pods.
    /// While any is present the `SchedulingGates` PreEnqueue plugin keeps
    /// the pod out of activeQ (upstream).
    pub scheduling_gates: Vec<String>,
    /// `spec.preemptionPolicy` is `Never`: the pod may not preempt others
    /// (DefaultPreemption answers `not eligible due to preemptionPolicy=Never.`).
    pub preemption_policy_never: bool,
    /// `metadata.deletionTimestamp` is set: the pod is being deleted (graceful
    /// termination) but still holds its resources on the node.
    pub terminating: bool,
    /// `status.startTime`; `None` for pods not started yet (assumed, bound
    /// but not running). Preemption reads such pods as started *now*, i.e.
    /// later than every pod with a start time (upstream `GetPodStartTime`).
    pub start_time: Option<Time>,
    /// `status.nominatedNodeName` (empty strings map to `None`): the node a
    /// previous preemption reserved room on for this pod.
    pub nominated_node_name: Option<Arc<str>>,
    /// The annotation `scheduling.flotilla.dev/max-instances-per-node`, as
    /// written (read by [`crate::max_instances`]).
    pub max_instances_annotation: Option<Arc<str>>,
    /// `spec.schedulingGroup.podGroupName` (empty maps to `None`): the
    /// `scheduling.k8s.io` PodGroup of the pod's namespace it belongs to
    /// (see [`crate::gang`]).
    pub pod_group_name: Option<Arc<str>>,
    /// `spec.volumes` as the volume plugins read them (claims, inline
    /// disks, CSI inline volumes); `None` when the pod has none of those
    /// (most pods: configMap, secret and emptyDir volumes are not kept).
    pub volumes: Option<Arc<PodVolumes>>,
    /// What the pod asks of GPUs and, bound, the devices it holds
    /// ([`crate::gpu::dialect`] says how both are read; a pending pod's
    /// `gpu-index` is not read); `None` for a pod that asks for no GPU
    /// (most pods).
    pub gpu: Option<Arc<PodGpu>>,
    /// Why the pod's GPU request cannot be read (the field and the
    /// problem), when it cannot: GpuShare refuses to place the pod; bound,
    /// it holds no device.
    pub gpu_error: Option<Arc<str>>,
}

/// A pod that cannot be read; names the object and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {message}")]
pub struct PodError {
    /// `namespace/name` (or `<unnamed>`).
    pub pod: String,
    /// Field path and problem.
    pub message: String,
}

impl PodInfo {
    /// The object this was compiled from. From [`PodInfo::from_json`], the
    /// JSON is decoded on the first call (a few microseconds) and kept.
    /// What the scheduling cycle needs is compiled into the fields; the
    /// object is for what speaks Kubernetes objects: extenders, placement
    /// webhooks, Events, status writes.
    #[must_use]
    pub fn pod(&self) -> Arc<Pod> {
        self.source.object(|| self.identity_pod())
    }

    /// [`PodInfo::pod`] without keeping the decoded object: for a one-off
    /// read where the `PodInfo` is held for long (the coordinator's records,
    /// which keep the JSON to stay small).
    #[must_use]
    pub fn pod_once(&self) -> Arc<Pod> {
        self.source.object_once(|| self.identity_pod())
    }

    /// What [`PodInfo::pod`] gives should the kept JSON not decode any more
    /// (it decoded when compiled): the identity, which is still known.
    fn identity_pod(&self) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(self.key.name.to_string()),
                namespace: Some(self.key.namespace.to_string()),
                uid: Some(self.uid.to_string()),
                labels: Some(self.labels.clone()),
                ..Default::default()
            },
            ..Pod::default()
        }
    }

    /// The object's JSON encoding: the kept JSON, or the object encoded now
    /// (a few microseconds) when it is kept whole.
    #[must_use]
    pub fn json(&self) -> Arc<[u8]> {
        self.source.json()
    }

    /// From now on keeps the object as its JSON (encoding it when it is
    /// kept whole) and drops this `PodInfo`'s hold on the decoded `Pod`: for
    /// whoever holds many pods for long (the coordinator holds every pod of
    /// the cluster). [`PodInfo::pod`] decodes it again on demand.
    pub fn keep_json(&mut self) {
        self.source.keep_json();
    }

    /// Compiles a pod from its JSON encoding (the API server's wire form),
    /// keeping the JSON rather than the decoded object: a `Pod` takes 5 KB
    /// and more in memory, its JSON a few hundred bytes, and a scheduler
    /// reads the object itself only for extenders, webhooks and the like
    /// ([`PodInfo::pod`]). What workers do with every pod they are sent.
    ///
    /// # Errors
    /// [`PodError`] when the JSON is not a `Pod` (naming the JSON path), or
    /// as [`PodInfo::from_pod`].
    pub fn from_json(json: &[u8]) -> Result<Self, PodError> {
        let pod: Pod = crate::object_source::decode(json).map_err(|message| PodError {
            pod: "<undecodable>".into(),
            message,
        })?;
        let mut info = Self::from_pod(Arc::new(pod))?;
        info.source = ObjectSource::json_of(json);
        Ok(info)
    }

    /// Compiles a `Pod`.
    ///
    /// # Errors
    /// [`PodError`] for a missing name or spec, a malformed quantity, selector,
    /// [`PodError`] for a missing name or spec, a malformed quantity, selector,
    /// pod (anti-)affinity term, toleration, host port, topology spread
    /// constraint or workload-class label.
    pub fn from_pod(pod: Arc<Pod>) -> Result<Self, PodError> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let Some(name) = pod.metadata.name.as_deref() else {
            return Err(PodError {
                pod: "<unnamed>".into(),
                message: "metadata.name: required".into(),
            });
        };
        let key = PodKey::new(namespace, name);
        let err = |message: String| PodError {
            pod: key.to_string(),
            message,
        };
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| err("spec: required".into()))?;
        let reqs = resources::pod_requests(spec).map_err(|e| err(e.to_string()))?;
        let class = workload::classify(&pod).map_err(err)?;
        // A GPU request Flotilla cannot read does not make the pod
        // unreadable: a bound one still holds its CPU and memory, and a
        // pending one is refused by GpuShare with the error.
        let annotations = pod.metadata.annotations.as_ref();
        let (gpu, gpu_error) = match gpu::dialect::pod_request(annotations, &reqs.requests) {
            Ok(Some(request)) => {
                // The devices only of a bound pod: on a pending one the
                // annotation is a copy (a manifest taken from a bound
                // pod), which the scheduler's choice replaces. One that
                // cannot be read is as none written: the pod is counted
                // on the tightest devices that hold it.
                let bound = spec.node_name.as_deref().is_some_and(|n| !n.is_empty());
                let devices = if bound {
                    gpu::dialect::pod_devices(annotations).ok().flatten()
                } else {
                    None
                };
                (Some(Arc::new(PodGpu { request, devices })), None)
            }
            Ok(None) => (None, None),
            Err(e) => (None, Some(Arc::from(e.as_str()))),
        };

        let mut required_affinity = None;
        let mut preferred_affinity = Vec::new();
        if let Some(na) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
        {
            const BASE: &str = "spec.affinity.nodeAffinity";
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                let field = format!("{BASE}.requiredDuringSchedulingIgnoredDuringExecution");
                required_affinity =
                    Some(selector::compile_selector(req, &field).map_err(|e| err(e.to_string()))?);
            }
            for (i, p) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let field = format!("{BASE}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                if !(1..=100).contains(&p.weight) {
                    return Err(err(format!(
                        "{field}.weight: {} must be in the range 1-100",
                        p.weight
                    )));
                }
                let term = selector::compile_term(&p.preference, &format!("{field}.preference"))
                    .map_err(|e| err(e.to_string()))?;
                preferred_affinity.push(WeightedTerm {
                    weight: i64::from(p.weight),
                    term,
                });
            }
        }

        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let pod_affinity = match &spec.affinity {
            Some(a) => PodAffinity::compile(a, namespace, &labels)
                .map_err(|e| err(e.to_string()))?
                .map(Arc::new),
            None => None,
        };

        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| Toleration::from_k8s(t, &format!("spec.tolerations[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;

        let mut host_ports = Vec::new();
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        for c in spec.containers.iter().chain(sidecars) {
            for p in c.ports.iter().flatten() {
                let Some(port) = p.host_port.filter(|p| *p != 0) else {
                    continue;
                };
                if !(1..=65535).contains(&port) {
                    return Err(err(format!(
                        "container {:?} ports.hostPort: {port} must be between 1 and 65535",
                        c.name
                    )));
                }
                host_ports.push(HostPort {
                    ip: Arc::from(
                        p.host_ip
                            .as_deref()
                            .filter(|s| !s.is_empty())
                            .unwrap_or("0.0.0.0"),
                    ),
                    protocol: Arc::from(p.protocol.as_deref().unwrap_or("TCP")),
                    port,
                });
            }
        }

        let topology_spread_constraints = topology_spread::compile(
            spec.topology_spread_constraints
                .as_deref()
                .unwrap_or_default(),
            pod.metadata.labels.as_ref(),
            "spec.topologySpreadConstraints",
        )
        .map_err(err)?;
        let images = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| {
                Arc::from(images::normalized_image_name(
                    c.image.as_deref().unwrap_or(""),
                ))
            })
            .collect();

        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let uid: Arc<str> = match pod.metadata.uid.as_deref() {
            Some(u) if !u.is_empty() => Arc::from(u),
            _ => Arc::from(format!("uid-{key}").as_str()),
        };
        let scheduling_gates = spec
            .scheduling_gates
            .iter()
            .flatten()
            .map(|g| g.name.clone())
            .collect();
        let nominated_node_name = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
            .map(Arc::from);
        Ok(PodInfo {
            uid,
            priority: spec.priority.unwrap_or(0),
            labels,
            requests: reqs.requests,
            non_zero_milli_cpu: reqs.non_zero_milli_cpu,
            non_zero_memory: reqs.non_zero_memory,
            node_name: spec
                .node_name
                .as_deref()
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            scheduler_name: Arc::from(
                spec.scheduler_name
                    .as_deref()
                    .unwrap_or(DEFAULT_SCHEDULER_NAME),
            ),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_affinity,
            preferred_affinity,
            pod_affinity,
            tolerations,
            host_ports,
            topology_spread_constraints,
            images,
            class,
            terminal,
            key,
            preemption_policy_never: spec.preemption_policy.as_deref() == Some("Never"),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            start_time: pod.status.as_ref().and_then(|s| s.start_time.clone()),
            max_instances_annotation: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE))
                .map(|v| Arc::from(v.as_str())),
            pod_group_name: spec
                .scheduling_group
                .as_ref()
                .and_then(|g| g.pod_group_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(Arc::from),
            volumes: PodVolumes::from_spec(name, spec.volumes.as_deref().unwrap_or_default())
                .map(Arc::new),
            source: ObjectSource::Object(pod),
            scheduling_gates,
            nominated_node_name,
            gpu,
            gpu_error,
        })
    }

    /// A copy of this pod holding `devices` of its node: what the
    /// scheduler assumes, and the arbiter grants, for a GPU pod.
    /// `self` unchanged when the pod asks for no GPU.
    #[must_use]
    pub fn with_gpu_devices(&self, devices: DeviceSet) -> PodInfo {
        let mut p = self.clone();
        if let Some(g) = &self.gpu {
            p.gpu = Some(Arc::new(PodGpu {
                request: g.request.clone(),
                devices: Some(devices),
            }));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    #[test]
    fn compiles_requests_ports_and_affinity() {
        let p = PodBuilder::new("web")
            .cpu("500m")
            .memory("1Gi")
            .host_port(8080)
            .node_selector("disk", "ssd")
            .priority(100)
            .build_info();
        assert_eq!(p.key.to_string(), "default/web");
        assert_eq!(p.requests.milli_cpu, 500);
        assert_eq!(p.requests.memory, 1 << 30);
        assert_eq!(p.priority, 100);
        assert_eq!(p.host_ports[0].port, 8080);
        assert_eq!(&*p.host_ports[0].ip, "0.0.0.0");
        assert_eq!(p.node_selector.get("disk").map(String::as_str), Some("ssd"));
        assert_eq!(p.class, WorkloadClass::Online);
    }

    #[test]
    fn images_are_normalized_one_per_container_init_first() {
        let p = PodBuilder::new("img")
            .image("gcr.io/30")
            .container("nginx:1.27")
            .container("gcr.io/30")
            .init_container("busybox@sha256:abc")
            .build_info();
        let got: Vec<&str> = p.images.iter().map(|i| &**i).collect();
        assert_eq!(
            got,
            [
                "busybox@sha256:abc",
                "gcr.io/30:latest",
                "nginx:1.27",
                "gcr.io/30:latest"
            ]
        );
    }

    #[test]
    fn kept_as_json_a_pod_info_gives_the_same_object_and_json() {
        let pod = PodBuilder::new("web")
            .cpu("500m")
            .label("app", "web")
            .build();
        let mut info = PodInfo::from_pod(Arc::new(pod.clone())).unwrap();
        let json = info.json();
        info.keep_json();
        assert_eq!(info.json(), json, "the same encoding, now kept");
        assert_eq!(*info.pod(), pod, "decoded back as it was");
        assert_eq!(*PodInfo::from_json(&json).unwrap().pod(), pod);
    }

    #[test]
    fn from_json_compiles_the_same_and_decodes_the_object_on_demand() {
        let pod = PodBuilder::new("web")
            .cpu("500m")
            .memory("1Gi")
            .label("app", "web")
            .annotation(crate::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE, "2")
            .host_port(8080)
            .build();
        let json = serde_json::to_vec(&pod).unwrap();
        let a = PodInfo::from_pod(Arc::new(pod.clone())).unwrap();
        let b = PodInfo::from_json(&json).unwrap();
        assert_eq!(
            (&a.key, &a.uid, &a.labels, &a.requests, &a.host_ports),
            (&b.key, &b.uid, &b.labels, &b.requests, &b.host_ports)
        );
        assert_eq!(b.max_instances_annotation.as_deref(), Some("2"));
        assert_eq!(*b.pod(), pod, "the object decodes back as it was");
        assert!(
            Arc::ptr_eq(&b.pod(), &b.clone().pod()),
            "decoded once, shared"
        );

        let e = PodInfo::from_json(br#"{"metadata":{"name":7}}"#).unwrap_err();
        assert!(e.message.contains("metadata.name"), "{e}");
        let e = PodInfo::from_json(br#"{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"lots"}}}]}}"#).unwrap_err();
        assert_eq!(e.pod, "default/x");
        assert!(e.message.contains("requests.cpu"), "{e}");
    }

    #[test]
    fn bad_quantity_names_pod_and_field() {
        let pod = PodBuilder::new("bad").cpu("lots").build();
        let e = PodInfo::from_pod(Arc::new(pod)).unwrap_err();
        assert_eq!(e.pod, "default/bad");
        assert!(
            e.to_string()
                .contains("spec.containers[0].resources.requests.cpu"),
            "{e}"
        );
    }

    #[test]
    fn preemption_fields_come_from_spec_metadata_and_status() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let plain = PodBuilder::new("plain").build_info();
        assert!(!plain.preemption_policy_never && !plain.terminating);
        assert_eq!(
            (plain.start_time.clone(), plain.nominated_node_name.clone()),
            (None, None)
        );

        let mut pod = PodBuilder::new("p").build();
        pod.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        pod.metadata.deletion_timestamp = Some(Time(Default::default()));
        let status = pod.status.as_mut().unwrap();
        status.start_time = Some(Time(Default::default()));
        status.nominated_node_name = Some("n1".into());
        let p = PodInfo::from_pod(Arc::new(pod)).unwrap();
        assert!(p.preemption_policy_never && p.terminating);
        assert_eq!(p.start_time, Some(Time(Default::default())));
        assert_eq!(p.nominated_node_name.as_deref(), Some("n1"));

        let mut pod = PodBuilder::new("q").build();
        pod.spec.as_mut().unwrap().preemption_policy = Some("PreemptLowerPriority".into());
        pod.status.as_mut().unwrap().nominated_node_name = Some(String::new());
        let q = PodInfo::from_pod(Arc::new(pod)).unwrap();
        assert!(!q.preemption_policy_never);
        assert_eq!(
            q.nominated_node_name, None,
            "an empty nominatedNodeName is unset"
        );
    }

    #[test]
    fn host_port_conflicts_follow_wildcard_rules() {
        let hp = |ip: &str, port| HostPort {
            ip: Arc::from(ip),
            protocol: Arc::from("TCP"),
            port,
        };
        assert!(hp("0.0.0.0", 80).conflicts_with(&hp("10.0.0.1", 80)));
        assert!(hp("10.0.0.1", 80).conflicts_with(&hp("10.0.0.1", 80)));
        assert!(!hp("10.0.0.1", 80).conflicts_with(&hp("10.0.0.2", 80)));
        assert!(!hp("0.0.0.0", 80).conflicts_with(&hp("0.0.0.0", 81)));
        let udp = HostPort {
            protocol: Arc::from("UDP"),
            ..hp("0.0.0.0", 80)
        };
        assert!(!udp.conflicts_with(&hp("0.0.0.0", 80)));
    }

    #[test]
    fn scheduling_gates_and_nominated_node_are_read() {
        let p = PodBuilder::new("g")
            .scheduling_gate("example.com/a")
            .scheduling_gate("example.com/b")
            .nominated_node_name("n1")
            .build_info();
        assert_eq!(p.scheduling_gates, ["example.com/a", "example.com/b"]);
        assert_eq!(p.nominated_node_name.as_deref(), Some("n1"));

        let plain = PodBuilder::new("p").nominated_node_name("").build_info();
        assert!(plain.scheduling_gates.is_empty());
        assert_eq!(plain.nominated_node_name, None, "empty means none");
    }
}
