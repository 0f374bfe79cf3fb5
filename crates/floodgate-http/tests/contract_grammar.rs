//! The emitted `RateLimit-Policy`, `RateLimit` and draft-03 headers parsed
//! by an independent Structured Field parser (the `sfv` crate), for many
//! reports: several policies, names needing escapes, huge numbers.

use std::time::Duration;

use floodgate::{Decision, Outcome, Timestamp};
use floodgate_http::contract::{
    Contract, HeaderBuf, HeaderForm, MAX_NAME_LEN, QuotaUnit, Report, Verdict, draft03_limit,
    ietf_current, ietf_policy,
};
use proptest::prelude::*;
use sfv::{BareItem, ListEntry, Parser};

fn param<'a>(item: &'a sfv::Item, key: &str) -> Option<&'a BareItem> {
    item.params
        .iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v)
}

fn int(item: &sfv::Item, key: &str) -> Option<i64> {
    param(item, key)
        .and_then(sfv::GenericBareItem::as_integer)
        .map(i64::from)
}

fn items(text: &str) -> Vec<sfv::Item> {
    let list: sfv::List = Parser::new(text)
        .parse_list()
        .unwrap_or_else(|e| panic!("not an sf-list: {e:?}: {text}"));
    list.into_iter()
        .map(|e| match e {
            ListEntry::Item(i) => i,
            ListEntry::InnerList(_) => panic!("inner list in {text}"),
        })
        .collect()
}

