//! A limit as the decision script's arguments: validated once per call and
//! precomputed in exact integer arithmetic, so that the script only adds,
//! compares and divides integers below 2^53.

use std::time::Duration;

use floodgate::algorithms::{AnyLimit, Gcra, LimitKind, Penalty, Shaper};
use floodgate_policy::Permit;
use redis::Cmd;

use crate::UnsupportedLimit;

/// Every magnitude the script computes with stays at or below this.
const EXACT: u64 = 1 << 52;

/// The script's parameters for one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Params {
    /// `T = p/c` µs in lowest terms; `burst·p = wq·c + wr`.
    Gcra {
        p: u64,
        c: u64,
        burst: u64,
        wq: u64,
        wr: u64,
    },
    Fixed {
        limit: u64,
        window: u64,
    },
    TwoWindows {
        limit: u64,
        sub: u64,
    },
    SubWindows {
        limit: u64,
        sub: u64,
        n: u64,
    },
    Log {
        limit: u64,
        window: u64,
    },
    /// Milli-requests (per second for `rate`); `delay < 0` is `nodelay`;
    /// `emax` caps the excess penalties can pile up.
    Shaper {
        rate: u64,
        burst: u64,
        delay: i64,
        emax: u64,
    },
    /// `lease`: the limit's own lease in µs (0: the store's
    /// `concurrency_lease`).
    Concurrency {
        max: u64,
        lease: u64,
    },
}

/// Checks that `limit` can be decided exactly by the Redis scripts.
///
/// Rejected: periods and windows that are not whole microseconds (the
/// scripts' clock ticks in µs), and limits whose magnitudes would leave the
/// range where Lua's doubles are exact (a GCRA burst taking more than about
/// 142 years to refill, an nginx shaper taking as long to drain). Call it
/// when loading a configuration; the backend also refuses such limits.
pub fn validate(limit: &AnyLimit) -> Result<(), UnsupportedLimit> {
    Params::of(limit)?;
    block_micros(limit)?;
    Ok(())
}

/// The limit's block duration in whole microseconds, rounded up (0: none).
///
/// Rounding up is exact on the scripts' microsecond clock: a key blocked
/// at `t` for `b` ns is blocked at `t + d` µs exactly when `d·1000 < b`,
/// that is when `d < ⌈b / 1000⌉`, and the wait left is then
/// `⌈b / 1000⌉ − d` µs, the in-memory wait rounded up.
pub(crate) fn block_micros(limit: &AnyLimit) -> Result<u64, UnsupportedLimit> {
    let block = limit.block();
    let us = block.as_nanos().div_ceil(1000);
    if us > u128::from(EXACT) {
        return Err(UnsupportedLimit::new(format!(
            "the block duration ({block:?}) is out of range"
        )));
    }
    Ok(us as u64)
}

/// The script's code for a penalty mode.
pub(crate) fn penalty_code(p: Penalty) -> u8 {
    match p {
        Penalty::None => 0,
        Penalty::OwnDenials => 1,
        Penalty::AllDenials => 2,
    }
}

fn micros(what: &str, d: Duration) -> Result<u64, UnsupportedLimit> {
    let nanos = d.as_nanos();
    if !nanos.is_multiple_of(1000) {
        return Err(UnsupportedLimit::new(format!(
            "the {what} ({d:?}) must be whole microseconds"
        )));
    }
    let us = nanos / 1000;
    if us == 0 || us > u128::from(EXACT) {
        return Err(UnsupportedLimit::new(format!(
            "the {what} ({d:?}) is out of range"
        )));
    }
    Ok(us as u64)
}

