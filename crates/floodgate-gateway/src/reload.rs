//! Reloading a running gateway, all or nothing: every part of the new
//! configuration is read and built first — the `server:`, `store:` and
//! `gateway:` sections read, the policies checked against the store, the
//! `http:` section compiled into a limiter — and only then are the new
//! policies and the new limiter put in force, together. A problem anywhere
//! leaves the running configuration exactly as it was. The sections read
//! at startup only (`server:`, `store:`, `gateway:`) are compared with the
//! ones the gateway started with, and a change is logged.

use std::sync::Arc;

use floodgate_policy::error::Errors;
use floodgate_policy::reload::Compiled;
use floodgate_policy::yaml::Document;
use floodgate_runtime::AnyBackend;
use floodgate_runtime::backend::replace_policy;
use floodgate_runtime::settings::{Env, Flags, Given, PolicyOverrides, Settings, StartupSections};

use crate::config::GatewayConfig;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use floodgate_http::HttpSection;

/// Reloads the configuration of one running gateway.
pub struct Reload {
    gateway: Arc<Gateway<AnyBackend>>,
    overrides: PolicyOverrides,
    given: Given,
    started_with: StartupSections<crate::settings::Draft>,
    startup: StartupSections,
}

impl Reload {
    /// Reloads for `gateway`, which started with the configuration
    /// `documents` and what it was `given` besides them (flags, the
    /// environment: new files are read with them); `overrides` (from the
    /// environment and flags) are applied to every new policy as they were
    /// at startup.
    pub fn new(
        gateway: Arc<Gateway<AnyBackend>>,
        overrides: PolicyOverrides,
        given: Given,
        documents: &[Document],
    ) -> Self {
        Reload {
            gateway,
            overrides,
            given,
            started_with: StartupSections::of(documents),
            startup: StartupSections::of(documents),
        }
    }

    /// Reads, checks and builds everything `compiled` holds, then, when
    /// all of it is valid, puts it in force: the policies, then the
    /// limiter (requests in flight finish with the ones they started on).
    /// An unchanged `http:` section keeps the running limiter (its queues
    /// and counts).
    /// Refused: a section that does not read ([`GatewayError::Config`]),
    /// or a rule the store cannot decide ([`GatewayError::Runtime`]).
    pub fn apply(&self, compiled: Compiled) -> Result<(), GatewayError> {
        let docs = &compiled.loaded.documents;
        let mut errors = Errors::default();
        let (_, http) = self.given.replay(|flags, env| {
            if let Err(e) = Settings::resolve(flags, env, docs) {
                errors.extend(e);
            }
            read_sections(flags, env, docs, &mut errors)
        });
        errors.finish(()).map_err(GatewayError::Config)?;
        self.startup.check_reload(&self.given, docs);
        replace_policy(self.gateway.engine(), &self.overrides, compiled.policy)?;
        if self.started_with.changed(docs) {
            tracing::warn!("the gateway section changed: it is only read at startup");
        }
        if self.gateway.set_limiter(http) {
            tracing::info!("http section reloaded: new limiter");
        }
        Ok(())
    }
}

/// The gateway's own sections of `documents`, read as startup reads them
/// and as a reload checks them: `gateway:` (with `flags` and `env`) and
/// `http:`, each problem added to `errors`.
pub fn read_sections(
    flags: &Flags,
    env: &Env<'_>,
    documents: &[Document],
    errors: &mut Errors,
) -> (Option<GatewayConfig>, Option<HttpSection>) {
    let gateway = GatewayConfig::resolve(flags, env, documents)
        .map_err(|e| errors.extend(e))
        .ok()
        .flatten();
    let http = HttpSection::from_documents(documents)
        .map_err(|e| errors.extend(e))
        .ok()
        .flatten();
    (gateway, http)
}
