//! [`PackedState`]: an [`AnyState`] in 16 bytes, its kind included, so that
//! a store holding keys of every kind of limit has 32-byte entries with a
//! 64-bit key (an [`AnyState`] takes 24); and [`Packed`], a limit deciding
//! on it.

use std::fmt;

use crate::algorithm::{Algorithm, Apply};
use crate::{Decision, Timestamp};

use super::{AnyState, GcraState, ShaperState, SlidingWindowState, WindowState};

/// Bits of the inline form's high word.
const HI_BITS: u32 = 56;
/// Bits of each of a sliding window's two counts, inline.
const COUNT_BITS: u32 = HI_BITS / 2;

/// An [`AnyState`] in 16 bytes, its kind included: what [`Packed`] limits
/// decide on, so that a store holding keys of every kind of limit has
/// 32-byte entries with a 64-bit key.
///
/// The states of the common kinds (GCRA and the token bucket, the fixed
/// window, the two-window sliding counter, the shaper, a concurrency count,
/// a block) are held inline: 120 bits of state beside a byte naming the
/// kind. The rest are held boxed, as the [`AnyState`] itself: the kinds
/// whose state is on the heap anyway (a sliding log, sub-windows, leases),
/// and values too large for the inline layout (a fixed window counting
/// 2^56 or more, a sliding window counting 2^28 or more in either of its
/// windows, a GCRA arrival time of 2^120 ticks or more). A boxed value is
/// unboxed by the first change after which it fits again. Nothing is
/// rounded: every state packs and unpacks exactly, so a limit decides on a
/// packed state as on the [`AnyState`] it holds.
///
/// There is no `unsafe` code behind it: the boxed form is an enum variant
/// whose discriminant lives in the unused values of the kind byte (a
/// niche), so the compiler drops and clones it.
///
/// ```
/// use floodgate::algorithms::{AnyState, PackedState, WindowState};
/// use floodgate::Timestamp;
///
/// assert_eq!(std::mem::size_of::<PackedState>(), 16);
/// let state = AnyState::FixedWindow(WindowState::new(Timestamp::from_secs(60), 7));
/// let packed = PackedState::from(state.clone());
/// assert_eq!(AnyState::from(packed), state);
/// ```
#[derive(Clone, Default)]
pub struct PackedState(Repr);

#[derive(Clone)]
enum Repr {
    Inline(Inline),
    /// A state of a kind held on the heap, or too large to be inline.
    Boxed(Box<AnyState>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Inline(Inline::word(Kind::Fresh, 0, 0))
    }
}

/// The kinds held inline. Its unused values are where [`Repr`] keeps its
/// own discriminant: checked by the size test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fresh,
    Gcra,
    FixedWindow,
    SlidingWindow,
    Shaper,
    Concurrency,
    Blocked,
}

/// A state held inline: two words of 64 and 56 bits, and its kind (laid
/// out in this order, so that the box of [`Repr::Boxed`] fits in `lo`).
#[derive(Clone, Copy)]
#[repr(C)]
struct Inline {
    lo: u64,
    hi: [u8; 7],
    kind: Kind,
}

impl Inline {
    /// The state of `kind` in words `lo` and `hi` (`hi` below 2^56).
    #[inline]
    fn word(kind: Kind, lo: u64, hi: u64) -> Inline {
        debug_assert!(hi >> HI_BITS == 0);
        let b = hi.to_le_bytes();
        Inline {
            lo,
            hi: [b[0], b[1], b[2], b[3], b[4], b[5], b[6]],
            kind,
        }
    }

    /// [`word`](Self::word), or `None` when `hi` needs more than 56 bits.
    #[inline]
    fn fit(kind: Kind, lo: u64, hi: u64) -> Option<Inline> {
        (hi >> HI_BITS == 0).then(|| Inline::word(kind, lo, hi))
    }

    #[inline]
    fn hi(&self) -> u64 {
        let h = self.hi;
        u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], 0])
    }

    /// `state` inline, or `None` for a kind held boxed or a value too large.
    #[inline]
    fn pack(state: &AnyState) -> Option<Inline> {
        match state {
            AnyState::Fresh => Some(Inline::word(Kind::Fresh, 0, 0)),
            AnyState::Gcra(s) => {
                let t = s.ticks();
                let hi = u64::try_from(t >> 64).ok()?;
                Inline::fit(Kind::Gcra, t as u64, hi)
            }
            AnyState::FixedWindow(s) => {
                Inline::fit(Kind::FixedWindow, s.start().as_nanos(), s.count())
            }
            AnyState::SlidingWindow(s) => {
                let [previous, current] = s.counts().map(u64::from);
                if (previous | current) >> COUNT_BITS != 0 {
                    return None;
                }
                let hi = previous << COUNT_BITS | current;
                Some(Inline::word(Kind::SlidingWindow, s.start().as_nanos(), hi))
            }
            AnyState::Shaper(s) => {
                let (excess, last) = s.parts();
                // No node yet (`last` at its maximum) is 0.
                Inline::fit(Kind::Shaper, excess, last.wrapping_add(1))
            }
            AnyState::Concurrency(held) => Some(Inline::word(Kind::Concurrency, *held, 0)),
            AnyState::Blocked(until) => Some(Inline::word(Kind::Blocked, *until, 0)),
            AnyState::SubWindows(_) | AnyState::SlidingLog(_) | AnyState::Leases(_) => None,
        }
    }

    /// The state this holds.
    #[inline]
    fn unpack(&self) -> AnyState {
        let (lo, hi) = (self.lo, self.hi());
        match self.kind {
            Kind::Fresh => AnyState::Fresh,
            Kind::Gcra => {
                AnyState::Gcra(GcraState::from_ticks(u128::from(hi) << 64 | u128::from(lo)))
            }
            Kind::FixedWindow => {
                AnyState::FixedWindow(WindowState::new(Timestamp::from_nanos(lo), hi))
            }
            Kind::SlidingWindow => {
                let mask = (1 << COUNT_BITS) - 1;
                AnyState::SlidingWindow(SlidingWindowState::new(
                    Timestamp::from_nanos(lo),
                    (hi >> COUNT_BITS) as u32,
                    (hi & mask) as u32,
                ))
            }
            Kind::Shaper => AnyState::Shaper(ShaperState::from_parts(lo, hi.wrapping_sub(1))),
            Kind::Concurrency => AnyState::Concurrency(lo),
            Kind::Blocked => AnyState::Blocked(lo),
        }
    }
}

