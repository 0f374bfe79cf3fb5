//! `floodgate`: the rate limiting service, gateway and tools.

mod allocator;
mod bench;
mod check;
mod flags;
mod healthcheck;
mod memory_report;
mod replay;
mod sync_report;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floodgate_runtime::host::{Frontend, logging};
use floodgate_runtime::settings::table::warn_not_read;
use floodgate_runtime::settings::{Env, warn_unsupported};

use flags::{GatewayFlags, ServeFlags, env};

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
    Serve(ServeFlags),
    /// Runs the gateway: a reverse proxy enforcing the policies in front
    /// of an HTTP/1.1 or HTTP/2 upstream.
    Gateway(GatewayFlags),
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
    /// GETs a URL (default: the admin listener's `/ready` on loopback),
    /// exits 0 on a 2xx answer: a probe for images without a shell.
    Healthcheck(healthcheck::HealthcheckArgs),
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
            eprintln!("floodgate: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, each said once: a cause its error already states
/// (`cannot listen on …: Address already in use`) is not repeated.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// `floodgate serve`, until SIGTERM/SIGINT: every setting has a flag, over
/// the environment and the configuration file.
fn serve(flags: ServeFlags) -> anyhow::Result<()> {
    // Before loading: rules resolve their metric handles when compiled.
    let prometheus = floodgate_runtime::host::metrics::install()?;
    let loaded = floodgate_server::load(
        &flags.0,
        &Env::new(&env),
        &flags::sections(),
        floodgate_server::DEFAULT_CONFIG,
    )?;
    logging::init(
        &loaded.runtime.settings.server.log,
        &loaded.runtime.settings.server.tracing,
    )?;
    warn_unsupported(env);
    Ok(floodgate_server::run(loaded, Some(prometheus))?)
}

/// `floodgate gateway`, until SIGTERM/SIGINT, read as `serve` is.
fn gateway(flags: GatewayFlags) -> anyhow::Result<()> {
    let prometheus = floodgate_runtime::host::metrics::install()?;
    let service = floodgate_server::Rls::sections();
    let loaded = floodgate_gateway::load_beside(&flags.0, &Env::new(&env), &service)?;
    let mut log = loaded.runtime.settings.server.log.clone();
    if loaded.gateway.access_log {
        // Access lines pass whatever level the other logs are filtered at.
        log.level = format!("{},{}=info", log.level, floodgate_gateway::access::TARGET);
    }
    logging::init(&log, &loaded.runtime.settings.server.tracing)?;
    warn_unsupported(env);
    let documents = &loaded.runtime.compiled.loaded.documents;
    warn_not_read::<floodgate_server::RlsSettings>(documents, "floodgate serve");
    Ok(floodgate_gateway::run(loaded, Some(prometheus))?)
}

/// The name envoyproxy/ratelimit's image runs (`/bin/ratelimit`), so that
/// its manifests' `command` works unchanged: it means `floodgate serve`.
const RATELIMIT: &str = "ratelimit";

/// The command line, `serve` inserted when the program is called by
/// [`RATELIMIT`]'s name (whatever its directory).
fn arguments() -> Vec<OsString> {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let called = args.first().and_then(|a| Path::new(a).file_name());
    if called.is_some_and(|name| name == RATELIMIT) {
        args.insert(1, "serve".into());
    }
    args
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(arguments());
    match cli.command {
        Command::Serve(flags) => report(serve(flags)),
        Command::Gateway(flags) => report(gateway(flags)),
        Command::Config {
            command: ConfigCommand::Check(args),
        } => check::run(*args),
        Command::Replay(args) => report(replay::run(*args)),
        Command::Bench { command } => report(bench::run(command)),
        Command::Healthcheck(args) => report(healthcheck::run(&args)),
    }
}
