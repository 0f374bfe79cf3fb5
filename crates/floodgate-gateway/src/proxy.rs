//! [`Proxy`]: the service behind the limiter, forwarding a request to the
//! upstream and streaming its response back (or, after `101 Switching
//! Protocols`, joining the two connections). Upstream failures are gateway
//! errors (502, 504), never rate-limit statuses; a client's own faults (its
//! `Host`, its body) are client errors (400, 408, 413), never the
//! upstream's.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use floodgate_http::identity::{EncodedSlashes, PathError, normalize_path};
use floodgate_runtime::listener::Slot;
use http::header::{CONNECTION, CONTENT_TYPE, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use crate::body::ProxyBody;
use crate::config::{Forwarding, ListenerLimits};
use crate::connection::{ExchangeError, UpstreamBody};
use crate::forward::{
    Hop, append_forwarded, append_x_forwarded_for, set_x_forwarded_proto, strip_hop_by_hop,
};
use crate::host::{HostError, normalize_host};
use crate::upgrade;
use crate::upload::{ClientBodyError, Progress, UploadBody};
use crate::upstream::Upstream;
use crate::upstream_errors::{UpstreamErrors, UpstreamFailure};

/// What the proxy needs to know of the client connection a request came
/// on (passed along with the request rather than in its extensions: no
/// extension map to allocate per request).
pub(crate) struct ClientInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection's forwarding values.
    pub hop: Arc<Hop>,
    /// The client connection is TLS (`X-Forwarded-Proto: https`,
    /// `proto=https`).
    pub tls: bool,
    /// The request came through a trusted proxy, so its
    /// `X-Forwarded-Proto` is kept.
    pub trusted_hop: bool,
    /// The client connection's place under the cap, held by a tunnel if
    /// the request is upgraded (always given: cheaper than a lookup of
    /// `Upgrade` per request).
    pub slot: Option<Arc<Slot>>,
}

/// Counters of the proxy (cumulative).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Requests sent to the upstream.
    pub forwarded: AtomicU64,
    /// Upstream connection failures and broken exchanges (502).
    pub bad_gateway: AtomicU64,
    /// Upstream connect and response timeouts (504).
    pub timeouts: AtomicU64,
    /// Request bodies the client stopped sending (408).
    pub upload_timeouts: AtomicU64,
    /// Requests whose target could not be rewritten (400).
    pub bad_target: AtomicU64,
    /// Requests without exactly one valid `Host` (400).
    pub bad_host: AtomicU64,
    /// Requests with more than one line of a field the limiter keys on
    /// (400).
    pub duplicate_keyed_fields: AtomicU64,
    /// Requests whose path has no normal form (400).
    pub bad_path: AtomicU64,
    /// `CONNECT` requests and methods not spelled in upper case (400).
    pub bad_method: AtomicU64,
    /// Requests with a transfer coding an HTTP/2 upstream cannot carry
    /// (501).
    pub bad_coding: AtomicU64,
    /// Request bodies whose framing the client broke (400).
    pub malformed_bodies: AtomicU64,
    /// Request bodies the client did not finish (400).
    pub incomplete_bodies: AtomicU64,
    /// Request bodies over `max_body_bytes` (413).
    pub bodies_too_large: AtomicU64,
    /// Connections switched to another protocol (`101`) and tunnelled.
    pub upgraded: AtomicU64,
}

struct Shared {
    upstream: Upstream,
    body_read_timeout: Duration,
    max_body_bytes: Option<u64>,
    /// The protocols an upgrade may ask for (lower case).
    upgrades: Box<[String]>,
    encoded_slashes: EncodedSlashes,
    stats: ProxyStats,
    /// The counter of each client fault (see [`CLIENT_ERRORS`]).
    client_errors: [metrics::Counter; CLIENT_ERRORS.len()],
    /// The counter of each kind of upstream failure.
    upstream_errors: UpstreamErrors,
    /// `floodgate_gateway_upstream_duration_seconds`: from sending a
    /// request upstream to its response head.
    upstream_time: metrics::Histogram,
}

/// A fault the gateway answers itself: the client's (400, 408, 413), or
/// the upstream's (502, 504).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Host(HostError),
    Target,
    Path(PathError),
    Connect,
    Method,
    Coding,
    Body(ClientBodyError),
    BodyTimeout,
    /// The upstream brought no response (502, or 504 for a timeout).
    Upstream(UpstreamFailure),
    DuplicateKeyedField,
}

