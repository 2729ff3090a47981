//! Localhost NodePorts in nftables mode, as kube-proxy serves them since 1.37
//! (KEP-6032, `pkg/proxy/localnodeportproxy`, gate `KubeProxyNFTablesLocalhostNodePorts`):
//! no rule can DNAT a packet to 127.0.0.1 without `route_localnet` (and none exists for
//! ::1), so a userspace TCP proxy listens on `127.0.0.1:<nodePort>` (IPv4) and
//! `[::1]:<nodePort>` (IPv6) for every TCP NodePort with endpoints, and connects each
//! accepted connection to one endpoint directly (picked at random; ClientIP affinity
//! pins one endpoint for its timeout, renewed by every connection).
//!
//! Driven by the engine's status ([`proxy_status::Status::localhost_node_ports`]): a
//! listener opens when a NodePort gets endpoints, follows its endpoints, and closes
//! (with its connections) when the NodePort or its last endpoint goes. Its sockets are
//! the only ones here; metrics go through [`proxy_status::LocalhostObserver`].

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube_model::{IpFamily, ServiceKey};
use proxy_status::{LocalhostNodePort, LocalhostObserver, Status};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Upstream's timeout for connecting to an endpoint.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The address a family's listeners bind: `127.0.0.1` or `::1`.
pub fn listen_ip(family: IpFamily) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

/// The endpoints of one listener and its affinity pin.
#[derive(Debug)]
struct Pick {
    endpoints: Vec<SocketAddr>,
    /// ClientIP affinity (None: off). Every local client shares one source address, so
    /// one endpoint takes all connections until the pin has been unused this long.
    affinity: Option<Duration>,
    pinned: Option<(SocketAddr, Instant)>,
}

impl Pick {
    fn new(np: &LocalhostNodePort) -> Pick {
        Pick {
            endpoints: np.endpoints.clone(),
            affinity: affinity(np),
            pinned: None,
        }
    }

    /// New endpoints (and affinity): a changed affinity drops the pin.
    fn update(&mut self, np: &LocalhostNodePort) {
        self.endpoints = np.endpoints.clone();
        let a = affinity(np);
        if a != self.affinity {
            self.pinned = None;
            self.affinity = a;
        }
    }

    /// The endpoint for a new connection at `now`; `rand(n)` picks an index below `n`.
    fn pick(&mut self, now: Instant, rand: impl FnOnce(usize) -> usize) -> Option<SocketAddr> {
        if self.endpoints.is_empty() {
            return None;
        }
        if let (Some(window), Some((ep, used))) = (self.affinity, self.pinned) {
            if now.saturating_duration_since(used) <= window && self.endpoints.contains(&ep) {
                self.pinned = Some((ep, now));
                return Some(ep);
            }
        }
        let ep = self.endpoints[rand(self.endpoints.len()).min(self.endpoints.len() - 1)];
        if self.affinity.is_some() {
            self.pinned = Some((ep, now));
        }
        Some(ep)
    }
}

fn affinity(np: &LocalhostNodePort) -> Option<Duration> {
    np.affinity_timeout
        .map(|s| Duration::from_secs(u64::from(s)))
}

/// One open listener.
struct Listener {
    pick: Arc<Mutex<Pick>>,
    /// Set to true to close the listener and its connections.
    stop: watch::Sender<bool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The listeners of one IP family, reconciled with the NodePorts to serve.
pub struct LocalhostProxy {
    family: IpFamily,
    ip: IpAddr,
    active: BTreeMap<u16, Listener>,
    observer: Arc<dyn LocalhostObserver>,
}

impl LocalhostProxy {
    /// The proxy of `family`, listening on its loopback address.
    pub fn new(family: IpFamily, observer: Arc<dyn LocalhostObserver>) -> LocalhostProxy {
        Self::on(family, listen_ip(family), observer)
    }

    /// The proxy of `family` listening on `ip` (tests).
    pub fn on(
        family: IpFamily,
        ip: IpAddr,
        observer: Arc<dyn LocalhostObserver>,
    ) -> LocalhostProxy {
        LocalhostProxy {
            family,
            ip,
            active: BTreeMap::new(),
            observer,
        }
    }

    /// The NodePorts with an open listener.
    pub fn ports(&self) -> Vec<u16> {
        self.active.keys().copied().collect()
    }

