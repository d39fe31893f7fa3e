//! Flotilla's gRPC wire types, one module per versioned proto package.
//!
//! Nothing but generated code and the protocol's limits lives here;
//! conversions to domain types are in
//! `flotilla-shared` and the service implementations in the coordinator and
//! scheduler crates. The contract (ordering, idempotency) is documented in the
//! `.proto` files themselves.

/// Package `flotilla.v1`: coordinator <-> scheduler worker protocol.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("flotilla.v1");

    /// The most `UnschedulableReport.node_statuses` a worker sends, and the
    /// coordinator keeps per pending pod: a sample of the per-node reasons
    /// for inspection (the report's message counts every node, as
    /// upstream's FitError does). Upstream keeps no per-node statuses past
    /// the cycle; sending and keeping one per node cost 2,000 entries a pod
    /// on a 2,000-node cluster, ~400 KB of the coordinator's memory per
    /// unschedulable pod (a backlog of 120,000 exhausted 24 GiB).
    pub const MAX_NODE_STATUSES: usize = 20;
}
