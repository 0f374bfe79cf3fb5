//! Errors of an identity configuration built in code (a YAML configuration
//! reports the same problems as [`floodgate_policy::ConfigErrors`], with
//! positions).

/// A problem in an [`IdentityConfig`](super::IdentityConfig).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A malformed or duplicate route template.
    #[error("invalid route template `{template}`: {reason}")]
    Route {
        /// The template.
        template: String,
        /// Why.
        reason: String,
    },
    /// A problem with the client address settings.
    #[error("client_ip: {0}")]
    ClientIp(String),
    /// A problem with the cost settings (the message names them).
    #[error("{0}")]
    Cost(String),
    /// A problem with descriptor `index` (from 0).
    #[error("descriptor {index}: {reason}")]
    Descriptor {
        /// Which descriptor.
        index: usize,
        /// Why.
        reason: String,
    },
    /// Any other problem.
    #[error("{0}")]
    Invalid(String),
}
