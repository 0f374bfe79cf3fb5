//! The gRPC API: Envoy's `RateLimitService`, health checking and server
//! reflection.

mod deadline;
mod fast;
mod wire;

pub use deadline::parse_grpc_timeout;
pub use fast::{GrpcService, RLS_PATH};
pub use wire::{WireError, WireRequest, encode_response};
