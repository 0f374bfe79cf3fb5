//! [`HttpIdentity`]: a compiled identity configuration, turning requests
//! into descriptors by running each action against the request: each
//! writes its entry's value into the descriptor being built, or yields
//! nothing.

use std::net::IpAddr;

use http::header::{AUTHORIZATION, HOST};

use super::client_ip::MAX_RENDERED;
use super::config::{Action, ActionKind, IdentityConfig, IdentityError, Source, cost_of};
use super::hash::{SECRET_HASH_LEN, write_bounded, write_secret_hash};
use super::output::{HttpDescriptor, RequestDescriptors};
use super::request::{ExtensionSource, RequestHead};
use super::route::Routes;
use crate::authority::{Authority, valid_authority};

/// Turns HTTP requests into the descriptors of one policy domain.
///
/// Immutable and shareable across threads; build each request's
/// descriptors into a [`RequestDescriptors`] kept per connection or task.
///
/// ```
/// use floodgate_http::identity::{HttpIdentity, RequestDescriptors};
/// use floodgate_policy::Descriptor;
///
/// let id = HttpIdentity::from_yaml_str("gw.yaml", r#"
/// http:
///   domain: api
///   client_ip: {trusted_hops: 1}
///   routes: ["/users/{id}"]
///   descriptors:
///     - [client_ip]
///     - [method, route]
/// "#).unwrap();
///
/// let req = http::Request::get("/users/42")
///     .header("x-forwarded-for", "198.51.100.7")
///     .body(())
///     .unwrap();
/// let peer = "10.0.0.2".parse().unwrap();
/// let mut out = RequestDescriptors::new();
/// id.build(&req, peer, req.extensions(), &mut out);
///
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[0].entry(0), ("remote_address", "198.51.100.7"));
/// assert_eq!(out[1].entry(1), ("route", "/users/{id}"));
/// assert_eq!(out.hits_addend(), 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HttpIdentity {
    pub(super) config: IdentityConfig,
    pub(super) routes: Routes,
    slot_bytes: usize,
    slot_entries: usize,
    /// Per descriptor, whether it carries the response's cost (none
    /// without `response_cost`).
    charged_after: Vec<bool>,
}

impl HttpIdentity {
    /// Compiles `config`.
    pub fn new(config: IdentityConfig) -> Result<Self, IdentityError> {
        config.validate()?;
        let mut routes = Routes::default();
        for t in &config.routes {
            routes.insert(t)?;
        }
        // The most bytes an action writes (key and value).
        let bound = |action: &Action| match &action.kind {
            ActionKind::ClientIp => MAX_RENDERED,
            ActionKind::Value { hash: true, .. } => SECRET_HASH_LEN,
            ActionKind::Value { .. } | ActionKind::Method | ActionKind::Path => config.max_value_len,
            ActionKind::Route { unmatched } => {
                routes.longest().max(unmatched.as_deref().map_or(0, str::len))
            }
            ActionKind::Generic(value) => value.len(),
            ActionKind::Tier { values, .. } => values.iter().map(String::len).max().unwrap_or(0),
        } + action.key.len();
        let descriptors = config.descriptors.iter();
        let slot_bytes = descriptors.clone().map(|d| d.iter().map(bound).sum());
        let slot_bytes = slot_bytes.max().unwrap_or(0);
        let slot_entries = descriptors.map(Vec::len).max().unwrap_or(0);
        let charged_after = match &config.response_cost {
            Some(c) => config.descriptors.iter().map(|d| c.carried_by(d)).collect(),
            None => Vec::new(),
        };
        Ok(HttpIdentity {
            config,
            routes,
            slot_bytes,
            slot_entries,
            charged_after,
        })
    }

    /// The configuration it was compiled from.
    pub fn config(&self) -> &IdentityConfig {
        &self.config
    }

    /// The policy domain to evaluate the descriptors in.
    pub fn domain(&self) -> &str {
        &self.config.domain
    }

