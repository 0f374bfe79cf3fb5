//! Floodgate against the reference model of envoyproxy/ratelimit
//! (`floodgate_testkit::envoy_reference`, written from its Go source), over
//! random envoyproxy/ratelimit configurations and request sequences, at
//! controlled times: every request goes through the gRPC path the service
//! serves (the message decoded in place, decided by the engine on the
//! in-memory store, the answer encoded), and every field of every answer is
//! compared — overall code, each status's code, limit, remaining and
//! duration until reset, the rate limit headers; negative hits mixed with
//! positive ones — in reference mode
//! (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`, that service's
//! default). Requests the reference refuses must be refused.
//!
//! `FLOODGATE_ENVOY_CASES` multiplies the number of sequences (a longer
//! soak); `FLOODGATE_ENVOY_SEED` replays one.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use floodgate::{Apply, ManualClock, StoreConfig, Timestamp};
use floodgate_http::contract::EnvoyHeaders;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::spec::PolicySpec;
use floodgate_policy::{Engine, MemoryBackend, PolicySet, Response};
use floodgate_server::internals::{WireRequest, encode_response, envoy_headers};
use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::{Entry, RateLimitOverride};
use floodgate_server::proto::rls::{RateLimitRequest, RateLimitResponse};
use floodgate_server::settings::HeaderSettings;
use floodgate_testkit::envoy_reference::{
    self as reference, Config, Failure, File, Request, Requests, Rng, Service, Settings, Shape,
};
use prost::Message;

/// The answer of one side: a response, or the refusal of the request.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// The response.
    Response(RateLimitResponse),
    /// Refused (invalid argument, or what the reference fails with).
    Refused(String),
}

/// The reference's answer as the protocol's message.
pub(crate) fn reference_answer(r: Result<reference::Response, Failure>) -> Answer {
    match r {
        Ok(r) => Answer::Response(proto_response(&r)),
        Err(f) => Answer::Refused(format!("{f:?}")),
    }
}

