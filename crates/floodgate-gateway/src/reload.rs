//! The gateway's sections, read at startup and on a reload: `gateway:`
//! (read at startup only; a change is logged) and `http:` (a reload puts
//! the new limiter in force). The host reads them before it puts anything
//! in force, all or nothing ([`floodgate_runtime::host`]).

use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::Document;
use floodgate_runtime::settings::{Env, Flags, Given, Settings};

use crate::config::GatewayConfig;
use floodgate_http::HttpSection;

/// Reads a reloaded configuration's `documents` as startup read them
/// (with what it was `given`, the keys `frontend_keys` left to others):
/// the `server:` and `store:` sections must still read, the gateway's too;
/// the `http:` section to put in force, or every problem.
pub(crate) fn read_reload(
    given: &Given,
    documents: &[Document],
    frontend_keys: &[&'static str],
) -> Result<Option<HttpSection>, ConfigErrors> {
    let mut errors = Errors::default();
    let (_, http) = given.replay(|flags, env| {
        if let Err(e) = Settings::resolve(flags, env, documents, frontend_keys) {
            errors.extend(e);
        }
        read_sections(flags, env, documents, &mut errors)
    });
    errors.finish(http)
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
