//! Asking Redis Sentinel where the primary is, following the Sentinel
//! clients guidelines: `SENTINEL get-master-addr-by-name` on every sentinel
//! at once (each on a kept connection), then `ROLE`, on a fresh connection,
//! on the addresses they report (the one most of them
//! agree on first) until one confirms it is a primary. A sentinel that
//! lags behind a failover, or a demoted primary that has not heard yet,
//! is never trusted on its own word.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, RedisError, RedisResult, Value};

/// A primary's address: host and port, as the sentinels report it.
pub(crate) type Addr = (String, u16);

/// The sentinels of one monitored primary, each with a connection kept
/// between questions (re-dialled after an error).
pub(crate) struct Sentinels {
    clients: Vec<Client>,
    conns: Mutex<Vec<Option<MultiplexedConnection>>>,
    master_name: String,
    timeout: Duration,
}

impl Sentinels {
    /// `clients` (one per sentinel) asked about `master_name`, each
    /// exchange bounded by `timeout`.
    pub(crate) fn new(clients: Vec<Client>, master_name: &str, timeout: Duration) -> Self {
        Sentinels {
            conns: Mutex::new(vec![None; clients.len()]),
            clients,
            master_name: master_name.to_owned(),
            timeout,
        }
    }

    /// Asks sentinel `i`, on its kept connection.
    async fn ask(&self, i: usize, cmd: &Cmd) -> RedisResult<Value> {
        let kept = self.lock()[i].clone();
        let run = async {
            let mut conn = match kept {
                Some(c) => c,
                None => {
                    let c = connect(&self.clients[i], self.timeout).await?;
                    self.lock()[i] = Some(c.clone());
                    c
                }
            };
            cmd.query_async::<Value>(&mut conn).await
        };
        let result = match tokio::time::timeout(self.timeout.saturating_mul(2), run).await {
            Ok(r) => r,
            Err(_) => Err(late(&self.clients[i])),
        };
        if result
            .as_ref()
            .is_err_and(|e| e.kind() != ErrorKind::UnexpectedReturnType)
        {
            self.lock()[i] = None;
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<MultiplexedConnection>>> {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The name the sentinels monitor the primary under.
    pub(crate) fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The primary's address as the sentinels report it: every distinct
    /// answer, the most reported first (ties in the sentinels' order).
    pub(crate) async fn candidates(&self) -> RedisResult<Vec<Addr>> {
        let mut ask = Cmd::new();
        ask.arg("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name);
        let answers = join_all((0..self.clients.len()).map(|i| self.ask(i, &ask))).await;
        let mut tally: Vec<(Addr, usize)> = Vec::new();
        let mut last_error = None;
        for answer in answers {
            match answer.and_then(parse_addr) {
                Ok(Some(addr)) => match tally.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, n)) => *n += 1,
                    None => tally.push((addr, 1)),
                },
                Ok(None) => {}
                Err(e) => last_error = Some(e),
            }
        }
        if tally.is_empty() {
            return Err(last_error.unwrap_or_else(|| {
                RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "no sentinel knows the master",
                    self.master_name.clone(),
                ))
            }));
        }
        // A stable sort keeps the sentinels' order among equals.
        tally.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        Ok(tally.into_iter().map(|(a, _)| a).collect())
    }
}

/// Whether the server behind `client` says it is a primary (`ROLE`).
pub(crate) async fn is_primary(client: &Client, timeout: Duration) -> RedisResult<bool> {
    let reply = exchange(client, &Cmd::new().arg("ROLE").clone(), timeout).await?;
    Ok(match reply {
        Value::Array(items) => {
            matches!(items.first(), Some(Value::BulkString(r)) if r == b"master")
        }
        _ => false,
    })
}

/// A connection whose every exchange is bounded by `timeout`.
async fn connect(client: &Client, timeout: Duration) -> RedisResult<MultiplexedConnection> {
    let settings = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&settings)
        .await
}

/// One command on a fresh connection, everything within `timeout`.
async fn exchange(client: &Client, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
    let run = async {
        let mut conn = connect(client, timeout).await?;
        cmd.query_async::<Value>(&mut conn).await
    };
    match tokio::time::timeout(timeout.saturating_mul(2), run).await {
        Ok(r) => r,
        Err(_) => Err(late(client)),
    }
}

fn late(client: &Client) -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "no answer in time",
        client.get_connection_info().addr().to_string(),
    ))
}

/// `[host, port]`, or nil when the sentinel does not know the master.
fn parse_addr(v: Value) -> RedisResult<Option<Addr>> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let host = text(&items[0]).filter(|h| !h.is_empty());
            let port = text(&items[1]).and_then(|p| p.parse::<u16>().ok());
            match (host, port) {
                (Some(h), Some(p)) if p > 0 => Ok(Some((h, p))),
                _ => Err(unexpected(&items)),
            }
        }
        other => Err(unexpected(&other)),
    }
}

fn unexpected(v: &impl std::fmt::Debug) -> RedisError {
    let shown: String = format!("{v:?}").chars().take(120).collect();
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "unexpected SENTINEL get-master-addr-by-name reply",
        shown,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            parse_addr(Value::Array(vec![bulk("10.0.0.1"), bulk("6380")])).unwrap(),
            Some(("10.0.0.1".into(), 6380))
        );
        assert_eq!(parse_addr(Value::Nil).unwrap(), None);
        for bad in [
            Value::Array(vec![bulk("h"), bulk("0")]),
            Value::Array(vec![bulk("h"), bulk("port")]),
            Value::Array(vec![bulk(""), bulk("1")]),
            Value::Array(vec![bulk("h")]),
            Value::Int(3),
        ] {
            assert!(parse_addr(bad).is_err());
        }
    }
}
