//! The GPU devices of one node with what its pods hold: the per-device
//! accounting [`crate::NodeInfo`] keeps for the worker's cache, `simulate`
//! and the arbiter alike.

use std::sync::Arc;

use super::dialect::NodeGpuSpec;
use super::{DeviceSet, GpuRequest, MILLI_PER_GPU, NodeGpus, choose_best_fit};

/// A pod's GPU request and, once placed, the devices it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodGpu {
    /// What it asks for.
    pub request: GpuRequest,
    /// The devices of its node it holds: from its `gpu-index` annotation
    /// (bound pods), or chosen by the scheduler at assume; `None` for a
    /// pod not placed yet, or bound without saying.
    pub devices: Option<DeviceSet>,
}

/// One pod's hold on devices.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hold {
    uid: Arc<str>,
    devices: DeviceSet,
    milli: u32,
    /// A pod bound without naming its devices, counted where the default
    /// rule put it: its request, so it can be put elsewhere when a pod
    /// naming those devices arrives.
    unnamed: Option<GpuRequest>,
}

/// A node's devices and the pods holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// Free milli-GPU per device (`1000 − used`, never below 0): what the
    /// Filter and the scores read.
    gpus: NodeGpus,
    /// Milli-GPU held per device; above 1000 only when pods bound by
    /// someone else share a device beyond it.
    used: Vec<u32>,
    holds: Vec<Hold>,
}

impl GpuState {
    /// Idle devices as `spec` describes them.
    #[must_use]
    pub fn new(spec: &NodeGpuSpec) -> Self {
        GpuState {
            gpus: NodeGpus {
                model: spec.model.clone(),
                memory_mib: spec.memory_mib,
                free: vec![MILLI_PER_GPU; spec.count],
            },
            used: vec![0; spec.count],
            holds: Vec::new(),
        }
    }

    /// The devices' free shares and model.
    #[must_use]
    pub fn gpus(&self) -> &NodeGpus {
        &self.gpus
    }

    /// The devices the pod `uid` holds here.
    #[must_use]
    pub fn held_by(&self, uid: &str) -> Option<DeviceSet> {
        self.holds
            .iter()
            .find(|h| &*h.uid == uid)
            .map(|h| h.devices)
    }

    /// Counts the pod `uid` holding `gpu` here and returns the devices
    /// held: those it names when they exist on the node and are as many as
    /// it asks for, else the default rule's choice ([`choose_best_fit`]),
    /// else (it fits nowhere: placed by someone else beyond the devices)
    /// the devices with the most free, so its share is counted somewhere.
    /// Nothing when it already holds.
    ///
    /// A pod naming devices that pods without named devices were counted
    /// on, beyond what those devices have, moves those pods: they are
    /// counted again after it, so the result does not depend on the order
    /// the pods were seen in (the arbiter and every worker agree).
    pub fn add(&mut self, uid: &Arc<str>, gpu: &PodGpu) -> DeviceSet {
        if let Some(held) = self.held_by(uid) {
            return held;
        }
        let n = self.used.len();
        let named = gpu
            .devices
            .filter(|d| d.len() == gpu.request.count as usize && d.iter().all(|i| i < n));
        let Some(named) = named else {
            return self.hold(uid, &gpu.request, None);
        };
        let milli = self.milli_of(&gpu.request);
        let overflows = named.iter().any(|i| self.used[i] + milli > MILLI_PER_GPU);
        let mut moved = Vec::new();
        if overflows {
            let mut i = 0;
            while i < self.holds.len() {
                let h = &self.holds[i];
                if h.unnamed.is_some() && h.devices.0 & named.0 != 0 {
                    let h = self.holds.swap_remove(i);
                    self.release(&h);
                    moved.push(h);
                } else {
                    i += 1;
                }
            }
        }
        let held = self.hold(uid, &gpu.request, Some(named));
        for h in moved {
            if let Some(req) = &h.unnamed {
                self.hold(&h.uid, req, None);
            }
        }
        held
    }

    /// The share `req` takes of each device here. A share this node cannot
    /// size (memory it does not report, or more than a device has):
    /// counted as whole devices.
    fn milli_of(&self, req: &GpuRequest) -> u32 {
        req.milli_on(&self.gpus).unwrap_or(MILLI_PER_GPU)
    }

    /// Counts `uid` on `named`, or (`None`) where the default rule puts it.
    fn hold(&mut self, uid: &Arc<str>, req: &GpuRequest, named: Option<DeviceSet>) -> DeviceSet {
        let milli = self.milli_of(req);
        let devices = named
            .or_else(|| choose_best_fit(&self.gpus, &without_models(req)))
            .unwrap_or_else(|| self.most_free(req.count as usize));
        for i in devices.iter() {
            self.used[i] += milli;
            self.gpus.free[i] = MILLI_PER_GPU.saturating_sub(self.used[i]);
        }
        self.holds.push(Hold {
            uid: uid.clone(),
            devices,
            milli,
            unnamed: named.is_none().then(|| req.clone()),
        });
        devices
    }

