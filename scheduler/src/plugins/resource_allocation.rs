//! What the resource score plugins share (upstream
//! `pkg/scheduler/framework/plugins/noderesources/resource_allocation.go`):
//! the `resources: [{name, weight}]` args entry and, per node, the
//! `(allocatable, requested)` figures of each configured resource.
//!
//! Upstream facts mirrored (`calculateResourceAllocatableRequest`):
//! - cpu and memory count the node's **non-zero** sums and the pod's
//!   non-zero request (a container without a request counts 100m / 200 MiB)
//!   for NodeResourcesFit (`useRequested: false`), the real requests for
//!   NodeResourcesBalancedAllocation (`useRequested: true`);
//! - ephemeral-storage always counts real requests;
//! - any other name is looked up among the node's extended resources
//!   (`nvidia.com/gpu`, `hugepages-2Mi`, ...); one the pod does not request
//!   is left out of the score, so pods without GPUs do not favour or avoid
//!   GPU nodes;
//! - a resource whose allocatable is 0 is left out, weight included.

use std::sync::Arc;

use serde::{Deserialize, Deserializer};

use flotilla_shared::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};
use flotilla_shared::{NodeHot, NodeInfo, PodInfo};

/// Upstream default resource weight (applied when a weight is unset or 0).
pub const DEFAULT_RESOURCE_WEIGHT: i64 = 1;

/// One resource a score plugin weighs, as written in args (upstream
/// `ResourceSpec`): `{name: cpu, weight: 1}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ResourceSpec {
    /// Resource name: `cpu`, `memory`, `ephemeral-storage` or an extended
    /// resource such as `nvidia.com/gpu`.
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// Weight; unset or 0 means [`DEFAULT_RESOURCE_WEIGHT`] (upstream v1
    /// defaulting). Valid range depends on the plugin.
    #[serde(deserialize_with = "null_as_default")]
    pub weight: i64,
}

impl ResourceSpec {
    /// A spec with a name and weight.
    #[must_use]
    pub fn new(name: &str, weight: i64) -> Self {
        ResourceSpec {
            name: name.to_owned(),
            weight,
        }
    }
}

/// Upstream `defaultResourceSpec`: cpu and memory, weight 1 each.
#[must_use]
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec::new(CPU, DEFAULT_RESOURCE_WEIGHT),
        ResourceSpec::new(MEMORY, DEFAULT_RESOURCE_WEIGHT),
    ]
}

/// Upstream v1 defaulting of a `resources` list: empty means
/// [`default_resources`], a 0 weight means [`DEFAULT_RESOURCE_WEIGHT`].
#[must_use]
pub fn defaulted(resources: &[ResourceSpec]) -> Vec<ResourceSpec> {
    if resources.is_empty() {
        return default_resources();
    }
    resources
        .iter()
        .map(|r| ResourceSpec {
            name: r.name.clone(),
            weight: if r.weight == 0 {
                DEFAULT_RESOURCE_WEIGHT
            } else {
                r.weight
            },
        })
        .collect()
}

/// Deserializes JSON `null` as the type's default, as Go's decoder leaves a
/// field at its zero value (YAML `weight:` with nothing after it is `null`).
///
/// # Errors
/// Whatever `T` rejects.
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Which figures of a node and a pod a configured resource reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceKind {
    /// `cpu`, millicores.
    Cpu,
    /// `memory`, bytes.
    Memory,
    /// `ephemeral-storage`, bytes.
    EphemeralStorage,
    /// Any other name: a scalar resource of the node (extended resources
    /// such as `nvidia.com/gpu`, `hugepages-*`).
    Scalar(Arc<str>),
}

impl ResourceKind {
    /// The kind a resource name reads.
    #[must_use]
    pub fn of(name: &str) -> Self {
        match name {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            other => ResourceKind::Scalar(Arc::from(other)),
        }
    }

