//! axum's `IntoResponse` for the contract's rejections.

use bytes::Bytes;

/// A rejection built by [`Contract::reject`](super::Contract::reject), as
/// an axum response (feature `axum`).
#[derive(Debug)]
pub struct Rejected(pub http::Response<Bytes>);

impl axum::response::IntoResponse for Rejected {
    fn into_response(self) -> axum::response::Response {
        self.0.map(axum::body::Body::from)
    }
}
