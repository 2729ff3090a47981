//! The Kubernetes source: kube-rs watchers on Services, EndpointSlices and this node.
//!
//! Each watcher lists, then watches from the list's resourceVersion; after a 410 Gone or
//! a broken watch it relists (kube-runtime's watcher) with exponential backoff. A relist
//! is diffed against what this source had sent, so objects deleted during an outage are
//! deleted then, and nothing else changes: an API outage never flushes rules.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::Sender;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, watcher, Event as WEvent};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use sync_engine::Event;
use tracing::{debug, info, warn};

use crate::settings::KubeSettings;

/// Objects proxied by another proxy, and headless services, are not even listed.
pub const LABEL_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

/// A client from `--kubeconfig` / `--master` / in-cluster configuration, rate limited by
/// `--kube-api-qps` / `--kube-api-burst`.
pub async fn client(s: &KubeSettings) -> anyhow::Result<Client> {
    let mut cfg = match (&s.kubeconfig, &s.master) {
        (Some(path), master) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {path}"))?;
            let mut c = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {path}"))?;
            if let Some(m) = master {
                c.cluster_url = m.parse().with_context(|| format!("--master {m}"))?;
            }
            c
        }
        (None, Some(m)) => kube::Config::new(m.parse().with_context(|| format!("--master {m}"))?),
        (None, None) => match kube::Config::incluster() {
            Ok(c) => c,
            Err(e) => {
                debug!(error = %e, "not in a cluster; trying the default kubeconfig");
                kube::Config::infer()
                    .await
                    .context("no in-cluster configuration and no kubeconfig (use --kubeconfig, --master or --manifests)")?
            }
        },
    };
    // Watches are long polls: no read timeout on the connection (the server ends them).
    cfg.read_timeout = None;
    let qps = if s.qps == 0.0 { 5.0 } else { s.qps };
    let burst = if s.burst <= 0 { 10 } else { s.burst };
    let builder = kube::client::ClientBuilder::try_from(cfg.clone())
        .context("building the API client")?
        .with_layer(&crate::rest_metrics::RestMetricsLayer::new(
            &cfg.cluster_url,
        ));
    let client = if qps < 0.0 {
        builder.build()
    } else {
        builder
            .with_layer(&RateLimitLayer::new(f64::from(qps), burst as u32))
            .build()
    };
    Ok(client)
}

/// A token bucket in front of the API client (client-go's QPS and burst).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    qps: f64,
    burst: u32,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimitLayer {
            qps,
            burst: burst.max(1),
        }
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            qps: self.qps,
            burst: f64::from(self.burst),
            tokens: f64::from(self.burst),
            last: Instant::now(),
            ready: false,
            sleep: None,
        }
    }
}

pub struct RateLimit<S> {
    inner: S,
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    ready: bool,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S, R> tower_service::Service<R> for RateLimit<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.ready {
            if let Some(s) = self.sleep.as_mut() {
                if s.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let now = Instant::now();
            let refill = now.duration_since(self.last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.last = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                self.ready = true;
            } else {
                let wait = (1.0 - self.tokens) / self.qps;
                self.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_secs_f64(
                    wait.clamp(0.001, 3600.0),
                ))));
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.ready = false;
        self.inner.call(req)
    }
}

fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or(""),
        o.meta().name.as_deref().unwrap_or("")
    )
}

/// How one resource kind maps to engine events.
struct Kind<K> {
    name: &'static str,
    applied: fn(K) -> Event,
    deleted: fn(K) -> Event,
    listed: Option<Event>,
}

