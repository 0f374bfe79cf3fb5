//! `floodgate healthcheck [URL]`: one GET, exit 0 on a 2xx answer, 1 with
//! a one-line reason otherwise. A probe for images without a shell or
//! curl (the Containerfile's `HEALTHCHECK`, a Kubernetes `exec` probe).
//! Plain HTTP/1.1 over a socket of the standard library: the probe needs
//! nothing more, and no runtime to start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

/// The admin listener's readiness on loopback, at its default port.
const DEFAULT_URL: &str = "http://127.0.0.1:6070/ready";

/// The arguments of `floodgate healthcheck`.
#[derive(clap::Args, Debug)]
pub(crate) struct HealthcheckArgs {
    /// The URL to GET (`http://host[:port][/path]`).
    #[arg(default_value = DEFAULT_URL)]
    url: String,
    /// Longest time for the whole check: connecting, asking, the answer.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = floodgate_runtime::settings::duration)]
    timeout: Duration,
}

/// Asks `args.url`; an error says why it is not healthy.
pub(crate) fn run(args: &HealthcheckArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.url)?;
    let deadline = Instant::now() + args.timeout;
    let status = target
        .get(deadline)
        .with_context(|| format!("healthcheck: {}", args.url))?;
    if !(200..300).contains(&status.0) {
        bail!("healthcheck: {} answered {}", args.url, status.1);
    }
    println!("{}: {}", args.url, status.1);
    Ok(())
}

/// Where to connect and what to ask.
#[derive(Debug, PartialEq)]
struct Target {
    /// `host[:port]` as the URL gives it: the `Host` header.
    authority: String,
    /// The host, without brackets around an IPv6 address.
    host: String,
    port: u16,
    path: String,
}

impl Target {
    /// Reads an `http://` URL.
    fn parse(url: &str) -> anyhow::Result<Target> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            anyhow!("healthcheck: {url}: not an http:// URL (the probe speaks plain HTTP)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = split_port(authority)
            .ok_or_else(|| anyhow!("healthcheck: {url}: no host, or a bad port"))?;
        Ok(Target {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// GETs the path: the status code and the status line's text.
    fn get(&self, deadline: Instant) -> anyhow::Result<(u16, String)> {
        let mut stream = self.connect(deadline)?;
        let left = remaining(deadline)?;
        stream.set_read_timeout(Some(left))?;
        stream.set_write_timeout(Some(left))?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: floodgate-healthcheck\r\nConnection: close\r\n\r\n",
            self.path, self.authority
        );
        stream.write_all(request.as_bytes())?;
        let mut line = String::new();
        // A status line, not whatever a wrong port streams.
        BufReader::new(stream.take(1024))
            .read_line(&mut line)
            .context("no answer")?;
        status_line(&line)
    }

    /// A connection to the first of the host's addresses that accepts one.
    fn connect(&self, deadline: Instant) -> anyhow::Result<TcpStream> {
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {}", self.host))?
            .collect();
        let mut last = anyhow!("{} has no address", self.host);
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, remaining(deadline)?) {
                Ok(s) => return Ok(s),
                Err(e) => last = anyhow!("cannot connect to {addr}: {e}"),
            }
        }
        Err(last)
    }
}

/// `host` and `port` of `host[:port]` or `[v6][:port]` (port 80 when none).
fn split_port(authority: &str) -> Option<(&str, u16)> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 80,
    };
    (!host.is_empty()).then_some((host, port))
}

/// The code and text of `HTTP/1.x CODE REASON`.
fn status_line(line: &str) -> anyhow::Result<(u16, String)> {
    let text = line.trim_end();
    let code = text
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP answer: {text:?}"))?;
    let reason = text.get(9..).unwrap_or_default().to_owned();
    Ok((code, reason))
}

/// The time left before `deadline`, an error once it has passed.
fn remaining(deadline: Instant) -> anyhow::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("timed out"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_host_port_and_path() {
        let t = Target::parse("http://[::1]:6070/ready").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 6070, "/ready")
        );
        assert_eq!(t.authority, "[::1]:6070");
        let t = Target::parse("http://localhost").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 80, "/")
        );
        for bad in [
            "https://x/",
            "http://:80/",
            "http://h:port/",
            "http://[::1/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_lines_give_code_and_reason() {
        let (code, reason) = status_line("HTTP/1.1 503 Service Unavailable\r\n").unwrap();
        assert_eq!((code, reason.as_str()), (503, "503 Service Unavailable"));
        assert!(status_line("SSH-2.0-OpenSSH\r\n").is_err());
        assert!(status_line("").is_err());
    }
}
