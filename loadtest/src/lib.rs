//! Flotilla workloads, runs and reports.
//!
//! # Layout
//! - [`workload`]: input as Kubernetes objects (synthetic SchedulingBasic,
//!   the Alibaba openb trace, Kubernetes YAML/JSON lists).
//! - [`run`]: one run on the embedded cluster (coordinator + workers over
//!   loopback gRPC) until every pod is bound or unschedulable.
//! - [`report`]: the end-of-run report (text and JSON) and placements file.
//! - [`live`]: the report of scheduling a live cluster (the process itself
//!   is the `flotilla` binary's).

pub mod bench;
pub mod live;
pub mod procstat;
pub mod report;
pub mod run;
pub mod workload;
