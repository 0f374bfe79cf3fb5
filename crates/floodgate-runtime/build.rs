//! Compiles the protocol files with a pure-Rust protobuf compiler (no
//! `protoc`): Envoy's RLS v3 and RLQS v3 (the service's), and the xDS
//! discovery service with envoyproxy/ratelimit's `RateLimitConfig` (the
//! configuration source). Keeps the services' descriptor set for
//! reflection.

use std::path::PathBuf;

const RLS: &str = "envoy/service/ratelimit/v3/rls.proto";
const RLQS: &str = "envoy/service/rate_limit_quota/v3/rlqs.proto";
const XDS: &[&str] = &[
    "envoy/service/discovery/v3/ads.proto",
    "ratelimit/config/ratelimit/v3/rls_conf.proto",
    "ratelimit/service/ratelimit/v3/rls_conf_ds.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let rls = protox::compile([RLS, RLQS], ["proto"])?;
    std::fs::write(
        out.join("rls_descriptor.bin"),
        prost::Message::encode_to_vec(&rls),
    )?;
    let all = protox::compile(
        [RLS, RLQS].into_iter().chain(XDS.iter().copied()),
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .include_file("_includes.rs")
        .compile_fds(all)?;
    Ok(())
}
