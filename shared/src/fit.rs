//! The pure fit checks of the Filter plugins NodeResourcesFit
//! ([`insufficient_reasons`], [`fits_resources`]), NodePorts
//! ([`ports_conflict`]) and NodeUnschedulable ([`blocked_by_cordon`]). Each
//! plugin's Filter and its bind check (`flotilla_shared::framework::BindCheck`,
//! which the coordinator's bind arbiter runs) call the same function, so
//! the worker and the arbiter can never disagree on what "fits" means.
//!
//! # Ignored resources
//! NodeResourcesFit's `ignoredResources` / `ignoredResourceGroups` (and the
//! resources extenders manage with `ignoredByScheduler`, which upstream
//! adds to `ignoredResources`) reach the check as an [`IgnoredResources`]
//! parameter, held by the plugin instance built from the profile's args:
//! its Filter and its bind check pass the same lists.

use std::borrow::Cow;
use std::ops::ControlFlow;

use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS, is_extended_resource};
use crate::taints::{NO_SCHEDULE, TAINT_NODE_UNSCHEDULABLE};

/// Reason for a node over its pod slots (upstream text).
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";
/// Reason for host-port clashes (upstream NodePorts text).
pub const REASON_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
/// Reason for a cordoned node (upstream NodeUnschedulable text).
pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";

/// One resource the node lacks for the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`, `pods`).
    pub resource: Cow<'static, str>,
    /// Upstream reason text: `Insufficient cpu`, `Too many pods`.
    pub reason: Cow<'static, str>,
    /// What the pod asks for (millicores for cpu, bytes for memory).
    pub requested: i64,
    /// Already in use on the node.
    pub used: i64,
    /// Node allocatable.
    pub capacity: i64,
    /// The pod asks for more than the node's whole allocatable: removing
    /// pods (preemption) cannot help. Upstream v1.34+ reports these nodes as
    /// UnschedulableAndUnresolvable.
    pub unresolvable: bool,
}

/// Extended resources a Filter leaves unchecked (NodeResourcesFit args
/// `ignoredResources` and `ignoredResourceGroups`). As upstream, only
/// extended resources ([`is_extended_resource`]) can be ignored; cpu,
/// memory, ephemeral-storage, pods, hugepages and the `*kubernetes.io/`
/// ones are always checked. Lists, not sets: configs name a handful at most, and a linear
/// scan of a few strings beats hashing on the Filter hot path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoredResources {
    /// Full resource names, e.g. `example.com/foo`.
    pub names: Vec<Box<str>>,
    /// Resource groups: the part before the `/`, e.g. `example.com` ignores
    /// every `example.com/*` resource.
    pub groups: Vec<Box<str>>,
}

impl IgnoredResources {
    /// Ignores nothing.
    pub const NONE: IgnoredResources = IgnoredResources {
        names: Vec::new(),
        groups: Vec::new(),
    };

    /// Whether nothing is ignored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.groups.is_empty()
    }

    /// Whether the check skips resource `name`.
    #[must_use]
    pub fn ignores(&self, name: &str) -> bool {
        if self.is_empty() || !is_extended_resource(name) {
            return false;
        }
        self.names.iter().any(|n| **n == *name)
            || name
                .split_once('/')
                .is_some_and(|(group, _)| self.groups.iter().any(|g| **g == *group))
    }
}

/// Most distinct extended-resource names whose reason text is interned
/// (leaked once, shared forever). Past it, reasons are allocated per use, so
/// pods inventing resource names cannot grow memory without bound.
const MAX_INTERNED_RESOURCES: usize = 4096;

/// `"Insufficient <name>"` without allocating on the hot path: static for
/// the standard resources, interned for extended ones.
fn insufficient_reason(name: &str) -> Cow<'static, str> {
    use std::collections::HashMap;
    use std::sync::{OnceLock, RwLock};
    static INTERNED: OnceLock<RwLock<HashMap<Box<str>, &'static str>>> = OnceLock::new();
    match name {
        CPU => return Cow::Borrowed("Insufficient cpu"),
        MEMORY => return Cow::Borrowed("Insufficient memory"),
        EPHEMERAL_STORAGE => return Cow::Borrowed("Insufficient ephemeral-storage"),
        _ => {}
    }
    let map = INTERNED.get_or_init(Default::default);
    if let Some(r) = map.read().ok().and_then(|m| m.get(name).copied()) {
        return Cow::Borrowed(r);
    }
    let reason = format!("Insufficient {name}");
    let Ok(mut m) = map.write() else {
        return Cow::Owned(reason);
    };
    if let Some(r) = m.get(name) {
        return Cow::Borrowed(r);
    }
    if m.len() >= MAX_INTERNED_RESOURCES {
        return Cow::Owned(reason);
    }
    let leaked: &'static str = Box::leak(reason.into_boxed_str());
    m.insert(name.into(), leaked);
    Cow::Borrowed(leaked)
}

