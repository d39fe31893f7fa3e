//! GPU sharing: per-device accounting, fit and device choice.
//!
//! A node has GPU devices (index `0..n`, one model, 1000 milli-GPU each);
//! a pod asks for `count` GPUs with a per-GPU share `milli`
//! ([`GpuRequest`]): `milli < 1000` only when `count == 1` (a share of one
//! GPU), `milli == 1000` otherwise (whole GPUs). A share must fit on **one**
//! device's free milli, whole GPUs need `count` wholly free devices, and
//! a pod restricted to GPU models fits only on a node of one of them.
//! This is the model of the FGD paper's simulator (Weng et al., USENIX ATC
//! '23) and of HAMi / Volcano vGPU, not a sum of milli-GPU per node: a node
//! whose eight GPUs each have 300 milli free cannot take a 500 milli share.
//!
//! - [`GpuRequest`], [`DeviceSet`], [`NodeGpus`]: the model.
//! - [`fits`], [`choose_best_fit`]: the Filter's test and the default device
//!   choice (the tightest device that fits; the lowest-indexed free ones
//!   for whole GPUs), the one rule the worker's Filter, its Reserve and the
//!   arbiter's bind check share.
//! - [`frag`]: the fragmentation of a node against a target workload
//!   (the paper's measure) and the target workload learned from pods.
//! - [`policy`]: the scoring policies (FGD and the paper's baselines).

use std::sync::Arc;

pub mod dialect;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod fixtures;
pub mod frag;
pub mod policy;
pub mod state;

/// Milli-GPU in one whole GPU: the capacity of every device.
pub const MILLI_PER_GPU: u32 = 1000;

/// Most GPU devices one node may have ([`DeviceSet`] is a 64-bit set).
pub const MAX_DEVICES: usize = 64;

/// What a pod asks of GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuRequest {
    /// How many devices (`k ≥ 1`).
    pub count: u32,
    /// Share of each device in milli-GPU: `1..=1000` when `count == 1`,
    /// exactly 1000 (whole devices) when `count > 1`; `0` when only
    /// `memory_mib` sizes the share.
    pub milli: u32,
    /// Device memory asked of each GPU, MiB (HAMi's `nvidia.com/gpumem`);
    /// `None`: not asked. On a node whose devices report their memory the
    /// share becomes at least that fraction of a device
    /// ([`GpuRequest::milli_on`]).
    pub memory_mib: Option<u32>,
    /// Allowed GPU models (`None`: any). Never empty when `Some`.
    pub models: Option<Arc<[Arc<str>]>>,
}

impl GpuRequest {
    /// `count` whole GPUs of any model.
    #[must_use]
    pub fn whole(count: u32) -> Self {
        GpuRequest {
            count,
            milli: MILLI_PER_GPU,
            memory_mib: None,
            models: None,
        }
    }

    /// A share of `milli` of one GPU of any model (`milli == 1000` is one
    /// whole GPU).
    #[must_use]
    pub fn share(milli: u32) -> Self {
        GpuRequest {
            count: 1,
            milli,
            memory_mib: None,
            models: None,
        }
    }

    /// Total milli-GPU asked for (`count × milli`).
    #[must_use]
    pub fn total_milli(&self) -> u64 {
        u64::from(self.count) * u64::from(self.milli)
    }

    /// Whether this is a share (`milli < 1000`), of one GPU unless
    /// [`GpuRequest::spans_devices`].
    #[must_use]
    pub fn is_share(&self) -> bool {
        self.milli < MILLI_PER_GPU
    }

    /// Whether this is a share of each of several GPUs (HAMi's
    /// `nvidia.com/gpu: 2` with `gpucores: 30`). Such a pod placed by
    /// another scheduler is counted on its devices; GpuShare does not
    /// place one.
    #[must_use]
    pub fn spans_devices(&self) -> bool {
        self.count > 1 && self.is_share()
    }

    /// The share of each device this request takes on `gpus`: `milli`, or
    /// with a memory request at least ⌈1000 · memory / device memory⌉
    /// (the larger of the two). `None` when it cannot be placed there: the
    /// memory is more than a device has, or the node does not report its
    /// devices' memory. Every fit test and every count of a held share
    /// goes through here.
    #[must_use]
    pub fn milli_on(&self, gpus: &NodeGpus) -> Option<u32> {
        self.milli_with(gpus.memory_mib)
    }

    /// [`GpuRequest::milli_on`] on devices of `device_memory_mib` each.
    #[must_use]
    pub fn milli_with(&self, device_memory_mib: Option<u32>) -> Option<u32> {
        let Some(mem) = self.memory_mib else {
            return Some(self.milli);
        };
        let device = u64::from(device_memory_mib.filter(|&m| m > 0)?);
        let of_memory = (u64::from(mem) * u64::from(MILLI_PER_GPU)).div_ceil(device);
        let share = of_memory.max(u64::from(self.milli));
        u32::try_from(share).ok().filter(|&s| s <= MILLI_PER_GPU)
    }

    /// Whether `model` is allowed.
    #[must_use]
    pub fn allows_model(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| &**x == model))
    }
}

