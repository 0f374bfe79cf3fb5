//! Calls of the service's JSON API over a real HTTP client.

use reqwest::header::HeaderMap;
use serde_json::Value;

/// One `POST` of `body` (JSON) to `http://127.0.0.1:{port}{path}` with
/// `client`: the status, the headers, and the body as JSON (a JSON string
/// of the text when it is not JSON).
pub(crate) async fn post_json(
    client: &reqwest::Client,
    port: u16,
    path: &str,
    body: &Value,
) -> (u16, HeaderMap, Value) {
    let r = client
        .post(format!("http://127.0.0.1:{port}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}