    /// Number of configured descriptors (at most this many are built).
    pub fn descriptor_count(&self) -> usize {
        self.config.descriptors.len()
    }

    /// Buffers sized for this identity: building into them never
    /// allocates, from the first request on.
    pub fn new_output(&self) -> RequestDescriptors {
        let mut out = RequestDescriptors::new();
        out.prepare(self.descriptor_count(), self.slot_bytes, self.slot_entries);
        out
    }

    /// Builds the descriptors of a request — an [`http::Request`], its
    /// [`Parts`](http::request::Parts), or any other [`RequestHead`] — sent
    /// from `peer`, with the application's values in `ext` (for an
    /// [`http::Request`], its [`extensions`](http::Request::extensions):
    /// the [`Attributes`](super::Attributes) an earlier middleware
    /// inserted), into `out`, replacing what it held. A descriptor is built
    /// only when all its actions produce an entry.
    pub fn build<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        self.build_resolved(head, peer, None, ext, out);
    }

    /// [`build`](Self::build), with the client address behind trusted
    /// proxies already resolved (`client`; none: resolved here if a
    /// descriptor needs it).
    pub(crate) fn build_resolved<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        mut client: Option<IpAddr>,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        let descriptors = &self.config.descriptors;
        out.prepare(descriptors.len(), self.slot_bytes, self.slot_entries);
        let cost = self.config.cost.as_ref();
        let hits = cost.map_or(1, |c| cost_of(source_value(&c.source, head, ext), c));
        out.hits = hits;
        let per_descriptor = cost.map(|_| u64::from(hits));
        // A descriptor carrying the response's cost is admitted by a check
        // (nothing charged), or charged the request's cost if it has one.
        let deposit = Some(per_descriptor.unwrap_or(0));
        let max = self.config.max_value_len;
        // Worked out at most once per request: the client address (unless
        // given) and the route template.
        let mut route = None;
        // Appends an action's entry; false when it yields nothing (a
        // partial entry is left: the descriptor is dropped).
        let mut run = |action: &Action, d: &mut HttpDescriptor| {
            d.entry(&action.key, |text| match &action.kind {
                ActionKind::ClientIp => self.write_client(head, peer, &mut client, text),
                ActionKind::Value { source, hash } => {
                    write_value(text, source_value(source, head, ext), source, *hash, max)
                }
                ActionKind::Method => {
                    write_bounded(text, head.method().as_bytes(), max);
                    true
                }
                ActionKind::Route { unmatched } => {
                    let found = *route.get_or_insert_with(|| self.routes.find(head.path()));
                    let value = found.or(unmatched.as_deref());
                    value.map(|v| text.push_str(v)).is_some()
                }
                ActionKind::Path => write_path(text, head.path(), max),
                ActionKind::Generic(value) => {
                    text.push_str(value);
                    true
                }
                ActionKind::Tier {
                    source,
                    values,
                    default,
                } => {
                    let given = source_value(source, head, ext);
                    write_tier(text, given, source, values, default.as_ref())
                }
            })
        };
        for (i, actions) in descriptors.iter().enumerate() {
            let after = self.charged_after.get(i).copied().unwrap_or(false);
            let hits = if after { deposit } else { per_descriptor };
            out.push(hits, after, |slot| actions.iter().all(|a| run(a, slot)));
        }
        out.client = client;
    }

    /// Writes the client address (`client`, resolved from `head` and `peer`
    /// the first time a descriptor needs it), as the identity groups it.
    #[inline]
    fn write_client<H: RequestHead + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        client: &mut Option<IpAddr>,
        text: &mut String,
    ) -> bool {
        let client_ip = &self.config.client_ip;
        let ip = *client.get_or_insert_with(|| client_ip.resolve(head, peer));
        client_ip.render(ip, text);
        true
    }

    /// The client address of a request from `peer` (after trusted proxies;
    /// not grouped by prefix).
    pub fn client_ip<H: RequestHead + ?Sized>(&self, head: &H, peer: IpAddr) -> IpAddr {
        self.config.client_ip.resolve(head, peer)
    }

    /// The route template matching `path`, if any.
    pub fn route(&self, path: &str) -> Option<&str> {
        self.routes.find(path)
    }

    /// The position in [`IdentityConfig::routes`] of the template matching
    /// `path`, if any: a table built per template at configuration time
    /// (metric handles, say) is indexed by it, with no lookup by name.
    ///
    /// ```
    /// use floodgate_http::HttpIdentity;
    ///
    /// let id = HttpIdentity::from_yaml_str("gw.yaml", r#"
    /// http:
    ///   domain: api
    ///   routes: ["/users/{id}", "/orders/{id}"]
    ///   descriptors: [[route]]
    /// "#).unwrap();
    /// assert_eq!(id.route_index("/orders/7"), Some(1));
    /// assert_eq!(id.config().routes[1], "/orders/{id}");
    /// assert_eq!(id.route_index("/"), None);
    /// ```
    pub fn route_index(&self, path: &str) -> Option<usize> {
        self.routes.find_index(path)
    }
}

