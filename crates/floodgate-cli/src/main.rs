//! `floodgate`: the rate limiting service, gateway and tools.

mod bench;
mod check;
mod gateway;
mod replay;
mod serve;

use std::path::PathBuf;
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
    /// Validates configuration files (Floodgate or envoyproxy/ratelimit
    /// format, or directories of them) without starting anything.
    Check {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Merge several files of one domain (envoyproxy/ratelimit's
        /// MERGE_DOMAIN_CONFIG) instead of rejecting them.
        #[arg(long, env = "MERGE_DOMAIN_CONFIG")]
        merge_domains: bool,
    },
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
            command:
                ConfigCommand::Check {
                    paths,
                    merge_domains,
                },
        } => check::run(&paths, merge_domains),
        Command::Replay(args) => report(replay::run(*args)),
        Command::Bench { command } => report(bench::run(command)),
    }
}
