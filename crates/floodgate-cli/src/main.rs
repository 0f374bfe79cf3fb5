//! `floodgate`: the rate limiting service, gateway and tools.

mod bench;
mod check;
mod flags;
mod gateway;
mod replay;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: the proxy and the service allocate and free small buffers on
/// every request (HTTP/2 frames, headers, futures), where it is measurably
/// cheaper than the system allocator (docs/benchmarks.md). Its stable v2
/// line: v3's path for Rust's (aligned) allocations cost the gateway about
/// 200 more instructions per request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Floodgate: rate limiting, exact and fast.
#[derive(Parser, Debug)]
#[command(name = "floodgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs the decision service: Envoy RLS over gRPC, JSON over HTTP,
    /// metrics on the admin listener.
    Serve(Box<serve::ServeArgs>),
    /// Runs the gateway: a reverse proxy enforcing the policies in front
    /// of an HTTP/1.1 or HTTP/2 upstream.
    Gateway(Box<gateway::GatewayArgs>),
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Replays access logs through policies: the gateway's decisions,
    /// request by request, with a report.
    Replay(Box<replay::ReplayArgs>),
    /// Load generation and reference servers for benchmarks.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validates the configuration (Floodgate or envoyproxy/ratelimit
    /// files, or directories of them) as `serve` and `gateway` read it —
    /// every section, the environment and the flags — without starting
    /// anything.
    Check(Box<check::CheckArgs>),
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floodgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => report(serve::run(*args)),
        Command::Gateway(args) => report(gateway::run(*args)),
        Command::Config {
            command: ConfigCommand::Check(args),
        } => check::run(*args),
        Command::Replay(args) => report(replay::run(*args)),
        Command::Bench { command } => report(bench::run(command)),
    }
}
