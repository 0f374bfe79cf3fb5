//! The configuration over xDS (state of the world), as envoyproxy/ratelimit's
//! `src/provider/xds_grpc_sotw_provider.go` takes it: a stream of the
//! aggregated discovery service (`StreamAggregatedResources`) asking for
//! the `RateLimitConfig` resources of envoyproxy/ratelimit's
//! `rls_conf.proto` for its node (id and metadata, extra headers), TLS or
//! mTLS to the server.
//!
//! Every response is the whole configuration: its resources are written
//! out as the envoyproxy/ratelimit files they stand for, read by the one
//! reader of those files, compiled and applied as a reloaded file is (the
//! frontends' sections, the policies checked against the store, all or
//! nothing), counted in `floodgate_config_reloads_total`. A response
//! applied is ACKed; one that does not decode or compile, or an older
//! version than the one applied on the same stream, is NACKed with its
//! error and the running configuration stays. An empty set of resources is
//! a configuration that limits nothing (the server removed every policy).
//!
//! A message larger than `xds.max_message_size` ends the stream. A stream
//! that ends, or a server that cannot be reached, is retried after a
//! pause ([`backoff`]); the decisions go on with the configuration in
//! force, and a stream that never answers holds nothing but its own task.

mod backoff;
pub(crate) mod channel;
mod convert;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use floodgate_policy::PolicySet;
use floodgate_policy::read::{LoadOptions, load_envoy_texts};
use floodgate_policy::reload::Compiled;
use tokio::task::JoinHandle;
use tonic::transport::Endpoint;

use crate::error::RuntimeError;
use crate::health::Health;
use crate::host::proto::discovery::DiscoveryResponse;
use crate::settings::XdsSettings;

/// The resource type asked for (envoyproxy/go-control-plane's
/// `resource.RateLimitConfigType`).
pub(crate) const TYPE_URL: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// What puts a configuration in force (the host's reload).
pub(crate) type ApplyFn = Arc<dyn Fn(Compiled) -> Result<(), RuntimeError> + Send + Sync>;

/// The xDS configuration source of one host.
pub(crate) struct Source {
    settings: XdsSettings,
    options: LoadOptions,
    apply: ApplyFn,
    health: Arc<Health>,
}

impl Source {
    /// Streams from the server `settings` name, reading with `options`,
    /// applying with `apply`; `health` is told once a configuration is in
    /// force.
    pub(crate) fn new(
        settings: XdsSettings,
        mut options: LoadOptions,
        apply: ApplyFn,
        health: Arc<Health>,
    ) -> Self {
        // The server's own statement, not a file cut short.
        options.allow_empty = true;
        Source {
            settings,
            options,
            apply,
            health,
        }
    }

    /// Runs the client in the background until aborted (`endpoint`: where
    /// it connects, checked at startup).
    pub(crate) fn spawn(self, endpoint: Endpoint) -> JoinHandle<()> {
        let source = Arc::new(self);
        tokio::spawn(async move { source.run(endpoint).await })
    }

    /// Connects, streams, and pauses before trying again, for ever.
    async fn run(self: Arc<Self>, endpoint: Endpoint) {
        let mut pauses = backoff::Pauses::new(self.settings.backoff);
        let mut held = stream::Held::default();
        tracing::info!(server = %self.settings.server, node = %self.settings.node_id, "xDS: connecting for the rate limit configuration");
        loop {
            let Ok(channel) = endpoint.connect().await.inspect_err(|e| {
                tracing::warn!(server = %self.settings.server, error = %e, "xDS: cannot connect");
            }) else {
                tokio::time::sleep(jittered(self.settings.connect_retry_interval)).await;
                continue;
            };
            let ended = stream::run(&self, channel, &mut held, || pauses.reset()).await;
            if let Err(e) = ended {
                tracing::warn!(server = %self.settings.server, error = %e, "xDS: the stream ended; the running configuration stays");
            }
            metrics::counter!("floodgate_xds_reconnects_total").increment(1);
            tokio::time::sleep(pauses.next()).await;
        }
    }

    /// Reads, compiles and applies the resources of `response` (on a
    /// blocking thread: a large configuration takes a while), counted as a
    /// reload; the error to NACK with.
    async fn apply(self: &Arc<Self>, response: &DiscoveryResponse) -> Result<(), String> {
        let texts = stream::texts(response);
        let this = self.clone();
        let version = response.version_info.clone();
        let applied = tokio::task::spawn_blocking(move || {
            let compiled = this.compile(&texts?)?;
            (this.apply)(compiled).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(format!("the configuration's compilation failed: {e}")));
        self.count(&version, &applied);
        applied
    }

    fn compile(&self, texts: &[(String, String)]) -> Result<Compiled, String> {
        let loaded = load_envoy_texts(texts, &self.options).map_err(|e| e.to_string())?;
        let policy = PolicySet::compile(&loaded.spec).map_err(|e| e.to_string())?;
        Ok(Compiled { policy, loaded })
    }

    /// Counts and logs a configuration applied or refused, as a reload of
    /// files is.
    fn count(&self, version: &str, applied: &Result<(), String>) {
        let ok = applied.is_ok();
        let result = if ok { "ok" } else { "error" };
        metrics::counter!("floodgate_config_reloads_total", "result" => result).increment(1);
        metrics::gauge!("floodgate_config_last_reload_ok").set(if ok { 1.0 } else { 0.0 });
        match applied {
            Ok(()) => {
                self.health.set_configured();
                tracing::info!(version, "xDS: configuration applied");
            }
            Err(error) => {
                tracing::error!(version, %error, "xDS: configuration refused (NACK); the running configuration stays in force");
            }
        }
    }
}

/// `d` jittered by half either way (envoyproxy/ratelimit's linear retry
/// with a jitter of 0.5).
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.5 + fastrand::f64())
}