/// A set of device indexes on one node (bit `i` = device `i`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DeviceSet(pub u64);

impl DeviceSet {
    /// The set holding only device `i` (`i < 64`).
    #[must_use]
    pub fn one(i: usize) -> Self {
        DeviceSet(1u64 << i)
    }

    /// Adds device `i` (`i < 64`).
    pub fn insert(&mut self, i: usize) {
        self.0 |= 1u64 << i;
    }

    /// Whether device `i` is in the set.
    #[must_use]
    pub fn contains(self, i: usize) -> bool {
        i < MAX_DEVICES && self.0 & (1u64 << i) != 0
    }

    /// Number of devices.
    #[must_use]
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether it holds no device.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The indexes, ascending.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..MAX_DEVICES).filter(move |&i| self.contains(i))
    }
}

/// A node's GPUs: how many, of which model, and their free share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpus {
    /// The GPU model of every device (`""` when the node does not say).
    pub model: Arc<str>,
    /// Memory of each device, MiB (`None`: the node does not say).
    pub memory_mib: Option<u32>,
    /// Free milli-GPU of each device, by index (`0..=1000`).
    pub free: Vec<u32>,
}

impl NodeGpus {
    /// `count` idle devices of `model`.
    #[must_use]
    pub fn idle(model: &str, count: usize) -> Self {
        NodeGpus {
            model: Arc::from(model),
            memory_mib: None,
            free: vec![MILLI_PER_GPU; count],
        }
    }

    /// Total free milli-GPU.
    #[must_use]
    pub fn free_milli(&self) -> u64 {
        self.free.iter().map(|&f| u64::from(f)).sum()
    }

    /// Number of wholly free devices.
    #[must_use]
    pub fn idle_devices(&self) -> usize {
        self.free.iter().filter(|&&f| f == MILLI_PER_GPU).count()
    }

    /// Takes `req.milli` from each device of `devices`.
    ///
    /// # Errors
    /// The first device that is out of range or has less than `req.milli`
    /// free (nothing is taken then).
    pub fn take(&mut self, devices: DeviceSet, milli: u32) -> Result<(), usize> {
        if let Some(bad) = devices
            .iter()
            .find(|&i| self.free.get(i).is_none_or(|&f| f < milli))
        {
            return Err(bad);
        }
        for i in devices.iter() {
            self.free[i] -= milli;
        }
        Ok(())
    }

    /// Gives `milli` back to each device of `devices` (capped at 1000).
    pub fn give(&mut self, devices: DeviceSet, milli: u32) {
        for i in devices.iter() {
            if let Some(f) = self.free.get_mut(i) {
                *f = (*f + milli).min(MILLI_PER_GPU);
            }
        }
    }
}

/// Whether `req` fits the devices of `gpus`: its model is allowed, and
/// either one device has `req.milli` free (a share) or `req.count` devices
/// are wholly free (whole GPUs). The Filter's test.
#[must_use]
pub fn fits(gpus: &NodeGpus, req: &GpuRequest) -> bool {
    if !req.allows_model(&gpus.model) {
        return false;
    }
    let Some(milli) = req.milli_on(gpus) else {
        return false;
    };
    let enough = gpus.free.iter().filter(|&&f| f >= milli).count();
    enough >= req.count as usize
}

/// Whether exactly `devices` can take `req`: `req.count` devices of
/// `gpus`, each with `req.milli` free. The arbiter keeps a worker's choice
/// when this holds on its view.
#[must_use]
pub fn holds(gpus: &NodeGpus, req: &GpuRequest, devices: DeviceSet) -> bool {
    let Some(milli) = req.milli_on(gpus) else {
        return false;
    };
    devices.len() == req.count as usize
        && devices
            .iter()
            .all(|i| gpus.free.get(i).is_some_and(|&f| f >= milli))
}