const CLIENT: &str = "floodgate_gateway_client_errors_total";

/// The `kind` label of each client fault's counter, in the order of the
/// rows [`Shared::answer`] gives.
const CLIENT_ERRORS: [&str; 10] = [
    "bad_host",
    "bad_target",
    "malformed_body",
    "incomplete_body",
    "body_too_large",
    "body_timeout",
    "duplicate_keyed_field",
    "bad_path",
    "bad_method",
    "bad_coding",
];

impl Shared {
    /// Counts `fault` and writes the gateway's answer to it.
    fn answer(&self, fault: Fault) -> Response<ProxyBody> {
        use ClientBodyError::*;
        let s = &self.stats;
        // The fault's row in `CLIENT_ERRORS`, its counter, and the answer,
        // whose first word is the status it is sent with.
        let (row, stat, text) = match fault {
            Fault::Upstream(kind) => return self.upstream_failed(kind),
            Fault::Host(h) => (0, &s.bad_host, host_text(h)),
            Fault::Target => (
                1,
                &s.bad_target,
                "400 Bad Request: invalid request target\n",
            ),
            Fault::Body(Malformed) => (
                2,
                &s.malformed_bodies,
                "400 Bad Request: malformed request body\n",
            ),
            Fault::Body(Incomplete) => (
                3,
                &s.incomplete_bodies,
                "400 Bad Request: incomplete request body\n",
            ),
            Fault::Body(TooLarge) => (4, &s.bodies_too_large, "413 Content Too Large\n"),
            Fault::BodyTimeout => (5, &s.upload_timeouts, "408 Request Timeout\n"),
            Fault::DuplicateKeyedField => (
                6,
                &s.duplicate_keyed_fields,
                "400 Bad Request: a rate-limited header field sent more than once\n",
            ),
            Fault::Path(p) => (7, &s.bad_path, path_text(p)),
            Fault::Connect => (
                8,
                &s.bad_method,
                "400 Bad Request: CONNECT is not proxied\n",
            ),
            Fault::Method => (
                8,
                &s.bad_method,
                "400 Bad Request: invalid method (methods are upper case)\n",
            ),
            Fault::Coding => (
                9,
                &s.bad_coding,
                "501 Not Implemented: transfer coding other than chunked\n",
            ),
        };
        stat.fetch_add(1, Ordering::Relaxed);
        self.client_errors[row].increment(1);
        let status = StatusCode::from_bytes(&text.as_bytes()[..3]);
        error(status.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), text)
    }

    /// Counts an upstream failure of `kind` and answers it: 504 for a
    /// timeout, else 502.
    fn upstream_failed(&self, kind: UpstreamFailure) -> Response<ProxyBody> {
        self.upstream_errors.count(kind);
        if kind.is_timeout() {
            self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
            error(StatusCode::GATEWAY_TIMEOUT, "504 Gateway Timeout\n")
        } else {
            self.stats.bad_gateway.fetch_add(1, Ordering::Relaxed);
            error(StatusCode::BAD_GATEWAY, "502 Bad Gateway\n")
        }
    }

    /// Answers a client's fault (the connection closed after it over
    /// HTTP/1.x: what follows in the stream cannot be trusted).
    fn client_error(&self, fault: Fault, version: Version) -> Response<ProxyBody> {
        tracing::debug!(error = ?fault, "client error");
        let mut res = self.answer(fault);
        // Keep-alive is an HTTP/1.x matter (HTTP/2 has no `Connection`).
        if version < Version::HTTP_2 {
            res.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        res
    }

    /// Answers an exchange that broke (502, or 504 for a connect
    /// timeout), counted by what broke.
    fn bad_gateway(&self, e: &ExchangeError) -> Response<ProxyBody> {
        tracing::debug!(error = %e, "upstream request failed");
        self.answer(Fault::Upstream(UpstreamFailure::of(e)))
    }
}

/// The answer to an authority that is not one.
fn host_text(h: HostError) -> &'static str {
    match h {
        HostError::Missing => "400 Bad Request: no Host\n",
        HostError::Duplicate => "400 Bad Request: more than one Host\n",
        HostError::Invalid => "400 Bad Request: invalid Host\n",
        HostError::Conflict => "400 Bad Request: Host differs from :authority\n",
    }
}

