//! The generated protocol types (Envoy RLS v3), in their proto packages.
#![allow(missing_docs, clippy::all, rustdoc::all)]

include!(concat!(env!("OUT_DIR"), "/_includes.rs"));

/// The encoded `FileDescriptorSet` of the protocol, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptor.bin"));

pub use envoy::extensions::common::ratelimit::v3 as ratelimit;
pub use envoy::service::ratelimit::v3 as rls;
