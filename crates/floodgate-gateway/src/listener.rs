//! The client-facing listener: the runtime's accept loop ([`accept_loop`]:
//! at most `max_connections`, fitted to the open files limit, room made
//! under a flood, a back-off when descriptors run out) and connection
//! protections ([`Http`]: TLS and the first bytes within the header
//! timeout, header, idle and HTTP/2 limits, the graceful drain), each
//! request handed to the [`Gateway`] with what the proxy needs to know of
//! its connection.

use std::sync::Arc;

use floodgate_policy::Backend;
use floodgate_runtime::listener::{Accepted, Counters, Http, Protocols, accept_loop, descriptors};
use http::header::UPGRADE;
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::ListenerLimits;
use crate::gateway::Gateway;
use crate::proxy::ClientInfo;

/// Serves `gateway` on `listener` (TLS with `tls`) until `stop` turns
/// true, then stops accepting and waits for the connections to finish
/// their requests in flight (the caller bounds the wait). Two descriptors
/// a connection count against the open files limit: the client's and an
/// upstream's.
pub async fn serve<B: Backend + 'static>(
    gateway: Arc<Gateway<B>>,
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let http = Arc::new(Http::new(&limits.connection, Protocols::Http1AndHttp2));
    let places = descriptors::fit_max_connections("gateway", limits.max_connections, 2);
    let counters = Counters {
        connections: metrics::gauge!("floodgate_gateway_connections"),
        evicted: metrics::counter!("floodgate_gateway_connections_evicted_total"),
        accept_errors: metrics::counter!("floodgate_gateway_accept_errors_total"),
    };
    accept_loop(listener, places, counters, stop, move |a: Accepted| {
        let (gateway, http, tls) = (gateway.clone(), http.clone(), tls.clone());
        async move {
            let https = tls.is_some();
            // Each request goes to the gateway with what the proxy needs to
            // know of its connection; the connection's place is held by a
            // tunnel it is upgraded to too, whichever ends last.
            http.serve_tls(a, tls.as_ref(), |peer, slot| {
                service_fn(move |req: hyper::Request<Incoming>| {
                    let client = ClientInfo {
                        peer,
                        tls: https,
                        trusted_hop: false,
                        slot: req.headers().contains_key(UPGRADE).then(|| slot.clone()),
                    };
                    gateway.clone().handle(req, client)
                })
            })
            .await
        }
    })
    .await;
}
