//! Flotilla load tests: workloads (synthetic, Alibaba openb trace, Kubernetes lists), runs and reports.

pub mod workload;
