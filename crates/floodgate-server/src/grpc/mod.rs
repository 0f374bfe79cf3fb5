//! The gRPC API: Envoy's `RateLimitService`, health checking and server
//! reflection.

mod deadline;
mod fast;
pub(crate) mod wire;

pub use fast::GrpcService;
