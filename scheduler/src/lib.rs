//! Flotilla scheduler worker.
//!
//! # Layout
//! - [`cache`]: the node cache (assume / forget / confirm / expire) and the
//!   per-cycle [`cache::Snapshot`].
//! - [`queue`]: activeQ, backoffQ and the unschedulable pool.
//! - [`config`]: the `KubeSchedulerConfiguration` file (`--config`):
//!   loading, upstream defaulting and merging, validation.
//! - [`framework`]: plugin registry, profiles, and the cycle runner
//!   (PreFilter → Filter → Score → select).
//! - [`plugins`]: the in-tree plugins, one file each.
//! - [`preemption`]: DefaultPreemption's PostFilter (victims, candidate
//!   node), pure over a snapshot.
//! - [`pdbs`]: the PodDisruptionBudgets the coordinator forwards.
//! - [`gang`]: gang scheduling's book (PodGroups, members waiting at Permit).
//! - [`extender`]: the upstream HTTP scheduler extender in the cycle (the
//!   filter chain, prioritize, preempt); its wire format and client are in
//!   `flotilla_shared::extender`.
//! - [`webhook`]: the placement webhook a profile may delegate the choice
//!   of node to.
//! - [`cycle`]: one scheduling attempt for one pod as a value
//!   ([`cycle::Decision`]): the cycle, the placement webhook, PostFilter
//!   (preemption, gang release), assume and Permit. The two drivers below
//!   only apply its decisions.
//! - [`simulate`]: `flotilla simulate` / `flotilla explain`: the decisions
//!   for a cluster's pending pods (or one pod), in-process, on a simulated
//!   cluster, with per-node filter results and per-plugin scores.
//! - [`worker`]: the worker process: coordinator stream → cache/queue →
//!   scheduling thread → bind stream (the crate's one user of the wire
//!   types).
//! - [`window`]: how many placements a worker may keep unconfirmed
//!   (additive increase, halved on a bind conflict).

pub mod cache;
pub mod config;
pub mod cycle;
pub mod extender;
pub mod framework;
pub mod gang;
pub mod pdbs;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod simulate;
pub mod webhook;
pub mod window;
pub mod worker;

pub use framework::{Framework, Profile, Registry};
pub use worker::{WorkerConfig, WorkerStats};