    /// The pod's request of this resource: non-zero cpu / memory when
    /// `use_requested` is false (NodeResourcesFit), real requests otherwise.
    #[must_use]
    pub fn pod_request(&self, pod: &PodInfo, use_requested: bool) -> i64 {
        match self {
            ResourceKind::Cpu if use_requested => pod.requests.milli_cpu,
            ResourceKind::Cpu => pod.non_zero_milli_cpu,
            ResourceKind::Memory if use_requested => pod.requests.memory,
            ResourceKind::Memory => pod.non_zero_memory,
            ResourceKind::EphemeralStorage => pod.requests.ephemeral_storage,
            ResourceKind::Scalar(name) => pod.requests.scalar(name),
        }
    }

    /// The node's figures for this resource with `pod_request` added, or
    /// `None` when upstream leaves the resource out of the score (allocatable
    /// 0, or an extended resource the pod does not request). Also `None`
    /// for a requested extended resource read from figures that lack it
    /// (a [`NodeHot`]): callers check [`hot_scorable`] first.
    #[must_use]
    pub fn allocation(
        &self,
        node: &impl NodeFigures,
        pod_request: i64,
        use_requested: bool,
    ) -> Option<Allocation> {
        if matches!(self, ResourceKind::Scalar(_)) && pod_request == 0 {
            return None;
        }
        let (allocatable, node_requested) = node.figures(self, use_requested)?;
        (allocatable != 0).then_some(Allocation {
            allocatable,
            node_requested,
            requested: node_requested + pod_request,
        })
    }
}

/// Where a node's resource figures come from: its [`NodeInfo`], or its
/// [`NodeHot`] record in the snapshot (which has no extended resources).
pub trait NodeFigures {
    /// `(allocatable, requested on the node)` of `kind`: the non-zero
    /// cpu / memory sums unless `use_requested`. `None` when these figures
    /// do not hold the resource (an extended resource on a [`NodeHot`]).
    fn figures(&self, kind: &ResourceKind, use_requested: bool) -> Option<(i64, i64)>;
}

impl NodeFigures for NodeInfo {
    fn figures(&self, kind: &ResourceKind, use_requested: bool) -> Option<(i64, i64)> {
        let alloc = &self.spec.allocatable;
        Some(match kind {
            ResourceKind::Cpu if use_requested => (alloc.milli_cpu, self.requested.milli_cpu),
            ResourceKind::Cpu => (alloc.milli_cpu, self.non_zero_milli_cpu),
            ResourceKind::Memory if use_requested => (alloc.memory, self.requested.memory),
            ResourceKind::Memory => (alloc.memory, self.non_zero_memory),
            ResourceKind::EphemeralStorage => {
                (alloc.ephemeral_storage, self.requested.ephemeral_storage)
            }
            ResourceKind::Scalar(name) => (alloc.scalar(name), self.requested.scalar(name)),
        })
    }
}

impl NodeFigures for NodeHot {
    fn figures(&self, kind: &ResourceKind, use_requested: bool) -> Option<(i64, i64)> {
        Some(match kind {
            ResourceKind::Cpu if use_requested => {
                (self.allocatable_milli_cpu, self.requested_milli_cpu)
            }
            ResourceKind::Cpu => (self.allocatable_milli_cpu, self.non_zero_milli_cpu),
            ResourceKind::Memory if use_requested => {
                (self.allocatable_memory, self.requested_memory)
            }
            ResourceKind::Memory => (self.allocatable_memory, self.non_zero_memory),
            ResourceKind::EphemeralStorage => (
                self.allocatable_ephemeral_storage,
                self.requested_ephemeral_storage,
            ),
            ResourceKind::Scalar(_) => return None,
        })
    }
}

