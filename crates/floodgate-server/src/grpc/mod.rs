//! The gRPC API: Envoy's `RateLimitService`, health checking and server
//! reflection.

mod convert;
mod deadline;
mod fast;
mod rls;
mod wire;

pub use convert::{fill_response, status_of};
pub use deadline::parse_grpc_timeout;
pub use fast::{GrpcService, RLS_PATH};
pub use rls::RlsService;
pub use wire::{WireError, WireRequest, encode_response};
