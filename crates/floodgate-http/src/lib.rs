//! Floodgate for HTTP.
//!
//! [`identity`] turns an HTTP request into the descriptors a Floodgate
//! policy matches on: the client address (behind trusted proxies), API
//! keys, bearer tokens, users, tenants, tiers, methods, route templates and
//! constants, plus the request's weighted cost.

#![warn(missing_docs)]

pub mod identity;

pub use identity::{HttpDescriptor, HttpIdentity, RequestDescriptors};
