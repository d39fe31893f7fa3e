//! `GpuShare` (Flotilla's; the FGD paper's simulator calls its equivalent
//! `Open-Gpu-Share`): per-device GPU placement. A pod's GPU request
//! ([`flotilla_shared::gpu::dialect`] reads the trace-replay annotations,
//! HAMi / Volcano vGPU resources and bare `nvidia.com/gpu`) fits a node
//! only when one device has its share free, or `count` devices are wholly
//! free, of an allowed model ([`flotilla_shared::gpu::fits`]); a node
//! whose eight GPUs each have 300 milli free does not take a 500 share,
//! though the sum would.
//!
//! - PreFilter: `Skip` for pods asking for no GPU (Filter does not run).
//! - Filter: no GPUs, or not of an allowed model, or fewer devices than
//!   asked: `UnschedulableAndUnresolvable`; devices too full:
//!   `Unschedulable` (preemption may free them).
//! - Reserve: the devices the pod takes on the chosen node
//!   ([`GpuShare::choose_devices`]); the cycle assumes the pod holding
//!   them, and the binding proposal carries them.
//! - Bind check: the arbiter re-checks the devices on its view (two
//!   workers never split one GPU beyond 1000 milli).
//!
//! Node GPU accounting ([`flotilla_shared::gpu::state::GpuState`]) lives
//! in `NodeInfo`, so the worker's cache, `simulate` and the arbiter count
//! the same way.

use std::borrow::Cow;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, ExtensionPoint, FilterPlugin,
    Plugin, PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::gpu::{self, DeviceSet, GpuRequest};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::GPU_SHARE;

/// The node has no GPU devices.
pub const REASON_NO_GPU: &str = "node(s) had no GPU";
/// The node's GPU model is not one the pod allows.
pub const REASON_MODEL: &str = "node(s) didn't have the requested GPU model";
/// The node has fewer devices than the pod asks for.
pub const REASON_TOO_FEW: &str = "node(s) had fewer GPUs than requested";
/// No device has the pod's share free.
pub const REASON_NO_SHARE: &str = "node(s) had no GPU with enough free share";
/// Too few devices are wholly free.
pub const REASON_NO_WHOLE: &str = "node(s) didn't have enough free GPUs";

/// A pod leaving (its devices), or a node joining or changing, can help.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeAllocatableGrew,
    ClusterEvent::AssignedPodDeleted,
];

/// Extension points served outside the cycle runner: Reserve (the device
/// choice, made by the cycle after the node is chosen).
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::Reserve];

/// The plugin.
#[derive(Debug, Default)]
pub struct GpuShare {}

impl GpuShare {
    /// The plugin with default args.
    #[must_use]
    pub fn new() -> Self {
        GpuShare {}
    }

    /// The devices `pod` takes on `node` (Reserve): `None` for a pod
    /// asking for no GPU, or when it does not fit.
    #[must_use]
    pub fn choose_devices(&self, pod: &PodInfo, node: &NodeInfo) -> Option<DeviceSet> {
        let req = &pod.gpu.as_deref()?.request;
        gpu::choose_best_fit(node.gpu.as_deref()?.gpus(), req)
    }
}

impl Plugin for GpuShare {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for GpuShare {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let status = if pod.gpu.is_some() {
            Status::success()
        } else {
            Status::skip()
        };
        (PreFilterResult::default(), status)
    }
}

/// Why `req` does not fit `node`'s devices, with whether preemption could
/// help (`false`: unresolvable); `None` when it fits. When `devices` is
/// given, those exact devices must hold the share.
#[must_use]
pub fn misfit(
    req: &GpuRequest,
    devices: Option<DeviceSet>,
    node: &NodeInfo,
) -> Option<(&'static str, bool)> {
    let Some(state) = node.gpu.as_deref() else {
        return Some((REASON_NO_GPU, false));
    };
    let gpus = state.gpus();
    if !req.allows_model(&gpus.model) {
        return Some((REASON_MODEL, false));
    }
    if gpus.free.len() < req.count as usize {
        return Some((REASON_TOO_FEW, false));
    }
    let fits = match devices {
        Some(d) => {
            d.len() == req.count as usize
                && d.iter().all(|i| gpus.free.get(i).is_some_and(|&f| f >= req.milli))
        }
        None => gpu::fits(gpus, req),
    };
    if fits {
        None
    } else if req.is_share() {
        Some((REASON_NO_SHARE, true))
    } else {
        Some((REASON_NO_WHOLE, true))
    }
}