/// A permit as the scripts name it: lowercase hex digits, no leading zeros.
pub(crate) fn permit_arg(permit: Permit) -> String {
    format!("{:x}", permit.get())
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Params {
    /// The parameters of `limit`'s algorithm, or why the scripts cannot
    /// decide it exactly.
    pub(crate) fn of(limit: &AnyLimit) -> Result<Params, UnsupportedLimit> {
        Ok(match limit.kind() {
            LimitKind::Gcra(g) => Params::gcra(g)?,
            LimitKind::FixedWindow(f) => Params::Fixed {
                limit: f.limit(),
                window: micros("window", f.window())?,
            },
            LimitKind::SlidingWindow(w) => Params::TwoWindows {
                limit: w.limit(),
                sub: micros("window", w.window())?,
            },
            LimitKind::SubWindows(w) => Params::SubWindows {
                limit: w.limit(),
                sub: micros("sub-window", w.window() / w.sub_windows())?,
                n: u64::from(w.sub_windows()),
            },
            LimitKind::SlidingLog(l) => Params::Log {
                limit: l.limit(),
                window: micros("window", l.window())?,
            },
            LimitKind::Shaper(s) => Params::shaper(s)?,
            LimitKind::Concurrency(c) => Params::Concurrency {
                max: c.max(),
                lease: c.lease().map_or(Ok(0), |l| micros("lease", l))?,
            },
        })
    }

    /// A GCRA's emission interval in lowest terms, and its burst's window.
    fn gcra(g: &Gcra) -> Result<Params, UnsupportedLimit> {
        let (count, period) = g.rate();
        let period = micros("period", period)?;
        let g2 = gcd(period, count);
        let (p, c) = (period / g2, count / g2);
        let burst = g.burst();
        let window = u128::from(burst) * u128::from(p);
        let (wq, wr) = (window / u128::from(c), window % u128::from(c));
        if wq > u128::from(EXACT) {
            return Err(UnsupportedLimit::new(format!(
                "a burst of {burst} at {count} per {period} µs takes more than 2^52 µs to refill"
            )));
        }
        Ok(Params::Gcra {
            p,
            c,
            burst,
            wq: wq as u64,
            wr: wr as u64,
        })
    }

    /// A shaper in milli-requests, with the excess its penalties may pile up.
    fn shaper(s: &Shaper) -> Result<Params, UnsupportedLimit> {
        let rate = s.rate_millis();
        let burst = s.burst() * 1000;
        // Milliseconds to drain a full burst: must stay well inside
        // the exact range once turned into microseconds.
        let max_drain = EXACT / 1000;
        let drain = ((u128::from(burst) + 1000) * 1000).div_ceil(u128::from(rate));
        if drain > u128::from(max_drain) {
            return Err(UnsupportedLimit::new(format!(
                "a burst of {} at {rate} milli-requests/s takes more than 2^52 µs to drain",
                s.burst()
            )));
        }
        let emax =
            (u128::from(max_drain) * u128::from(rate) / 1000 - 1000).min(u128::from(EXACT) / 2);
        let delay = match s.delay_millis() {
            u64::MAX => -1,
            d => d as i64,
        };
        Ok(Params::Shaper {
            rate,
            burst,
            delay,
            emax: emax as u64,
        })
    }

    /// The quota a decision reports as `limit`.
    pub(crate) fn quota(&self) -> u64 {
        match *self {
            Params::Gcra { burst, .. } => burst,
            Params::Fixed { limit, .. }
            | Params::TwoWindows { limit, .. }
            | Params::SubWindows { limit, .. }
            | Params::Log { limit, .. } => limit,
            Params::Shaper { burst, .. } => burst / 1000 + 1,
            Params::Concurrency { max, .. } => max,
        }
    }

    /// The kind the scripts dispatch on (see `lua/dispatch.lua`).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Params::Gcra { .. } => "g",
            Params::Fixed { .. } => "f",
            Params::TwoWindows { .. } => "w",
            Params::SubWindows { .. } => "n",
            Params::Log { .. } => "l",
            Params::Shaper { .. } => "s",
            Params::Concurrency { .. } => "c",
        }
    }

    /// Appends this item's arguments: kind, cost, penalty (see
    /// [`penalty_code`]), block (µs), parameters; a concurrency limit's
    /// parameters end with the request's permit (hex digits).
    /// With `members` (a key shared by several items: their costs, in
    /// order), the cost argument lists them, comma-separated, and the
    /// parameters derived from a cost are those of their sum, `cost`.
    pub(crate) fn push_args(
        &self,
        cost: u64,
        members: Option<&[(usize, u64)]>,
        penalty: Penalty,
        block_us: u64,
        permit: Permit,
        cmd: &mut Cmd,
    ) {
        // Every limit is at most 2^40, so any larger cost is "never" alike.
        let cost = cost.min(EXACT);
        cmd.arg(self.code());
        match members {
            Some(members) => {
                let list: Vec<String> = members
                    .iter()
                    .map(|&(_, c)| c.min(EXACT).to_string())
                    .collect();
                cmd.arg(list.join(","));
            }
            None => {
                cmd.arg(cost);
            }
        }
        cmd.arg(penalty_code(penalty)).arg(block_us);
        self.push_params(cost, permit, cmd);
    }

    /// Appends the parameters (a GCRA's with the emission of `cost`, a
    /// concurrency limit's with `permit`).
    fn push_params(&self, cost: u64, permit: Permit, cmd: &mut Cmd) {
        match *self {
            Params::Gcra {
                p,
                c,
                burst,
                wq,
                wr,
            } => {
                // Over the burst too: a forced charge (penalty) counts it
                // all; past 2^52 µs the script saturates anyway.
                let t = u128::from(cost) * u128::from(p);
                let nq = (t / u128::from(c)).min(u128::from(EXACT)) as u64;
                let nr = (t % u128::from(c)) as u64;
                cmd.arg(p).arg(c).arg(burst).arg(wq).arg(wr).arg(nq).arg(nr);
            }
            Params::Fixed { limit, window } | Params::Log { limit, window } => {
                cmd.arg(limit).arg(window);
            }
            Params::TwoWindows { limit, sub } => {
                cmd.arg(limit).arg(sub);
            }
            Params::SubWindows { limit, sub, n } => {
                cmd.arg(limit).arg(sub).arg(n);
            }
            Params::Shaper {
                rate,
                burst,
                delay,
                emax,
            } => {
                cmd.arg(rate).arg(burst).arg(delay).arg(emax);
            }
            Params::Concurrency { max, lease } => {
                cmd.arg(max).arg(permit_arg(permit)).arg(lease);
            }
        }
    }
}

