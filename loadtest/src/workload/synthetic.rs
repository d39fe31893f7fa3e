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
    let node_resources = resource_list([
        ("cpu", NODE_CPU.to_owned()),
        ("memory", NODE_MEMORY.to_owned()),
        ("pods", NODE_PODS.to_owned()),
    ]);
    let pod_requests = resource_list([
        ("cpu", POD_CPU.to_owned()),
        ("memory", POD_MEMORY.to_owned()),
    ]);

    let nodes_out = (0..nodes)
        .map(|i| {
            ready_node(
                &format!("node-{i:05}"),
                BTreeMap::new(),
                node_resources.clone(),
            )
        })
        .collect();
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
            let class = if i % 2 == 0 {
                WORKLOAD_CLASS_ONLINE
            } else {
                WORKLOAD_CLASS_BATCH
            };
            pod.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_WORKLOAD_CLASS.to_owned(), class.to_owned());
            pod
        })
        .collect();

    Workload {
        name: format!("scheduling-basic-{nodes}nodes-{pods}pods"),
        nodes: nodes_out,
        pods: pods_out,
        warnings: Vec::new(),
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