/// The answer to a path without a normal form.
fn path_text(p: PathError) -> &'static str {
    match p {
        PathError::NotAbsolute => "400 Bad Request: the path does not start with /\n",
        PathError::BadPercent => "400 Bad Request: invalid percent-encoding in the path\n",
        PathError::AboveRoot => "400 Bad Request: the path climbs above the root\n",
        PathError::SlashSpelling => {
            "400 Bad Request: encoded slash (%2F, %5C) or backslash in the path\n"
        }
    }
}

/// Forwards requests to an [`Upstream`]. Always ready; never fails (errors
/// are responses).
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.shared.upstream)
            .finish()
    }
}

impl Proxy {
    /// A proxy to `upstream` whose clients may pause `body_read_timeout`
    /// between two chunks of a request body (beyond: 408) and send at most
    /// `max_body_bytes` (beyond: 413).
    pub(crate) fn with_limits(
        upstream: Upstream,
        limits: &ListenerLimits,
        forwarding: &Forwarding,
    ) -> Self {
        Proxy {
            shared: Arc::new(Shared {
                upstream,
                body_read_timeout: limits.body_read_timeout,
                max_body_bytes: limits.max_body_bytes,
                upgrades: forwarding.upgrades.clone().into(),
                encoded_slashes: forwarding.encoded_slashes,
                stats: ProxyStats::default(),
                client_errors: CLIENT_ERRORS.map(|kind| metrics::counter!(CLIENT, "kind" => kind)),
                upstream_errors: UpstreamErrors::new(),
                upstream_time: upstream_time(),
            }),
        }
    }

    /// Checks what must be right before a request is limited or forwarded:
    /// its method (not `CONNECT`, spelled in upper case; 400 otherwise),
    /// its authority, made one (see [`crate::host`]; 400 otherwise), its
    /// path, made normal (see [`normalize_path`]; 400 when it has no
    /// normal form), and a `Content-Length` within `max_body_bytes` (413
    /// otherwise). The limiter reads, and the upstream is sent, the
    /// normal path. Returns the gateway's answer to a request that fails,
    /// counted as a client error; none for a request to go on with.
    pub(crate) fn check_request<B: http_body::Body>(
        &self,
        req: &mut Request<B>,
    ) -> Option<Response<ProxyBody>> {
        let shared = &self.shared;
        let e = self.check(req).err()?;
        Some(shared.client_error(e, req.version()))
    }

    /// Answers a request with more than one line of a field the limiter
    /// keys on (400, before it is limited or forwarded).
    pub(crate) fn duplicate_keyed_field(&self, version: Version) -> Response<ProxyBody> {
        self.shared
            .client_error(Fault::DuplicateKeyedField, version)
    }

    fn check<B: http_body::Body>(&self, req: &mut Request<B>) -> Result<(), Fault> {
        let shared = &self.shared;
        if req.method() == Method::CONNECT {
            return Err(Fault::Connect);
        }
        if !upper_case(req.method()) {
            return Err(Fault::Method);
        }
        normalize_host(req).map_err(Fault::Host)?;
        normalize_target(req, shared.encoded_slashes)?;
        if shared
            .max_body_bytes
            .is_some_and(|max| req.body().size_hint().lower() > max)
        {
            return Err(Fault::Body(ClientBodyError::TooLarge));
        }
        Ok(())
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.shared.upstream
    }

    /// The proxy's counters.
    pub fn stats(&self) -> &ProxyStats {
        &self.shared.stats
    }

