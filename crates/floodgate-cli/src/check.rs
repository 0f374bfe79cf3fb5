//! `floodgate config check`: load the configuration as `serve` and
//! `gateway` do — every section, the environment and the flags — report
//! every problem with where it came from, start nothing.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use floodgate_policy::error::Errors;
use floodgate_runtime::RuntimeError;
use floodgate_runtime::settings::{Env, Value};

use crate::flags::{CheckFlags, env};

/// `floodgate config check`.
#[derive(Args, Debug)]
pub(crate) struct CheckArgs {
    /// Files or directories (Floodgate or envoyproxy/ratelimit format);
    /// the same as `--config`.
    pub paths: Vec<PathBuf>,
    /// Check every file (and every `*.yaml`/`*.yml` of a directory) as a
    /// configuration of its own, as for a directory of separate
    /// deployments such as `examples/`; without it, all the files are one
    /// configuration, as `serve` and `gateway` read them.
    #[arg(long)]
    pub each: bool,
    #[command(flatten)]
    pub flags: CheckFlags,
}

pub(crate) fn run(args: CheckArgs) -> ExitCode {
    if !args.each {
        return check(args.flags.0, &args.paths, "");
    }
    let mut files = Vec::new();
    let yaml = |f: &PathBuf| {
        f.is_file() && matches!(f.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
    };
    for p in &args.paths {
        let Ok(dir) = std::fs::read_dir(p) else {
            files.push(p.clone());
            continue;
        };
        let mut found: Vec<PathBuf> = dir.flatten().map(|e| e.path()).filter(yaml).collect();
        found.sort();
        files.extend(found);
    }
    if files.is_empty() {
        eprintln!("--each: no file to check");
        return ExitCode::FAILURE;
    }
    let failed = (files.iter())
        .filter(|f| {
            let label = format!("{}: ", f.display());
            check(args.flags.0.clone(), std::slice::from_ref(f), &label) != ExitCode::SUCCESS
        })
        .count();
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("{failed} of {} configuration(s) have problems", files.len());
        ExitCode::FAILURE
    }
}

/// Checks the configuration made of `paths` (the flags' `--config` when
/// empty); `label` prefixes its summary line.
fn check(
    mut flags: floodgate_runtime::settings::Flags,
    paths: &[PathBuf],
    label: &str,
) -> ExitCode {
    if !paths.is_empty() {
        let paths = paths.iter().map(|p| p.display().to_string());
        flags.set("config", Value::many(paths));
    }
    // Files are checked whatever source the environment names.
    flags.set("config_type", Value::one("file"));
    let env = Env::new(&env);
    let mut errors = Errors::default();
    let loaded = match floodgate_runtime::host::load(
        &flags,
        &env,
        &crate::flags::sections(),
        floodgate_server::DEFAULT_CONFIG,
    ) {
        Ok(l) => Some(l),
        Err(RuntimeError::Config(e)) => {
            errors.extend(e);
            None
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut explained = Vec::new();
    if let Some(l) = &loaded {
        match check_sections(l, &flags, &env, &mut errors) {
            Ok(lines) => explained = lines,
            Err(code) => return code,
        }
    }
    match errors.finish(loaded) {
        Ok(Some(l)) => {
            print_summary(&l, label);
            if !explained.is_empty() {
                println!("adaptive concurrency limit (http.layer.shedding.adaptive):");
                for line in explained {
                    println!("  {line}");
                }
            }
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::FAILURE,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!("{} problem(s) found", errors.0.len());
            ExitCode::FAILURE
        }
    }
}

/// Checks what the loaded configuration `l` asks of the store, and the
/// service's and the gateway's sections (into `errors`); gives the
/// explanation of its adaptive concurrency limit, if it has one.
fn check_sections(
    l: &floodgate_runtime::host::Loaded,
    flags: &floodgate_runtime::settings::Flags,
    env: &Env<'_>,
    errors: &mut Errors,
) -> Result<Vec<String>, ExitCode> {
    // What the store cannot decide, as `serve` and `gateway` refuse it.
    if let Err(e) =
        floodgate_runtime::host::check_policy(l.settings.store.backend, &l.compiled.policy)
    {
        eprintln!("{e}");
        return Err(ExitCode::FAILURE);
    }
    // The service's settings and the gateway's sections, read as
    // `floodgate serve` and `floodgate gateway` read them.
    let docs = &l.compiled.loaded.documents;
    if let Err(e) = floodgate_server::RlsSettings::resolve(flags, env, docs) {
        errors.extend(e);
    }
    let (_, http) = floodgate_gateway::read_sections(flags, env, docs, errors);
    let adaptive = http.and_then(|h| h.layer.shedding?.adaptive);
    Ok(adaptive.map(|a| a.explain()).unwrap_or_default())
}

/// What a valid configuration `l` holds, and how a Redis store shares what
/// is decided in memory.
fn print_summary(l: &floodgate_runtime::host::Loaded, label: &str) {
    let c = &l.compiled;
    println!(
        "{label}OK: {} file(s), {} domain(s), {} rule(s)",
        c.loaded.files.len(),
        c.policy.domains().count(),
        c.policy.rules().len()
    );
    if let Some(line) = crate::memory_report::memory_report(&l.settings.store) {
        println!("{line}");
    }
    let sync = crate::sync_report::sync_report(&l.settings.store, &c.policy);
    if !sync.is_empty() {
        println!("decided in memory, shared through Redis:");
        for line in sync {
            println!("  {line}");
        }
    }
}
