//! A real axum app behind the layer, served on 127.0.0.1:0.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use bytes::Bytes;
use floodgate::{Clock, ManualClock, Timestamp};
use floodgate_http::identity::Attributes;
use floodgate_http::{FloodgateLayer, HttpSection};
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::{Engine, MemoryBackend, PolicySet};
use http_body::Frame;

pub(crate) fn peer(e: &http::Extensions) -> Option<SocketAddr> {
    e.get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| floodgate_http::layer::default_peer(e))
}

pub(crate) fn engine_with<C: Clock + 'static>(
    text: &str,
    clock: C,
) -> Arc<Engine<MemoryBackend, C>> {
    let options = LoadOptions {
        other_sections: vec!["http"],
        ..Default::default()
    };
    let spec = load_str("test.yaml", text, &options).unwrap_or_else(|e| panic!("{e}"));
    let policy = PolicySet::compile(&spec).unwrap_or_else(|e| panic!("{e:?}"));
    let backend = MemoryBackend::new(Default::default()).unwrap();
    Arc::new(Engine::with_clock(policy, backend, clock))
}

pub(crate) fn layer_for<C: Clock + 'static>(
    engine: Arc<Engine<MemoryBackend, C>>,
    text: &str,
) -> FloodgateLayer<MemoryBackend, C> {
    let mut s = HttpSection::from_yaml_str("test.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    s.layer.peer = peer;
    FloodgateLayer::with(engine, s.identity, s.contract, s.layer)
}

pub(crate) fn manual() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)))
}

/// `Authorization: User <name>` → `Attributes { user }`, as an
/// authentication middleware would.
async fn auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("User "))
        .map(str::to_owned);
    if let Some(u) = user {
        req.extensions_mut()
            .insert(Attributes::new().with("user", u));
    }
    next.run(req).await
}

/// A body of `n` chunks, `gap` apart.
pub(crate) struct SlowBody {
    left: usize,
    gap: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for SlowBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let gap = self.gap;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
        match sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.sleep = None;
                self.left -= 1;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk\n")))))
            }
        }
    }
}

/// The app: `/` answers "ok"; `/slow` streams 5 chunks 200 ms apart;
/// `/reports/{id}` and `/charges` for priorities; `/wait` answers after
/// 300 ms. An auth middleware runs before the limiter.
pub(crate) fn app<C: Clock + 'static>(layer: FloodgateLayer<MemoryBackend, C>) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/me", get(|| async { "me" }))
        .route(
            "/slow",
            get(|| async {
                Body::new(SlowBody {
                    left: 5,
                    gap: Duration::from_millis(200),
                    sleep: None,
                })
            }),
        )
        .route(
            "/wait",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "waited"
            }),
        )
        .route("/reports/{id}", get(|| async { "report" }))
        .route("/charges", get(|| async { "charge" }))
        .layer(layer)
        .layer(middleware::from_fn(auth))
}

/// Serves `app` on 127.0.0.1:0; returns its base URL.
pub(crate) async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

pub(crate) fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Polls `f` every 10 ms until it holds; fails naming `what` after 10 s.
pub(crate) async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
