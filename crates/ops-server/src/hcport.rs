//! Health-check node ports: for each externalTrafficPolicy Local LoadBalancer service,
//! an HTTP server on its `healthCheckNodePort` answering with the number of local
//! endpoints in the `X-Load-Balancing-Endpoint-Weight` header and the JSON body
//! `{"service":{"namespace","name"},"localEndpoints":n,"serviceProxyHealthy":bool}`;
//! 200 only with local endpoints and a healthy proxy, else 503. Servers open and close
//! as services come and go ([`HealthCheckPorts::reconcile`]).

use crate::StatusSource;
use axum::extract::State;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use kube_model::ServiceKey;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::task::JoinHandle;

#[derive(Serialize)]
struct Svc<'a> {
    namespace: &'a str,
    name: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    service: Svc<'a>,
    local_endpoints: usize,
    service_proxy_healthy: bool,
}

struct Ctx<S> {
    source: S,
    key: ServiceKey,
    port: u16,
}

async fn answer<S: StatusSource>(State(ctx): State<Arc<Ctx<S>>>) -> Response {
    let status = ctx.source.snapshot();
    let healthy = status.healthy(ctx.source.now());
    // The count of the service as it is now; a service that moved to another port
    // answers 0 here until its server is closed.
    let n = status
        .health_checks
        .get(&ctx.key)
        .filter(|h| h.node_port == ctx.port)
        .map(|h| h.local_endpoints)
        .unwrap_or(0);
    let body = Body {
        service: Svc {
            namespace: &ctx.key.namespace,
            name: &ctx.key.name,
        },
        local_endpoints: n,
        service_proxy_healthy: healthy,
    };
    let code = if n > 0 && healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let json = serde_json::to_string(&body).unwrap_or_else(|_| "{}".into());
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
        json,
    )
        .into_response()
}

/// The open health-check servers, keyed by port.
pub struct HealthCheckPorts<S: StatusSource> {
    source: S,
    bind: Vec<IpAddr>,
    open: BTreeMap<u16, (ServiceKey, JoinHandle<()>)>,
}

impl<S: StatusSource> HealthCheckPorts<S> {
    /// Servers will listen on each of `bind` (e.g. the node's addresses, or 0.0.0.0).
    pub fn new(source: S, bind: Vec<IpAddr>) -> HealthCheckPorts<S> {
        HealthCheckPorts {
            source,
            bind,
            open: BTreeMap::new(),
        }
    }

    /// Ports with a server now.
    pub fn ports(&self) -> Vec<u16> {
        self.open.keys().copied().collect()
    }

    /// Open servers for new health-check ports and close those of services that went
    /// away, from the current status. A port that cannot be bound is logged and retried
    /// at the next call.
    pub async fn reconcile(&mut self) {
        let want: BTreeMap<u16, ServiceKey> = self
            .source
            .snapshot()
            .health_checks
            .into_iter()
            .map(|(k, h)| (h.node_port, k))
            .collect();
        let stale: Vec<u16> = self
            .open
            .iter()
            .filter(|(p, (k, _))| want.get(p) != Some(k))
            .map(|(p, _)| *p)
            .collect();
        for p in stale {
            if let Some((key, task)) = self.open.remove(&p) {
                task.abort();
                let _ = task.await;
                tracing::info!(port = p, service = %format!("{}/{}", key.namespace, key.name), "closed health-check node port");
            }
        }
        for (port, key) in want {
            if self.open.contains_key(&port) {
                continue;
            }
            let mut listeners = Vec::new();
            for ip in &self.bind {
                let addr = std::net::SocketAddr::new(*ip, port);
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => listeners.push(l),
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "cannot open health-check node port")
                    }
                }
            }
            if listeners.len() != self.bind.len() {
                continue;
            }
            let ctx = Arc::new(Ctx {
                source: self.source.clone(),
                key: key.clone(),
                port,
            });
            let router = Router::new().fallback(get(answer::<S>)).with_state(ctx);
            let task = tokio::spawn(async move {
                let mut set = tokio::task::JoinSet::new();
                for l in listeners {
                    set.spawn(crate::serve(l, router.clone()));
                }
                while set.join_next().await.is_some() {}
            });
            tracing::info!(port, service = %format!("{}/{}", key.namespace, key.name), "opened health-check node port");
            self.open.insert(port, (key, task));
        }
    }
}

impl<S: StatusSource> Drop for HealthCheckPorts<S> {
    fn drop(&mut self) {
        for (_, (_, task)) in std::mem::take(&mut self.open) {
            task.abort();
        }
    }
}
