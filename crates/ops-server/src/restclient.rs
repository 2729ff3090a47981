//! The API client's metrics as client-go records them and component-base registers
//! them (`k8s.io/component-base/metrics/prometheus/restclient`): requests by status code,
//! method and host; latency, request and response sizes, and the time spent in the
//! client-side rate limiter, by verb and host. The daemon's
//! tower layer on its kube client calls these through [`proxy_status::RestObserver`]
//! (see `proxy_sources::rest_metrics`).

use std::sync::Arc;
use std::time::Duration;

use crate::expo::{Desc, Family, Registry};

/// client-go's latency buckets (seconds).
const LATENCY: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];
/// client-go's size buckets: 64 bytes .. 16 MiB.
const SIZE: [f64; 11] = [
    64.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0,
];

/// The `rest_client_*` families.
#[derive(Clone, Debug)]
pub struct RestClient {
    requests: Arc<Family>,
    latency: Arc<Family>,
    request_size: Arc<Family>,
    response_size: Arc<Family>,
    rate_limiter: Arc<Family>,
}

impl RestClient {
    pub(crate) fn register(r: &Registry) -> RestClient {
        RestClient {
            requests: r.register(Desc::counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                &["code", "host", "method"],
            )),
            latency: r.register(Desc::histogram(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
                &["host", "verb"],
                LATENCY.to_vec(),
            )),
            request_size: r.register(Desc::histogram(
                "rest_client_request_size_bytes",
                "Request size in bytes. Broken down by verb and host.",
                &["host", "verb"],
                SIZE.to_vec(),
            )),
            response_size: r.register(Desc::histogram(
                "rest_client_response_size_bytes",
                "Response size in bytes. Broken down by verb and host.",
                &["host", "verb"],
                SIZE.to_vec(),
            )),
            rate_limiter: r.register(Desc::histogram(
                "rest_client_rate_limiter_duration_seconds",
                "Client side rate limiter latency in seconds. Broken down by verb, and host.",
                &["host", "verb"],
                LATENCY.to_vec(),
            )),
        }
    }
}

impl proxy_status::RestObserver for RestClient {
    fn result(&self, code: Option<u16>, method: &str, host: &str) {
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.requests.inc(&[&code, host, method]);
    }

    fn latency(&self, verb: &str, host: &str, took: Duration) {
        self.latency.observe(&[host, verb], took.as_secs_f64());
    }

    fn request_size(&self, verb: &str, host: &str, bytes: u64) {
        self.request_size.observe(&[host, verb], bytes as f64);
    }

    fn response_size(&self, verb: &str, host: &str, bytes: u64) {
        self.response_size.observe(&[host, verb], bytes as f64);
    }

    fn rate_limiter(&self, verb: &str, host: &str, waited: Duration) {
        self.rate_limiter
            .observe(&[host, verb], waited.as_secs_f64());
    }
}
