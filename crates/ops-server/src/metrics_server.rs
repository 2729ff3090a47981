//! The metrics port's paths, as kube-proxy's `serveMetrics` installs them
//! (`cmd/kube-proxy/app/server.go`): `/metrics` (format negotiated from `Accept`),
//! component-base's `/healthz` and `/healthz/ping` (`ok`), `/metrics/slis` (the health
//! checks' SLI metrics), `/proxyMode`, `/configz`, `/statusz` and `/flagz` (when their
//! gates are on, [`crate::zpages`]), `/debug/pprof/...` and `/debug/flags/v` with
//! `enableProfiling` ([`crate::debug`]); anything else is Go's `404 page not found`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use crate::expo::{negotiate, Desc, Family, Format, Registry, Stability};
use crate::metrics::Metrics;

/// What the metrics port says about the running proxy.
#[derive(Debug, Clone, Default)]
pub struct ProxyInfo {
    /// The configured mode (`nftables`, `iptables`, `ipvs`), for `/proxyMode`.
    pub mode: String,
    /// The effective configuration as JSON, for `/configz`.
    pub config_json: String,
    /// `/statusz` (gate ComponentStatusz): `None` leaves the path unregistered (404).
    pub statusz: Option<crate::zpages::Statusz>,
    /// `/flagz` (gate ComponentFlagz): the flags, name and value; `None`: unregistered.
    pub flagz: Option<Vec<(String, String)>>,
    /// `--profiling` / `enableProfiling`: `/debug/pprof/...` and `/debug/flags/v`
    /// ([`crate::debug`]); `None` leaves them unregistered (404).
    pub debug: Option<crate::debug::DebugHandlers>,
}

struct Ctx {
    metrics: Arc<Metrics>,
    info: ProxyInfo,
    slis: Registry,
    sli_gauge: Arc<Family>,
    sli_total: Arc<Family>,
    /// flagz's body, drawn once per process as upstream caches it.
    flagz_body: String,
}

fn text(code: StatusCode, body: String) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// Go's `http.NotFound`.
pub async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404 page not found\n".into())
}

/// The router of the metrics port.
pub fn metrics_router(metrics: Arc<Metrics>, info: ProxyInfo) -> Router {
    let slis = Registry::default();
    let sli_gauge = slis.register(
        Desc::gauge(
            "kubernetes_healthcheck",
            "This metric records the result of a single healthcheck.",
            &["name", "type"],
        )
        .stability(Stability::Stable),
    );
    let sli_total = slis.register(
        Desc::counter(
            "kubernetes_healthchecks_total",
            "This metric records the results of all healthcheck.",
            &["name", "status", "type"],
        )
        .stability(Stability::Stable),
    );
    let flagz_body = info.flagz.as_ref().map_or_else(String::new, |f| {
        crate::zpages::flagz_text("kube-proxy", f, crate::zpages::random_delimiter())
    });
    let (has_statusz, has_flagz) = (info.statusz.is_some(), info.flagz.is_some());
    let debug = info.debug;
    let ctx = Arc::new(Ctx {
        metrics,
        info,
        slis,
        sli_gauge,
        sli_total,
        flagz_body,
    });
    let mut r = Router::new();
    if has_statusz {
        r = r.route("/statusz", any(statusz));
    }
    if has_flagz {
        r = r.route("/flagz", any(flagz));
    }
    if let Some(h) = debug {
        r = r.merge(crate::debug::router(h).with_state(()));
    }
    r.route("/metrics", any(serve_metrics))
        .route("/metrics/slis", any(serve_slis))
        .route("/healthz", any(healthz))
        .route("/healthz/ping", any(ping))
        .route("/proxyMode", any(proxy_mode))
        .route("/configz", any(configz))
        .fallback(not_found)
        .with_state(ctx)
}

fn format_of(headers: &HeaderMap) -> Format {
    negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

fn exposition(format: Format, body: String) -> Response {
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

async fn serve_metrics(State(ctx): State<Arc<Ctx>>, headers: HeaderMap) -> Response {
    let f = format_of(&headers);
    exposition(f, ctx.metrics.encode(f))
}

async fn serve_slis(State(ctx): State<Arc<Ctx>>, headers: HeaderMap) -> Response {
    let f = format_of(&headers);
    exposition(f, ctx.slis.encode(f))
}

/// component-base's healthz with its one check, `ping` (always ok): `ok`, or with
/// `?verbose` each check and the verdict.
async fn healthz(State(ctx): State<Arc<Ctx>>, RawQuery(q): RawQuery) -> Response {
    ctx.sli_gauge.set(&["ping", "healthz"], 1.0);
    ctx.sli_total.inc(&["ping", "success", "healthz"]);
    let verbose = q
        .as_deref()
        .unwrap_or("")
        .split('&')
        .any(|kv| kv.split('=').next() == Some("verbose"));
    if verbose {
        text(StatusCode::OK, "[+]ping ok\nhealthz check passed\n".into())
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

async fn ping() -> Response {
    text(StatusCode::OK, "ok".into())
}

async fn proxy_mode(State(ctx): State<Arc<Ctx>>) -> Response {
    text(StatusCode::OK, ctx.info.mode.clone())
}

/// configz: every registered configuration under its group name.
async fn configz(State(ctx): State<Arc<Ctx>>) -> Response {
    let body = format!(
        "{{\"kubeproxy.config.k8s.io\":{}}}",
        if ctx.info.config_json.is_empty() {
            "{}"
        } else {
            &ctx.info.config_json
        }
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
        ],
        body,
    )
        .into_response()
}

fn zpage(
    headers: &HeaderMap,
    kind: &str,
    body: impl FnOnce() -> String,
    json: impl FnOnce(&str) -> String,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match crate::zpages::negotiate(accept, kind) {
        Some(crate::zpages::Media::TextPlain) => text(StatusCode::OK, body()),
        Some(crate::zpages::Media::Json(v)) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                format!("application/json;v={v};g=config.k8s.io;as={kind}"),
            )],
            json(v),
        )
            .into_response(),
        None => text(StatusCode::NOT_ACCEPTABLE, "not acceptable\n".into()),
    }
}

async fn statusz(State(ctx): State<Arc<Ctx>>, headers: HeaderMap) -> Response {
    let Some(s) = ctx.info.statusz.as_ref() else {
        return not_found().await;
    };
    let now = std::time::SystemTime::now();
    zpage(
        &headers,
        "Statusz",
        || crate::zpages::statusz_text(s, now, crate::zpages::random_delimiter()),
        |v| crate::zpages::statusz_json(s, now, v),
    )
}

async fn flagz(State(ctx): State<Arc<Ctx>>, headers: HeaderMap) -> Response {
    zpage(
        &headers,
        "Flagz",
        || ctx.flagz_body.clone(),
        |v| {
            let flags = ctx.info.flagz.as_deref().unwrap_or_default();
            crate::zpages::flagz_json("kube-proxy", flags, v)
        },
    )
}
