//! [`HttpIdentity`]: a compiled identity configuration, turning requests
//! into descriptors.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, Method, Uri};

use super::actions::{Lazy, Request, source_value};
use super::config::{Action, IdentityConfig};
use super::cost::cost_of;
use super::error::IdentityError;
use super::extension::ExtensionSource;
use super::head::{HttpHead, RequestHead};
use super::output::RequestDescriptors;
use super::route::Routes;

/// Turns HTTP requests into the descriptors of one policy domain.
///
/// Immutable and shareable across threads; build each request's
/// descriptors into a [`RequestDescriptors`] kept per connection or task.
///
/// ```
/// use floodgate_http::identity::{HttpIdentity, NoExtensions, RequestDescriptors};
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
/// let (parts, ()) = http::Request::get("/users/42")
///     .header("x-forwarded-for", "198.51.100.7")
///     .body(())
///     .unwrap()
///     .into_parts();
/// let peer = "10.0.0.2:40000".parse().unwrap();
/// let mut out = RequestDescriptors::new();
/// id.descriptors(&parts, peer, &NoExtensions, &mut out);
///
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[0].entry(0), ("remote_address", "198.51.100.7"));
/// assert_eq!(out[1].entry(1), ("route", "/users/{id}"));
/// assert_eq!(out.hits_addend(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct HttpIdentity {
    pub(super) config: IdentityConfig,
    pub(super) routes: Routes,
    slot_bytes: usize,
    slot_entries: usize,
}

impl HttpIdentity {
    /// Compiles `config`.
    pub fn new(config: IdentityConfig) -> Result<Self, IdentityError> {
        config.validate()?;
        let mut routes = Routes::default();
        for t in &config.routes {
            routes.insert(t)?;
        }
        let mut id = HttpIdentity {
            config,
            routes,
            slot_bytes: 0,
            slot_entries: 0,
        };
        let descriptors = &id.config.descriptors;
        let bound = |d: &[Action]| d.iter().map(|a| id.bound(a)).sum::<usize>();
        let slot_bytes = descriptors.iter().map(|d| bound(d)).max().unwrap_or(0);
        id.slot_entries = descriptors.iter().map(Vec::len).max().unwrap_or(0);
        id.slot_bytes = slot_bytes;
        Ok(id)
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

    /// Builds the descriptors of a request (its head `parts`, from `peer`,
    /// with the application's values in `ext`) into `out`, replacing what
    /// it held. A descriptor is built only when all its actions produce an
    /// entry.
    pub fn descriptors<E: ExtensionSource + ?Sized>(
        &self,
        parts: &http::request::Parts,
        peer: SocketAddr,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        let head = HttpHead {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        self.build(&head, peer.ip(), None, ext, out);
    }

    /// Like [`descriptors`](Self::descriptors) for a whole request, reading
    /// `extension` values from its [`http::Extensions`] (the
    /// [`Attributes`](super::Attributes) an earlier middleware inserted).
    pub fn request_descriptors<B>(
        &self,
        request: &http::Request<B>,
        peer: SocketAddr,
        out: &mut RequestDescriptors,
    ) {
        self.request_descriptors_of(request, peer.ip(), None, out);
    }

    /// Like [`request_descriptors`](Self::request_descriptors), with the
    /// client address behind trusted proxies already resolved (`client`;
    /// none: resolved here if a descriptor needs it).
    pub(crate) fn request_descriptors_of(
        &self,
        request: &http::Request<impl Sized>,
        peer: IpAddr,
        client: Option<IpAddr>,
        out: &mut RequestDescriptors,
    ) {
        let head = HttpHead {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
        };
        self.build(&head, peer, client, request.extensions(), out);
    }

    /// Like [`descriptors`](Self::descriptors), from any [`RequestHead`]
    /// (a request known from elsewhere than an [`http::Request`], such as
    /// an access log line) sent from `peer`.
    pub fn build_head<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        self.build(head, peer, None, ext, out);
    }

    fn build<H: RequestHead + ?Sized, E: ExtensionSource + ?Sized>(
        &self,
        head: &H,
        peer: IpAddr,
        client: Option<IpAddr>,
        ext: &E,
        out: &mut RequestDescriptors,
    ) {
        let req = Request { head, ext, peer };
        let descriptors = &self.config.descriptors;
        out.prepare(descriptors.len(), self.slot_bytes, self.slot_entries);
        let cost = self.config.cost.as_ref();
        let hits = cost.map_or(1, |c| cost_of(source_value(&c.source, head, ext), c));
        out.hits = hits;
        let per_descriptor = cost.map(|_| hits as u64);
        let mut lazy = Lazy {
            client,
            route: None,
        };
        for actions in descriptors {
            let Some(slot) = out.current() else { break };
            let complete = actions.iter().all(|a| self.run(a, &req, &mut lazy, slot));
            if complete {
                out.commit(per_descriptor);
            } else {
                out.discard();
            }
        }
        out.client = lazy.client;
    }

    /// The client address of a request from `peer` (after trusted proxies;
    /// not grouped by prefix).
    pub fn client_ip(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let head = HttpHead {
            method: &Method::GET,
            uri: &Uri::default(),
            headers,
        };
        self.config.client_ip.resolve(&head, peer)
    }

    /// The route template matching `path`, if any.
    pub fn route(&self, path: &str) -> Option<&str> {
        self.routes.find(path)
    }
}
