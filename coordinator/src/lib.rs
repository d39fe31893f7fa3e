//! Flotilla coordinator: the one component that talks to the cluster.
//!
//! # Layout
//! - [`cluster`]: the `Cluster` trait, the embedded simulated cluster and
//!   the real API server through `kube`.
//! - [`partition`]: rendezvous-hash node partitioning per worker pool.
//! - [`state`]: the authoritative view, pod dispatch by workload class,
//!   bind arbitration (`Coordinator::propose`) and preemption; one file per
//!   seam, in the coordinator's own types.
//! - [`grpc`]: the `flotilla.v1.Coordinator` service over [`state`], the
//!   one place wire types are converted (requests in, answers and each
//!   worker's `WorkerEvent` out).
//! - [`server`]: serving it on a TCP listener with graceful shutdown, in
//!   plaintext (loopback, or `--insecure`) or under mutual TLS ([`tls`]:
//!   certificates reloaded on change, a worker's class from its
//!   certificate).
//! - [`leader`]: leader election between coordinator replicas on a Lease.

pub mod arbiter;
pub mod cluster;
pub mod grpc;
pub mod leader;
pub mod partition;
pub mod server;
pub mod state;
pub mod tls;

pub use state::{
    Arbitration, BindSample, Coordinator, Decision, Grant, NodeRejection, PodPhase, PodRecord,
    PreemptionDecision, Summary,
};
