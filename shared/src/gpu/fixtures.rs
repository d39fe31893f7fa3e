//! Test fixtures shared by the `frag` and `policy` tests.

use std::sync::Arc;

use super::frag::{TargetWorkload, TaskShape};
use super::{GpuRequest, NodeGpus};

/// A V100 node's devices with these free shares.
pub(crate) fn gpus(free: &[u32]) -> NodeGpus {
    NodeGpus {
        model: Arc::from("V100"),
        memory_mib: None,
        free: free.to_vec(),
    }
}

/// A task of `cpu` millicores and a `milli` share of one GPU.
pub(crate) fn share(cpu: i64, milli: u32) -> TaskShape {
    TaskShape::with_gpu(cpu, GpuRequest::share(milli))
}

/// A task of `cpu` millicores and `count` whole GPUs.
pub(crate) fn whole(cpu: i64, count: u32) -> TaskShape {
    TaskShape::with_gpu(cpu, GpuRequest::whole(count))
}

/// The target workload of the reference's §1.7: A = 4000 m + 1 × 500
/// (0.5), B = 8000 m + 1 × 1000 (0.3), C = 2000 m CPU-only (0.2).
pub(crate) fn example_target() -> TargetWorkload {
    TargetWorkload::from_weights(vec![
        (share(4000, 500), 0.5),
        (whole(8000, 1), 0.3),
        (TaskShape::cpu_only(2000), 0.2),
    ])
}

/// Equal to within 1e-9.
pub(crate) fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}
