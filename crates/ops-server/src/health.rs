//! `/healthz` and `/livez`, as kube-proxy serves them on healthzBindAddress
//! (`pkg/proxy/healthcheck/proxy_health.go`).
//!
//! Both answer JSON `{"lastUpdated", "currentTime", "healthy", "status": {family:
//! {"lastUpdated", "healthy"}}}` (`status` once a family has synced); `/healthz` adds
//! `"nodeEligible"`. Unhealthy (503) when a change has been queued for more than
//! 2 x syncPeriod without being applied; `/healthz` is also 503 while the node is being
//! deleted or carries the `ToBeDeletedByClusterAutoscaler` taint. Nothing else: an API
//! server that hangs or fails queues no change and changes neither. As in kube-proxy, the
//! top-level `lastUpdated` is the current time when healthy (older clients read it as
//! "the sync loop ran recently"), else the last sync.

use crate::metrics::Metrics;
use crate::status_source::StatusSource;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FamilyStatus {
    last_updated: String,
    healthy: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    last_updated: String,
    current_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    status: BTreeMap<&'static str, FamilyStatus>,
}

/// A time as Go's JSON encoding of `time.Time` writes it (RFC 3339 with the
/// nanoseconds' trailing zeros cut, UTC).
pub fn rfc3339(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_nanos(t).to_string();
    // "...:SS.nnnnnnnnnZ" -> "...:SS.nnnZ" / "...:SSZ"
    match s.strip_suffix('Z').and_then(|b| b.rsplit_once('.')) {
        Some((head, frac)) => {
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                format!("{head}Z")
            } else {
                format!("{head}.{frac}Z")
            }
        }
        None => s,
    }
}

/// Go's zero `time.Time`.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

struct Ctx<S> {
    source: S,
    families: Vec<&'static str>,
    metrics: Option<Arc<Metrics>>,
}

/// The router for `/healthz` and `/livez`. `families` are the IP families the proxy
/// serves (`"IPv4"`, `"IPv6"`), each reported under `status` once synced.
pub fn health_router<S: StatusSource>(
    source: S,
    families: Vec<&'static str>,
    metrics: Option<Arc<Metrics>>,
) -> Router {
    let ctx = Arc::new(Ctx {
        source,
        families,
        metrics,
    });
    Router::new()
        .route("/healthz", any(healthz::<S>))
        .route("/livez", any(livez::<S>))
        .fallback(crate::metrics_server::not_found)
        .with_state(ctx)
}

fn answer<S: StatusSource>(ctx: &Ctx<S>, with_node: bool) -> (StatusCode, Body) {
    let status = ctx.source.snapshot();
    let now: Instant = ctx.source.now();
    // Upstream's rule alone, for both: a change queued and not applied within the
    // health timeout. A source that stalled (the API server hangs or fails) queues
    // nothing: the rules in place are still right, so an outage of the control plane
    // does not take every node out of its load balancers at once.
    let healthy = status.healthy(now);
    let wall_now = SystemTime::now();
    let last = status.last_sync_wall.map(rfc3339);
    let eligible = status.node.as_ref().is_none_or(|n| n.eligible());
    let ok = healthy && (!with_node || eligible);
    let body = Body {
        last_updated: if ok {
            rfc3339(wall_now)
        } else {
            last.clone().unwrap_or_else(|| ZERO_TIME.into())
        },
        current_time: rfc3339(wall_now),
        node_eligible: with_node.then_some(eligible),
        healthy,
        status: match &last {
            None => BTreeMap::new(),
            Some(last) => ctx
                .families
                .iter()
                .map(|f| {
                    (
                        *f,
                        FamilyStatus {
                            last_updated: last.clone(),
                            healthy,
                        },
                    )
                })
                .collect(),
        },
    };
    (
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        body,
    )
}

fn respond(code: StatusCode, body: &Body) -> Response {
    let json = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (
                header::HeaderName::from_static("x-content-type-options"),
                "nosniff",
            ),
        ],
        json,
    )
        .into_response()
}

async fn healthz<S: StatusSource>(State(ctx): State<Arc<Ctx<S>>>) -> Response {
    let (code, body) = answer(&ctx, true);
    if let Some(m) = &ctx.metrics {
        m.healthz(code.as_u16());
    }
    respond(code, &body)
}

async fn livez<S: StatusSource>(State(ctx): State<Arc<Ctx<S>>>) -> Response {
    let (code, body) = answer(&ctx, false);
    if let Some(m) = &ctx.metrics {
        m.livez(code.as_u16());
    }
    respond(code, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_as_go_marshals_them() {
        let t = UNIX_EPOCH + Duration::new(1709210096, 0);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
        assert_eq!(
            rfc3339(t + Duration::from_nanos(123_400_000)),
            "2024-02-29T12:34:56.1234Z"
        );
        assert_eq!(
            rfc3339(t + Duration::from_nanos(5)),
            "2024-02-29T12:34:56.000000005Z"
        );
    }
}
