//! The rate limit headers of a response, any values: the client helper
//! reads its waiting signals from them without panicking, at any time.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use floodgate_http::client::{Signals, retry_after};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 8] = [
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-limit",
];

#[derive(Arbitrary, Debug)]
struct Response<'a> {
    headers: Vec<(u8, &'a [u8])>,
    now_secs: u64,
}

fuzz_target!(|r: Response<'_>| {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &r.headers {
        if let Ok(value) = http::HeaderValue::from_bytes(value) {
            headers.append(NAMES[*name as usize % NAMES.len()], value);
        }
    }
    let Some(now) = UNIX_EPOCH.checked_add(Duration::from_secs(r.now_secs)) else {
        return;
    };
    let _ = retry_after(&headers, now);
    let _ = Signals::from_headers(&headers, now);
});
