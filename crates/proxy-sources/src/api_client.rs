//! The Kubernetes API client: configuration (kubeconfig, `--master`, or, with neither,
//! the in-cluster configuration only, as kube-proxy: never the default kubeconfig),
//! vetted so that nothing in it can make the product run a program, and a transport
//! whose every request is bounded in time.
//!
//! - **No `exec`, no `auth-provider`**: kube-rs would run `users[].user.exec.command` or
//!   an auth provider's `cmd-path`; a kubeconfig whose selected user has either is refused
//!   before kube-rs sees it, naming the field and the alternatives.
//! - **Timeouts** ([`Timing`], from the watch timeout W, default 60 s): connect 10 s; response
//!   headers within min(W/2, 30 s); no byte for W x 5/4 on a connection ends it (watches
//!   ask the server for `timeoutSeconds=W`, so a healthy watch ends first); TCP keepalive
//!   after 30 s idle, probes every 10 s. Retries back off up to min(W/2, 30 s).
//! - **Progress** ([`Progress`]): the time the last response bytes of each resource kind
//!   arrived, read by the source to tell a quiet watch from a stalled one.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing::info;

use crate::rate_limit::RateLimitLayer;
use crate::rest_metrics::RestMetricsLayer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client [`client`] builds (for callers that hold one without naming kube-rs).
pub use kube::Client;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "kubeconfig {path}: user {user:?} has `{field}`, which runs a program \
         ({program}); kube-nlproxy never runs one. Use a token file (`tokenFile`), \
         client certificates (`client-certificate`/`client-key`), or run in the cluster \
         with the service account (no --kubeconfig)"
    )]
    RunsAProgram {
        path: String,
        user: String,
        field: &'static str,
        program: String,
    },
    #[error("--master {0}: not a URL")]
    Master(String),
    /// Neither `--kubeconfig` nor `--master` and no in-cluster environment: upstream's
    /// `rest.ErrNotInCluster`, and what it means here.
    #[error(
        "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and \
         KUBERNETES_SERVICE_PORT must be defined (without --kubeconfig or --master only the \
         in-cluster configuration is used, as by kube-proxy: KUBECONFIG and ~/.kube/config \
         are not read; give --kubeconfig, --master or --manifests)"
    )]
    NotInCluster,
    #[error("in-cluster configuration: {0}")]
    InCluster(String),
    #[error("API client: {0}")]
    Build(#[from] kube::Error),
}

/// The time bounds of API requests, all derived from the watch timeout W.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Server-side `timeoutSeconds` of every watch.
    pub watch: Duration,
    /// No byte received on a connection for this long ends it.
    pub read_idle: Duration,
    /// Response headers must arrive within this.
    pub response: Duration,
    /// Longest wait between two attempts.
    pub backoff_max: Duration,
    /// A kind with no progress (no list, no event, no bookmark) for this long is stalled.
    pub stall_after: Duration,
}

impl Timing {
    pub fn from_watch(w: Duration) -> Timing {
        let w = w.max(Duration::from_secs(1));
        let half = (w / 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
        Timing {
            watch: w,
            read_idle: w + (w / 4).max(Duration::from_secs(1)),
            response: half,
            backoff_max: half,
            stall_after: w * 2,
        }
    }
}

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Refuse a kubeconfig whose selected user would make kube-rs run a program.
fn vet(kc: &Kubeconfig, opts: &KubeConfigOptions, path: &str) -> Result<(), ClientError> {
    let context = opts
        .context
        .clone()
        .or_else(|| kc.current_context.clone())
        .unwrap_or_default();
    let user = opts.user.clone().or_else(|| {
        kc.contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone())
    });
    let Some(user) = user else { return Ok(()) };
    let Some(info) = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
    else {
        return Ok(());
    };
    let refuse = |field, program: String| ClientError::RunsAProgram {
        path: path.to_string(),
        user: user.clone(),
        field,
        program,
    };
    if let Some(exec) = &info.exec {
        return Err(refuse(
            "exec",
            exec.command.clone().unwrap_or_else(|| "no command".into()),
        ));
    }
    if let Some(p) = &info.auth_provider {
        let program = p
            .config
            .get("cmd-path")
            .cloned()
            .unwrap_or_else(|| format!("provider {:?}", p.name));
        return Err(refuse("auth-provider", program));
    }
    Ok(())
}

