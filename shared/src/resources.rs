//! Resource vectors and the effective request of a pod.
//!
//! Units: cpu in millicores, memory and ephemeral-storage in bytes, extended
//! (scalar) resources such as `nvidia.com/gpu` as integers, pods as a count.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{self, QuantityError};

/// `cpu`.
pub const CPU: &str = "cpu";
/// `memory`.
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`: how many pods a node accepts.
pub const PODS: &str = "pods";
/// `nvidia.com/gpu`: whole GPUs, the common extended resource.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// Upstream's default cpu request for scoring a container that sets none
/// (`DefaultMilliCPURequest`, 100 millicores).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Upstream's default memory request for scoring a container that sets none
/// (`DefaultMemoryRequest`, 200 MiB in bytes).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A named extended resource and its amount.
pub type Scalar = (Arc<str>, i64);

/// A vector of resources: a pod's request, a node's allocatable, or the sum of
/// the requests placed on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Pod slots (only meaningful in a node's allocatable).
    pub allowed_pod_number: i64,
    /// Extended resources, sorted by name, no zero entries.
    pub scalar: Vec<Scalar>,
}

/// Why a resource list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {source}")]
pub struct ResourceError {
    /// Path of the offending entry, e.g. `spec.containers[0].resources.requests.cpu`.
    pub field: String,
    /// The quantity problem.
    #[source]
    pub source: QuantityError,
}

impl Resources {
    /// Reads a Kubernetes resource list (`requests`, `allocatable`, `overhead`).
    /// `field` is the path used in error messages.
    ///
    /// # Errors
    /// [`ResourceError`] naming `field.<resource>` when a quantity is malformed.
    pub fn from_list(
        list: &BTreeMap<String, Quantity>,
        field: &str,
    ) -> Result<Self, ResourceError> {
        let mut r = Resources::default();
        for (name, q) in list {
            let err = |source| ResourceError {
                field: format!("{field}.{name}"),
                source,
            };
            // The API server rejects negative requests and capacities.
            if q.0.trim_start().starts_with('-') {
                return Err(err(QuantityError::Negative(q.0.clone())));
            }
            match name.as_str() {
                CPU => r.milli_cpu = quantity::milli_value(&q.0).map_err(err)?,
                MEMORY => r.memory = quantity::value(&q.0).map_err(err)?,
                EPHEMERAL_STORAGE => r.ephemeral_storage = quantity::value(&q.0).map_err(err)?,
                PODS => r.allowed_pod_number = quantity::value(&q.0).map_err(err)?,
                other => {
                    let v = quantity::value(&q.0).map_err(err)?;
                    if is_scalar_resource(other) {
                        r.set_scalar(other, v);
                    }
                }
            }
        }
        Ok(r)
    }

    /// Amount of extended resource `name` (0 when absent).
    #[must_use]
    pub fn scalar(&self, name: &str) -> i64 {
        // A linear scan with equality (length first, then bytes) beats a
        // binary search's ordering compares on the 1-3 entries pods carry:
        // it runs for every node in Filter.
        self.scalar
            .iter()
            .find(|(n, _)| **n == *name)
            .map_or(0, |(_, v)| *v)
    }

    /// Sets extended resource `name` (removing it when `v == 0`).
    pub fn set_scalar(&mut self, name: &str, v: i64) {
        match self.scalar.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) if v == 0 => {
                self.scalar.remove(i);
            }
            Ok(i) => self.scalar[i].1 = v,
            Err(_) if v == 0 => {}
            Err(i) => self.scalar.insert(i, (Arc::from(name), v)),
        }
    }

    /// `self += other` (every resource, including pod slots), saturating at
    /// `i64::MAX` so node aggregates can never wrap (a single pod's total is
    /// checked exactly by [`Resources::checked_add`] in [`pod_requests`]).
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_add(other.allowed_pod_number);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            self.set_scalar(n, cur.saturating_add(*v));
        }
    }

    /// `self += other`, exactly.
    ///
    /// # Errors
    /// The name of the first resource whose sum does not fit in an `i64`
    /// (`self` is then partly updated: discard it).
    pub fn checked_add(&mut self, other: &Resources) -> Result<(), String> {
        let sum = |a: i64, b: i64, name: &str| a.checked_add(b).ok_or_else(|| name.to_owned());
        self.milli_cpu = sum(self.milli_cpu, other.milli_cpu, CPU)?;
        self.memory = sum(self.memory, other.memory, MEMORY)?;
        self.ephemeral_storage = sum(
            self.ephemeral_storage,
            other.ephemeral_storage,
            EPHEMERAL_STORAGE,
        )?;
        self.allowed_pod_number = sum(self.allowed_pod_number, other.allowed_pod_number, "pods")?;
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            self.set_scalar(n, sum(cur, *v, n)?);
        }
        Ok(())
    }

    /// `self -= other`, saturating like [`Resources::add`].
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_sub(other.allowed_pod_number);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            self.set_scalar(n, cur.saturating_sub(*v));
        }
    }

    /// Element-wise maximum, in place.
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            if *v > cur {
                self.set_scalar(n, *v);
            }
        }
    }

    /// True when every entry is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar.is_empty()
    }
}

/// Whether `name` is counted beside cpu, memory, ephemeral-storage and
/// pods (upstream's `IsScalarResourceName`): an extended resource
/// ([`is_extended_resource`], e.g. `nvidia.com/gpu`), `hugepages-*`,
/// `attachable-volumes-*`, or a prefixed native one (a name containing
/// `kubernetes.io/`, e.g. `kubernetes.io/foo`, `example.kubernetes.io/x`):
/// NodeResourcesFit checks each against the node's allocatable, where an
/// absent one is 0.
#[must_use]
pub fn is_scalar_resource(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || name.contains("kubernetes.io/")
        || is_extended_resource(name)
}

/// Upstream's `IsExtendedResourceName`: a name with a `/` that is neither
/// native (in the `kubernetes.io/` namespace, `*.kubernetes.io/` included)
/// nor a quota `requests.` name. Only these can be left unchecked through
/// NodeResourcesFit's `ignoredResources` / `ignoredResourceGroups`. (The
/// API server has validated the name's syntax before any scheduler sees
/// it.)
#[must_use]
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// The requests a scheduler counts for a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// Effective request (what NodeResourcesFit filters on).
    pub requests: Resources,
    /// cpu (millicores) with [`DEFAULT_MILLI_CPU_REQUEST`] for containers
    /// that set none; used by scoring so best-effort pods still spread.
    pub non_zero_milli_cpu: i64,
    /// memory (bytes) with [`DEFAULT_MEMORY_REQUEST`] for containers that set none.
    pub non_zero_memory: i64,
}

/// Per-container (request, non-zero cpu, non-zero memory).
fn container_requests(c: &Container, field: &str) -> Result<(Resources, i64, i64), ResourceError> {
    let empty = BTreeMap::new();
    let list = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .unwrap_or(&empty);
    let r = Resources::from_list(list, &format!("{field}.resources.requests"))?;
    let nz_cpu = if list.contains_key(CPU) {
        r.milli_cpu
    } else {
        DEFAULT_MILLI_CPU_REQUEST
    };
    let nz_mem = if list.contains_key(MEMORY) {
        r.memory
    } else {
        DEFAULT_MEMORY_REQUEST
    };
    Ok((r, nz_cpu, nz_mem))
}

/// A pod's effective request, the way upstream computes it
/// (`resourcehelper.PodRequests`):
/// 1. the sum of the app containers;
/// 2. restartable init containers (sidecars, `restartPolicy: Always`) are added
///    to that sum, and keep running beside every later init container;
/// 3. each regular init container needs its own request plus the sidecars
///    started before it; the pod needs the maximum of (1+2) and those;
/// 4. plus `spec.overhead`.
///
/// The non-zero figures apply the same rule to per-container requests where
/// missing cpu/memory count as 100m / 200 MiB (`NonMissingContainerRequests`).
///
/// # Errors
/// [`ResourceError`] naming the container field with the malformed quantity.
pub fn pod_requests(spec: &PodSpec) -> Result<PodRequests, ResourceError> {
    // Every sum is exact: a total that does not fit in an i64 is an error,
    // never a wrapped (negative) request that would fit anywhere.
    let overflow = |what: &str| ResourceError {
        field: "spec.containers[*].resources.requests".to_owned(),
        source: QuantityError::SumOverflow(format!("the pod's total {what} request")),
    };
    let add = |a: i64, b: i64, what: &str| a.checked_add(b).ok_or_else(|| overflow(what));
    let mut reqs = Resources::default();
    let (mut nz_cpu, mut nz_mem) = (0i64, 0i64);
    for (i, c) in spec.containers.iter().enumerate() {
        let (r, c_cpu, c_mem) = container_requests(c, &format!("spec.containers[{i}]"))?;
        reqs.checked_add(&r).map_err(|n| overflow(&n))?;
        nz_cpu = add(nz_cpu, c_cpu, CPU)?;
        nz_mem = add(nz_mem, c_mem, MEMORY)?;
    }
    let mut sidecars = Resources::default();
    let (mut sidecar_cpu, mut sidecar_mem) = (0i64, 0i64);
    let mut init_max = Resources::default();
    let (mut init_cpu, mut init_mem) = (0i64, 0i64);
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let (r, c_cpu, c_mem) = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        let restartable = c.restart_policy.as_deref() == Some("Always");
        let (need, need_cpu, need_mem) = if restartable {
            reqs.checked_add(&r).map_err(|n| overflow(&n))?;
            nz_cpu = add(nz_cpu, c_cpu, CPU)?;
            nz_mem = add(nz_mem, c_mem, MEMORY)?;
            sidecars.checked_add(&r).map_err(|n| overflow(&n))?;
            sidecar_cpu = add(sidecar_cpu, c_cpu, CPU)?;
            sidecar_mem = add(sidecar_mem, c_mem, MEMORY)?;
            (sidecars.clone(), sidecar_cpu, sidecar_mem)
        } else {
            let mut need = r;
            need.checked_add(&sidecars).map_err(|n| overflow(&n))?;
            (
                need,
                add(c_cpu, sidecar_cpu, CPU)?,
                add(c_mem, sidecar_mem, MEMORY)?,
            )
        };
        init_max.max_with(&need);
        init_cpu = init_cpu.max(need_cpu);
        init_mem = init_mem.max(need_mem);
    }
    reqs.max_with(&init_max);
    nz_cpu = nz_cpu.max(init_cpu);
    nz_mem = nz_mem.max(init_mem);
    if let Some(overhead) = &spec.overhead {
        let o = Resources::from_list(overhead, "spec.overhead")?;
        reqs.checked_add(&o).map_err(|n| overflow(&n))?;
        nz_cpu = add(nz_cpu, o.milli_cpu, CPU)?;
        nz_mem = add(nz_mem, o.memory, MEMORY)?;
    }
    Ok(PodRequests {
        requests: reqs,
        non_zero_milli_cpu: nz_cpu,
        non_zero_memory: nz_mem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_that_overflow_an_i64_are_errors_not_wrapped_requests() {
        // Each quantity is in range; their sum is not (4 Ei + 4 Ei > 2^63 - 1).
        let spec = PodSpec {
            containers: vec![
                container(Some("4611686018427387"), Some("4Ei"), None),
                container(Some("4611686018427387"), Some("4Ei"), None),
            ],
            ..Default::default()
        };
        let e = pod_requests(&spec).expect_err("4Ei + 4Ei overflows");
        assert_eq!(e.field, "spec.containers[*].resources.requests");
        assert!(
            e.to_string()
                .ends_with("the pod's total memory request is out of range (the sum exceeds 2^63-1 in its unit)"),
            "{e}"
        );
        // Overhead on top of a near-maximal request, too.
        let spec = PodSpec {
            containers: vec![container(Some("1"), Some("7Ei"), None)],
            overhead: Some(BTreeMap::from([(
                MEMORY.to_owned(),
                Quantity("2Ei".into()),
            )])),
            ..Default::default()
        };
        assert!(pod_requests(&spec).is_err());
        // Large but representable totals are fine.
        let spec = PodSpec {
            containers: vec![
                container(Some("1"), Some("3Ei"), None),
                container(Some("1"), Some("3Ei"), None),
            ],
            ..Default::default()
        };
        assert_eq!(pod_requests(&spec).expect("fits").requests.memory, 6 << 60);
    }

    #[test]
    fn node_aggregates_saturate_instead_of_wrapping() {
        let mut r = Resources {
            memory: i64::MAX - 1,
            ..Default::default()
        };
        r.add(&Resources {
            memory: 10,
            ..Default::default()
        });
        assert_eq!(r.memory, i64::MAX);
        let mut c = Resources {
            memory: i64::MAX - 1,
            ..Default::default()
        };
        assert_eq!(
            c.checked_add(&Resources {
                memory: 10,
                ..Default::default()
            }),
            Err(MEMORY.to_owned())
        );
    }
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn container(cpu: Option<&str>, mem: Option<&str>, gpu: Option<&str>) -> Container {
        let mut req = BTreeMap::new();
        if let Some(c) = cpu {
            req.insert(CPU.to_owned(), Quantity(c.to_owned()));
        }
        if let Some(m) = mem {
            req.insert(MEMORY.to_owned(), Quantity(m.to_owned()));
        }
        if let Some(g) = gpu {
            req.insert(NVIDIA_GPU.to_owned(), Quantity(g.to_owned()));
        }
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(req),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sidecar(cpu: &str, mem: &str) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..container(Some(cpu), Some(mem), None)
        }
    }

    #[test]
    fn app_containers_are_summed() {
        let spec = PodSpec {
            containers: vec![
                container(Some("100m"), Some("1Gi"), Some("1")),
                container(Some("250m"), Some("1Gi"), None),
            ],
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.requests.milli_cpu, 350);
        assert_eq!(r.requests.memory, 2 << 30);
        assert_eq!(r.requests.scalar(NVIDIA_GPU), 1);
    }

    #[test]
    fn init_container_max_wins_over_app_sum() {
        let spec = PodSpec {
            containers: vec![container(Some("100m"), Some("100Mi"), None)],
            init_containers: Some(vec![
                container(Some("2"), Some("50Mi"), None),
                container(Some("500m"), Some("300Mi"), None),
            ]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.requests.milli_cpu, 2000);
        assert_eq!(r.requests.memory, 300 << 20);
    }

    #[test]
    fn sidecars_add_to_the_sum_and_to_later_init_containers() {
        // Upstream's documented example: sidecar 1 cpu runs beside the app
        // (1 cpu) and beside the later init container (2 cpu) => max(2, 3) = 3.
        let spec = PodSpec {
            containers: vec![container(Some("1"), Some("1Gi"), None)],
            init_containers: Some(vec![
                sidecar("1", "1Gi"),
                container(Some("2"), Some("1Gi"), None),
            ]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.requests.milli_cpu, 3000);
        assert_eq!(r.requests.memory, 2 << 30);
    }

    #[test]
    fn init_container_before_the_sidecar_does_not_see_it() {
        let spec = PodSpec {
            containers: vec![container(Some("1"), None, None)],
            init_containers: Some(vec![container(Some("3"), None, None), sidecar("1", "0")]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        // app+sidecar = 2, first init = 3 => 3
        assert_eq!(r.requests.milli_cpu, 3000);
    }

    #[test]
    fn overhead_is_added() {
        let spec = PodSpec {
            containers: vec![container(Some("1"), Some("1Gi"), None)],
            overhead: Some(BTreeMap::from([(CPU.to_owned(), Quantity("250m".into()))])),
            ..Default::default()
        };
        assert_eq!(pod_requests(&spec).unwrap().requests.milli_cpu, 1250);
    }

    #[test]
    fn non_zero_defaults_apply_to_missing_requests_only() {
        let spec = PodSpec {
            containers: vec![
                container(None, None, None),
                container(Some("0"), Some("1Gi"), None),
            ],
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.requests.milli_cpu, 0);
        assert_eq!(r.non_zero_milli_cpu, DEFAULT_MILLI_CPU_REQUEST);
        assert_eq!(r.non_zero_memory, DEFAULT_MEMORY_REQUEST + (1 << 30));
    }

    #[test]
    fn malformed_quantity_names_the_field() {
        let spec = PodSpec {
            containers: vec![
                container(Some("1"), None, None),
                container(Some("x"), None, None),
            ],
            ..Default::default()
        };
        let e = pod_requests(&spec).unwrap_err();
        assert_eq!(e.field, "spec.containers[1].resources.requests.cpu");
        assert!(e.to_string().contains("invalid quantity \"x\""));
    }

    #[test]
    fn negative_quantities_are_rejected_with_the_field() {
        let list = BTreeMap::from([(CPU.to_owned(), Quantity("-4".into()))]);
        let e = Resources::from_list(&list, "status.allocatable").unwrap_err();
        assert_eq!(e.field, "status.allocatable.cpu");
        assert!(e.to_string().contains("must not be negative"), "{e}");
    }

    #[test]
    fn scalar_and_extended_names_as_upstream_classifies_them() {
        // (name, IsScalarResourceName, IsExtendedResourceName), from
        // upstream's resource helpers.
        for (name, scalar, extended) in [
            ("cpu", false, false),
            ("memory", false, false),
            ("foo", false, false),
            ("nvidia.com/gpu", true, true),
            ("example.com/dongle", true, true),
            ("kubernetes.io/something", true, false),
            ("subdomain.kubernetes.io/x", true, false),
            ("hugepages-2Mi", true, false),
            ("attachable-volumes-aws-ebs", true, false),
            ("requests.example.com/foo", false, false),
        ] {
            assert_eq!(is_scalar_resource(name), scalar, "{name} scalar");
            assert_eq!(is_extended_resource(name), extended, "{name} extended");
        }
    }

    #[test]
    fn scalar_arithmetic_keeps_sorted_nonzero_entries() {
        let mut a = Resources::default();
        a.set_scalar("b.io/x", 2);
        a.set_scalar("a.io/y", 1);
        assert_eq!(a.scalar.len(), 2);
        assert_eq!(&*a.scalar[0].0, "a.io/y");
        let b = a.clone();
        a.sub(&b);
        assert!(a.is_zero());
        assert!(is_scalar_resource("nvidia.com/gpu"));
        assert!(!is_scalar_resource("cpu"));
    }
}
