//! Synthetic workloads shaped like upstream `scheduler_perf` test cases.
//!
//! [`scheduling_basic`] mirrors `SchedulingBasic` from
//! `kubernetes/test/integration/scheduler_perf`: identical nodes from
//! `node-default.yaml` (4 CPUs, 32 GiB, 110 pods) and identical pods from
//! `pod-default.yaml` (100m CPU, 500 MiB). Unlike upstream, the pods carry
//! requests only (no limits), every object gets a fixed name so runs are
//! reproducible, and pods alternate between the `online` and `batch` workload
//! classes (label `flotilla.io/workload-class`) so both worker pools work.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};

use super::{
    LABEL_WORKLOAD_CLASS, PAUSE_IMAGE, WORKLOAD_CLASS_BATCH, WORKLOAD_CLASS_ONLINE, Workload,
    pending_pod, ready_node, resource_list,
};

/// Default node count of [`scheduling_basic`], like upstream's `500Nodes` case.
pub const DEFAULT_NODES: usize = 500;
/// Default pod count of [`scheduling_basic`]: 10 pods per default node.
pub const DEFAULT_PODS: usize = 5000;

/// Namespace of the generated pods.
pub const NAMESPACE: &str = "default";
/// CPU capacity (= allocatable) of every generated node, in cores.
pub const NODE_CPU: &str = "4";
/// Memory capacity (= allocatable) of every generated node.
pub const NODE_MEMORY: &str = "32Gi";
/// Pod capacity (= allocatable) of every generated node, in pods.
pub const NODE_PODS: &str = "110";
/// CPU request of every generated pod, in millicores.
pub const POD_CPU: &str = "100m";
/// Memory request of every generated pod.
pub const POD_MEMORY: &str = "500Mi";
/// Name of the single container of every generated pod.
pub const CONTAINER_NAME: &str = "pause";

/// Labels the `i`-th generated pod online (even `i`) or batch (odd), so
/// both worker pools work.
fn alternate_class(pod: &mut k8s_openapi::api::core::v1::Pod, i: usize) {
    let class = if i.is_multiple_of(2) {
        WORKLOAD_CLASS_ONLINE
    } else {
        WORKLOAD_CLASS_BATCH
    };
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL_WORKLOAD_CLASS.to_owned(), class.to_owned());
}

/// `n` upstream `node-default` nodes `node-00000`, `node-00001`, …
fn default_nodes(n: usize) -> Vec<k8s_openapi::api::core::v1::Node> {
    let node_resources = resource_list([
        ("cpu", NODE_CPU.to_owned()),
        ("memory", NODE_MEMORY.to_owned()),
        ("pods", NODE_PODS.to_owned()),
    ]);
    (0..n)
        .map(|i| {
            ready_node(
                &format!("node-{i:05}"),
                BTreeMap::new(),
                node_resources.clone(),
            )
        })
        .collect()
}