    /// Gives back what `h` held (it is no longer in `holds`).
    fn release(&mut self, h: &Hold) {
        for d in h.devices.iter() {
            self.used[d] = self.used[d].saturating_sub(h.milli);
            self.gpus.free[d] = MILLI_PER_GPU.saturating_sub(self.used[d]);
        }
    }

    /// Gives back what the pod `uid` held; false when it held nothing.
    pub fn remove(&mut self, uid: &str) -> bool {
        let Some(i) = self.holds.iter().position(|h| &*h.uid == uid) else {
            return false;
        };
        let h = self.holds.swap_remove(i);
        self.release(&h);
        true
    }

    /// The `k` devices with the most free (lowest index first among equals).
    fn most_free(&self, k: usize) -> DeviceSet {
        let mut order: Vec<usize> = (0..self.used.len()).collect();
        order.sort_by_key(|&i| (self.used[i], i));
        let mut set = DeviceSet::default();
        for i in order.into_iter().take(k) {
            set.insert(i);
        }
        set
    }
}

/// A placed pod is counted on its node whatever the node's model: the
/// model constraint is the Filter's, not the accounting's.
fn without_models(req: &GpuRequest) -> GpuRequest {
    GpuRequest {
        models: None,
        ..req.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(count: usize) -> GpuState {
        GpuState::new(&NodeGpuSpec {
            model: Arc::from("T4"),
            count,
            memory_mib: None,
        })
    }

    fn pod(milli: u32, count: u32, devices: Option<u64>) -> PodGpu {
        PodGpu {
            request: GpuRequest {
                count,
                milli,
                memory_mib: None,
                models: None,
            },
            devices: devices.map(DeviceSet),
        }
    }

    /// A memory-sized share is held as that node's share, and given back
    /// the same; one the node cannot size counts as a whole device.
    #[test]
    fn memory_sized_shares_are_held_as_the_node_sizes_them() {
        let req = GpuRequest {
            memory_mib: Some(4000),
            ..GpuRequest::share(0)
        };
        let pod = PodGpu {
            request: req,
            devices: Some(DeviceSet::one(1)),
        };
        let mut s = GpuState::new(&NodeGpuSpec {
            model: Arc::from("T4"),
            count: 2,
            memory_mib: Some(16000),
        });
        let a: Arc<str> = Arc::from("a");
        s.add(&a, &pod);
        assert_eq!(s.gpus().free, [1000, 750]);
        assert!(s.remove("a"));
        assert_eq!(s.gpus().free, [1000, 1000]);
        let mut no_memory = state(2);
        no_memory.add(&a, &pod);
        assert_eq!(no_memory.gpus().free, [1000, 0]);
    }

    #[test]
    fn named_devices_are_held_and_given_back() {
        let mut s = state(4);
        let a: Arc<str> = Arc::from("a");
        assert_eq!(s.add(&a, &pod(300, 1, Some(0b100))), DeviceSet(0b100));
        assert_eq!(s.gpus().free, [1000, 1000, 700, 1000]);
        // Counted once.
        s.add(&a, &pod(300, 1, Some(0b100)));
        assert_eq!(s.gpus().free, [1000, 1000, 700, 1000]);
        assert!(s.remove("a"));
        assert!(!s.remove("a"));
        assert_eq!(s.gpus().free, [1000; 4]);
    }

    #[test]
    fn unnamed_devices_follow_the_default_rule() {
        let mut s = state(3);
        s.add(&Arc::from("a"), &pod(600, 1, Some(0b1)));
        // 300 goes to the tightest device that holds it: device 0 (400 free).
        assert_eq!(s.add(&Arc::from("b"), &pod(300, 1, None)), DeviceSet(0b1));
        assert_eq!(
            s.add(&Arc::from("c"), &pod(1000, 2, None)),
            DeviceSet(0b110)
        );
        assert_eq!(s.gpus().free, [100, 0, 0]);
    }

    #[test]
    fn a_pod_beyond_the_devices_is_still_counted() {
        let mut s = state(2);
        s.add(&Arc::from("a"), &pod(1000, 2, None));
        // Bound by someone else though nothing is free: counted on the
        // devices with most free, never below 0 free.
        let d = s.add(&Arc::from("b"), &pod(500, 1, None));
        assert_eq!(d.len(), 1);
        assert_eq!(s.gpus().free, [0, 0]);
        s.remove("a");
        let left: u32 = s.gpus().free.iter().sum();
        assert_eq!(left, 1500, "only b's 500 is still held");
        // Devices named beyond the node's are not trusted.
        assert_eq!(s.add(&Arc::from("c"), &pod(100, 1, Some(0b1000))).len(), 1);
    }
}