    /// Forwards one request from `client` and returns the upstream's
    /// response (or the gateway's error response), as a service's result:
    /// the forwarding future itself, not one awaiting it (a wrapper would be
    /// one more copy of it). Owns the proxy, for a future that must be
    /// `'static`. The request is made ready for the upstream as it arrives
    /// (no future holds the client's request, its fields or its moved-out
    /// parts: a future's size is that of the most it holds across an
    /// await, copied whole when it moves), then exchanged.
    pub(crate) fn forward(
        self,
        req: Request<Incoming>,
        client: ClientInfo,
    ) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static {
        let shared = self.shared;
        let prepared = prepare(&shared, req, client);
        // The exchange written in this block rather than awaited as a future
        // of its own: an awaited future is built, then moved into the state
        // of the one awaiting it.
        async move {
            let shared: &Shared = &shared;
            let Prepared {
                req,
                target,
                version,
                progress,
                client_upgrade,
            } = match prepared {
                Ok(p) => p,
                Err(res) => return Ok(*res),
            };
            let up = &shared.upstream;
            let sent = Instant::now();
            let result = {
                // Pinned here, once: the exchange borrows it rather than holding
                // (and moving) a copy of its own. Gone at the end of this block:
                // the rest of the future does not carry it.
                let send = std::pin::pin!(up.send(target, req, client_upgrade.is_some()));
                let result = exchange(shared, send, progress.as_deref()).await;
                blame(result, progress.as_deref())
            };
            let mut res = match result {
                Ok(res) => res,
                Err(failure) => return Ok(shared.failed(failure, version)),
            };
            shared.upstream_time.record(sent.elapsed().as_secs_f64());
            let switched = switch(&mut res, client_upgrade);
            let (mut parts, mut body) = res.into_parts();
            // The first frame, when it is there already: a body broken
            // from its first byte is the upstream's failure, answered 502
            // rather than a response head with nothing behind it.
            let first = if switched.is_none() && !body.is_end_stream() {
                match poll_once(&mut body).await {
                    Some(Some(Err(e))) => return Ok(shared.bad_gateway(&e)),
                    Some(Some(Ok(frame))) => Some(frame),
                    Some(None) | None => None,
                }
            } else {
                None
            };
            shared.response_head(&mut parts, switched, version);
            let body = ProxyBody::upstream(body, first, up.response_timeout());
            Ok(Response::from_parts(parts, body))
        }
    }
}

/// The histogram of the upstream's time to a response head.
fn upstream_time() -> metrics::Histogram {
    metrics::describe_histogram!(
        "floodgate_gateway_upstream_duration_seconds",
        metrics::Unit::Seconds,
        "Time from sending a request upstream (connecting included) to its response head, for the exchanges that brought one."
    );
    metrics::histogram!("floodgate_gateway_upstream_duration_seconds")
}

/// The client broke its own upload: its error, whatever the upstream's
/// client made of the aborted body.
fn blame(result: Exchange, progress: Option<&Progress>) -> Exchange {
    match result {
        Err(Failure::Failed(e)) => match progress.and_then(Progress::client_error) {
            Some(c) => Err(Failure::ClientBody(c)),
            None => Err(Failure::Failed(e)),
        },
        r => r,
    }
}

/// The protocol the upstream switched to, when it accepted the client's
/// upgrade (`client_upgrade`): the connection, taken from `res`, then
/// belongs to its tunnel, not the pool.
fn switch(
    res: &mut Response<UpstreamBody>,
    client_upgrade: Option<(OnUpgrade, Option<Arc<Slot>>, HeaderValue)>,
) -> Option<HeaderValue> {
    match client_upgrade {
        Some((client, slot, asked)) if res.status() == StatusCode::SWITCHING_PROTOCOLS => {
            res.body_mut().take_upgraded().map(|upstream| {
                upgrade::spawn_tunnel(client, upstream, slot);
                res.headers().get(UPGRADE).cloned().unwrap_or(asked)
            })
        }
        _ => None,
    }
}

impl Shared {
    /// The upstream's response head made ready for a client of `version`:
    /// its hop-by-hop fields dropped, its upgrade (`switched`) restored.
    fn response_head(
        &self,
        parts: &mut http::response::Parts,
        switched: Option<HeaderValue>,
        version: Version,
    ) {
        // The upstream's codings before `chunked` go on to an HTTP/1.1
        // client as sent (hyper chunks the body again); HTTP/2 has none to
        // carry them.
        let codings = strip_hop_by_hop(&mut parts.headers, None)
            .codings
            .filter(|_| version == Version::HTTP_11);
        if let Some(c) = codings {
            parts.headers.insert(TRANSFER_ENCODING, c);
        }
        if let Some(v) = switched {
            upgrade::restore(&mut parts.headers, v);
            self.stats.upgraded.fetch_add(1, Ordering::Relaxed);
        }
        parts.version = Version::HTTP_11;
    }

