//! [`Both`]: two frontends in one process, on one engine and one store.

use std::sync::Arc;

use axum::Router;
use floodgate_policy::ConfigErrors;
use floodgate_policy::engine::RequestLimits;
use floodgate_policy::yaml::Document;

use super::{Apply, Frontend, Listeners};
use crate::error::RuntimeError;
use crate::health::Health;
use crate::settings::{Given, Settings};

/// Frontends `A` and `B` run by one host: one engine and one store, one
/// admin listener with both's routes, one reload reading both's sections
/// before applying either.
pub struct Both<A, B>(pub Arc<A>, pub Arc<B>);

impl<A: Frontend, B: Frontend> Frontend for Both<A, B> {
    fn sections() -> Vec<&'static str> {
        let mut all = A::sections();
        all.extend(B::sections());
        all
    }

    type Config = (A::Config, B::Config);

    /// `A`'s (the engine is one).
    fn request_limits((a, _): &Self::Config) -> RequestLimits {
        A::request_limits(a)
    }

    fn build(
        (a, b): Self::Config,
        health: &Arc<Health>,
        settings: &Settings,
    ) -> Result<Self, RuntimeError> {
        let a = A::build(a, health, settings)?;
        Ok(Both(Arc::new(a), Arc::new(B::build(b, health, settings)?)))
    }

    /// Both read first; either's problems refuse both.
    fn read_reload(&self, given: &Given, documents: &[Document]) -> Result<Apply, ConfigErrors> {
        let a = self.0.read_reload(given, documents);
        let b = self.1.read_reload(given, documents);
        match (a, b) {
            (Ok(a), Ok(b)) => Ok(Box::new(move |policy| {
                a(policy);
                b(policy);
            })),
            (Err(mut a), Err(b)) => {
                a.0.extend(b.0);
                Err(a)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    fn admin_routes(self: &Arc<Self>) -> Router {
        self.0.admin_routes().merge(self.1.admin_routes())
    }

    async fn serve(self: &Arc<Self>, listeners: &mut Listeners<'_>) -> Result<(), RuntimeError> {
        self.0.serve(listeners).await?;
        self.1.serve(listeners).await
    }
}
