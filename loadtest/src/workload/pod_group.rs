//! `PodGroup` (`scheduling.x-k8s.io/v1alpha1`), now defined in
//! [`flotilla_shared::pod_group`] (the scheduler and the coordinator use it
//! too); re-exported here so loadtest paths keep working.

pub use flotilla_shared::pod_group::*;