/// One limit of every algorithm, for tests: the match makes the compiler
/// point here when an algorithm is added, and fails until it is in the
/// list.
#[cfg(test)]
pub(crate) fn every_algorithm() -> Vec<AnyLimit> {
    use floodgate::algorithms::{
        Concurrency, FixedWindow, NginxRate, ShaperDelay, SlidingLog, SlidingWindow,
        SubWindowCounter,
    };
    let s = Duration::from_secs;
    let all: Vec<AnyLimit> = vec![
        Gcra::new(3, s(1), 5).unwrap().into(),
        FixedWindow::new(100, s(60)).unwrap().into(),
        SlidingWindow::new(10, s(2)).unwrap().into(),
        SubWindowCounter::new(10, s(60), 4).unwrap().into(),
        SlidingLog::new(7, s(3600)).unwrap().into(),
        Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::Queue)
            .unwrap()
            .into(),
        Concurrency::new(4).unwrap().into(),
    ];
    let mut seen = [false; 7];
    for limit in &all {
        seen[match limit.kind() {
            LimitKind::Gcra(_) => 0,
            LimitKind::FixedWindow(_) => 1,
            LimitKind::SlidingWindow(_) => 2,
            LimitKind::SubWindows(_) => 3,
            LimitKind::SlidingLog(_) => 4,
            LimitKind::Shaper(_) => 5,
            LimitKind::Concurrency(_) => 6,
        }] = true;
    }
    assert_eq!(seen, [true; 7], "an algorithm is missing");
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithms::{
        Concurrency, FixedWindow, Gcra, NginxRate, Shaper, ShaperDelay, SlidingLog,
        SubWindowCounter,
    };

    fn any(l: impl Into<AnyLimit>) -> AnyLimit {
        l.into()
    }

    #[test]
    fn gcra_in_lowest_terms() {
        let g = any(Gcra::new(3, Duration::from_secs(1), 2).unwrap());
        // T = 1e6/3 µs: p = 1e6, c = 3; window = 2e6 ticks = 666666 µs + 2/3.
        assert_eq!(
            Params::of(&g).unwrap(),
            Params::Gcra {
                p: 1_000_000,
                c: 3,
                burst: 2,
                wq: 666_666,
                wr: 2
            }
        );
    }

    #[test]
    fn rejects_what_is_not_exact() {
        let odd = any(Gcra::new(1, Duration::from_nanos(1_500), 1).unwrap());
        assert!(validate(&odd).is_err());
        let huge = any(Gcra::new(1, Duration::from_secs(86_400 * 365 * 100), 1 << 20).unwrap());
        assert!(validate(&huge).is_err());
        let sub = any(SubWindowCounter::new(5, Duration::from_micros(1), 8).unwrap());
        assert!(validate(&sub).is_err());
        let slow = any(Shaper::new(NginxRate::PerMinute(1), 1 << 40, ShaperDelay::Queue).unwrap());
        assert!(validate(&slow).is_err());
        let fixed = any(FixedWindow::new(5, Duration::from_secs(1)).unwrap());
        let forever = fixed.clone().with_block(Duration::from_secs(1 << 40));
        assert!(validate(&forever).is_err());
        let odd_block = fixed.with_block(Duration::from_nanos(1_500));
        assert_eq!(block_micros(&odd_block), Ok(2));
        for ok in [
            any(Gcra::new(1 << 40, Duration::from_secs(1), 1 << 40).unwrap()),
            any(FixedWindow::new(1 << 40, Duration::from_secs(86_400 * 365 * 100)).unwrap()),
            any(SlidingLog::new(1_000_000, Duration::from_micros(1)).unwrap()),
            any(Shaper::new(NginxRate::PerSecond(10), 5, ShaperDelay::NoDelay).unwrap()),
            any(Concurrency::new(1 << 40).unwrap()),
        ] {
            validate(&ok).unwrap();
        }
    }

    #[test]
    fn every_algorithm_is_encoded_for_the_scripts_that_decide_it() {
        let read = include_str!("lua/read_item.lua");
        let dispatch = include_str!("lua/dispatch.lua");
        let mut codes = Vec::new();
        for limit in every_algorithm() {
            let params = Params::of(&limit).unwrap();
            assert_eq!(params.quota(), limit.quota().limit, "{}", limit.describe());
            let code = params.code();
            let test = format!("kind == '{code}'");
            assert!(read.contains(&test), "read_item.lua reads no '{code}'");
            assert!(dispatch.contains(&test), "dispatch.lua decides no '{code}'");
            codes.push(code);
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), 7, "one code per algorithm");
    }
}