/// Resources the node lacks for `pod` (upstream `fitsRequest`), in upstream
/// order: pods, cpu, memory, ephemeral-storage, then extended resources in
/// the pod's order. Empty means it fits. A pod requesting nothing is only
/// checked for a free pod slot.
#[must_use]
pub fn insufficient_resources(pod: &PodInfo, node: &NodeInfo) -> Vec<Insufficient> {
    let mut out = Vec::new();
    let _ = for_each_shortfall(
        pod,
        node,
        &IgnoredResources::NONE,
        |resource, requested, used, capacity| {
            let (reason, resource) = if resource == PODS {
                (Cow::Borrowed(REASON_TOO_MANY_PODS), Cow::Borrowed(PODS))
            } else {
                (
                    insufficient_reason(resource),
                    Cow::Owned(resource.to_owned()),
                )
            };
            out.push(Insufficient {
                resource,
                reason,
                requested,
                used,
                capacity,
                unresolvable: requested > capacity,
            });
            ControlFlow::Continue(())
        },
    );
    out
}

/// The reasons of [`insufficient_resources`] and whether any is
/// unresolvable, without the detailed records: what Filter needs, with no
/// allocation beyond the returned Vec (reason texts are static or interned).
/// Extended resources in `ignored` are not checked (upstream `fitsRequest`
/// with NodeResourcesFit's ignore lists).
#[must_use]
pub fn insufficient_reasons(
    pod: &PodInfo,
    node: &NodeInfo,
    ignored: &IgnoredResources,
) -> (Vec<Cow<'static, str>>, bool) {
    let mut reasons = Vec::new();
    let mut unresolvable = false;
    let _ = for_each_shortfall(pod, node, ignored, |resource, requested, _, capacity| {
        unresolvable |= requested > capacity;
        reasons.push(if resource == PODS {
            Cow::Borrowed(REASON_TOO_MANY_PODS)
        } else {
            insufficient_reason(resource)
        });
        ControlFlow::Continue(())
    });
    (reasons, unresolvable)
}

/// Whether the node has room for `pod` (no shortfall in
/// [`insufficient_reasons`]): the same check without building reasons, and
/// stopping at the first shortfall (NodeResourcesFit's
/// [`crate::framework::FilterPlugin::fits`]).
#[must_use]
pub fn fits_resources(pod: &PodInfo, node: &NodeInfo, ignored: &IgnoredResources) -> bool {
    for_each_shortfall(pod, node, ignored, |_, _, _, _| ControlFlow::Break(())).is_continue()
}

/// Calls `f(resource, requested, used, capacity)` once per shortfall, in
/// upstream order (`pods` first), skipping the extended resources in
/// `ignored`, until `f` breaks (then `Break`).
fn for_each_shortfall(
    pod: &PodInfo,
    node: &NodeInfo,
    ignored: &IgnoredResources,
    mut f: impl FnMut(&str, i64, i64, i64) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let alloc = &node.spec.allocatable;
    let used = &node.requested;
    let pods = i64::try_from(node.pod_count()).unwrap_or(i64::MAX);
    if pods + 1 > alloc.allowed_pod_number {
        // requested 1 > capacity only when the node has no pod slot at all.
        f(PODS, 1, pods, alloc.allowed_pod_number)?;
    }
    let req = &pod.requests;
    if req.milli_cpu == 0 && req.memory == 0 && req.ephemeral_storage == 0 && req.scalar.is_empty()
    {
        return ControlFlow::Continue(());
    }
    if req.milli_cpu > 0 && req.milli_cpu > alloc.milli_cpu - used.milli_cpu {
        f(CPU, req.milli_cpu, used.milli_cpu, alloc.milli_cpu)?;
    }
    if req.memory > 0 && req.memory > alloc.memory - used.memory {
        f(MEMORY, req.memory, used.memory, alloc.memory)?;
    }
    if req.ephemeral_storage > 0
        && req.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage
    {
        f(
            EPHEMERAL_STORAGE,
            req.ephemeral_storage,
            used.ephemeral_storage,
            alloc.ephemeral_storage,
        )?;
    }
    for (name, v) in &req.scalar {
        if ignored.ignores(name) {
            continue;
        }
        let (cap, u) = (alloc.scalar(name), used.scalar(name));
        if *v > 0 && *v > cap - u {
            f(name, *v, u, cap)?;
        }
    }
    ControlFlow::Continue(())
}

