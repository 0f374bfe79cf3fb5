//! Errors of the HTTP API, as a JSON body with a status code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floodgate_policy::{EngineError, ErrorCode};
use serde::Serialize;

/// An error answer: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ApiError {
    #[serde(skip)]
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with a status, a code name and a message.
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// A malformed request (400).
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    /// The answer before a service started without a configuration has
    /// its first (503, `UNAVAILABLE`).
    pub(crate) fn unconfigured() -> Self {
        Self::of_code(ErrorCode::Unavailable, crate::grpc::NO_CONFIGURATION)
    }

    /// An engine error, with the status of its [`ErrorCode`].
    pub(crate) fn engine(e: &EngineError) -> Self {
        Self::of_code(e.code(), e.to_string())
    }

    /// An error of class `code`, with its status.
    pub(crate) fn of_code(code: ErrorCode, message: impl Into<String>) -> Self {
        let name = match code {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            ErrorCode::Internal => "INTERNAL",
        };
        let status =
            StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self::new(status, name, message)
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The same error with another status (envoyproxy/ratelimit's `/json`
    /// answers 400 for every error).
    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({ "error": self }))).into_response()
    }
}
