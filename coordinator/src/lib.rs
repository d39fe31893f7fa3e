//! Flotilla coordinator: the one component that talks to the cluster.
//!
//! # Layout
//! - [`cluster`]: the `Cluster` trait, the embedded simulated cluster and
//!   the real API server through `kube`.
//! - [`partition`]: rendezvous-hash node partitioning per worker pool.
//! - [`state`]: the authoritative view, pod dispatch by workload class, and
//!   bind arbitration (`Coordinator::propose`).
//! - [`grpc`]: the `flotilla.v1.Coordinator` service over [`state`].
//! - [`server`]: serving it on a TCP listener with graceful shutdown.
//! - [`leader`]: leader election between coordinator replicas on a Lease.

pub mod arbiter;
pub mod cluster;
pub mod grpc;
pub mod leader;
pub mod partition;
pub mod server;
pub mod state;

pub use state::{
    Arbitration, BindSample, Coordinator, Decision, Grant, NodeRejection, PodPhase, PodRecord,
    PreemptionDecision, Summary,
};