    /// The gateway's answer to an exchange that brought no response.
    fn failed(&self, failure: Failure, version: Version) -> Response<ProxyBody> {
        match failure {
            Failure::ClientBody(e) => self.client_error(Fault::Body(e), version),
            Failure::Failed(e) => self.bad_gateway(&e),
            Failure::TimedOut => {
                let timeout = self.upstream.response_timeout();
                tracing::debug!(?timeout, "upstream response timed out");
                self.answer(Fault::Upstream(UpstreamFailure::ResponseTimeout))
            }
            Failure::UploadStalled => {
                tracing::debug!(timeout = ?self.body_read_timeout, "request body stalled");
                self.client_error(Fault::BodyTimeout, version)
            }
        }
    }
}

/// Whether a method is spelled as nginx accepts one: upper-case letters,
/// `_` and `-`. Methods are case-sensitive, so `get` is not `GET`, but
/// some upstreams read it as `GET`: a limit keyed on the method must not
/// be dodged by spelling it in lower case.
fn upper_case(m: &Method) -> bool {
    m.as_str()
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
}

/// Puts the request's path in its normal form (`OPTIONS *` as it is); a
/// new target is built only when the path changes.
fn normalize_target<B>(req: &mut Request<B>, slashes: EncodedSlashes) -> Result<(), Fault> {
    let uri = req.uri();
    if uri.path() == "*" && req.method() == Method::OPTIONS {
        return Ok(());
    }
    let path = match normalize_path(uri.path().as_bytes(), slashes) {
        Ok(std::borrow::Cow::Borrowed(_)) => return Ok(()),
        Ok(std::borrow::Cow::Owned(p)) => p,
        Err(e) => return Err(Fault::Path(e)),
    };
    let mut target = path;
    if let Some(q) = uri.query() {
        target.push(b'?');
        target.extend_from_slice(q.as_bytes());
    }
    let mut parts = std::mem::take(req.uri_mut()).into_parts();
    parts.path_and_query =
        Some(PathAndQuery::from_maybe_shared(Bytes::from(target)).map_err(|_| Fault::Target)?);
    *req.uri_mut() = Uri::from_parts(parts).map_err(|_| Fault::Target)?;
    Ok(())
}

/// A request made ready for the upstream, with what its exchange needs.
struct Prepared {
    req: Request<UploadBody>,
    target: usize,
    version: Version,
    progress: Option<Arc<Progress>>,
    /// The client's side of an upgrade it asked for, its connection's
    /// place, and the protocol asked for.
    client_upgrade: Option<(OnUpgrade, Option<Arc<Slot>>, HeaderValue)>,
}

/// The request's hop-by-hop fields dropped, its forwarding fields added,
/// its target rewritten for the upstream and its body counted; or the
/// gateway's answer to a target it cannot rewrite (boxed: rare).
fn prepare(
    shared: &Shared,
    mut req: Request<Incoming>,
    client: ClientInfo,
) -> Result<Prepared, Box<Response<ProxyBody>>> {
    let keep_proto = client.trusted_hop;
    let https = client.tls;
    let version = req.version();
    let headers = req.headers_mut();
    // Room for the forwarding fields, in one growth of the map rather
    // than one per field.
    headers.reserve(3);
    // The gateway answers `100-continue` itself when it reads the body.
    let stripped = strip_hop_by_hop(headers, Some(EXPECT));
    let codings = stripped.codings;
    let upgrade = upgrade::requested(version, stripped.upgrade)
        .and_then(|asked| upgrade::allowed(asked, &shared.upgrades));
    // A cheap clone (shared bytes), so the map can be written to.
    let field = req.headers().get(HOST).cloned();
    let has_host = field.is_some();
    let host = field.or_else(|| {
        let authority = req.uri().authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    });
    with_forwarding_buf(|buf| {
        append_x_forwarded_for(req.headers_mut(), &client.hop, buf);
        let host = host.as_ref().map(HeaderValue::as_bytes);
        append_forwarded(req.headers_mut(), &client.hop, host, buf);
    });
    set_x_forwarded_proto(req.headers_mut(), keep_proto, https);
    let Some(target) = shared.upstream.prepare(&mut req, has_host) else {
        return Err(Box::new(shared.client_error(Fault::Target, version)));
    };
    if let Some(c) = codings {
        // HTTP/2 has no transfer codings: the body could not be sent as
        // the client coded it (nginx answers such requests 501 itself).
        if req.version() != Version::HTTP_11 {
            return Err(Box::new(shared.client_error(Fault::Coding, version)));
        }
        req.headers_mut().insert(TRANSFER_ENCODING, c);
    }
    // An upgrade needs an HTTP/1.1 upstream; towards HTTP/2 the request
    // goes as a plain one.
    let upgrade = upgrade.filter(|_| req.version() == Version::HTTP_11);
    let client_upgrade = upgrade.map(|v| {
        upgrade::restore(req.headers_mut(), v.clone());
        (hyper::upgrade::on(&mut req), client.slot, v)
    });
    shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let (body, progress) = UploadBody::new(body, shared.max_body_bytes);
    Ok(Prepared {
        req: Request::from_parts(parts, body),
        target,
        version,
        progress,
        client_upgrade,
    })
}

