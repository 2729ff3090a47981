//! Health-check node ports (`pkg/proxy/healthcheck/service_health.go`): for each
//! externalTrafficPolicy Local LoadBalancer service, an HTTP server on its
//! `healthCheckNodePort`, on the addresses NodePorts are served on (nodePortAddresses:
//! every address of a family it has no CIDR of, or a CIDR covering the whole family,
//! else the node's matching addresses; `[::]` is IPv6-only next to IPv4 addresses),
//! answering with the number of local endpoints in the `X-Load-Balancing-Endpoint-Weight`
//! header and kube-proxy's JSON body; 200 only with local endpoints and a healthy proxy,
//! else 503. Servers open and close as services come and go
//! ([`HealthCheckPorts::reconcile`]); a port that cannot be bound on every address is
//! closed again (as upstream) and tried again after [`crate::server::BIND_RETRY`],
//! without holding back the other ports.

use crate::server::{Limits, BIND_RETRY};
use crate::status_source::StatusSource;
use axum::extract::State;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use kube_model::ServiceKey;
use proxy_status::Status;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinSet;

struct Ctx<S> {
    source: S,
    key: ServiceKey,
    port: u16,
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The body exactly as kube-proxy writes it (a dedented, tab-indented JSON object).
pub fn body(key: &ServiceKey, local_endpoints: usize, healthy: bool) -> String {
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {healthy}\n}}",
        quote(&key.namespace),
        quote(&key.name)
    )
}

async fn answer<S: StatusSource>(State(ctx): State<Arc<Ctx<S>>>) -> Response {
    let now = ctx.source.now();
    // The count of the service as it is now; a service that moved to another port
    // answers 0 here until its server is closed.
    let (healthy, n) = ctx.source.read(|status| {
        let n = status
            .health_checks
            .get(&ctx.key)
            .filter(|h| h.node_port == ctx.port)
            .map(|h| h.local_endpoints)
            .unwrap_or(0);
        (status.healthy(now), n)
    });
    let code = if n > 0 && healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                HeaderName::from_static("x-content-type-options"),
                "nosniff".to_string(),
            ),
            (
                HeaderName::from_static("x-load-balancing-endpoint-weight"),
                n.to_string(),
            ),
        ],
        body(&ctx.key, n, healthy),
    )
        .into_response()
}

/// Where the servers listen, from the status (the node's addresses may arrive late).
pub type BindAddrs = Box<dyn Fn(&Status) -> Vec<IpAddr> + Send + Sync>;

struct Open {
    key: ServiceKey,
    addrs: Vec<IpAddr>,
    /// One server per address, each owning its listener.
    servers: JoinSet<()>,
}

/// The open health-check servers, keyed by port.
pub struct HealthCheckPorts<S: StatusSource> {
    source: S,
    bind: BindAddrs,
    limits: Limits,
    open: BTreeMap<u16, Open>,
    /// Ports that could not be bound: when to try again.
    failed: BTreeMap<u16, Instant>,
}

impl<S: StatusSource> HealthCheckPorts<S> {
    /// Servers will listen on each of the addresses `bind` gives for the current status.
    pub fn new(source: S, bind: BindAddrs, limits: Limits) -> HealthCheckPorts<S> {
        HealthCheckPorts {
            source,
            bind,
            limits,
            open: BTreeMap::new(),
            failed: BTreeMap::new(),
        }
    }

    /// Servers on fixed addresses.
    pub fn on(source: S, addrs: Vec<IpAddr>, limits: Limits) -> HealthCheckPorts<S> {
        HealthCheckPorts::new(source, Box::new(move |_| addrs.clone()), limits)
    }

    /// Ports with a server now.
    pub fn ports(&self) -> Vec<u16> {
        self.open.keys().copied().collect()
    }