impl From<AnyState> for PackedState {
    #[inline]
    fn from(state: AnyState) -> Self {
        PackedState(match Inline::pack(&state) {
            Some(inline) => Repr::Inline(inline),
            None => Repr::Boxed(Box::new(state)),
        })
    }
}

impl From<PackedState> for AnyState {
    fn from(packed: PackedState) -> Self {
        match packed.0 {
            Repr::Inline(inline) => inline.unpack(),
            Repr::Boxed(state) => *state,
        }
    }
}

impl PackedState {
    /// True when the state is held boxed (see [`PackedState`]).
    pub fn is_boxed(&self) -> bool {
        matches!(self.0, Repr::Boxed(_))
    }

    /// `f` of the state, unpacked.
    #[inline]
    pub fn view<R>(&self, f: impl FnOnce(&AnyState) -> R) -> R {
        match &self.0 {
            Repr::Inline(inline) => f(&inline.unpack()),
            Repr::Boxed(state) => f(state),
        }
    }

    /// `f` of the state, unpacked and packed again after `f` changed it: a
    /// boxed state is changed in place, and unboxed if it then fits inline.
    #[inline]
    pub fn update<R>(&mut self, f: impl FnOnce(&mut AnyState) -> R) -> R {
        match &mut self.0 {
            Repr::Inline(inline) => {
                let mut state = inline.unpack();
                let r = f(&mut state);
                *self = PackedState::from(state);
                r
            }
            Repr::Boxed(state) => {
                let r = f(state);
                if let Some(inline) = Inline::pack(state) {
                    self.0 = Repr::Inline(inline);
                }
                r
            }
        }
    }
}

impl PartialEq for PackedState {
    fn eq(&self, other: &Self) -> bool {
        self.view(|a| other.view(|b| a == b))
    }
}

impl Eq for PackedState {}

impl fmt::Debug for PackedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view(|state| state.fmt(f))
    }
}

/// A limit whose state is an [`AnyState`] ([`AnyLimit`](super::AnyLimit),
/// [`HeldBy`](super::HeldBy), or a reference to one), deciding on
/// [`PackedState`]s: for a store whose entries should be 32 bytes.
///
/// ```
/// use floodgate::{Algorithm, Apply, Store, StoreConfig, Timestamp};
/// use floodgate::algorithms::{AnyLimit, FixedWindow, Packed, PackedState};
/// use std::time::Duration;
///
/// let limit = AnyLimit::from(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
/// let store: Store<u64, PackedState> = Store::new(StoreConfig::default()).unwrap();
/// let packed = Packed(&limit);
/// assert!(store.decide(&packed, &7, Timestamp::ZERO, 1, Apply::Commit).is_allowed());
/// assert!(store.decide(&packed, &7, Timestamp::ZERO, 1, Apply::Commit).is_denied());
/// assert_eq!(Store::<u64, PackedState>::ENTRY, 32);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Packed<A>(pub A);

impl<A: Algorithm<State = AnyState>> Algorithm for Packed<A> {
    type State = PackedState;

    #[inline]
    fn fresh(&self) -> PackedState {
        PackedState::from(self.0.fresh())
    }

    #[inline]
    fn decide(&self, state: &mut PackedState, now: Timestamp, cost: u64, apply: Apply) -> Decision {
        state.update(|s| self.0.decide(s, now, cost, apply))
    }

    #[inline]
    fn idle_at(&self, state: &PackedState, now: Timestamp) -> Timestamp {
        state.view(|s| self.0.idle_at(s, now))
    }

    #[inline]
    fn in_flight(&self) -> bool {
        self.0.in_flight()
    }

    #[inline]
    fn pins(&self) -> bool {
        self.0.pins()
    }

    #[inline]
    fn snapshot(&self, state: &PackedState) -> Option<PackedState> {
        state.view(|s| self.0.snapshot(s)).map(PackedState::from)
    }

    #[inline]
    fn decide_idle(
        &self,
        state: &mut PackedState,
        now: Timestamp,
        cost: u64,
        apply: Apply,
    ) -> (Decision, Timestamp) {
        state.update(|s| self.0.decide_idle(s, now, cost, apply))
    }
}