/// Polls `body` once: its next frame or end when it is there already
/// (`Some`), `None` when it is not.
async fn poll_once<B: http_body::Body + Unpin>(
    body: &mut B,
) -> Option<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
    std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
        Poll::Ready(frame) => Poll::Ready(Some(frame)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// How an exchange with the upstream ended: its response, or why none.
// Matched at once where it is made: boxing the response would cost an
// allocation per request.
type Exchange = Result<Response<UpstreamBody>, Failure>;

/// Why an exchange with the upstream brought no response.
enum Failure {
    /// The exchange failed.
    Failed(ExchangeError),
    /// No response head within `response_timeout` of the end of the
    /// upload, or the upstream stopped reading the upload that long.
    TimedOut,
    /// The client stopped sending its body for `body_read_timeout`.
    UploadStalled,
    /// The client broke its body (the upstream's answer, if any, is not
    /// waited for).
    ClientBody(ClientBodyError),
}

/// Waits for the upstream's response head. While the request body is
/// still being uploaded, only its pauses are timed: the client may pause
/// `body_read_timeout` between two chunks, the upstream may leave one
/// unread `response_timeout`. Once the body is sent whole (at once for a
/// request without one), the head is due within `response_timeout`.
async fn exchange(
    shared: &Shared,
    mut send: Pin<&mut impl Future<Output = Result<Response<UpstreamBody>, ExchangeError>>>,
    progress: Option<&Progress>,
) -> Exchange {
    let response_timeout = shared.upstream.response_timeout();
    let done = |r: Result<Response<UpstreamBody>, ExchangeError>| r.map_err(Failure::Failed);
    if let Some(p) = progress {
        let body_read_timeout = shared.body_read_timeout;
        // Checked at least every quarter of the shorter timeout, so a
        // switch between waiting for the client and for the upstream is
        // seen in time.
        let tick = (body_read_timeout.min(response_timeout) / 4).max(Duration::from_millis(10));
        let upload = async {
            loop {
                let client = p.waiting_client();
                let due = p.last_progress()
                    + if client {
                        body_read_timeout
                    } else {
                        response_timeout
                    };
                let now = tokio::time::Instant::now();
                if now >= due {
                    return Err(if client {
                        Failure::UploadStalled
                    } else {
                        Failure::TimedOut
                    });
                }
                tokio::time::sleep_until(due.min(now + tick)).await;
            }
        };
        tokio::select! {
            biased;
            r = send.as_mut() => return done(r),
            _ = p.finished() => {
                if let Some(e) = p.client_error() {
                    return Err(Failure::ClientBody(e));
                }
            }
            stalled = upload => {
                // The upload may have just ended: then the head is timed.
                if !p.is_done() {
                    return stalled;
                }
            }
        }
    }
    match tokio::time::timeout(response_timeout, send).await {
        Ok(r) => done(r),
        Err(_) => Err(Failure::TimedOut),
    }
}

/// Bytes reserved at a time for forwarding values.
const FORWARDING_CHUNK: usize = 4096;

thread_local! {
    /// The forwarding values of this thread's requests are split off one
    /// buffer, reclaimed in place once they are all dropped (after their
    /// requests are written): no allocation per request.
    static FORWARDING: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

fn with_forwarding_buf(f: impl FnOnce(&mut BytesMut)) {
    FORWARDING.with(|b| {
        let mut buf = b.borrow_mut();
        if buf.capacity() < FORWARDING_CHUNK / 8 {
            buf.reserve(FORWARDING_CHUNK);
        }
        f(&mut buf);
    });
}

fn error(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut res = Response::new(ProxyBody::full(text));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}
