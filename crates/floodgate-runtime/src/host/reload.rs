//! A reload, all or nothing: the frontend's sections are read first, then
//! the policies are checked against the store; only when both hold are
//! the policies and the sections put in force, together. A problem
//! anywhere leaves the running configuration exactly as it was. The
//! host's own sections (`server:`, `store:`) are read at startup only: a
//! change is logged.

use std::sync::Arc;

use floodgate_policy::Engine;
use floodgate_policy::reload::Compiled;

use super::Frontend;
use crate::backend::{AnyBackend, prepare_policy};
use crate::error::RuntimeError;
use crate::health::Health;
use crate::settings::{Given, PolicyOverrides, Settings, StartupSections};

/// Reloads the configuration of one running host.
pub(super) struct Reload<F> {
    frontend: Arc<F>,
    health: Arc<Health>,
    engine: Arc<Engine<AnyBackend>>,
    overrides: PolicyOverrides,
    given: Given,
    startup: StartupSections,
    /// The keys of the host's sections the frontends read.
    frontend_keys: Vec<&'static str>,
}

impl<F: Frontend> Reload<F> {
    /// Reloads for `frontend` on `health`'s engine, started with `settings` and
    /// what it was `given` besides the files (new files are read with
    /// them), the `startup` sections and the keys of them the frontends
    /// read.
    pub(super) fn new(
        frontend: Arc<F>,
        health: Arc<Health>,
        settings: &Settings,
        given: Given,
        (startup, frontend_keys): (StartupSections, Vec<&'static str>),
    ) -> Self {
        Reload {
            frontend,
            engine: health.engine().clone(),
            health,
            overrides: settings.policy,
            given,
            startup,
            frontend_keys,
        }
    }

    /// Reads the frontend's sections of `compiled`, then, when they and
    /// the policies are valid, puts both in force: the sections, given
    /// the new policies, then the policies in the engine (requests in
    /// flight finish with what they started on). A binary started without
    /// a configuration has one from then on.
    pub(super) fn apply(&self, compiled: Compiled) -> Result<(), RuntimeError> {
        let docs = &compiled.loaded.documents;
        let apply = self
            .frontend
            .read_reload(&self.given, docs)
            .map_err(RuntimeError::Config)?;
        self.startup
            .check_reload(&self.given, docs, &self.frontend_keys);
        let policy = prepare_policy(&self.engine, &self.overrides, compiled.policy)?;
        apply(&policy);
        self.engine.replace_policy(policy);
        self.health.set_configured();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use floodgate_policy::error::Errors;
    use floodgate_policy::read::LoadOptions;
    use floodgate_policy::reload::ConfigSource;
    use floodgate_policy::yaml::Document;
    use floodgate_policy::{ConfigErrors, PolicySet};
    use floodgate_redis::{Mode, RedisBackend, RedisConfig, ResilientBackend};

    use super::*;
    use crate::host::{Apply, Listeners};

    /// A frontend reading `fake: ok` or `fake: bad` (refused), counting
    /// the sections it applied; with the last, it keeps the policy it was
    /// given and the one its engine ran at that moment.
    struct Fake(Arc<AtomicUsize>, Arc<Engine<AnyBackend>>, Arc<Seen>);

    /// The policy given with a section, and the engine's then.
    type Seen = std::sync::Mutex<Option<(Arc<PolicySet>, Arc<PolicySet>)>>;

    /// Refuses `fake: bad`.
    fn read_fake(docs: &[Document]) -> Result<(), ConfigErrors> {
        let mut errors = Errors::default();
        for doc in docs {
            let node = doc.root().map().ok().and_then(|m| m.get("fake"));
            if let Some(node) = node.filter(|n| n.str().ok() == Some("bad")) {
                errors.push(node.error("bad"));
            }
        }
        errors.finish(())
    }

    impl Frontend for Fake {
        fn sections() -> Vec<&'static str> {
            vec!["fake"]
        }
        type Config = (Arc<AtomicUsize>, Arc<Engine<AnyBackend>>, Arc<Seen>);

        fn build(
            applied: Self::Config,
            _: &Arc<Health>,
            _: &Settings,
        ) -> Result<Self, RuntimeError> {
            Ok(Fake(applied.0, applied.1, applied.2))
        }

        fn read_reload(&self, _: &Given, docs: &[Document]) -> Result<Apply, ConfigErrors> {
            read_fake(docs)?;
            let (applied, engine, seen) = (self.0.clone(), self.1.clone(), self.2.clone());
            Ok(Box::new(move |policy| {
                *seen.lock().unwrap() = Some((policy.clone(), engine.policy()));
                applied.fetch_add(1, Ordering::SeqCst);
            }))
        }

        async fn serve(self: &Arc<Self>, _: &mut Listeners<'_>) -> Result<(), RuntimeError> {
            Ok(())
        }
    }

    const GOOD: &str = "
domains:
  - domain: api
    descriptors:
      - key: user
        rate_limit: {name: per-user, requests: 3, per: 1m}
";
    /// A rule the Redis store cannot decide exactly: a period of 1.5 µs.
    const UNDECIDABLE: &str = "
      - key: odd
        rate_limit: {name: too-fine, algorithm: token_bucket, requests: 1, per: 1500ns}
";

    fn compile(dir: &tempfile::TempDir, text: &str) -> Compiled {
        let path = dir.path().join("floodgate.yaml");
        std::fs::write(&path, text).unwrap();
        let options = LoadOptions {
            other_sections: vec!["fake"],
            ..LoadOptions::default()
        };
        let source = ConfigSource {
            paths: vec![path],
            options,
        };
        source.compile().unwrap()
    }

    async fn redis_engine(policy: PolicySet) -> Arc<Engine<AnyBackend>> {
        let config = RedisConfig::new("127.0.0.1:1", Mode::Single).unwrap();
        let redis = RedisBackend::connect_lazy(&config).await.unwrap();
        let backend = AnyBackend::Redis(Box::new(ResilientBackend::new(redis, &config).unwrap()));
        Arc::new(Engine::new(policy, backend))
    }

    /// A frontend's valid section is not applied when the policies are
    /// refused, and valid policies are not applied when a frontend's
    /// section is invalid; both are applied when both are valid.
    #[tokio::test]
    async fn a_reload_applies_every_section_and_the_policies_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let engine = redis_engine(compile(&dir, GOOD).policy).await;
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Seen::default());
        let frontend = Arc::new(Fake(count.clone(), engine.clone(), seen.clone()));
        let settings = Settings::default();
        let startup = StartupSections::of(&[]);
        let reload = Reload::new(
            frontend,
            Arc::new(Health::new(engine.clone())),
            &settings,
            Given::default(),
            (startup, Vec::new()),
        );
        let running = engine.policy();
        let applied = || count.load(Ordering::SeqCst);

