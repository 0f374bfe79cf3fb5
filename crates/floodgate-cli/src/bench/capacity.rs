//! The bench upstream's capacity flags (`--servers`, `--service`,
//! `--service-dist`, `--fail`): what each request costs it, drawn per
//! request, and the requests a second it completes at most.

use std::time::Duration;

use anyhow::bail;
use clap::Args;
use floodgate_gateway::demo::{Capacity, ServiceTime, Work};

/// Flags of a capacity-limited upstream.
#[derive(Args, Debug, Clone)]
pub(crate) struct CapacityArgs {
    /// Requests served at once; the others wait in a FIFO queue, as in a
    /// server's worker pool (`bench upstream` without it: every request
    /// at once, no service time; `bench overload`: 8).
    #[arg(long)]
    pub servers: Option<usize>,
    /// The mean service time of a request (spent asleep, not on the CPU).
    #[arg(long, default_value = "20ms", value_parser = floodgate_runtime::settings::duration)]
    pub service: Duration,
    /// The service-time distribution: `fixed` (every request `--service`),
    /// `exp` (exponential of mean `--service`) or `bimodal:P:LONG` (a
    /// share `P` of the requests takes `LONG`, the others `--service`).
    #[arg(long, default_value = "fixed", value_parser = parse_dist)]
    pub service_dist: Dist,
    /// The share of requests that fail: answered 503 after a tenth of
    /// their service time.
    #[arg(long, default_value_t = 0.0)]
    pub fail: f64,
}

/// A service-time distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Dist {
    /// Every request takes the service time.
    Fixed,
    /// Exponential, of mean the service time.
    Exp,
    /// A share `p` of the requests takes `long`, the others the service
    /// time.
    Bimodal { p: f64, long: Duration },
}

/// Parses `fixed`, `exp` or `bimodal:P:LONG`.
fn parse_dist(text: &str) -> Result<Dist, String> {
    match text.split(':').collect::<Vec<_>>().as_slice() {
        ["fixed"] => Ok(Dist::Fixed),
        ["exp"] => Ok(Dist::Exp),
        ["bimodal", p, long] => {
            let p: f64 = p.parse().map_err(|_| format!("`{p}` is not a share"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!(
                    "the share of long requests ({p}) must be from 0 to 1"
                ));
            }
            let long = floodgate_runtime::settings::duration(long)?;
            Ok(Dist::Bimodal { p, long })
        }
        _ => Err(format!(
            "unknown service-time distribution `{text}` (expected fixed, exp or bimodal:P:LONG)"
        )),
    }
}

impl CapacityArgs {
    /// The servers, `default` when not given; refused when zero, or with
    /// a service time or failure share that makes no capacity.
    pub(crate) fn servers_or(&self, default: usize) -> anyhow::Result<usize> {
        let servers = self.servers.unwrap_or(default);
        if servers == 0 {
            bail!("--servers must be at least 1");
        }
        if self.mean().is_zero() {
            bail!("--service must be above zero");
        }
        if !(0.0..1.0).contains(&self.fail) {
            bail!(
                "--fail must be a share from 0 to below 1, not {}",
                self.fail
            );
        }
        Ok(servers)
    }

    /// The mean service time.
    pub(crate) fn mean(&self) -> Duration {
        match self.service_dist {
            Dist::Fixed | Dist::Exp => self.service,
            Dist::Bimodal { p, long } => self.service.mul_f64(1.0 - p) + long.mul_f64(p),
        }
    }

    /// Requests a second `servers` complete at most.
    pub(crate) fn rate(&self, servers: usize) -> f64 {
        servers as f64 / self.mean().as_secs_f64()
    }

    /// The pool of `servers` servers these flags describe.
    pub(crate) fn capacity(&self, servers: usize) -> Capacity {
        Capacity::new(
            servers,
            Draw {
                service: self.service,
                dist: self.service_dist,
                fail: self.fail,
            },
        )
    }
}

/// Parses one step of a capacity schedule, `TIME:SERVERS`.
pub(crate) fn schedule_step(text: &str) -> Result<(Duration, usize), String> {
    let (at, servers) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not TIME:SERVERS, such as 10s:4"))?;
    let servers: usize = servers
        .parse()
        .map_err(|_| format!("`{servers}` is not a number of servers"))?;
    if servers == 0 {
        return Err("a schedule's servers must be at least 1".to_owned());
    }
    Ok((floodgate_runtime::settings::duration(at)?, servers))
}

/// Sets the servers of `capacity` at each step's time (from now).
pub(crate) async fn follow_schedule(capacity: Capacity, mut steps: Vec<(Duration, usize)>) {
    steps.sort_by_key(|s| s.0);
    let start = tokio::time::Instant::now();
    for (at, servers) in steps {
        tokio::time::sleep_until(start + at).await;
        eprintln!("upstream: {servers} servers from {at:?} on");
        capacity.set_servers(servers);
    }
}

/// Draws each request's work from the flags.
struct Draw {
    service: Duration,
    dist: Dist,
    fail: f64,
}

impl ServiceTime for Draw {
    fn draw(&self) -> Work {
        let time = match self.dist {
            Dist::Fixed => self.service,
            Dist::Exp => self.service.mul_f64(-(1.0 - fastrand::f64()).ln()),
            Dist::Bimodal { p, long } if fastrand::f64() < p => long,
            Dist::Bimodal { .. } => self.service,
        };
        let fail = self.fail > 0.0 && fastrand::f64() < self.fail;
        Work {
            time: if fail { time / 10 } else { time },
            fail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_parse() {
        assert_eq!(parse_dist("fixed"), Ok(Dist::Fixed));
        assert_eq!(parse_dist("exp"), Ok(Dist::Exp));
        assert_eq!(
            parse_dist("bimodal:0.1:200ms"),
            Ok(Dist::Bimodal {
                p: 0.1,
                long: Duration::from_millis(200)
            })
        );
        for bad in [
            "gauss",
            "bimodal:2:1s",
            "bimodal:0.1",
            "bimodal:x:1s",
            "exp:1",
        ] {
            assert!(parse_dist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_capacity_is_servers_over_the_mean_service_time() {
        let args = CapacityArgs {
            servers: None,
            service: Duration::from_millis(10),
            service_dist: Dist::Bimodal {
                p: 0.5,
                long: Duration::from_millis(30),
            },
            fail: 0.0,
        };
        assert_eq!(args.mean(), Duration::from_millis(20));
        assert_eq!(args.rate(8), 400.0);
        assert_eq!(args.servers_or(8).unwrap(), 8);
        let zero = CapacityArgs {
            servers: Some(0),
            ..args
        };
        assert!(zero.servers_or(8).is_err());
    }
}