/// Whether one of the pod's host ports clashes with a port in use on the node.
#[must_use]
pub fn ports_conflict(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.host_ports
        .iter()
        .any(|want| node.used_ports.iter().any(|u| want.conflicts_with(u)))
}

/// Whether the node is cordoned and the pod does not tolerate the
/// `node.kubernetes.io/unschedulable:NoSchedule` taint (upstream
/// NodeUnschedulable).
#[must_use]
pub fn blocked_by_cordon(pod: &PodInfo, node: &NodeInfo) -> bool {
    // Same rule as `Toleration::tolerates` against the cordon taint (empty
    // value), without building the taint.
    node.spec.unschedulable
        && !pod.tolerations.iter().any(|t| {
            (t.effect.is_empty() || t.effect == NO_SCHEDULE)
                && if t.key.is_empty() {
                    t.exists
                } else {
                    t.key == TAINT_NODE_UNSCHEDULABLE && (t.exists || t.value.is_empty())
                }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node(cpu: &str, mem: &str, pods: u32) -> NodeInfo {
        NodeInfo::new(Arc::new(
            NodeBuilder::new("n1")
                .cpu(cpu)
                .memory(mem)
                .pods(pods)
                .resource("nvidia.com/gpu", "2")
                .build_spec(),
        ))
    }

    #[test]
    fn reports_each_short_resource_in_upstream_order() {
        let mut n = node("2", "4Gi", 10);
        n.add_pod(Arc::new(
            PodBuilder::new("a").cpu("1500m").memory("3Gi").build_info(),
        ));
        let p = PodBuilder::new("p")
            .cpu("1")
            .memory("2Gi")
            .request("nvidia.com/gpu", "3")
            .build_info();
        let r = insufficient_resources(&p, &n);
        let reasons: Vec<_> = r.iter().map(|i| i.reason.as_ref()).collect();
        assert_eq!(
            reasons,
            [
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient nvidia.com/gpu"
            ]
        );
        assert!(
            !r[0].unresolvable,
            "1 cpu < 2 allocatable: preemption could help"
        );
        assert!(r[2].unresolvable, "3 GPUs > 2 allocatable");
        assert_eq!(
            (r[0].requested, r[0].used, r[0].capacity),
            (1000, 1500, 2000)
        );
    }

    #[test]
    fn exact_fit_fits_and_pod_slots_are_checked_first() {
        let mut n = node("1", "1Gi", 1);
        let p = PodBuilder::new("p").cpu("1").memory("1Gi").build_info();
        assert!(insufficient_resources(&p, &n).is_empty());
        n.add_pod(Arc::new(PodBuilder::new("z").build_info()));
        let r = insufficient_resources(&p, &n);
        assert_eq!(r[0].reason, REASON_TOO_MANY_PODS);
        // A pod requesting nothing is only checked for a slot.
        let empty = PodBuilder::new("e").build_info();
        assert_eq!(insufficient_resources(&empty, &n).len(), 1);
    }

    #[test]
    fn ignored_extended_resources_are_not_checked_but_native_ones_are() {
        // Upstream fit_test "skip checking ignored extended resource" and
        // "skip checking ignored extended resource via resource groups".
        let n = node("4", "4Gi", 10);
        let p = PodBuilder::new("p")
            .cpu("5")
            .request("example.com/aaa", "1")
            .request("nvidia.com/gpu", "3")
            .request("hugepages-2Mi", "2Mi")
            .build_info();
        let reasons = |ignored: &IgnoredResources| {
            let (r, _) = insufficient_reasons(&p, &n, ignored);
            r.into_iter().map(|c| c.into_owned()).collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(&IgnoredResources::NONE),
            [
                "Insufficient cpu",
                "Insufficient example.com/aaa",
                "Insufficient hugepages-2Mi",
                "Insufficient nvidia.com/gpu"
            ]
        );
        let by_name = IgnoredResources {
            names: vec![
                "example.com/aaa".into(),
                "hugepages-2Mi".into(),
                "cpu".into(),
            ],
            groups: Vec::new(),
        };
        assert_eq!(
            reasons(&by_name),
            [
                "Insufficient cpu",
                "Insufficient hugepages-2Mi",
                "Insufficient nvidia.com/gpu"
            ],
            "only extended resources can be ignored"
        );
        let by_group = IgnoredResources {
            names: Vec::new(),
            groups: vec!["nvidia.com".into(), "example".into()],
        };
        assert_eq!(
            reasons(&by_group),
            [
                "Insufficient cpu",
                "Insufficient example.com/aaa",
                "Insufficient hugepages-2Mi"
            ],
            "a group is the whole part before the '/'"
        );
        assert_eq!(
            insufficient_resources(&p, &n).len(),
            4,
            "the detailed records ignore nothing"
        );
        assert!(!IgnoredResources::NONE.ignores("example.com/aaa"));
        assert!(!by_name.ignores("kubernetes.io/aaa"));
    }

    #[test]
    fn a_prefixed_native_resource_the_node_lacks_does_not_fit_and_cannot_be_ignored() {
        // Upstream fit_test "native resource in the kubernetes.io
        // namespace not advertised by the node": Insufficient, and
        // ignoredResources / ignoredResourceGroups do not reach it.
        let n = node("4", "4Gi", 10);
        for name in ["kubernetes.io/something", "subdomain.kubernetes.io/x"] {
            let p = PodBuilder::new("p").request(name, "10").build_info();
            let ignore_all = IgnoredResources {
                names: vec![name.into()],
                groups: vec!["kubernetes.io".into(), "subdomain.kubernetes.io".into()],
            };
            for ignored in [&IgnoredResources::NONE, &ignore_all] {
                let (r, _) = insufficient_reasons(&p, &n, ignored);
                assert_eq!(r, [format!("Insufficient {name}")], "{name}");
                assert!(!fits_resources(&p, &n, ignored), "{name}");
            }
        }
        let with = NodeInfo::new(Arc::new(
            NodeBuilder::new("n2")
                .cpu("4")
                .pods(10)
                .resource("kubernetes.io/something", "10")
                .build_spec(),
        ));
        let p = PodBuilder::new("p")
            .request("kubernetes.io/something", "10")
            .build_info();
        assert!(fits_resources(&p, &with, &IgnoredResources::NONE));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The search's cheap check agrees with the reasons Filter gives:
        /// it fits exactly when there is no reason, whatever the node holds,
        /// the pod asks and the profile ignores.
        #[test]
        fn fits_resources_is_no_insufficient_reason(
            cpu in 0u32..5, mem in 0u32..5, gpu in 0u32..4, slots in 0u32..3,
            used_cpu in 0u32..5, used_gpu in 0u32..3, used_pods in 0u32..3,
            want_cpu in 0u32..5, want_mem in 0u32..5, want_gpu in 0u32..4, want_x in 0u32..2,
            ignore_gpu: bool,
        ) {
            let mut n = NodeInfo::new(Arc::new(
                NodeBuilder::new("n1")
                    .cpu(&cpu.to_string())
                    .memory(&format!("{mem}Gi"))
                    .pods(slots + used_pods)
                    .resource("nvidia.com/gpu", &gpu.to_string())
                    .build_spec(),
            ));
            for i in 0..used_pods {
                let mut b = PodBuilder::new(&format!("u{i}"));
                if i == 0 {
                    b = b
                        .cpu(&used_cpu.to_string())
                        .request("nvidia.com/gpu", &used_gpu.to_string());
                }
                n.add_pod(Arc::new(b.build_info()));
            }
            let mut b = PodBuilder::new("p")
                .cpu(&format!("{}m", want_cpu * 500))
                .memory(&format!("{want_mem}Gi"))
                .request("nvidia.com/gpu", &want_gpu.to_string());
            if want_x > 0 {
                b = b.request("example.com/x", &want_x.to_string());
            }
            let p = b.build_info();
            let ignored = if ignore_gpu {
                IgnoredResources { names: vec!["nvidia.com/gpu".into()], groups: Vec::new() }
            } else {
                IgnoredResources::NONE
            };
            let (reasons, _) = insufficient_reasons(&p, &n, &ignored);
            proptest::prop_assert_eq!(fits_resources(&p, &n, &ignored), reasons.is_empty());
        }
    }
}