    /// Open, update and close listeners to serve exactly `desired` (the entries of other
    /// families, and any without endpoints, are ignored). A port that cannot be bound is
    /// logged and counted, and tried again at the next call. Must run on a tokio runtime.
    pub fn sync<'a>(&mut self, desired: impl IntoIterator<Item = &'a LocalhostNodePort>) {
        let mut want: BTreeMap<u16, &LocalhostNodePort> = BTreeMap::new();
        for np in desired {
            if np.family == self.family && !np.endpoints.is_empty() {
                want.entry(np.node_port).or_insert(np);
            }
        }
        self.active.retain(|port, _| {
            let keep = want.contains_key(port);
            if !keep {
                tracing::debug!(
                    protocol = "TCP",
                    port = *port,
                    "Removing localhost nodeport proxy"
                );
            }
            keep
        });
        for (port, np) in want {
            if let Some(l) = self.active.get(&port) {
                lock(&l.pick).update(np);
                continue;
            }
            match self.open(np) {
                Ok(l) => {
                    tracing::trace!(
                        protocol = "TCP",
                        port,
                        endpoints = np.endpoints.len(),
                        "Created localhost nodeport proxy"
                    );
                    self.active.insert(port, l);
                }
                Err(e) => {
                    tracing::error!(err = %e, protocol = "TCP", port,
                        "Failed to create localhost nodeport proxy");
                    self.observer.listener_failed(self.family);
                }
            }
        }
        self.observer.listeners(self.family, self.active.len());
    }

    /// Close every listener and its connections.
    pub fn shutdown(&mut self) {
        self.active.clear();
        self.observer.listeners(self.family, 0);
    }

    fn open(&self, np: &LocalhostNodePort) -> Result<Listener, String> {
        let addr = SocketAddr::new(self.ip, np.node_port);
        let bound = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std)
            .map_err(|e| format!("failed to listen on {addr}: {e}"))?;
        let pick = Arc::new(Mutex::new(Pick::new(np)));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(accept_loop(bound, np.node_port, pick.clone(), stopped));
        Ok(Listener { pick, stop })
    }
}

fn lock(p: &Mutex<Pick>) -> std::sync::MutexGuard<'_, Pick> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept_loop(
    listener: TcpListener,
    port: u16,
    pick: Arc<Mutex<Pick>>,
    stopped: watch::Receiver<bool>,
) {
    let mut stop = stopped.clone();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((conn, _)) => {
                    tokio::spawn(proxy_conn(conn, port, pick.clone(), stopped.clone()));
                }
                Err(e) => {
                    tracing::trace!(err = %e, protocol = "TCP", port,
                        "Accept error on localhost nodeport proxy");
                    // a descriptor shortage would otherwise spin
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

async fn proxy_conn(
    mut client: TcpStream,
    port: u16,
    pick: Arc<Mutex<Pick>>,
    mut stopped: watch::Receiver<bool>,
) {
    let ep = lock(&pick).pick(Instant::now(), |n| fastrand::usize(..n));
    let Some(ep) = ep else { return };
    let backend = tokio::select! {
        r = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(ep)) => r,
        _ = stopped.changed() => return,
    };
    let mut backend = match backend {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            tracing::trace!(err = %e, protocol = "TCP", port, endpoint = %ep, "Failed to connect to backend");
            return;
        }
        Err(_) => {
            tracing::trace!(err = "i/o timeout", protocol = "TCP", port, endpoint = %ep, "Failed to connect to backend");
            return;
        }
    };
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut backend) => {
            if let Err(e) = r {
                tracing::trace!(err = %e, protocol = "TCP", port,
                    "Error proxying localhost nodeport connection");
            }
        }
        _ = stopped.changed() => {}
    }
}

/// The proxies of the families to serve, fed from the engine's status.
pub struct LocalhostProxies(Vec<LocalhostProxy>);

impl LocalhostProxies {
    pub fn new(families: &[IpFamily], observer: Arc<dyn LocalhostObserver>) -> LocalhostProxies {
        LocalhostProxies(
            families
                .iter()
                .map(|f| LocalhostProxy::new(*f, observer.clone()))
                .collect(),
        )
    }

    /// Serve the NodePorts `status` lists.
    pub fn sync(&mut self, status: &Status) {
        self.sync_ports(&status.localhost_node_ports);
    }

    /// Serve these NodePorts (the status's `localhost_node_ports`, read without a copy
    /// of the rest of the status).
    pub fn sync_ports(&mut self, ports: &BTreeMap<ServiceKey, Vec<LocalhostNodePort>>) {
        for p in &mut self.0 {
            p.sync(ports.values().flatten());
        }
    }
}

#[cfg(test)]
mod tests;