        let valid_section_refused_policy = format!("fake: ok\n{GOOD}{UNDECIDABLE}");
        let err = reload
            .apply(compile(&dir, &valid_section_refused_policy))
            .unwrap_err();
        assert!(err.to_string().contains("too-fine"), "{err}");
        assert_eq!(applied(), 0, "the section was applied without the policies");
        assert!(Arc::ptr_eq(&engine.policy(), &running));

        let invalid_section_valid_policy = format!("fake: bad\n{}", GOOD.replace("3", "5"));
        let err = reload
            .apply(compile(&dir, &invalid_section_valid_policy))
            .unwrap_err();
        assert!(err.to_string().contains("bad"), "{err}");
        assert_eq!(applied(), 0);
        assert!(
            Arc::ptr_eq(&engine.policy(), &running),
            "the policies were applied without the section"
        );

        let both_valid = format!("fake: ok\n{}", GOOD.replace("3", "5"));
        reload.apply(compile(&dir, &both_valid)).unwrap();
        assert_eq!(applied(), 1);
        assert!(!Arc::ptr_eq(&engine.policy(), &running));
        // The section was put in force given the new policy, while the
        // engine still ran the old one: a frontend deciding under the
        // policy it is given never mixes the two files.
        let (given, then) = seen.lock().unwrap().take().unwrap();
        assert!(Arc::ptr_eq(&given, &engine.policy()));
        assert!(Arc::ptr_eq(&then, &running));
    }
}
