//! The configurations replayed: each candidate is a set of Floodgate
//! files read exactly as the gateway reads them — the policies, and the
//! `http:` section's identity, contract and layer settings.

use std::path::PathBuf;

use floodgate_http::identity::{ActionKind, IdentityConfig, Source};
use floodgate_http::layer::OnError;
use floodgate_http::{Contract, HttpIdentity, HttpSection};
use floodgate_policy::PolicySet;
use floodgate_policy::read::LoadOptions;
use floodgate_policy::reload::{Compiled, ConfigSource};
use floodgate_policy::spec::PolicySpec;
use http::HeaderName;

use crate::error::ReplayError;
use crate::variants::Variant;

/// A configuration to replay: a name and its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateSpec {
    /// Its name in reports.
    pub name: String,
    /// Files or directories, as for `floodgate gateway --config`.
    pub paths: Vec<PathBuf>,
}

impl CandidateSpec {
    /// `[NAME=]PATH[,PATH...]`: the name defaults to the first file's
    /// stem.
    pub fn parse(text: &str) -> Result<CandidateSpec, String> {
        let (name, list) = match text.split_once('=') {
            Some((n, l)) if !n.is_empty() && !n.contains(['/', ',']) => (Some(n), l),
            _ => (None, text),
        };
        let paths: Vec<PathBuf> = list
            .split(',')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        let Some(first) = paths.first() else {
            return Err(format!("`{text}` names no file"));
        };
        let name = match name {
            Some(n) => n.to_owned(),
            None => first
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| first.display().to_string()),
        };
        Ok(CandidateSpec { name, paths })
    }
}

/// A compiled candidate.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub name: String,
    pub identity: HttpIdentity,
    pub contract: Contract,
    pub max_delayed: usize,
    pub on_error: OnError,
    /// What of the configuration a replay does not reproduce.
    pub notes: Vec<String>,
}

/// A candidate's configuration, loaded.
pub(crate) struct Loaded {
    pub spec: PolicySpec,
    pub http: Option<HttpSection>,
}

/// Loads the files of `spec`, which may hold the top-level `sections`
/// besides the policies'.
pub(crate) fn load(spec: &CandidateSpec, sections: &[&'static str]) -> Result<Loaded, ReplayError> {
    let source = ConfigSource {
        paths: spec.paths.clone(),
        options: LoadOptions {
            other_sections: sections.to_vec(),
            ..Default::default()
        },
    };
    let config = |e: floodgate_policy::ConfigErrors| ReplayError::Config {
        candidate: spec.name.clone(),
        message: floodgate_policy::compile::describe(&e),
    };
    let Compiled { loaded, .. } = source.compile().map_err(config)?;
    let http = HttpSection::from_documents(&loaded.documents).map_err(config)?;
    Ok(Loaded {
        spec: loaded.spec,
        http,
    })
}

/// Compiles a candidate named `name` from `spec` (possibly changed by a
/// variant) and its `http:` part.
pub(crate) fn compile(
    name: String,
    spec: &PolicySpec,
    http: &HttpSection,
) -> Result<(Candidate, PolicySet), ReplayError> {
    let policy = PolicySet::compile(spec).map_err(|e| ReplayError::Config {
        candidate: name.clone(),
        message: floodgate_policy::compile::describe(&e),
    })?;
    let identity = http.identity.clone();
    let mut notes = Vec::new();
    let l = &http.layer;
    if l.shedding.is_some() {
        notes.push("http.layer.shedding is not replayed (it depends on requests in flight)".into());
    }
    if l.global_concurrency.is_some() || l.keyed_concurrency.is_some() {
        notes.push(
            "http.layer.concurrency is not replayed (its queues depend on requests in flight)"
                .into(),
        );
    }
    Ok((
        Candidate {
            name,
            identity,
            contract: http.contract.clone(),
            max_delayed: l.max_delayed,
            on_error: l.on_error,
            notes,
        },
        policy,
    ))
}

/// Loads every candidate: each spec, then each algorithm variant of each.
/// A candidate without an `http:` section uses the first one's.
pub(crate) fn load_all(
    specs: &[CandidateSpec],
    variants: &[Variant],
    sections: &[&'static str],
) -> Result<Vec<(Candidate, PolicySet)>, ReplayError> {
    let mut loaded = Vec::new();
    for s in specs {
        loaded.push((s.name.clone(), load(s, sections)?));
    }
    let shared = loaded
        .iter()
        .find_map(|(_, l)| l.http.clone())
        .ok_or(ReplayError::NoHttpSection)?;
    let mut out = Vec::new();
    for (name, l) in &loaded {
        let http = l.http.as_ref().unwrap_or(&shared);
        if variants.is_empty() {
            out.push(compile(name.clone(), &l.spec, http)?);
            continue;
        }
        for v in variants {
            let (spec, skipped) = v.apply(&l.spec);
            let label = if loaded.len() > 1 {
                format!("{name}/{}", v.name())
            } else {
                v.name().to_owned()
            };
            let mut c = compile(label, &spec, http)?;
            c.0.notes.extend(skipped);
            out.push(c);
        }
    }
    Ok(out)
}

/// The request headers `config` reads.
pub(crate) fn headers_read(config: &IdentityConfig) -> Vec<HeaderName> {
    let mut names = Vec::new();
    if config.client_ip.trusts_proxies() {
        names.push(config.client_ip.header.clone());
    }
    if let Some(c) = &config.cost
        && let Source::Header(h) = &c.source
    {
        names.push(h.clone());
    }
    for action in config.descriptors.iter().flatten() {
        match &action.kind {
            ActionKind::Value { source, .. } | ActionKind::Tier { source, .. } => match source {
                Source::Header(h) => names.push(h.clone()),
                Source::Bearer => names.push(http::header::AUTHORIZATION),
                Source::Extension(_) => {}
            },
            _ => {}
        }
    }
    names
}

/// What the identity needs of a log line besides headers.
pub(crate) fn needs(config: &IdentityConfig) -> (bool, bool, bool) {
    let all = || config.descriptors.iter().flatten();
    let address = all().any(|a| matches!(a.kind, ActionKind::ClientIp));
    let path = all().any(|a| matches!(a.kind, ActionKind::Route { .. } | ActionKind::Path));
    let method = all().any(|a| matches!(a.kind, ActionKind::Method));
    (address, path, method)
}
