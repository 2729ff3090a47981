//! `/healthz` and `/livez`, as kube-proxy serves them on healthzBindAddress.
//!
//! Both answer JSON `{"lastUpdated", "currentTime", "healthy", "status": {family:
//! {"lastUpdated", "healthy"}}}`; `/healthz` adds `"nodeEligible"`. Unhealthy (503) when a
//! change has been queued for more than 2 x syncPeriod without being applied; `/healthz`
//! is also 503 while the node is being deleted or carries the
//! `ToBeDeletedByClusterAutoscaler` taint.

use crate::metrics::Metrics;
use crate::StatusSource;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
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
    status: BTreeMap<&'static str, FamilyStatus>,
}

/// RFC 3339 with nanoseconds, UTC, as Go's JSON encoding of `time.Time` prints it.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_nanos(t).to_string()
}

struct Ctx<S> {
    source: S,
    families: Vec<&'static str>,
    metrics: Option<Arc<Metrics>>,
}

/// The router for `/healthz` and `/livez`. `families` are the IP families the proxy
/// serves (`"IPv4"`, `"IPv6"`), each reported under `status`.
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
        .route("/healthz", get(healthz::<S>))
        .route("/livez", get(livez::<S>))
        .with_state(ctx)
}

fn answer<S: StatusSource>(ctx: &Ctx<S>, with_node: bool) -> (StatusCode, Body) {
    let status = ctx.source.snapshot();
    let now: Instant = ctx.source.now();
    // /healthz also fails for a source stalled beyond the same bound (see
    // `Status::stale_source`); /livez follows upstream's rule alone.
    let healthy = status.healthy(now) && (!with_node || status.stale_source(now).is_none());
    let wall_now = SystemTime::now();
    // Before the first sync, kube-proxy reports the zero time as lastUpdated.
    let last = status
        .last_sync_wall
        .map(rfc3339)
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
    let eligible = status.node.as_ref().is_none_or(|n| n.eligible());
    let ok = healthy && (!with_node || eligible);
    let body = Body {
        last_updated: last.clone(),
        current_time: rfc3339(wall_now),
        node_eligible: with_node.then_some(eligible),
        healthy,
        status: ctx
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