async fn from_kubeconfig(kc: Kubeconfig, path: &str) -> Result<kube::Config, ClientError> {
    let opts = KubeConfigOptions::default();
    vet(&kc, &opts, path)?;
    kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .map_err(|source| ClientError::Kubeconfig {
            path: path.to_string(),
            source,
        })
}

/// The client configuration: `--kubeconfig` (with `--master` overriding its server),
/// `--master` alone, else in-cluster, else the default kubeconfig (`KUBECONFIG` or
/// `~/.kube/config`). Every kubeconfig is vetted.
pub async fn config(
    kubeconfig: Option<&str>,
    master: Option<&str>,
) -> Result<kube::Config, ClientError> {
    let master_url = |m: &str| m.parse().map_err(|_| ClientError::Master(m.to_string()));
    match (kubeconfig, master) {
        (Some(path), m) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.to_string(),
                source,
            })?;
            let mut c = from_kubeconfig(kc, path).await?;
            if let Some(m) = m {
                c.cluster_url = master_url(m)?;
            }
            Ok(c)
        }
        (None, Some(m)) => Ok(kube::Config::new(master_url(m)?)),
        // kube-proxy's createClient: the in-cluster configuration only, never the
        // default kubeconfig (KUBECONFIG, ~/.kube/config), which on a node can be an
        // admin credential.
        (None, None) => {
            info!("Neither kubeconfig file nor master URL was specified, falling back to in-cluster config");
            let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
            if !set("KUBERNETES_SERVICE_HOST") || !set("KUBERNETES_SERVICE_PORT") {
                return Err(ClientError::NotInCluster);
            }
            kube::Config::incluster().map_err(|e| ClientError::InCluster(e.to_string()))
        }
    }
}

/// When response bytes of each resource kind last arrived.
#[derive(Debug, Default)]
pub struct Progress(Mutex<BTreeMap<&'static str, Instant>>);

impl Progress {
    pub fn touch(&self, kind: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind, Instant::now());
    }
    pub fn last(&self, kind: &str) -> Option<Instant> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .copied()
    }
}

/// The resource kind a request path is about (the names the source uses).
fn kind_of_path(path: &str) -> Option<&'static str> {
    let last = path.rsplit('/').next().unwrap_or("");
    match last {
        "services" => Some("service"),
        "endpointslices" => Some("endpointslice"),
        "nodes" => Some("node"),
        "servicecidrs" => Some("servicecidr"),
        _ => None,
    }
}

/// Bounds the wait for response headers and records body progress per kind.
#[derive(Clone)]
struct Guard<S> {
    inner: S,
    progress: Arc<Progress>,
    response: Duration,
}

/// A response body that notes every data frame in [`Progress`].
pub struct ProgressBody<B> {
    inner: B,
    kind: Option<&'static str>,
    progress: Arc<Progress>,
}

impl<B> Body for ProgressBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(f))), Some(k)) = (&r, self.kind) {
            if f.is_data() {
                self.progress.touch(k);
            }
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<S, ReqB, ResB> tower_service::Service<http::Request<ReqB>> for Guard<S>
where
    S: tower_service::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<ProgressBody<ResB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let kind = kind_of_path(req.uri().path());
        let fut = self.inner.call(req);
        let (progress, limit) = (self.progress.clone(), self.response);
        Box::pin(async move {
            let resp = tokio::time::timeout(limit, fut)
                .await
                .map_err(|_| format!("no response within {limit:?}"))?
                .map_err(Into::into)?;
            Ok(resp.map(|inner| ProgressBody {
                inner,
                kind,
                progress,
            }))
        })
    }
}