/// Writes a source's value `given` (none: nothing is written, `false`): a
/// host as a host, any other value hashed (`hash`) or bounded to `max`
/// bytes.
#[inline]
fn write_value(
    text: &mut String,
    given: Option<&[u8]>,
    source: &Source,
    hash: bool,
    max: usize,
) -> bool {
    match (given, hash) {
        (Some(v), _) if is_host(source) => write_host(text, v, hash, max),
        (Some(v), true) => write_secret_hash(text, v),
        (Some(v), false) => write_bounded(text, v, max),
        (None, _) => return false,
    }
    true
}

/// Writes the tier of a source's value `given`: the known value it is (in
/// any case; a host without its port), else `default`; `false` when
/// neither.
#[inline]
fn write_tier(
    text: &mut String,
    given: Option<&[u8]>,
    source: &Source,
    values: &[String],
    default: Option<&String>,
) -> bool {
    let known = given.and_then(|g| {
        if is_host(source) {
            let host = Authority::new(g, None).host();
            values
                .iter()
                .find(|v| v.as_bytes().eq_ignore_ascii_case(host))
        } else {
            values.iter().find(|v| v.as_bytes().eq_ignore_ascii_case(g))
        }
    });
    let tier = known.or(default);
    tier.map(|v| text.push_str(v)).is_some()
}

/// Writes the path, bounded to `max` bytes; `false` when it is empty.
#[inline]
fn write_path(text: &mut String, path: &str, max: usize) -> bool {
    write_bounded(text, path.as_bytes(), max);
    !path.is_empty()
}

/// Whether `source` is the request's authority (`header: host`).
fn is_host(source: &Source) -> bool {
    matches!(source, Source::Header(name) if name == HOST)
}

/// Appends the host of the authority `raw`, normalised as nginx's `$host`
/// is (lowercase, without a name's final dot or any port), bounded or
/// hashed as any value; an invalid authority as it is (only the gateway
/// refuses it).
fn write_host(text: &mut String, raw: &[u8], hash: bool, max: usize) {
    if !valid_authority(raw) {
        return match hash {
            true => write_secret_hash(text, raw),
            false => write_bounded(text, raw, max),
        };
    }
    let a = Authority::new(raw, None);
    let start = text.len();
    a.write_host(text);
    if hash || a.host().len() > max {
        // Rare (hashed or overlong hosts): written, then replaced.
        let whole = text.split_off(start);
        match hash {
            true => write_secret_hash(text, whole.as_bytes()),
            false => write_bounded(text, whole.as_bytes(), max),
        }
    }
}

/// The value of `source`, trimmed; none when absent or empty.
fn source_value<'r, H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
    source: &Source,
    head: &'r H,
    ext: &'r E,
) -> Option<&'r [u8]> {
    let value = match source {
        Source::Header(name) if name == HOST => head.authority()?,
        Source::Header(name) => head.header(name)?,
        Source::Extension(name) => ext.get(name)?.as_bytes(),
        Source::Bearer => bearer_token(head)?,
    };
    Some(value.trim_ascii()).filter(|v| !v.is_empty())
}

