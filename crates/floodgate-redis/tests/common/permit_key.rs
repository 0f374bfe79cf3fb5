//! One concurrency key, acquired and released under permit ids.

use floodgate::algorithms::{AnyLimit, Concurrency};
use floodgate::{Apply, Decision, Timestamp};
use floodgate_policy::{Backend, BackendError, Item, Permit, Released};

use super::{blank, item};

/// One concurrency key of a group, decided through backend `b`.
pub(crate) struct PermitKey<'a, B> {
    pub b: &'a B,
    pub group: &'static [u8],
    pub limit: AnyLimit,
    pub key: &'static [u8],
}

impl<'a, B: Backend> PermitKey<'a, B> {
    /// Key `key` of `group`, at most `max` units in flight.
    pub(crate) fn new(b: &'a B, group: &'static [u8], max: u64, key: &'static [u8]) -> Self {
        PermitKey {
            b,
            group,
            limit: Concurrency::new(max).unwrap().into(),
            key,
        }
    }

    /// Takes `cost` units under permit `id` at `at` µs.
    pub(crate) async fn acquire(&self, id: u64, cost: u64, at: u64) -> Decision {
        self.acquire_as(Permit::from(id), cost, at).await
    }

    /// Takes `cost` units under `permit` at `at` µs.
    pub(crate) async fn acquire_as(&self, permit: Permit, cost: u64, at: u64) -> Decision {
        let items = [Item {
            permit,
            ..item(self.group, self.key, &self.limit, cost)
        }];
        let mut out = [blank()];
        self.b
            .decide(&items, Timestamp::from_micros(at), Apply::Commit, &mut out)
            .await
            .expect("decision")
    }

    /// Gives back `units` of permit `id` at `at` µs: what the backend says.
    pub(crate) async fn try_release(
        &self,
        id: u64,
        units: u64,
        at: u64,
    ) -> Result<Released, BackendError> {
        self.try_release_as(Permit::from(id), units, at).await
    }

    /// Gives back `units` of `permit` at `at` µs: what the backend says.
    pub(crate) async fn try_release_as(
        &self,
        permit: Permit,
        units: u64,
        at: u64,
    ) -> Result<Released, BackendError> {
        let it = Item {
            permit,
            ..item(self.group, self.key, &self.limit, 0)
        };
        self.b.release(it, units, Timestamp::from_micros(at)).await
    }

    /// Gives back `units` of permit `id` at `at` µs, which must succeed:
    /// what it gave back.
    pub(crate) async fn release(&self, id: u64, units: u64, at: u64) -> Released {
        self.try_release(id, units, at).await.expect("release")
    }

    /// The units held at `at` µs (a decision of cost 0: it takes nothing,
    /// and drops the permits whose lease has ended).
    pub(crate) async fn held(&self, at: u64) -> u64 {
        let items = [item(self.group, self.key, &self.limit, 0)];
        let mut out = [blank()];
        let d = self
            .b
            .decide(&items, Timestamp::from_micros(at), Apply::Commit, &mut out)
            .await
            .expect("check");
        assert!(d.is_allowed(), "{d:?}");
        d.limit - d.remaining
    }
}
