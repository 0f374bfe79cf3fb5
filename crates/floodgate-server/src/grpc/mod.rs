//! The gRPC API: Envoy's `RateLimitService`, health checking and server
//! reflection.

mod convert;
mod fast;
mod rls;
mod wire;

pub use convert::{fill_response, status_of};
pub use fast::{GrpcService, RLS_PATH};
pub use rls::RlsService;
pub use wire::{WireError, WireRequest, encode_response};