/// A model response as the protocol's message.
pub(crate) fn proto_response(r: &reference::Response) -> RateLimitResponse {
    use floodgate_server::proto::envoy::config::core::v3::HeaderValue;
    use floodgate_server::proto::rls::rate_limit_response::{DescriptorStatus, RateLimit};
    RateLimitResponse {
        overall_code: r.overall_code.number(),
        statuses: r
            .statuses
            .iter()
            .map(|s| DescriptorStatus {
                code: s.code.number(),
                current_limit: s.current_limit.as_ref().map(|l| RateLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s
                    .duration_until_reset
                    .map(|seconds| prost_types::Duration { seconds, nanos: 0 }),
                quota: None,
            })
            .collect(),
        response_headers_to_add: r
            .headers
            .iter()
            .map(|(k, v)| HeaderValue {
                key: k.clone(),
                value: v.clone(),
                raw_value: Vec::new(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A model request as the protocol's message.
pub(crate) fn proto_request(r: &Request) -> RateLimitRequest {
    RateLimitRequest {
        domain: r.domain.clone(),
        descriptors: r
            .descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.clone(),
                        value: v.clone(),
                    })
                    .collect(),
                limit: d.limit.map(|(rpu, unit)| RateLimitOverride {
                    requests_per_unit: rpu,
                    unit,
                }),
                hits_addend: d.hits_addend,
                is_negative_hits: d.negative,
            })
            .collect(),
        hits_addend: r.hits_addend,
    }
}

/// Floodgate's policy of `files`, in reference mode when `increment_all`.
pub(crate) fn floodgate_policy(files: &[File], increment_all: bool) -> Result<PolicySet, String> {
    let opts = LoadOptions {
        envoy_increment_all: Some(increment_all),
        ..Default::default()
    };
    let mut spec = PolicySpec::default();
    for (i, f) in files.iter().enumerate() {
        let one =
            load_str(&format!("f{i}.yaml"), &f.to_yaml(), &opts).map_err(|e| e.to_string())?;
        spec.settings = one.settings;
        spec.domains.extend(one.domains);
    }
    PolicySet::compile(&spec).map_err(|e| e.to_string())
}

/// One side of the comparison: the engine on a manual clock, answering
/// gRPC messages as the service does.
struct Floodgate {
    engine: Engine<MemoryBackend, Arc<ManualClock>>,
    headers: EnvoyHeaders,
    response: Response,
}

impl Floodgate {
    /// The engine deciding by `policy` on the in-memory store at `clock`'s
    /// time, its headers as `headers` configures them.
    fn new(policy: PolicySet, headers: &HeaderSettings, clock: Arc<ManualClock>) -> Self {
        let store = MemoryBackend::new(StoreConfig {
            capacity: 4096,
            shards: 4,
            ..StoreConfig::default()
        });
        Floodgate {
            engine: Engine::with_clock(policy, store.unwrap(), clock),
            headers: envoy_headers(headers).unwrap(),
            response: Response::default(),
        }
    }

    fn answer(&mut self, request: &RateLimitRequest) -> Answer {
        let bytes = request.encode_to_vec();
        let wire = match WireRequest::decode(&bytes) {
            Ok(w) => w,
            Err(e) => return Answer::Refused(e.to_string()),
        };
        let descriptors = wire.descriptors();
        let decided = self.engine.evaluate_now(
            wire.domain,
            &descriptors,
            wire.hits_addend,
            Apply::Commit,
            &mut self.response,
        );
        if let Err(e) = decided.expect("the in-memory store decides at once") {
            return Answer::Refused(e.to_string());
        }
        let mut out = BytesMut::new();
        encode_response(&self.response, &self.headers, &mut out);
        Answer::Response(RateLimitResponse::decode(&out[5..]).expect("a valid message"))
    }
}

/// Runs one random sequence; `Err` describes the first difference. In
/// reference mode (`stop` false) everything is generated; with
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (Floodgate's default), what
/// docs/service.md lists as differing there is left out: shadow-mode and
/// quota-mode rules, and descriptors sent twice.
fn run_case(seed: u64, steps: usize, stop: bool) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let shape = Shape {
        modes: !stop,
        duplicates: !stop,
        ..Shape::default()
    };
    let files = reference::generate::config(&mut rng, &shape);
    let fail = |what: String| {
        let yaml: String = files.iter().map(|f| f.to_yaml() + "---\n").collect();
        Err(format!("seed {seed}: {what}\nconfiguration:\n{yaml}"))
    };
    let config = match Config::load(&files, false) {
        Ok(c) => c,
        Err(e) => {
            // Refused there: refused here.
            return match floodgate_policy(&files, !stop) {
                Err(_) => Ok(()),
                Ok(_) => fail(format!(
                    "the reference refuses the configuration ({e:?}), Floodgate loads it"
                )),
            };
        }
    };
    let policy = match floodgate_policy(&files, !stop) {
        Ok(p) => p,
        Err(e) => {
            return fail(format!(
                "Floodgate refuses a configuration the reference loads: {e}"
            ));
        }
    };
    let headers = rng.chance(60).then(|| match rng.below(3) {
        0 => (
            "X-Limit".to_owned(),
            "X-Left".to_owned(),
            "X-Reset".to_owned(),
        ),
        _ => (
            "RateLimit-Limit".to_owned(),
            "RateLimit-Remaining".to_owned(),
            "RateLimit-Reset".to_owned(),
        ),
    });
    let shadow = rng.chance(10);
    let settings = Settings {
        stop_increment_when_over_limit: stop,
        global_shadow_mode: shadow,
        headers: headers.clone(),
        ..Settings::default()
    };
    let mut policy = policy;
    policy.settings.shadow_mode = shadow;
    let header_settings = match &headers {
        Some((limit, remaining, reset)) => HeaderSettings {
            enabled: true,
            limit: limit.clone(),
            remaining: remaining.clone(),
            reset: reset.clone(),
            x_ratelimit: false,
        },
        None => floodgate_server::RlsSettings::default().headers,
    };
    // Whole seconds for the reference (its clock is `time.Now().Unix()`),
    // anywhere within that second for Floodgate.
    let mut now: i64 = 1_700_000_000 + rng.below(86_400 * 30) as i64;
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(now as u64)));
    let mut floodgate = Floodgate::new(policy, &header_settings, clock.clone());
    let mut service = Service::new(config, settings);
    let mut requests = Requests::default();
    let mut sent: Vec<(i64, Duration, Request)> = Vec::with_capacity(steps);
    for step in 0..steps {
        now += match rng.below(10) {
            0..=5 => 0,
            6 | 7 => 1,
            8 => rng.below(120) as i64,
            _ => 3600 - now % 3600 + rng.below(2) as i64,
        };
        let frac = Duration::from_nanos(rng.below(1_000_000_000));
        clock.set(Timestamp::from_secs(now as u64) + frac);
        let request = requests.next(&mut rng, &files, &shape);
        let expected = reference_answer(service.should_rate_limit(&request, now));
        if let Some(k) = service.shared_keys().first() {
            return fail(format!(
                "the generator met a documented counter collision ({k}) at step {step}"
            ));
        }
        if !service.text_keys().is_empty() {
            // A count of 10¹⁴ or more the reference's decrement script
            // wrote as text (see `Service::text_keys`): the model's count
            // is no longer Redis's; the sequence ends here.
            return Ok(());
        }
        let actual = floodgate.answer(&proto_request(&request));
        sent.push((now, frac, request));
        let same = match (&expected, &actual) {
            (Answer::Refused(_), Answer::Refused(_)) => true,
            (a, b) => a == b,
        };
        if !same {
            let log: String = sent
                .iter()
                .enumerate()
                .map(|(i, (t, f, r))| format!("  {i} @ {t}+{f:?}: {r:?}\n"))
                .collect();
            return fail(format!(
                "step {step} differs\nrequests:\n{log}{}",
                difference(&format!("{expected:#?}"), &format!("{actual:#?}"))
            ));
        }
    }
    Ok(())
}