/// The devices `req` takes on `gpus` by the default rule: for a share, the
/// device with the *least* free share that still holds it (ties: lowest
/// index), the `count` least free for a share of several; for whole GPUs,
/// the `count` lowest-indexed wholly free devices. `None` when it does not
/// [`fits`].
#[must_use]
pub fn choose_best_fit(gpus: &NodeGpus, req: &GpuRequest) -> Option<DeviceSet> {
    if !fits(gpus, req) {
        return None;
    }
    let milli = req.milli_on(gpus)?;
    let mut set = DeviceSet::default();
    if req.is_share() && req.count == 1 {
        let (i, _) = gpus
            .free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f >= milli)
            .min_by_key(|(i, f)| (**f, *i))?;
        set.insert(i);
    } else if req.is_share() {
        let mut fitting: Vec<(u32, usize)> = gpus
            .free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f >= milli)
            .map(|(i, f)| (*f, i))
            .collect();
        fitting.sort_unstable();
        for (_, i) in fitting.into_iter().take(req.count as usize) {
            set.insert(i);
        }
    } else {
        for (i, _) in gpus
            .free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f >= MILLI_PER_GPU)
            .take(req.count as usize)
        {
            set.insert(i);
        }
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(free: &[u32]) -> NodeGpus {
        NodeGpus {
            model: Arc::from("V100"),
            memory_mib: None,
            free: free.to_vec(),
        }
    }

    #[test]
    fn a_share_must_fit_on_one_device_not_the_sum() {
        let eight_scattered = node(&[300; 8]);
        assert_eq!(eight_scattered.free_milli(), 2400);
        assert!(!fits(&eight_scattered, &GpuRequest::share(500)));
        assert!(fits(&eight_scattered, &GpuRequest::share(300)));
    }

    #[test]
    fn whole_gpus_need_wholly_free_devices() {
        let n = node(&[1000, 999, 1000, 0]);
        assert!(fits(&n, &GpuRequest::whole(2)));
        assert!(!fits(&n, &GpuRequest::whole(3)));
        assert_eq!(
            choose_best_fit(&n, &GpuRequest::whole(2)),
            Some(DeviceSet(0b101))
        );
    }

    /// A share of several GPUs (placed by another scheduler, counted
    /// here): each of `count` devices holds it, the least free first.
    #[test]
    fn a_share_of_several_gpus_takes_the_tightest_devices() {
        let req = GpuRequest {
            count: 2,
            ..GpuRequest::share(300)
        };
        assert!(req.spans_devices() && !GpuRequest::share(300).spans_devices());
        let n = node(&[1000, 400, 200, 300, 400]);
        assert!(fits(&n, &req));
        assert_eq!(choose_best_fit(&n, &req), Some(DeviceSet(0b01010)));
        assert!(!fits(&node(&[1000, 200]), &req));
    }

    #[test]
    fn a_share_takes_the_tightest_device_lowest_index_first() {
        let n = node(&[1000, 600, 500, 500, 400]);
        assert_eq!(
            choose_best_fit(&n, &GpuRequest::share(450)),
            Some(DeviceSet::one(2))
        );
        assert_eq!(
            choose_best_fit(&n, &GpuRequest::share(550)),
            Some(DeviceSet::one(1))
        );
        assert_eq!(
            choose_best_fit(&n, &GpuRequest::share(1000)),
            Some(DeviceSet::one(0))
        );
        assert_eq!(
            choose_best_fit(&n, &GpuRequest::share(100)),
            Some(DeviceSet::one(4))
        );
    }

    /// A memory request sizes the share on each node: ⌈1000 · memory /
    /// device memory⌉, at least the compute share; nothing fits where the
    /// devices have too little memory or do not say.
    #[test]
    fn memory_sizes_the_share_on_each_node() {
        let req = GpuRequest {
            memory_mib: Some(4096),
            ..GpuRequest::share(0)
        };
        let mut n16 = node(&[1000, 300]);
        n16.memory_mib = Some(16384);
        assert_eq!(req.milli_on(&n16), Some(250));
        assert!(fits(&n16, &req));
        assert_eq!(choose_best_fit(&n16, &req), Some(DeviceSet::one(1)));
        let mut n8 = node(&[1000, 300]);
        n8.memory_mib = Some(8192);
        assert_eq!(req.milli_on(&n8), Some(500));
        assert_eq!(choose_best_fit(&n8, &req), Some(DeviceSet::one(0)));
        assert!(!holds(&n8, &req, DeviceSet::one(1)));
        // Rounded up; the compute share when larger.
        assert_eq!(
            GpuRequest {
                memory_mib: Some(1),
                ..GpuRequest::share(0)
            }
            .milli_with(Some(16384)),
            Some(1)
        );
        assert_eq!(
            GpuRequest {
                memory_mib: Some(4096),
                ..GpuRequest::share(600)
            }
            .milli_on(&n16),
            Some(600)
        );
        let mut n2 = node(&[1000]);
        n2.memory_mib = Some(2048);
        assert_eq!(req.milli_on(&n2), None, "more than a device has");
        assert!(!fits(&n2, &req));
        assert_eq!(req.milli_on(&node(&[1000])), None, "memory not reported");
        assert!(!fits(&node(&[1000]), &req));
        assert_eq!(GpuRequest::share(300).milli_on(&node(&[1000])), Some(300));
    }

    #[test]
    fn models_restrict_nodes() {
        let n = node(&[1000]);
        let mut req = GpuRequest::whole(1);
        req.models = Some(Arc::from(vec![Arc::from("T4"), Arc::from("A100")]));
        assert!(!fits(&n, &req));
        req.models = Some(Arc::from(vec![Arc::from("V100")]));
        assert!(fits(&n, &req));
    }

    #[test]
    fn take_refuses_over_sharing_and_changes_nothing() {
        let mut n = node(&[1000, 300]);
        assert_eq!(n.take(DeviceSet(0b11), 500), Err(1));
        assert_eq!(n.free, [1000, 300]);
        n.take(DeviceSet::one(0), 500).unwrap();
        assert_eq!(n.free, [500, 300]);
        assert_eq!(n.take(DeviceSet::one(7), 1), Err(7));
        n.give(DeviceSet::one(0), 500);
        assert_eq!(n.free, [1000, 300]);
    }
}
