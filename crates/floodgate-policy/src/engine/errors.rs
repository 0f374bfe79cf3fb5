//! Errors of a request, with one code enum that both the gRPC and the HTTP
//! interfaces map.

use crate::backend::BackendError;

/// Why a request could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The request itself is malformed (empty domain, no descriptors, too
    /// many, too long).
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The backend could not decide (and its failure policy did not
    /// decide for it).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The error classes, for mapping to gRPC codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// gRPC `INVALID_ARGUMENT`, HTTP 400.
    InvalidArgument,
    /// gRPC `UNAVAILABLE`, HTTP 503.
    Unavailable,
    /// gRPC `DEADLINE_EXCEEDED`, HTTP 504.
    DeadlineExceeded,
    /// gRPC `INTERNAL`, HTTP 500.
    Internal,
}

impl EngineError {
    /// The error's class.
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            EngineError::Backend(BackendError::Unavailable(_)) => ErrorCode::Unavailable,
            EngineError::Backend(BackendError::Timeout(_)) => ErrorCode::DeadlineExceeded,
            EngineError::Backend(BackendError::Protocol(_)) => ErrorCode::Internal,
        }
    }
}

impl ErrorCode {
    /// The HTTP status for this class.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unavailable => 503,
            ErrorCode::DeadlineExceeded => 504,
            ErrorCode::Internal => 500,
        }
    }

    /// The gRPC status code number for this class.
    pub fn grpc_code(self) -> i32 {
        match self {
            ErrorCode::InvalidArgument => 3,
            ErrorCode::DeadlineExceeded => 4,
            ErrorCode::Internal => 13,
            ErrorCode::Unavailable => 14,
        }
    }
}
