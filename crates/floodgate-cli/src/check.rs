//! `floodgate config check`: load and compile, report every problem with
//! its file, line and column, start nothing.

use std::path::PathBuf;
use std::process::ExitCode;

use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::ConfigSource;

/// Top-level sections read by other components of the binary: the
/// service's `server:` and `store:`, and the gateway's `http:` and
/// `gateway:`.
pub const OTHER_SECTIONS: &[&str] = &["server", "store", "http", "gateway"];

pub fn run(paths: &[PathBuf], merge_domains: bool) -> ExitCode {
    let source = ConfigSource {
        paths: paths.to_vec(),
        options: LoadOptions {
            merge_domains,
            other_sections: OTHER_SECTIONS.to_vec(),
            ..Default::default()
        },
    };
    let result = source.compile().and_then(|c| {
        // The service's own sections (`server:`, `store:`), then the
        // gateway's (`gateway:`, `http:`): every problem of every section.
        let docs = &c.loaded.documents;
        let mut errors = floodgate_policy::error::Errors::default();
        if let Err(e) = floodgate_runtime::settings::read_sections(docs) {
            errors.extend(e);
        }
        if let Err(e) = floodgate_gateway::GatewayConfig::from_documents(docs) {
            errors.extend(e);
        }
        if let Err(e) = floodgate_gateway::HttpSection::from_documents(docs) {
            errors.extend(e);
        }
        errors.finish(c)
    });
    match result {
        Ok(c) => {
            let domains = c.policy.domains().count();
            let rules = c.policy.rules().len();
            println!(
                "OK: {} file(s), {domains} domain(s), {rules} rule(s)",
                c.loaded.files.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!("{} problem(s) found", errors.0.len());
            ExitCode::FAILURE
        }
    }
}
