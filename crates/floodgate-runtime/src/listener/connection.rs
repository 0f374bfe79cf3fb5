//! Serving a service on an accepted connection, under the listener's
//! protections: the first bytes (the HTTP/2 preface or a request line) due
//! within the header timeout, HTTP/1.1 heads bounded in time and size (an
//! idle keep-alive connection closes after the same timeout), HTTP/2 with
//! a cap on concurrent streams and closed once it has had no open stream
//! for the idle timeout, a client that accepts nothing sent to it for the
//! send timeout cut off (its connection, or its HTTP/2 stream whose window
//! stays shut), a PROXY protocol header read first where configured; on
//! shutdown each connection finishes its requests
//! in flight and closes.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsAcceptor;

use super::accept::{Accepted, Slot};
use super::activity::{Activity, InFlight};
use super::age::Ageing;
use super::own_http2::{Http2Connection, Http2Server, Streams};
use super::proxy_protocol::{Peek, ProxyProtocol};
use super::send::SendTimed;
use super::sniff::{Prefixed, Sniffed, sniff};
use super::stall::{self, StreamExec};
use super::{HttpService, ResponseBody};

/// The protections of a listener's connections (`Default`: blank; each
/// listener's defaults are its settings').
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has for a request head (HTTP/1.1) or the connection
    /// preface, and how long an idle keep-alive connection is kept.
    pub header_read_timeout: Duration,
    /// Largest request head: the HTTP/1.1 read buffer (beyond: 431) and
    /// the HTTP/2 header list.
    pub max_header_bytes: usize,
    /// Most header fields of an HTTP/1.1 request (beyond: 431).
    pub max_headers: usize,
    /// Concurrent streams per HTTP/2 connection (beyond: refused).
    pub max_concurrent_streams: u32,
    /// An HTTP/2 connection with no open stream for this long is asked to
    /// close (`GOAWAY`), then disconnected if it opens none for as long.
    pub http2_idle_timeout: Duration,
    /// Longest a client may accept nothing sent to it (nginx's
    /// `send_timeout`): a connection whose writes wait this long is
    /// closed; an HTTP/2 stream that waits this long for room in its
    /// flow-control window is reset. Zero: no timeout.
    pub send_timeout: Duration,
    /// A connection older than this, give or take a tenth drawn per
    /// connection, is asked to close (`GOAWAY`): its calls in flight
    /// complete, its client opens a new one for the next (gRPC's
    /// `MaxConnectionAge`). Zero: never.
    pub max_connection_age: Duration,
    /// How long a connection asked to close for its age has to finish
    /// its calls before it is closed. Zero: however long they take.
    pub max_connection_age_grace: Duration,
}

/// Which protocols a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocols {
    /// HTTP/1.1, and HTTP/2 with prior knowledge (told apart by the first
    /// bytes).
    Http1AndHttp2,
    /// HTTP/2 only (gRPC); anything else is disconnected.
    Http2,
}

/// The protocol builders of one listener, shared by its connections.
pub struct Http {
    h1: http1::Builder,
    h2: http2::Builder<StreamExec>,
    limits: ConnectionLimits,
    protocols: Protocols,
    proxy_protocol: Option<ProxyProtocol>,
    own_http2: Option<Arc<dyn Http2Server>>,
}