/// Whether the score over `resources` for `pod` can be computed from a
/// [`NodeHot`]: no configured extended resource is requested by the pod
/// (an unrequested one is left out of the score anyway).
#[must_use]
pub fn hot_scorable<'a>(
    resources: impl IntoIterator<Item = &'a ResourceKind>,
    pod: &PodInfo,
) -> bool {
    resources.into_iter().all(|kind| match kind {
        ResourceKind::Scalar(name) => pod.requests.scalar(name) == 0,
        _ => true,
    })
}

/// One resource's figures on one node (millicores for cpu, bytes for
/// memory and storage, counts for extended resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Node allocatable (never 0).
    pub allocatable: i64,
    /// Requested on the node before the pod.
    pub node_requested: i64,
    /// Requested on the node with the pod.
    pub requested: i64,
}

/// A configured resource, compiled: what it reads and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedResource {
    /// What it reads.
    pub kind: ResourceKind,
    /// Its weight in the node score.
    pub weight: i64,
}

impl WeightedResource {
    /// Compiles a (defaulted, validated) spec.
    #[must_use]
    pub fn new(spec: &ResourceSpec) -> Self {
        WeightedResource {
            kind: ResourceKind::of(&spec.name),
            weight: spec.weight,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn defaults_fill_an_empty_list_and_zero_weights() {
        assert_eq!(
            defaulted(&[]),
            [ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]
        );
        assert_eq!(
            defaulted(&[
                ResourceSpec::new("nvidia.com/gpu", 0),
                ResourceSpec::new("cpu", 3)
            ]),
            [
                ResourceSpec::new("nvidia.com/gpu", 1),
                ResourceSpec::new("cpu", 3)
            ]
        );
        let v = serde_json::json!({"name": "cpu", "weight": null});
        let r: ResourceSpec = serde_json::from_value(v).unwrap();
        assert_eq!(r, ResourceSpec::new("cpu", 0), "null is the zero value");
    }

    #[test]
    fn figures_follow_use_requested_and_skip_unrequested_extended_resources() {
        let mut node = NodeInfo::new(Arc::new(
            NodeBuilder::new("n")
                .cpu("4")
                .memory("8Gi")
                .resource("ephemeral-storage", "100Gi")
                .resource("nvidia.com/gpu", "4")
                .pods(110)
                .build_spec(),
        ));
        node.add_pod(Arc::new(PodBuilder::new("be").build_info()));
        let pod = PodBuilder::new("p")
            .cpu("1")
            .request("nvidia.com/gpu", "1")
            .build_info();
        let cpu = ResourceKind::of("cpu");
        // Fit: the best-effort neighbour counts 100m, the pod its 1000m.
        let fit = cpu
            .allocation(&node, cpu.pod_request(&pod, false), false)
            .unwrap();
        assert_eq!(
            (fit.allocatable, fit.node_requested, fit.requested),
            (4000, 100, 1100)
        );
        // Balanced: real requests only.
        let bal = cpu
            .allocation(&node, cpu.pod_request(&pod, true), true)
            .unwrap();
        assert_eq!((bal.node_requested, bal.requested), (0, 1000));
        // Memory: the pod sets none, so it counts 200 MiB for Fit, 0 for Balanced.
        let mem = ResourceKind::of("memory");
        assert_eq!(mem.pod_request(&pod, false), 200 << 20);
        assert_eq!(mem.pod_request(&pod, true), 0);
        let gpu = ResourceKind::of("nvidia.com/gpu");
        let g = gpu
            .allocation(&node, gpu.pod_request(&pod, false), false)
            .unwrap();
        assert_eq!((g.allocatable, g.requested), (4, 1));
        let other = PodBuilder::new("o").cpu("1").build_info();
        assert_eq!(
            gpu.allocation(&node, gpu.pod_request(&other, false), false),
            None
        );
        let absent = ResourceKind::of("example.com/foo");
        assert_eq!(absent.allocation(&node, 1, false), None, "allocatable 0");
        let es = ResourceKind::of("ephemeral-storage");
        assert_eq!(
            es.allocation(&node, 0, false).unwrap().allocatable,
            100 << 30
        );
    }
}