/// Forward one watcher stream to the engine. `first_list` fires after the first
/// complete list.
async fn pump<K, St>(
    stream: St,
    kind: Kind<K>,
    tx: Sender<Event>,
    mut first_list: Option<tokio::sync::oneshot::Sender<()>>,
) where
    K: Resource + Clone,
    St: Stream<Item = Result<WEvent<K>, watcher::Error>>,
{
    let mut store: BTreeMap<String, K> = BTreeMap::new();
    let mut seen: Option<BTreeSet<String>> = None;
    let mut lists = 0u64;
    let send = |ev: Event| tx.send(ev).is_ok();
    futures::pin_mut!(stream);
    while let Some(item) = stream.next().await {
        let ok = match item {
            Ok(WEvent::Init) => {
                seen = Some(BTreeSet::new());
                true
            }
            Ok(WEvent::InitApply(o)) => {
                let k = key_of(&o);
                if let Some(s) = seen.as_mut() {
                    s.insert(k.clone());
                }
                let same = store
                    .get(&k)
                    .is_some_and(|old| old.resource_version() == o.resource_version());
                store.insert(k, o.clone());
                same || send((kind.applied)(o))
            }
            Ok(WEvent::InitDone) => {
                let seen = seen.take().unwrap_or_default();
                let gone: Vec<String> = store
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                let mut ok = true;
                for k in &gone {
                    if let Some(o) = store.remove(k) {
                        ok &= send((kind.deleted)(o));
                    }
                }
                lists += 1;
                if lists == 1 {
                    info!(kind = kind.name, objects = store.len(), "listed");
                } else {
                    info!(
                        kind = kind.name,
                        objects = store.len(),
                        deleted = gone.len(),
                        "relisted"
                    );
                }
                if let Some(l) = &kind.listed {
                    ok &= send(l.clone());
                }
                if let Some(f) = first_list.take() {
                    let _ = f.send(());
                }
                ok
            }
            Ok(WEvent::Apply(o)) => {
                store.insert(key_of(&o), o.clone());
                send((kind.applied)(o))
            }
            Ok(WEvent::Delete(o)) => {
                store.remove(&key_of(&o));
                send((kind.deleted)(o))
            }
            Err(e) => {
                warn!(kind = kind.name, error = %e, "watch failed; retrying with backoff (rules unchanged)");
                true
            }
        };
        if !ok {
            return; // the engine is gone
        }
    }
}

fn node_deleted(mut n: Node) -> Event {
    if n.metadata.deletion_timestamp.is_none() {
        n.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    }
    Event::NodeApplied(n)
}

/// Watch this node, then Services and EndpointSlices, forwarding everything to `tx`.
/// The node's first list completes before the others start, so the engine knows the
/// node (addresses, labels, podCIDRs) before its first sync.
pub async fn run(client: Client, node_name: String, tx: Sender<Event>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node_stream = watcher(
        nodes,
        watcher::Config::default().fields(&format!("metadata.name={node_name}")),
    )
    .default_backoff();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let node_task = tokio::spawn(pump(
        node_stream,
        Kind {
            name: "node",
            applied: Event::NodeApplied,
            deleted: node_deleted,
            listed: None,
        },
        tx.clone(),
        Some(first_tx),
    ));
    if first_rx.await.is_err() {
        return;
    }
    let services: Api<Service> = Api::all(client.clone());
    let svc_task = tokio::spawn(pump(
        watcher(services, watcher::Config::default().labels(LABEL_SELECTOR)).default_backoff(),
        Kind {
            name: "service",
            applied: Event::ServiceApplied,
            deleted: Event::ServiceDeleted,
            listed: Some(Event::ServicesListed),
        },
        tx.clone(),
        None,
    ));
    let slices: Api<EndpointSlice> = Api::all(client);
    let slice_task = tokio::spawn(pump(
        watcher(slices, watcher::Config::default().labels(LABEL_SELECTOR)).default_backoff(),
        Kind {
            name: "endpointslice",
            applied: Event::SliceApplied,
            deleted: Event::SliceDeleted,
            listed: Some(Event::SlicesListed),
        },
        tx,
        None,
    ));
    let _ = futures::join!(node_task, svc_task, slice_task);
}

/// The service CIDRs of the cluster, from its `ServiceCIDR` objects
/// (networking.k8s.io/v1), listed once at start: traffic to an address inside them that
/// no Service holds is dropped. An API server without them (or without permission) gives
/// none, and that check is left out, as in kube-proxy.
pub async fn service_cidrs(client: &kube::Client) -> Vec<String> {
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    let api: kube::Api<ServiceCIDR> = kube::Api::all(client.clone());
    match api.list(&Default::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .flat_map(|s| s.spec.and_then(|sp| sp.cidrs).unwrap_or_default())
            .collect(),
        Err(e) => {
            tracing::info!(error = %e, "no ServiceCIDR objects listed; unallocated ClusterIPs are not dropped");
            Vec::new()
        }
    }
}
