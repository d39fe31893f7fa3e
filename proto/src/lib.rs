//! Flotilla's gRPC wire types, one module per versioned proto package.
//!
//! Nothing but generated code lives here; conversions to domain types are in
//! `flotilla-shared` and the service implementations in the coordinator and
//! scheduler crates. The contract (ordering, idempotency) is documented in the
//! `.proto` files themselves.

/// Package `flotilla.v1`: coordinator <-> scheduler worker protocol.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("flotilla.v1");
}
