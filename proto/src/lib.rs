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

/// How each side of a coordinator–worker connection tells a live peer from
/// a frozen or unreachable one: HTTP/2 PING frames, answered by the peer's
/// process (a host that is up but a process that is stopped, hung, or cut
/// off by a silently dropping network does not answer). A peer silent for
/// `interval` is pinged; one that does not answer within `timeout` has its
/// connection closed. So the coordinator re-dispatches a frozen worker's
/// pods, and ends its session (its credential refused from then on: a
/// worker that wakes cannot place anything), within [`Liveness::bound`] of
/// its last word; a worker leaves a coordinator that stops answering within
/// the same bound and joins whichever replica leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Silence before a ping. Default 5 s.
    pub interval: std::time::Duration,
    /// Wait for the ping's answer. Default 5 s.
    pub timeout: std::time::Duration,
}

impl Liveness {
    /// 5 s of silence, 5 s to answer: a peer is declared dead at most 10 s
    /// after its last word.
    pub const DEFAULT: Liveness = Liveness {
        interval: std::time::Duration::from_secs(5),
        timeout: std::time::Duration::from_secs(5),
    };

    /// The longest a dead peer goes unnoticed: `interval + timeout`.
    #[must_use]
    pub fn bound(&self) -> std::time::Duration {
        self.interval + self.timeout
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Self::DEFAULT
    }
}
