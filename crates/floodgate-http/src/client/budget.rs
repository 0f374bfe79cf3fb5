//! A retry budget: retries may add at most a fraction of the requests
//! (plus a small steady allowance), so retries cannot multiply the load of
//! a struggling service.

use std::sync::Mutex;
use std::time::Instant;

/// Budget settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Retries earned per request (0.1: one retry per ten requests).
    pub ratio: f64,
    /// Retries always allowed per second, whatever the traffic.
    pub min_per_sec: f64,
    /// The most retries saved up.
    pub max_saved: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            ratio: 0.1,
            min_per_sec: 1.0,
            max_saved: 100.0,
        }
    }
}

#[derive(Debug)]
struct State {
    /// Thousandths of a retry (exact: 10 × 0.1 is one retry).
    earned: u64,
    floor: f64,
    at: Instant,
}

/// A token bucket of retries, shared by every request of a client: each
/// request deposits `ratio`, each retry withdraws one; a second bucket
/// refilled at `min_per_sec` (holding at most one second's worth) lets a
/// quiet client retry at all.
#[derive(Debug)]
pub struct RetryBudget {
    config: BudgetConfig,
    state: Mutex<State>,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::new(BudgetConfig::default())
    }
}

impl RetryBudget {
    /// A budget with `config`, starting with the steady allowance.
    pub fn new(config: BudgetConfig) -> Self {
        RetryBudget {
            config,
            state: Mutex::new(State {
                earned: 0,
                floor: config.min_per_sec.max(0.0),
                at: Instant::now(),
            }),
        }
    }

    /// Records a request (not a retry).
    pub fn deposit(&self) {
        if let Ok(mut s) = self.state.lock() {
            let add = (self.config.ratio.max(0.0) * 1000.0).round() as u64;
            let cap = (self.config.max_saved.max(0.0) * 1000.0).round() as u64;
            s.earned = s.earned.saturating_add(add).min(cap);
        }
    }

    /// Takes one retry; false when the budget is spent.
    pub fn try_withdraw(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let now = Instant::now();
        let dt = now.saturating_duration_since(s.at).as_secs_f64();
        s.at = now;
        let cap = self.config.min_per_sec.max(0.0).max(1.0);
        s.floor = (s.floor + dt * self.config.min_per_sec.max(0.0)).min(cap);
        if s.earned >= 1000 {
            s.earned -= 1000;
            true
        } else if s.floor >= 1.0 {
            s.floor -= 1.0;
            true
        } else {
            false
        }
    }

    /// Retries available now (earned plus the steady allowance), rounded down.
    pub fn available(&self) -> u64 {
        self.state
            .lock()
            .map_or(0, |s| s.earned / 1000 + s.floor.floor() as u64)
    }
}
