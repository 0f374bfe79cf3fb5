//! Compiles the Envoy RLS v3 protocol files with a pure-Rust protobuf
//! compiler (no `protoc`), and keeps the descriptor set for reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["envoy/service/ratelimit/v3/rls.proto"];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("rls_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .include_file("_includes.rs")
        .compile_fds(fds)?;
    Ok(())
}
