//! Operator endpoints of kube-nlproxy, with kube-proxy's formats so load balancers
//! and dashboards keep working:
//! - `/healthz` and `/livez` on the healthz address ([`health_router`]),
//! - the metrics port ([`metrics_server::metrics_router`]): `/metrics` with
//!   kube-proxy's metrics ([`metrics::Metrics`], written by [`expo`] in the format the
//!   scraper negotiates), `/healthz`, `/metrics/slis`, `/proxyMode`, `/configz`,
//!   `/statusz`, `/flagz` ([`zpages`], gated),
//! - one HTTP server per `healthCheckNodePort` of externalTrafficPolicy Local
//!   services ([`hcport::HealthCheckPorts`]),
//!
//! all served by [`server`]: bounded connections and timeouts, binding retried every
//! 5 s per server. Everything reads the engine's status through [`StatusSource`];
//! nothing here touches the kernel.

pub mod debug;
pub mod expo;
pub mod go_runtime;
pub mod hcport;
pub mod health;
pub mod metrics;
pub mod metrics_server;
pub mod observer;
pub mod process;
pub mod restclient;
pub mod server;
pub mod status_source;
pub mod zpages;

pub use health::health_router;
pub use metrics::{BuildInfo, Metrics, RejectedPackets};
pub use metrics_server::{metrics_router, ProxyInfo};
pub use status_source::StatusSource;
