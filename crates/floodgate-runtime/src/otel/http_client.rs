//! OTLP over HTTP: the exporter's requests sent by hyper on the tracing
//! runtime's thread, TLS by rustls for an `https://` collector (the roots
//! and client certificate of `server.tracing.tls_*`).

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError};
use rustls::ClientConfig;
use tokio::runtime::Handle;

/// The largest collector answer read.
const MAX_ANSWER: usize = 4 << 20;

/// The exporter's HTTP client.
#[derive(Debug)]
pub(super) struct CollectorClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: Handle,
    timeout: Duration,
}

impl CollectorClient {
    /// A client speaking TLS with `tls` to `https://` URLs, plain HTTP to
    /// `http://` ones, each request (answer read) bounded by `timeout`,
    /// run on `runtime`.
    pub(super) fn new(tls: ClientConfig, runtime: Handle, timeout: Duration) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        CollectorClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime,
            timeout,
        }
    }
}

#[async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let exchange = async move {
            let answer = client.request(request.map(Full::new)).await?;
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let bounded = async move {
            let timed_out = |_| HttpError::from(format!("no answer within {timeout:?}"));
            tokio::time::timeout(timeout, exchange)
                .await
                .map_err(timed_out)?
        };
        // The exporter's thread polls this without a Tokio runtime: the
        // exchange runs on the tracing runtime, awaited through its handle.
        self.runtime.spawn(bounded).await?
    }
}