impl Http {
    /// Builders for `limits`.
    pub fn new(limits: &ConnectionLimits, protocols: Protocols) -> Self {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192))
            .max_headers(limits.max_headers)
            .keep_alive(true);
        let exec = StreamExec {
            send_timeout: limits.send_timeout,
        };
        let mut h2 = http2::Builder::new(exec);
        h2.timer(TokioTimer::new())
            .max_header_list_size(limits.max_header_bytes.min(u32::MAX as usize) as u32)
            .max_concurrent_streams(limits.max_concurrent_streams)
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(4 << 20)
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(20));
        Http {
            h1,
            h2,
            limits: limits.clone(),
            protocols,
            proxy_protocol: None,
            own_http2: None,
        }
    }

    /// With the PROXY protocol header read first on each connection
    /// ([`proxy_protocol`](super::proxy_protocol)), before TLS.
    pub fn with_proxy_protocol(mut self, proxy_protocol: ProxyProtocol) -> Self {
        self.proxy_protocol = Some(proxy_protocol);
        self
    }

    /// With HTTP/2 connections served by `server` rather than hyper.
    pub fn with_http2_server(mut self, server: Arc<dyn Http2Server>) -> Self {
        self.own_http2 = Some(server);
        self
    }

    /// Serves an accepted connection until the client closes it, a
    /// timeout closes it, or shutdown asks it to finish: TLS terminated by
    /// `tls` first if any (ALPN `h2`, else HTTP/2 with prior knowledge told
    /// by its preface), the service made for the connection by `service`
    /// from its client's address and its place under the cap (held until
    /// the connection and whatever it was upgraded to end).
    pub(super) async fn serve<S: HttpService<B>, B: ResponseBody, T>(
        &self,
        accepted: Accepted<T>,
        tls: Option<&TlsAcceptor>,
        service: impl FnOnce(SocketAddr, &Arc<Slot>) -> S,
    ) where
        T: AsyncRead + AsyncWrite + Peek + Unpin + Send + 'static,
    {
        let Accepted {
            stream,
            peer,
            slot,
            activity,
            mut stop,
        } = accepted;
        // The TLS handshake and the first bytes are due within the header
        // timeout; a connection that has sent nothing when shutdown begins
        // has nothing in flight.
        let deadline = Instant::now() + self.limits.header_read_timeout;
        let ends = |stop| Ends {
            stop,
            aged: Ageing::of(&self.limits),
        };
        // Behind a load balancer, the client is who its header says.
        let peer = match &self.proxy_protocol {
            None => peer,
            Some(p) => match p.client(&stream, peer, deadline, &mut stop).await {
                Some(client) => client,
                None => return,
            },
        };
        let slot = Arc::new(slot);
        let service = service(peer, &slot);
        let Some(tls) = tls else {
            let sniffed = first_bytes(stream, deadline, &mut stop).await;
            if let Some((io, kind)) = sniffed {
                let ends = ends(stop);
                self.serve_io(io, kind, peer, activity, ends, service).await;
            }
            return;
        };
        let stream = tokio::select! {
            a = timeout_at(deadline, tls.accept(stream)) => match a {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                Err(_) => return,
            },
            _ = signalled(&mut stop) => return,
        };
        let sniffed = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
            Some((Prefixed::new(Bytes::new(), stream), Sniffed::Http2))
        } else {
            first_bytes(stream, deadline, &mut stop).await
        };
        if let Some((io, kind)) = sniffed {
            let ends = ends(stop);
            self.serve_io(io, kind, peer, activity, ends, service).await;
        }
    }

    /// Serves `service` on a connection whose first bytes told its protocol
    /// (`kind`; `io` gives them again). HTTP/1.1 requests may upgrade the
    /// connection (`hyper::upgrade::on`).
    async fn serve_io<I, S, B>(
        &self,
        io: I,
        kind: Sniffed,
        peer: SocketAddr,
        activity: Arc<Activity>,
        ends: Ends,
        service: S,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: HttpService<B>,
        B: ResponseBody,
    {
        // An HTTP/1.1 head is arriving (left its grace to finish, see
        // [`HEAD_GRACE`](super::HEAD_GRACE)); an HTTP/2 connection without
        // a stream yet is idle, whatever it sent (its preface, settings).
        match kind {
            Sniffed::Http1 => activity.heard(),
            Sniffed::Http2 | Sniffed::Closed => activity.silent(),
        }
        let io = SendTimed::new(io, self.limits.send_timeout);
        if let (Sniffed::Http2, Some(server)) = (kind, &self.own_http2) {
            let conn =
                server.connection(Box::new(io), peer, Streams(activity.clone()), &self.limits);
            let idle = Some((&*activity, self.limits.http2_idle_timeout));
            let graceful = |c: Pin<&mut Pin<Box<dyn Http2Connection>>>| {
                c.get_mut().as_mut().graceful_shutdown();
            };
            if let Err(e) = drive(conn, graceful, ends, idle).await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            return;
        }
        let io = TokioIo::new(io);
        // A request (an HTTP/2 stream) is in flight until its response body
        // is dropped.
        let counted = activity.clone();
        // `map`, not an `async` block: the service's future is polled where
        // it was put, not moved once more into the block's state on its
        // first poll (a gateway's is kilobytes, moved per request).
        let svc = service_fn(move |req: Request<Incoming>| {
            let flight = counted.begin();
            service.call(req).map(move |Ok(res)| {
                Ok::<_, Infallible>(res.map(|body| Held {
                    body,
                    _flight: flight,
                }))
            })
        });
        let result = match (kind, self.protocols) {
            (Sniffed::Closed, _) | (Sniffed::Http1, Protocols::Http2) => return,
            (Sniffed::Http1, Protocols::Http1AndHttp2) => {
                let conn = self.h1.serve_connection(io, svc).with_upgrades();
                drive(
                    conn,
                    http1::UpgradeableConnection::graceful_shutdown,
                    ends,
                    None,
                )
                .await
            }
            (Sniffed::Http2, _) => {
                // A connection with no stream in flight for the idle timeout
                // closes.
                let conn = self.h2.serve_connection(io, svc);
                let idle = Some((&*activity, self.limits.http2_idle_timeout));
                drive(conn, http2::Connection::graceful_shutdown, ends, idle).await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
    }
}

/// What the first bytes of `io` say (read by `deadline`, unless shutdown
/// comes first), and `io` to give them again.
async fn first_bytes<I: AsyncRead + AsyncWrite + Unpin>(
    mut io: I,
    deadline: Instant,
    stop: &mut watch::Receiver<bool>,
) -> Option<(Prefixed<I>, Sniffed)> {
    let (kind, prefix) = tokio::select! {
        s = timeout_at(deadline, sniff(&mut io)) => s.ok()?.ok()?,
        _ = signalled(stop) => return None,
    };
    Some((Prefixed::new(prefix, io), kind))
}

pin_project! {
    /// A response body that keeps its request (its HTTP/2 stream) in
    /// flight until it is dropped, and tells an HTTP/2 stream's task
    /// whether it handed out a frame ([`stall`]).
    struct Held<B> {
        #[pin]
        body: B,
        _flight: InFlight,
    }
}

impl<B: Body> Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let out = self.project().body.poll_frame(cx);
        // For an HTTP/2 stream's send timeout (see `stall`).
        match &out {
            Poll::Ready(Some(Ok(f))) if f.is_data() => stall::handed_out(),
            _ => stall::waiting(),
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Resolves once shutdown is signalled (`stop` turns true).
async fn signalled(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// What asks a connection to close besides its client: shutdown (`stop`
/// turns true) and its age.
pub(super) struct Ends {
    stop: watch::Receiver<bool>,
    aged: Option<Ageing>,
}

/// Why a connection was asked to finish.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asked {
    Shutdown,
    Idle,
    Aged,
}

/// Drives `conn` to its end. On shutdown, once it is old (its `ends`), or
/// (HTTP/2, with `idle`) once it has had no open stream for the idle
/// timeout, `graceful` asks it to finish its requests in flight and close
/// (`GOAWAY`). An idle client that then opens no stream for the idle
/// timeout either is disconnected; an old one is at the end of its
/// grace.
async fn drive<C, E>(
    conn: C,
    graceful: impl FnOnce(Pin<&mut C>),
    ends: Ends,
    idle: Option<(&Activity, Duration)>,
) -> Result<(), E>
where
    C: Future<Output = Result<(), E>>,
{
    let Ends { mut stop, aged } = ends;
    let mut conn = pin!(conn);
    let streams = idle.map(|(activity, _)| activity);
    let idle_for = async {
        match idle {
            Some((activity, timeout)) => activity.idle_for(timeout).await,
            None => std::future::pending().await,
        }
    };
    let old = async {
        match aged {
            Some(a) => tokio::time::sleep_until(a.at).await,
            None => std::future::pending().await,
        }
    };
    // The connection first: the signal's check takes a lock. Without an
    // idle timeout or an age the timers are not polled at all.
    let asked = tokio::select! {
        biased;
        out = poll_fn(|cx| poll_batched(conn.as_mut(), cx, streams)) => return out,
        _ = old, if aged.is_some() => Asked::Aged,
        _ = signalled(&mut stop) => Asked::Shutdown,
        _ = idle_for, if idle.is_some() => Asked::Idle,
    };
    graceful(conn.as_mut());
    let finished = poll_fn(|cx| poll_batched(conn.as_mut(), cx, streams));
    match (asked, idle, aged) {
        (Asked::Idle, Some((activity, timeout)), _) => tokio::select! {
            out = finished => out,
            _ = activity.idle_for(timeout) => {
                tracing::debug!("idle HTTP/2 connection closed");
                Ok(())
            }
        },
        (Asked::Aged, _, Some(a)) if !a.grace.is_zero() => {
            let out = tokio::time::timeout(a.grace, finished).await;
            out.unwrap_or_else(|_| {
                tracing::debug!("connection closed at the end of its age's grace");
                Ok(())
            })
        }
        _ => finished.await,
    }
}

/// Polls an HTTP/2 connection (its `streams`) once. A poll that began
/// streams yields: the tasks answering them run before the connection
/// does again, which then writes their responses together, rather than
/// being woken by the first answer to write it alone (a system call per
/// response).
fn poll_batched<C: Future>(
    conn: Pin<&mut C>,
    cx: &mut Context<'_>,
    streams: Option<&Activity>,
) -> Poll<C::Output> {
    let Some(streams) = streams else {
        return conn.poll(cx);
    };
    let before = streams.in_flight();
    let out = conn.poll(cx);
    if out.is_pending() && streams.in_flight() > before {
        cx.waker().wake_by_ref();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On shutdown a connection is asked to finish its requests, then
    /// driven to its end.
    #[tokio::test]
    async fn shutdown_asks_the_connection_to_finish() {
        let (stop, stopped) = watch::channel(false);
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let conn = async move {
            let _ = finished.await;
            Ok::<(), hyper::Error>(())
        };
        let graceful = move |_: Pin<&mut _>| {
            let _ = finish.send(());
        };
        let ends = Ends {
            stop: stopped,
            aged: None,
        };
        let driven = tokio::spawn(drive(conn, graceful, ends, None));
        stop.send_replace(true);
        let out = tokio::time::timeout(Duration::from_secs(5), driven).await;
        assert!(matches!(out, Ok(Ok(Ok(())))));
    }

    /// An old connection is asked to finish (at its age, not before),
    /// then closed at the end of its grace whatever it still carries.
    #[tokio::test(start_paused = true)]
    async fn an_old_connection_is_asked_to_finish_then_closed() {
        let (_stop, stopped) = watch::channel(false);
        let asked = Arc::new(std::sync::Mutex::new(None));
        let at = Instant::now() + Duration::from_secs(10);
        let graceful = {
            let asked = asked.clone();
            move |_: Pin<&mut _>| *asked.lock().unwrap() = Some(Instant::now())
        };
        let conn = std::future::pending::<Result<(), hyper::Error>>();
        let grace = Duration::from_secs(3);
        let ends = Ends {
            stop: stopped,
            aged: Some(Ageing { at, grace }),
        };
        drive(conn, graceful, ends, None).await.unwrap();
        assert_eq!(*asked.lock().unwrap(), Some(at));
        assert_eq!(Instant::now(), at + grace);
    }

    /// An HTTP/2 connection whose poll began a stream is polled again
    /// after the tasks it woke; one that began none, or an HTTP/1.1
    /// connection, waits to be woken.
    #[test]
    fn a_poll_that_began_streams_yields() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Wake, Waker};

        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let registry = Arc::new(super::super::activity::Connections::new(
            metrics::Counter::noop(),
        ));
        let registered = registry.register();
        let activity = registered.activity();
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut begun = Vec::new();
        let mut conn = pin!(std::future::poll_fn(|_| {
            begun.push(activity.begin());
            Poll::<()>::Pending
        }));
        let mut idle = pin!(std::future::pending::<()>());

        assert!(poll_batched(conn.as_mut(), &mut cx, Some(activity)).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(poll_batched(idle.as_mut(), &mut cx, Some(activity)).is_pending());
        assert!(poll_batched(conn.as_mut(), &mut cx, None).is_pending());
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
    }
}
