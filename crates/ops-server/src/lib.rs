//! Operator endpoints of kube-nlproxy, with kube-proxy's formats so load balancers
//! and dashboards keep working:
//! - `/healthz` and `/livez` on the healthz address ([`health_router`]),
//! - Prometheus metrics on the metrics address ([`metrics::Metrics`], [`metrics_router`]),
//! - one HTTP server per `healthCheckNodePort` of externalTrafficPolicy Local
//!   services ([`hcport::HealthCheckPorts`]).
//!
//! Everything reads the engine's status through [`StatusSource`]; nothing here touches
//! the kernel.

pub mod hcport;
pub mod health;
pub mod metrics;

pub use health::health_router;
pub use metrics::{metrics_router, Metrics};

use proxy_status::{Status, StatusHandle};
use std::time::Instant;

/// Where the servers read the proxy's status from (the engine's [`StatusHandle`], or a
/// fixed status in tests).
pub trait StatusSource: Clone + Send + Sync + 'static {
    fn snapshot(&self) -> Status;
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl StatusSource for StatusHandle {
    fn snapshot(&self) -> Status {
        StatusHandle::snapshot(self)
    }
}

/// Errors of the operator servers.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// Bind a TCP listener, naming the address on failure.
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, OpsError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| OpsError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// Serve `router` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) {
    if let Err(e) = axum::serve(listener, router).await {
        tracing::warn!(error = %e, "http server stopped");
    }
}