/// `nodes` identical nodes and `pods` identical pods, like upstream
/// `SchedulingBasic`.
///
/// - Nodes `node-00000`, `node-00001`, …: capacity = allocatable = cpu
///   [`NODE_CPU`], memory [`NODE_MEMORY`], pods [`NODE_PODS`]; label
///   `kubernetes.io/hostname`; condition `Ready=True`; no taints.
/// - Pods `default/pod-00000`, `default/pod-00001`, …: one container
///   requesting cpu [`POD_CPU`] and memory [`POD_MEMORY`] (requests only), a
///   deterministic uid, `schedulerName: default-scheduler`, phase `Pending`.
///
/// Names are zero-padded to 5 digits (wider beyond 99,999).
pub fn scheduling_basic(nodes: usize, pods: usize) -> Workload {
    let pod_requests = resource_list([
        ("cpu", POD_CPU.to_owned()),
        ("memory", POD_MEMORY.to_owned()),
    ]);

    let nodes_out = default_nodes(nodes);
    let pods_out = (0..pods)
        .map(|i| {
            let container = Container {
                name: CONTAINER_NAME.to_owned(),
                image: Some(PAUSE_IMAGE.to_owned()),
                resources: Some(ResourceRequirements {
                    requests: Some(pod_requests.clone()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            };
            let mut pod = pending_pod(NAMESPACE, &format!("pod-{i:05}"), container);
            alternate_class(&mut pod, i);
            pod
        })
        .collect();

    Workload {
        name: format!("scheduling-basic-{nodes}nodes-{pods}pods"),
        nodes: nodes_out,
        pods: pods_out,
        warnings: Vec::new(),
        barriers: Vec::new(),
        ..Default::default()
    }
}

/// CPU request of [`preemption_basic`]'s low-priority pods (upstream
/// `pod-low-priority.yaml`): four fill a 4-CPU node to 3.6 CPU.
pub const LOW_PRIORITY_POD_CPU: &str = "900m";
/// CPU request of [`preemption_basic`]'s high-priority pods (upstream
/// `pod-high-priority.yaml`): placing one evicts three low-priority pods.
pub const HIGH_PRIORITY_POD_CPU: &str = "3";
/// `spec.priority` of [`preemption_basic`]'s high-priority pods (upstream: 10).
pub const HIGH_PRIORITY: i32 = 10;
/// Default node count of [`preemption_basic`] (upstream's older 500-node case).
pub const PREEMPTION_NODES: usize = 500;

/// Upstream `scheduler_perf` `PreemptionBasic`: `nodes` default nodes
/// (4 CPU / 32 Gi / 110 pods), `4 × nodes` low-priority pods
/// `low-NNNNN` (900m / 500 Mi, priority 0, grace period 0) that fill them,
/// a barrier, then `nodes` high-priority pods `high-NNNNN` (3 CPU / 500 Mi,
/// priority 10, grace period 0), each of which fits only by preempting three
/// low-priority pods. Pods alternate between the online and batch pools.
pub fn preemption_basic(nodes: usize) -> Workload {
    let nodes_out = default_nodes(nodes);
    let pod = |name: String, cpu: &str, priority: i32, i: usize| {
        let container = Container {
            name: CONTAINER_NAME.to_owned(),
            image: Some(PAUSE_IMAGE.to_owned()),
            resources: Some(ResourceRequirements {
                requests: Some(resource_list([
                    ("cpu", cpu.to_owned()),
                    ("memory", POD_MEMORY.to_owned()),
                ])),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let mut pod = pending_pod(NAMESPACE, &name, container);
        if let Some(spec) = pod.spec.as_mut() {
            spec.priority = Some(priority);
            spec.termination_grace_period_seconds = Some(0);
        }
        alternate_class(&mut pod, i);
        pod
    };
    let low = 4 * nodes;
    let mut pods: Vec<_> = (0..low)
        .map(|i| pod(format!("low-{i:05}"), LOW_PRIORITY_POD_CPU, 0, i))
        .collect();
    pods.extend((0..nodes).map(|i| {
        pod(
            format!("high-{i:05}"),
            HIGH_PRIORITY_POD_CPU,
            HIGH_PRIORITY,
            i,
        )
    }));
    Workload {
        name: format!("preemption-basic-{nodes}nodes"),
        nodes: nodes_out,
        pods,
        warnings: Vec::new(),
        barriers: vec![low],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::workload::LABEL_HOSTNAME;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn counts_and_names() {
        let w = scheduling_basic(3, 12);
        assert_eq!(w.nodes.len(), 3);
        assert_eq!(w.pods.len(), 12);
        assert!(w.warnings.is_empty());
        let node_names: Vec<_> = w
            .nodes
            .iter()
            .map(|n| n.metadata.name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(node_names, ["node-00000", "node-00001", "node-00002"]);
        assert_eq!(w.pods[0].metadata.name.as_deref(), Some("pod-00000"));
        assert_eq!(w.pods[11].metadata.name.as_deref(), Some("pod-00011"));
        assert!(
            w.pods
                .iter()
                .all(|p| p.metadata.namespace.as_deref() == Some("default"))
        );

        let uids: HashSet<_> = w.pods.iter().map(|p| p.metadata.uid.clone()).collect();
        assert_eq!(uids.len(), 12, "uids are unique");
        assert!(!uids.contains(&None));
        assert_eq!(
            scheduling_basic(0, 1).pods[0].metadata.uid,
            w.pods[0].metadata.uid,
            "uids are deterministic"
        );

        let empty = scheduling_basic(0, 0);
        assert!(empty.nodes.is_empty() && empty.pods.is_empty());
    }

    #[test]
    fn node_allocatable_labels_and_condition() {
        let w = scheduling_basic(2, 0);
        let node = &w.nodes[1];
        let status = node.status.as_ref().expect("status");
        let alloc = status.allocatable.as_ref().expect("allocatable");
        assert_eq!(alloc.get("cpu"), Some(&q("4")));
        assert_eq!(alloc.get("memory"), Some(&q("32Gi")));
        assert_eq!(alloc.get("pods"), Some(&q("110")));
        assert_eq!(alloc.len(), 3);
        assert_eq!(status.capacity.as_ref(), Some(alloc));
        let labels = node.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(LABEL_HOSTNAME).map(String::as_str),
            Some("node-00001")
        );
        let conditions = status.conditions.as_ref().expect("conditions");
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        assert!(node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_none());
    }

    #[test]
    fn preemption_basic_fills_nodes_then_needs_three_victims_per_high_pod() {
        let w = preemption_basic(3);
        assert_eq!(w.nodes.len(), 3);
        assert_eq!(w.pods.len(), 15);
        assert_eq!(w.barriers, [12]);
        let cpu = |p: &k8s_openapi::api::core::v1::Pod| {
            let spec = p.spec.as_ref().expect("spec");
            let r = spec.containers[0].resources.as_ref().expect("resources");
            let q = r.requests.as_ref().expect("requests")["cpu"].clone();
            (q, spec.priority, spec.termination_grace_period_seconds)
        };
        assert_eq!(cpu(&w.pods[0]), (q("900m"), Some(0), Some(0)));
        assert_eq!(cpu(&w.pods[12]), (q("3"), Some(10), Some(0)));
        assert_eq!(w.pods[12].metadata.name.as_deref(), Some("high-00000"));
        // Four low pods fill a node to 3.6 of 4 CPU (400m free); a 3-CPU
        // pod needs exactly three of them gone.
        let free_after = |victims: i64| 4000 - 4 * 900 + victims * 900;
        assert!(free_after(0) >= 0 && free_after(2) < 3000 && free_after(3) >= 3000);
    }

    #[test]
    fn pod_requests_only_and_pending() {
        let w = scheduling_basic(0, 1);
        let pod = &w.pods[0];
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.containers.len(), 1);
        let resources = spec.containers[0].resources.as_ref().expect("resources");
        let requests = resources.requests.as_ref().expect("requests");
        assert_eq!(requests.get("cpu"), Some(&q("100m")));
        assert_eq!(requests.get("memory"), Some(&q("500Mi")));
        assert_eq!(requests.len(), 2);
        assert!(resources.limits.is_none());
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert!(spec.node_name.is_none());
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
    }
}
