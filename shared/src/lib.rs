//! Flotilla's common types: the cluster model, resources, and the plugin
//! framework API shared by the scheduler workers and the coordinator.
//!
//! # Layout
//! - [`quantity`]: Kubernetes quantity strings → millicores / bytes / counts.
//! - [`resources`]: resource vectors and a pod's effective request (upstream
//!   `PodRequests`: containers, init containers, sidecars, overhead).
//! - [`selector`], [`taints`]: node affinity terms and taint/toleration
//!   matching, compiled once per pod; [`label_selector`]: `metav1.LabelSelector`.
//! - [`pod_affinity`]: inter-pod (anti-)affinity terms, compiled once per
//!   pod, and the InterPodAffinity counting / checking used by the plugin's
//!   Filter and bind check.
//! - [`pod_info`], [`node_info`]: `PodInfo` / `NodeInfo`, the compact views the
//!   pipeline reads; Kubernetes `Pod`/`Node` stay at the edges.
//! - [`fit`]: the fit checks (resources, host ports, cordon) of
//!   NodeResourcesFit, NodePorts and NodeUnschedulable, each called by the
//!   plugin's Filter and by its bind check.
//! - [`topology_spread`]: `spec.topologySpreadConstraints` compiled once per
//!   pod, and the pure spread counting / skew check / scoring of the
//!   PodTopologySpread plugin (its Filter, bind check and Score).
//! - [`max_instances`]: at most `k` pods of one app per node (annotation
//!   `scheduling.flotilla.dev/max-instances-per-node`), the check of the
//!   MaxInstancesPerNode plugin's Filter and bind check.
//! - [`pdb`]: `PodDisruptionBudget` compiled for preemption.
//! - [`images`]: container image names (pods) and reported images (nodes),
//!   for ImageLocality.
//! - [`volumes`]: PersistentVolumeClaims, PersistentVolumes, StorageClasses,
//!   CSINodes and VolumeAttachments compiled for the volume plugins, the
//!   store a cycle reads them from, and the pure checks of VolumeZone,
//!   VolumeRestrictions and NodeVolumeLimits.
//! - [`workload`]: online vs batch classification.
//! - [`pod_group`]: the `PodGroup` custom resource of gang scheduling
//!   (scheduler-plugins Coscheduling) and the pod label naming it.
//! - [`framework`]: the plugin traits (PreFilter, Filter, Score, and the
//!   Filters' bind-time re-check `BindCheck` the coordinator's arbiter runs),
//!   `Status`, `CycleState` and `FitError`.
//! - [`priority`]: pod priority from PriorityClasses, as admission resolves it.
//! - [`extender`]: the upstream HTTP scheduler extender: wire format,
//!   configuration, and one client per extender.
//! - [`metrics`]: the process's Prometheus metrics (kube-scheduler's names,
//!   and Flotilla's Omega-style ones); [`telemetry`]: the `/metrics`,
//!   `/healthz`, `/readyz` endpoint; [`trace`]: logs and OpenTelemetry
//!   spans (OTLP, W3C context between processes).
//! - [`http`]: JSON over HTTP(S) POST with deadlines and TLS, the transport
//!   of extenders and placement webhooks.
//! - [`tls`]: the coordinator's mutual TLS: PEM inputs, a worker's identity
//!   and allowed classes from its client certificate, ephemeral certificates.
//! - [`testing`]: builders for pods and nodes.

pub mod affinity_counts;
pub mod extender;
pub mod fit;
pub mod framework;
pub mod gang;
pub mod gpu;
pub mod http;
pub mod images;
pub mod label_selector;
pub mod max_instances;
pub mod metrics;
pub mod node_hot;
pub mod node_info;
pub mod object_source;
pub mod objects;
pub mod pdb;
pub mod pod_affinity;
pub mod pod_group;
pub mod pod_info;
pub mod preemption;
pub mod priority;
pub mod quantity;
pub mod resources;
pub mod selector;
pub mod spread_counts;
pub mod stable_hash;
pub mod taints;
pub mod telemetry;
pub mod testing;
pub mod tls;
pub mod topology_spread;
pub mod trace;
pub mod volumes;
pub mod workload;

pub use node_hot::NodeHot;
pub use node_info::{NodeInfo, NodeSpec};
pub use pod_info::{PodInfo, PodKey};
pub use resources::Resources;
pub use workload::WorkloadClass;