/// The token of `Authorization: Bearer <token>` (scheme in any case).
fn bearer_token<H: RequestHead + ?Sized>(head: &H) -> Option<&[u8]> {
    let value = head.header(&AUTHORIZATION)?.trim_ascii();
    let space = value.iter().position(|&b| b == b' ' || b == b'\t')?;
    let (scheme, rest) = value.split_at(space);
    let token = rest.trim_ascii();
    let valid = scheme.eq_ignore_ascii_case(b"bearer")
        && !token.is_empty()
        && !token.iter().any(|&b| b == b' ' || b == b'\t');
    valid.then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer() {
        let token = |v: &str| {
            let req = http::Request::get("/").header(AUTHORIZATION, v).body(());
            bearer_token(&req.unwrap()).map(|t| String::from_utf8(t.to_vec()).unwrap())
        };
        assert_eq!(token("Bearer abc.def-ghi"), Some("abc.def-ghi".into()));
        assert_eq!(token("bearer   tok=="), Some("tok==".into()));
        assert_eq!(token("BEARER\ttok"), Some("tok".into()));
        assert_eq!(token("Basic dXNlcjpwYXNz"), None);
        assert_eq!(token("Bearer"), None);
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearer a b"), None);
        assert_eq!(token("Bearerabc"), None);
        assert_eq!(bearer_token(&http::Request::new(())), None);
    }

    fn host_keys(reqs: &[http::Request<()>]) -> Vec<Option<String>> {
        let id = HttpIdentity::from_yaml_str(
            "h.yaml",
            "http:\n  domain: d\n  descriptors:\n    - [{header: {name: host}}]\n",
        )
        .unwrap();
        let mut out = id.new_output();
        let peer = "192.0.2.1".parse().unwrap();
        reqs.iter()
            .map(|r| {
                id.build(r, peer, &crate::identity::NoExtensions, &mut out);
                out.first().map(|d| d.get("host").unwrap().to_owned())
            })
            .collect()
    }

    #[test]
    fn host_is_the_normalised_authority() {
        let h1 = |host: &str| {
            http::Request::get("/")
                .header("host", host)
                .body(())
                .unwrap()
        };
        let h2 = |uri: &str| {
            let r = http::Request::get(uri).version(http::Version::HTTP_2);
            r.body(()).unwrap()
        };
        let same = [
            h1("app.example"),
            h1("APP.example"),
            h1("app.example."),
            h1("app.example:80"),
            h1("app.example:8080"),
            h1("app.example:"),
            h2("http://App.Example/x"),
            h2("https://app.example:443/x"),
        ];
        for k in host_keys(&same) {
            assert_eq!(k.as_deref(), Some("app.example"));
        }
        let keys = host_keys(&[h1("[::1]:80"), h1("[2001:DB8::1]:8080"), h1("a b")]);
        let expected = ["[::1]", "[2001:db8::1]", "a b"];
        assert_eq!(keys, expected.map(|k| Some(k.into())));
        assert_eq!(host_keys(&[http::Request::new(())]), [None]);
    }

    #[test]
    fn a_host_tier_compares_the_host() {
        let id = HttpIdentity::from_yaml_str(
            "h.yaml",
            "http:\n  domain: d\n  descriptors:\n    - [{tier: {header: host, values: [Api.Example]}}]\n",
        )
        .unwrap();
        let mut out = id.new_output();
        let req = http::Request::get("/")
            .header("host", "API.example.:443")
            .body(())
            .unwrap();
        id.build(
            &req,
            "192.0.2.1".parse().unwrap(),
            &crate::identity::NoExtensions,
            &mut out,
        );
        assert_eq!(out[0].get("tier"), Some("Api.Example"));
    }
}