impl FilterPlugin for GpuShare {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(g) = pod.gpu.as_deref() else {
            return Status::success();
        };
        match misfit(&g.request, None, node) {
            None => Status::success(),
            Some((reason, true)) => Status::unschedulable(reason).with_plugin(NAME),
            Some((reason, false)) => Status::unresolvable(reason).with_plugin(NAME),
        }
    }
}

/// The Filter's rule on the arbiter's view: the devices the proposal
/// names (the pod's [`flotilla_shared::gpu::state::PodGpu::devices`]) must
/// still hold the share there; without them, any fit will do (the arbiter
/// counts the pod on the default rule's devices).
impl BindCheck for GpuShare {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        let Some(g) = pod.gpu.as_deref() else {
            return Ok(());
        };
        match misfit(&g.request, g.devices, node) {
            None => Ok(()),
            Some((reason, _)) => Err(Cow::Borrowed(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::gpu::dialect::{ANNOTATION_GPU_COUNT, ANNOTATION_GPU_MILLI, GPU_CARD_MODEL};
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    fn gpu_node(name: &str, model: &str, count: usize) -> NodeInfo {
        NodeInfo::new(Arc::new(
            NodeBuilder::new(name)
                .resource("nvidia.com/gpu", &count.to_string())
                .label(GPU_CARD_MODEL, model)
                .build_spec(),
        ))
    }

    fn gpu_pod(name: &str, milli: u32, count: u32) -> PodInfo {
        PodBuilder::new(name)
            .annotation(ANNOTATION_GPU_MILLI, &milli.to_string())
            .annotation(ANNOTATION_GPU_COUNT, &count.to_string())
            .build_info()
    }

    #[test]
    fn a_share_needs_one_device_with_room() {
        let mut node = gpu_node("n", "T4", 2);
        for (i, milli) in [(0, 700), (1, 700)] {
            let p = gpu_pod(&format!("p{i}"), milli, 1);
            let d = GpuShare::new().choose_devices(&p, &node).unwrap();
            assert!(node.add_pod(Arc::new(p.with_gpu_devices(d))));
        }
        // 600 free in total, 300 on each device: a 500 share fits nowhere.
        let st = GpuShare::new().filter(&CycleState::default(), &gpu_pod("x", 500, 1), &node);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(st.reasons, [REASON_NO_SHARE]);
        assert!(
            GpuShare::new()
                .filter(&CycleState::default(), &gpu_pod("y", 300, 1), &node)
                .is_success()
        );
    }

    #[test]
    fn unresolvable_reasons() {
        let pl = GpuShare::new();
        let s = CycleState::default();
        let cpu_node = NodeInfo::new(Arc::new(NodeBuilder::new("c").build_spec()));
        let st = pl.filter(&s, &gpu_pod("p", 1000, 1), &cpu_node);
        assert_eq!((st.code, st.reasons[0].as_ref()), (Code::UnschedulableAndUnresolvable, REASON_NO_GPU));
        let st = pl.filter(&s, &gpu_pod("p", 1000, 4), &gpu_node("g", "T4", 2));
        assert_eq!(st.reasons, [REASON_TOO_FEW]);
        let p = PodBuilder::new("m")
            .annotation(ANNOTATION_GPU_MILLI, "1000")
            .annotation(GPU_CARD_MODEL, "A100|V100")
            .build_info();
        let st = pl.filter(&s, &p, &gpu_node("g", "T4", 2));
        assert_eq!((st.code, st.reasons[0].as_ref()), (Code::UnschedulableAndUnresolvable, REASON_MODEL));
        assert!(pl.filter(&s, &p, &gpu_node("g", "V100", 2)).is_success());
    }

    #[test]
    fn pods_without_gpus_skip() {
        let (_, st) = GpuShare::new().pre_filter(
            &mut CycleState::default(),
            &PodBuilder::new("p").cpu("1").build_info(),
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st.code, Code::Skip);
    }

    #[test]
    fn the_bind_check_refuses_devices_another_grant_took() {
        let mut node = gpu_node("n", "T4", 2);
        let first = gpu_pod("a", 600, 1).with_gpu_devices(DeviceSet::one(0));
        node.add_pod(Arc::new(first));
        let second = gpu_pod("b", 600, 1);
        assert_eq!(misfit(&second.gpu.as_ref().unwrap().request, Some(DeviceSet::one(0)), &node), Some((REASON_NO_SHARE, true)));
        assert_eq!(misfit(&second.gpu.as_ref().unwrap().request, Some(DeviceSet::one(1)), &node), None);
        // Without named devices any fit passes.
        assert_eq!(misfit(&second.gpu.as_ref().unwrap().request, None, &node), None);
    }
}