/// A client for `cfg` with the time bounds of `t`, rate limited by `--kube-api-qps` /
/// `--kube-api-burst` (0: the defaults 5/10; negative QPS: unlimited).
pub fn client(
    cfg: kube::Config,
    qps: f32,
    burst: i32,
    t: Timing,
    progress: Arc<Progress>,
) -> Result<kube::Client, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(3));
    http.set_nodelay(true);
    let https = cfg.rustls_https_connector_with_connector(http)?;
    let mut conn = hyper_timeout::TimeoutConnector::new(https);
    conn.set_read_timeout(Some(t.read_idle));
    conn.set_write_timeout(Some(t.response));
    conn.set_reset_reader_on_write(true);
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(t.read_idle)
        .build(conn);
    let guard = Guard {
        inner: hyper,
        progress,
        response: t.response,
    };
    let qps = if qps == 0.0 { 5.0 } else { qps };
    let burst = if burst <= 0 { 10 } else { burst };
    let limit = (qps >= 0.0)
        .then(|| RateLimitLayer::new(f64::from(qps), u32::try_from(burst).unwrap_or(10)));
    let service = tower::ServiceBuilder::new()
        .option_layer(limit)
        .layer(RestMetricsLayer::new(&cfg.cluster_url))
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .map_err(BoxError::from)
        .service(guard);
    info!(
        server = %cfg.cluster_url,
        watch_timeout_s = t.watch.as_secs(),
        read_idle_s = t.read_idle.as_secs_f32(),
        response_s = t.response.as_secs_f32(),
        "kubernetes API client"
    );
    Ok(kube::Client::new(service, cfg.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str) -> Kubeconfig {
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:1'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             users: [{{name: u, user: {user}}}, {{name: other, user: {{exec: {{command: x, apiVersion: client.authentication.k8s.io/v1}}}}}}]\n"
        );
        Kubeconfig::from_yaml(&text).unwrap()
    }

    #[test]
    fn programs_in_the_selected_user_are_refused() {
        let opts = KubeConfigOptions::default();
        let exec = kubeconfig(
            "{exec: {command: /bin/touch, args: [/tmp/x], apiVersion: client.authentication.k8s.io/v1}}",
        );
        let e = vet(&exec, &opts, "kc").unwrap_err().to_string();
        assert!(
            e.contains("`exec`") && e.contains("/bin/touch") && e.contains("tokenFile"),
            "{e}"
        );
        let ap = kubeconfig("{auth-provider: {name: gcp, config: {cmd-path: /usr/bin/gcloud}}}");
        let e = vet(&ap, &opts, "kc").unwrap_err().to_string();
        assert!(
            e.contains("`auth-provider`") && e.contains("/usr/bin/gcloud"),
            "{e}"
        );
        // Another (unselected) user's exec does not matter.
        assert!(vet(&kubeconfig("{token: abc}"), &opts, "kc").is_ok());
    }

    #[test]
    fn timing_bounds() {
        let t = Timing::from_watch(Duration::from_secs(60));
        assert_eq!(t.read_idle, Duration::from_secs(75));
        assert_eq!(t.response, Duration::from_secs(30));
        assert_eq!(t.stall_after, Duration::from_secs(120));
        assert!(
            t.read_idle > t.watch,
            "a healthy watch ends before the idle timeout"
        );
        let t = Timing::from_watch(Duration::from_secs(2));
        assert_eq!(t.response, Duration::from_secs(1));
        assert_eq!(
            kind_of_path("/apis/discovery.k8s.io/v1/endpointslices"),
            Some("endpointslice")
        );
        assert_eq!(
            kind_of_path("/apis/events.k8s.io/v1/namespaces/default/events"),
            None
        );
    }
}