    /// Open servers for new health-check ports and close those of services that went
    /// away (or whose addresses changed), from the current status. A port that cannot
    /// be bound is logged and tried again after [`BIND_RETRY`].
    /// When a port that could not be bound is tried again (a reconcile is due then even
    /// without a change of the status), if any.
    pub fn next_retry(&self) -> Option<Instant> {
        self.failed.values().min().copied()
    }

    pub async fn reconcile(&mut self) {
        // (read in place: a copy of the whole status on every change costs in
        // proportion to the cluster)
        let bind = &self.bind;
        let (addrs, want): (_, BTreeMap<u16, ServiceKey>) = self.source.read(|status| {
            let want = status
                .health_checks
                .iter()
                .map(|(k, h)| (h.node_port, k.clone()))
                .collect();
            (bind(status), want)
        });
        let stale: Vec<u16> = self
            .open
            .iter()
            .filter(|(p, o)| want.get(p) != Some(&o.key) || o.addrs != addrs)
            .map(|(p, _)| *p)
            .collect();
        for p in stale {
            if let Some(mut o) = self.open.remove(&p) {
                // Closed when this returns: each server is awaited until its future,
                // and the listener it owns, is dropped (an abort alone only schedules
                // that, and the port could not be bound again at once).
                o.servers.abort_all();
                while o.servers.join_next().await.is_some() {}
                tracing::debug!(port = p, service = %o.key, "Closing healthcheck");
            }
        }
        self.failed.retain(|p, _| want.contains_key(p));
        if addrs.is_empty() {
            return;
        }
        let now = Instant::now();
        for (port, key) in want {
            if self.open.contains_key(&port) || self.failed.get(&port).is_some_and(|t| *t > now) {
                continue;
            }
            let mut listeners = Vec::new();
            let mut error = None;
            // `[::]` next to IPv4 addresses serves IPv6 only (every IPv6 address, the
            // listed IPv4 ones): nodePortAddresses with CIDRs of IPv4 only
            let v6only = addrs.iter().any(IpAddr::is_ipv4);
            for ip in &addrs {
                let addr = SocketAddr::new(*ip, port);
                match listen(addr, v6only).await {
                    Ok(l) => listeners.push(l),
                    Err(e) => {
                        error = Some(format!("listen tcp {addr}: {e}"));
                        break;
                    }
                }
            }
            if let Some(err) = error {
                // close what was opened, to let another owner take the port
                drop(listeners);
                if self.failed.insert(port, now + BIND_RETRY).is_none() {
                    tracing::error!(err = %err, service = %key, port, retry_s = BIND_RETRY.as_secs(), "Failed to start healthcheck");
                }
                continue;
            }
            self.failed.remove(&port);
            let ctx = Arc::new(Ctx {
                source: self.source.clone(),
                key: key.clone(),
                port,
            });
            let router = Router::new().fallback(any(answer::<S>)).with_state(ctx);
            let limits = self.limits;
            let mut servers = JoinSet::new();
            for l in listeners {
                servers.spawn(crate::server::serve(l, router.clone(), limits));
            }
            tracing::debug!(port, service = %key, "Opening healthcheck");
            self.open.insert(
                port,
                Open {
                    key,
                    addrs: addrs.clone(),
                    servers,
                },
            );
        }
    }
}

/// A listener on `addr`; the IPv6 wildcard IPv6-only when `v6only` (else it takes IPv4
/// too, as Linux's default `bindv6only=0` makes it).
async fn listen(addr: SocketAddr, v6only: bool) -> std::io::Result<tokio::net::TcpListener> {
    if !(v6only && addr.ip() == IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)) {
        return tokio::net::TcpListener::bind(addr).await;
    }
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.set_only_v6(true)?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    tokio::net::TcpListener::from_std(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_kube_proxys_text() {
        assert_eq!(
            body(&ServiceKey::new("web", "lb"), 2, true),
            "{\n\t\"service\": {\n\t\t\"namespace\": \"web\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
    }
}
