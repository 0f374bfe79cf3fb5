//! The gRPC API: Envoy's `RateLimitService`, health checking and server
//! reflection.

mod convert;
mod rls;

pub use convert::{fill_response, status_of};
pub use rls::RlsService;
