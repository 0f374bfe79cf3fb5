//! The generated protocol types (Envoy RLS v3 and RLQS v3), in their proto packages:
//! the runtime's, which compiles every protocol file Floodgate speaks.

pub use floodgate_runtime::host::proto::{FILE_DESCRIPTOR_SET, envoy, ratelimit, rlqs, rls};