/// What a name becomes: printable ASCII, cut to the maximum.
fn sanitized(name: &str) -> String {
    let s: String = name
        .bytes()
        .take(MAX_NAME_LEN)
        .map(|b| {
            if (0x20..=0x7e).contains(&b) {
                b as char
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "-".into() } else { s }
}

const MAX: i64 = 999_999_999_999_999;

#[derive(Debug, Clone)]
struct Line {
    name: String,
    quota: u64,
    window: Option<u64>,
    concurrent: bool,
    decision: Decision,
}

fn decision() -> impl Strategy<Value = Decision> {
    (
        0..4u8,
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(o, l, r, reset, retry)| {
            let outcome = match o {
                0 => Outcome::Allowed,
                1 => Outcome::Delayed(Duration::from_nanos(retry % 10_000_000_000)),
                2 => Outcome::Denied,
                _ => Outcome::Never,
            };
            Decision {
                outcome,
                limit: l,
                remaining: r,
                reset_after: Duration::from_nanos(reset),
                retry_after: (o == 2 && retry % 3 != 0).then(|| Duration::from_nanos(retry)),
            }
        })
}

fn line() -> impl Strategy<Value = Line> {
    (
        prop_oneof![
            "[a-z][a-z0-9-]{0,12}",
            any::<String>(),
            r#"[ -~]{0,20}"#,
            Just("a\"b\\c".to_string()),
            Just("x".repeat(300)),
        ],
        prop_oneof![0..100u64, any::<u64>()],
        proptest::option::of(prop_oneof![0..100_000u64, any::<u64>()]),
        any::<bool>(),
        decision(),
    )
        .prop_map(|(name, quota, window, concurrent, decision)| Line {
            name,
            quota,
            window,
            concurrent,
            decision,
        })
}

fn report(lines: &[Line]) -> Report {
    let mut r = Report::new();
    for l in lines {
        let unit = if l.concurrent {
            QuotaUnit::ConcurrentRequests
        } else {
            QuotaUnit::Requests
        };
        let p = r.add_policy(&l.name, l.quota, l.window, unit);
        r.add_current(p, &l.decision);
    }
    let denied = lines.iter().any(|l| l.decision.is_denied());
    let retry = lines.iter().filter_map(|l| l.decision.retry_after).max();
    r.set_verdict(
        if denied {
            Verdict::Denied
        } else {
            Verdict::Allowed
        },
        retry,
    );
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ietf_headers_parse_as_sf_lists(lines in proptest::collection::vec(line(), 1..6)) {
        let r = report(&lines);
        let mut buf = String::new();

        ietf_policy(&r, &mut buf);
        let policy = items(&buf);
        prop_assert_eq!(policy.len(), lines.len());
        for (item, l) in policy.iter().zip(&lines) {
            let name = item.bare_item.as_string().expect("a String item");
            prop_assert_eq!(name.as_str(), sanitized(&l.name));
            prop_assert_eq!(int(item, "q"), Some(l.quota.min(MAX as u64) as i64));
            prop_assert_eq!(int(item, "w"), l.window.map(|w| w.clamp(1, MAX as u64) as i64));
            let qu = param(item, "qu").and_then(|v| v.as_string()).map(|s| s.as_str().to_owned());
            prop_assert_eq!(qu.as_deref(), l.concurrent.then_some("concurrent-requests"));
        }

        ietf_current(&r, Duration::ZERO, &mut buf);
        let current = items(&buf);
        prop_assert_eq!(current.len(), lines.len());
        for (item, l) in current.iter().zip(&lines) {
            prop_assert_eq!(item.bare_item.as_string().unwrap().as_str(), sanitized(&l.name));
            prop_assert_eq!(int(item, "r"), Some(l.decision.remaining.min(MAX as u64) as i64));
            if let Some(t) = int(item, "t") {
                prop_assert!((0..=MAX).contains(&t));
                let exact = match (l.decision.outcome, l.decision.retry_after) {
                    (Outcome::Denied, Some(r)) => r,
                    _ => l.decision.reset_after,
                };
                let secs = exact.as_secs() + u64::from(exact.subsec_nanos() > 0);
                prop_assert_eq!(t as u64, secs.min(MAX as u64));
            } else {
                prop_assert!(l.decision.is_denied() && l.decision.retry_after.is_none());
            }
        }

        let quota = lines[0].quota;
        draft03_limit(&r, quota, &mut buf);
        let d03 = items(&buf);
        prop_assert_eq!(d03[0].bare_item.as_integer().map(i64::from), Some(quota.min(MAX as u64) as i64));
        prop_assert_eq!(d03.len(), 1 + lines.iter().filter(|l| l.window.is_some()).count());
    }

    #[test]
    fn retry_after_matches_the_denying_policy(lines in proptest::collection::vec(line(), 1..6)) {
        let r = report(&lines);
        let contract = Contract::default().with_forms([HeaderForm::Ietf, HeaderForm::XRateLimit]);
        let mut headers = http::HeaderMap::new();
        contract.write_headers(&r, Timestamp::from_secs(1_700_000_000), Duration::ZERO, &mut headers, &mut HeaderBuf::new(), None);
        let retry = headers.get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        if let Some(ra) = retry {
            // The denying policy with the longest wait says the same.
            let t = headers.get("x-ratelimit-reset").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            if !r.is_never() && r.retry_after().is_some() {
                prop_assert_eq!(t, Some(ra));
            }
        }
        for v in headers.values() {
            prop_assert!(v.to_str().is_ok());
        }
    }
}

#[test]
fn multiple_policies_and_escapes() {
    let mut r = Report::new();
    let a = r.add_policy("burst", 100, Some(60), QuotaUnit::Requests);
    let b = r.add_policy("da\"i\\ly", 1000, Some(86_400), QuotaUnit::Requests);
    let allowed = |remaining, reset| Decision {
        outcome: Outcome::Allowed,
        limit: 0,
        remaining,
        reset_after: Duration::from_millis(reset),
        retry_after: None,
    };
    r.add_current(a, &allowed(50, 29_001));
    r.add_current(b, &allowed(u64::MAX, 1));
    let mut buf = String::new();
    ietf_policy(&r, &mut buf);
    assert_eq!(buf, r#""burst";q=100;w=60, "da\"i\\ly";q=1000;w=86400"#);
    ietf_current(&r, Duration::ZERO, &mut buf);
    assert_eq!(
        buf,
        r#""burst";r=50;t=30, "da\"i\\ly";r=999999999999999;t=1"#
    );
    draft03_limit(&r, 100, &mut buf);
    assert_eq!(
        buf,
        r#"100, 100;w=60;name="burst", 1000;w=86400;name="da\"i\\ly""#
    );
}
