//! The layer's short path, for a server that calls it from its own handler
//! and wants the common case without any future of the layer's:
//! [`FloodgateLayer::decide_early`](super::FloodgateLayer::decide_early)
//! decides a request whose rule is known in advance before anything is
//! awaited, and says what is left to do — call the inner service and add
//! headers ([`Early::Pass`]), send an answer ([`Early::Answer`]), or await
//! the layer's general steps ([`Early::Later`], through
//! [`FloodgateLayer::finish_later`](super::FloodgateLayer::finish_later)).
//! The outcome is exactly [`FloodgateLayer::serve`](super::FloodgateLayer::serve)'s.

use floodgate::{Clock, Timestamp};
use floodgate_policy::Backend;
use http::Response;

use super::body::FloodgateBody;
use super::direct::{Decided, write_admitted};
use super::shared::Held;

/// What the layer's short path made of a request (see the module docs).
#[must_use = "an admitted request's headers, an answer or the rest of the steps"]
pub enum Early<B: Backend, C: Clock + 'static, RB> {
    /// Admitted (and charged): call the inner service, then
    /// [`Admitted::finish`] its response. Nothing is held until its body
    /// ends.
    Pass(Admitted<B, C>),
    /// Answered by the layer (a rejection): send it as it is.
    Answer(Response<FloodgateBody<RB>>),
    /// To be finished by the layer's general steps:
    /// [`finish_later`](super::FloodgateLayer::finish_later).
    Later(Pending<B, C, RB>),
}

/// The headers of a request admitted on the short path.
#[must_use = "the admitted response's rate-limit headers"]
pub struct Admitted<B: Backend, C: Clock + 'static>(Option<(Held<B, C>, Timestamp)>);

impl<B: Backend, C: Clock + 'static> Admitted<B, C> {
    /// Adds the contract's headers for an admitted request to the inner
    /// service's response (none when the contract writes nothing on
    /// success).
    pub fn finish<RB>(self, res: &mut Response<RB>) {
        if let Some((held, now)) = self.0 {
            write_admitted(held, now, res);
        }
    }
}

/// A request the short path has not finished (decided and delayed, or not
/// decided at all).
#[must_use = "the request is not answered until the layer's steps run"]
pub struct Pending<B: Backend, C: Clock + 'static, RB>(pub(crate) Decided<B, C, RB>);

impl<B: Backend, C: Clock + 'static, RB> From<Decided<B, C, RB>> for Early<B, C, RB> {
    fn from(d: Decided<B, C, RB>) -> Self {
        match d {
            Decided::Pass(after) => Early::Pass(Admitted(after)),
            Decided::Ready(res) => Early::Answer(res),
            later => Early::Later(Pending(later)),
        }
    }
}
