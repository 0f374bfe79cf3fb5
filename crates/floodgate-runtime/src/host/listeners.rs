//! [`Listeners`]: what a frontend binds its listeners with, and where the
//! host keeps them: their tasks (drained together at shutdown), their
//! addresses, their certificates (reloaded together).

use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::RuntimeError;
use crate::settings::Settings;
use crate::tls::{Certificates, ListenerTls, TlsAcceptor};

/// The listeners of a host being started.
pub struct Listeners<'a> {
    settings: &'a Settings,
    certificates: &'a Certificates,
    stop: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
}

impl<'a> Listeners<'a> {
    pub(super) fn new(
        settings: &'a Settings,
        certificates: &'a Certificates,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Listeners {
            settings,
            certificates,
            stop,
            tasks: Vec::new(),
            addrs: Vec::new(),
        }
    }

    /// The host's settings.
    pub fn settings(&self) -> &'a Settings {
        self.settings
    }

    /// What tells the listeners to stop accepting and drain.
    pub fn stop(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    /// The acceptor of a listener with TLS `files` (none: cleartext); its
    /// certificate is reloaded with the configuration.
    pub fn tls(&self, files: Option<ListenerTls>) -> Result<Option<TlsAcceptor>, RuntimeError> {
        Ok(self.certificates.add(files)?)
    }

    /// Binds `addr` as the `what` listener ([`crate::listener::bind`]),
    /// its address kept ([`Running::addrs`](super::Running::addrs)).
    pub async fn bind(
        &mut self,
        what: &str,
        addr: SocketAddr,
    ) -> Result<TcpListener, RuntimeError> {
        let listener = crate::listener::bind(what, addr).await?;
        let bound = listener
            .local_addr()
            .map_err(|source| RuntimeError::Bind { addr, source })?;
        self.addrs.push(bound);
        Ok(listener)
    }

    /// Keeps the task serving a listener: drained at shutdown, and its end
    /// before then ends the host.
    pub fn push(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }

    /// Serves `router` on the admin listener (`server.admin`, if any, with
    /// `server.tls.admin`).
    pub(super) async fn admin(&mut self, router: Router) -> Result<(), RuntimeError> {
        let s = &self.settings.server;
        let tls = self.tls(s.admin_tls.files())?;
        let (hosts, limits) = (&s.admin_hosts, &s.limits);
        let admin = crate::admin::spawn(s.admin, hosts, router, limits, tls, self.stop()).await?;
        self.tasks.extend(admin);
        Ok(())
    }

    /// Serves `router` ([`crate::admin::probes`]) on the metrics listener
    /// (`server.metrics`, if any, with `server.tls.metrics`), for any
    /// `Host`.
    pub(super) async fn metrics(&mut self, router: Router) -> Result<(), RuntimeError> {
        let s = &self.settings.server;
        let tls = self.tls(s.metrics_tls.files())?;
        let (addr, limits) = (s.metrics, &s.limits);
        let metrics = crate::admin::serve("metrics", addr, router, limits, tls, self.stop()).await;
        self.tasks.extend(metrics?);
        Ok(())
    }

    pub(super) fn into_parts(self) -> (Vec<JoinHandle<()>>, Vec<SocketAddr>) {
        (self.tasks, self.addrs)
    }
}