/// The two answers, line by line, the differing lines marked.
fn difference(reference: &str, floodgate: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (reference.lines().collect(), floodgate.lines().collect());
    let mut out = String::from("reference | floodgate\n");
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (
            a.get(i).copied().unwrap_or(""),
            b.get(i).copied().unwrap_or(""),
        );
        let mark = if x == y { "  " } else { "≠ " };
        out.push_str(&format!("{mark}{x} | {}\n", y.trim_start()));
    }
    out
}

fn factor() -> u64 {
    std::env::var("FLOODGATE_ENVOY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Runs `cases` random sequences (or the one `FLOODGATE_ENVOY_SEED` names).
fn run(cases: u64, stop: bool) {
    if let Some(seed) = std::env::var("FLOODGATE_ENVOY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_case(seed, 30, stop).unwrap_or_else(|e| panic!("{e}"));
        return;
    }
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for i in 0..cases * factor() {
        let seed = base.wrapping_mul(1_000_003).wrapping_add(i);
        if let Err(e) = run_case(seed, 30, stop) {
            panic!("{e}\n(replay: FLOODGATE_ENVOY_SEED={seed})");
        }
    }
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`, that service's default:
/// every configuration and request.
#[test]
fn floodgate_answers_as_envoyproxy_ratelimit_in_reference_mode() {
    run(1200, false);
}

/// Floodgate's default against `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`,
/// outside the differences docs/service.md lists.
#[test]
fn floodgates_default_answers_as_envoyproxy_ratelimit_stopping_increments() {
    run(400, true);
}

/// A shadow-mode rule over its limit, beside an enforced one with room
/// left: envoyproxy/ratelimit describes the descriptor with the least
/// remaining in its headers, shadow or not (`shouldRateLimitWorker`), and
/// so does Floodgate over RLS — the request passes, and the headers say
/// the dark-launched rule's 0.
#[test]
fn rls_headers_describe_shadow_rules_as_envoyproxy_ratelimit_does() {
    use floodgate_testkit::envoy_reference::{Descriptor, Node, RateLimit};
    let node = |key: &str, requests: u32, shadow_mode: bool| Node {
        key: key.into(),
        shadow_mode,
        rate_limit: Some(RateLimit {
            requests_per_unit: Some(requests),
            unit: Some("minute".into()),
            name: key.into(),
            ..RateLimit::default()
        }),
        ..Node::default()
    };
    let files = vec![File {
        domain: "d".into(),
        descriptors: vec![node("user", 10, false), node("dark", 1, true)],
    }];
    let names = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset");
    let settings = Settings {
        headers: Some((names.0.into(), names.1.into(), names.2.into())),
        ..Settings::default()
    };
    let header_settings = HeaderSettings {
        enabled: true,
        limit: names.0.into(),
        remaining: names.1.into(),
        reset: names.2.into(),
        x_ratelimit: false,
    };
    let now: i64 = 1_700_000_000;
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(now as u64)));
    let policy = floodgate_policy(&files, true).unwrap();
    let mut floodgate = Floodgate::new(policy, &header_settings, clock);
    let mut service = Service::new(Config::load(&files, false).unwrap(), settings);
    let descriptor = |key: &str| Descriptor {
        entries: vec![(key.into(), "alice".into())],
        ..Descriptor::default()
    };
    let request = Request {
        domain: "d".into(),
        descriptors: vec![descriptor("user"), descriptor("dark")],
        hits_addend: 0,
    };
    for step in 0..3 {
        let expected = reference_answer(service.should_rate_limit(&request, now));
        let actual = floodgate.answer(&proto_request(&request));
        assert_eq!(expected, actual, "step {step}");
        let Answer::Response(r) = actual else {
            panic!("step {step}: refused: {actual:?}")
        };
        assert_eq!(r.overall_code, 1, "step {step}: OK");
        let headers: Vec<(&str, &str)> = (r.response_headers_to_add.iter())
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(
            headers[..2],
            [(names.0, "1"), (names.1, "0")],
            "step {step}: the shadow rule's"
        );
    }
}
