//! The Kubernetes source: watchers on this node, ServiceCIDRs, Services and
//! EndpointSlices, turned into engine events.
//!
//! - Lists and watches through [`list_watch`], in protobuf (kube-proxy's default content
//!   type) or JSON, as kube-rs' `watcher()` events handled by one pump.
//! - Each watcher streams its list (or lists), then watches from the list's resourceVersion (bookmarks asked,
//!   server-side `timeoutSeconds` = the watch timeout); a broken watch resumes, a 410 Gone
//!   relists. A relist is diffed against what this source had sent, so objects deleted
//!   during an outage are deleted then, and nothing else changes: an API outage never
//!   flushes rules.
//! - Nothing of an object is kept after it is sent: per object its key and
//!   resourceVersion (and this node's Node, the ServiceCIDRs' `spec.cidrs`).
//! - Objects are decoded one by one ([`Lenient`]): one that does not decode is skipped
//!   and named (namespace/name, the field error), never fails its list or watch; if a
//!   version of it was sent before, it is deleted, as an invalid object is.
//! - A kind with no progress (no list completed, no event, no bookmark, no response
//!   bytes) for [`Timing::stall_after`] is stalled: logged, reported to the engine
//!   ([`Event::SourceStalled`], kept in the status for information: no health answer
//!   depends on it, as upstream's health depends only on changes queued and not
//!   applied), and its watcher restarted: a relist from the last resourceVersion synced
//!   (kept across restarts, [`list_watch::Memory`]). Progress again: logged, reported
//!   ([`Event::SourceRecovered`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::{self, Event as WEvent};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use kube_model::lean::Decode;
use kube_proto::FromProto;
use proxy_events::Event;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::api_client::{Progress, Timing};
use crate::events::{self, EventSender};
use crate::lenient::Lenient;
use crate::list_watch::{self, Reading};

/// Objects proxied by another proxy, and headless services, are not even listed.
pub const LABEL_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

/// How every kind is listed, as client-go's reflector lists for kube-proxy's informers:
/// `resourceVersion=0` (any version, not older than 0), which the API server answers from
/// its watch cache, in one response whatever `limit` says (the cache ignores the limit
/// of such a list), instead of kube-rs' default quorum read that etcd pages by 500 and
/// the client's rate limit then spaces out (`--kube-api-qps` applies to every page).
/// Watches still resume from the list's or the last event's resourceVersion. (kube-rs
/// sends `resourceVersion=0` only without a `limit`; client-go sends both and the cache
/// ignores the limit: the same answer.)
pub(crate) fn list_config() -> watcher::Config {
    watcher::Config {
        page_size: None,
        ..watcher::Config::default().any_semantic()
    }
}

/// Backoff between attempts: 0.5 s doubling up to [`Timing::backoff_max`]; back to
/// 0.5 s only after a quiet period of 4 x the maximum (a watcher reports a success at
/// the start of each attempt, which must not reset a failing series).
struct Backoff {
    pacing: proxy_status::Backoff,
    max: Duration,
    last: Option<Instant>,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            pacing: proxy_status::Backoff::new(Duration::from_millis(500).min(max), max),
            max,
            last: None,
        }
    }
}

impl Iterator for Backoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        self.last = Some(Instant::now());
        Some(self.pacing.fail())
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        if self.last.is_none_or(|t| t.elapsed() > self.max * 4) {
            self.pacing.reset();
        }
    }
}

/// The event for a deleted object, from its namespace and name.
type Deleted = dyn FnMut(Option<&str>, &str) -> Option<Event> + Send;

/// How one resource kind maps to engine events.
struct Kind<K> {
    name: &'static str,
    /// The event for a new or changed object (None: nothing to send).
    applied: Box<dyn FnMut(K) -> Option<Event> + Send>,
    /// The event for a deleted object, from its namespace and name.
    deleted: Box<Deleted>,
    /// Sent after every complete list.
    listed: Option<Event>,
    /// Whether a missing or forbidden resource is normal (ServiceCIDR on older servers):
    /// then it never counts as stalled before its first list.
    optional: bool,
}

fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(_) => kube_model::ns_key(meta).to_string(),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// What a pump knows of its kind: the objects sent (key -> resourceVersion), and the
/// undecodable versions already reported.
#[derive(Default)]
struct Known {
    sent: BTreeMap<String, String>,
    reported: BTreeSet<(String, String)>,
    seen: Option<BTreeSet<String>>,
    lists: u64,
}

impl<K> Kind<K> {
    /// One object from a list or a watch; the events to send.
    fn object(&mut self, known: &mut Known, o: Lenient<K>, out: &mut Vec<Event>) {
        let k = key(&o.meta);
        let rv = o.meta.resource_version.clone().unwrap_or_default();
        if let Some(s) = known.seen.as_mut() {
            s.insert(k.clone());
        }
        match o.decoded {
            Ok(obj) => {
                if known.sent.get(&k) == Some(&rv) && known.seen.is_some() {
                    return; // relisted, unchanged
                }
                known.sent.insert(k, rv);
                out.extend((self.applied)(obj));
            }
            Err(e) => {
                if known.reported.insert((k.clone(), rv)) {
                    warn!(kind = self.name, object = %k, error = %e, "object does not decode; skipped");
                }
                if known.sent.remove(&k).is_some() {
                    out.extend((self.deleted)(
                        o.meta.namespace.as_deref(),
                        o.meta.name.as_deref().unwrap_or(""),
                    ));
                }
            }
        }
    }

    fn gone(&mut self, known: &mut Known, meta: &ObjectMeta, out: &mut Vec<Event>) {
        let k = key(meta);
        if known.sent.remove(&k).is_some() {
            out.extend((self.deleted)(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or(""),
            ));
        }
    }

    fn list_done(&mut self, known: &mut Known, out: &mut Vec<Event>) {
        let seen = known.seen.take().unwrap_or_default();
        let gone: Vec<String> = known
            .sent
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in &gone {
            known.sent.remove(k);
            let (ns, name) = match k.split_once('/') {
                Some((ns, n)) => (Some(ns), n),
                None => (None, k.as_str()),
            };
            out.extend((self.deleted)(ns, name));
        }
        known.reported.retain(|(k, _)| seen.contains(k));
        known.lists += 1;
        if known.lists == 1 {
            info!(kind = self.name, objects = known.sent.len(), "listed");
        } else {
            info!(
                kind = self.name,
                objects = known.sent.len(),
                deleted = gone.len(),
                "relisted"
            );
        }
        out.extend(self.listed.clone());
    }
}

/// Watch one kind and forward it to the engine, restarting the watcher (a relist) when
/// it makes no progress. `first_list` fires after the first complete list (or, for an
/// optional kind, its first failure).
#[allow(clippy::too_many_arguments)]
async fn pump<K>(
    api: Api<Lenient<K>>,
    reading: Reading,
    config: watcher::Config,
    mut kind: Kind<K>,
    t: Timing,
    progress: Arc<Progress>,
    tx: EventSender,
    mut first_list: Option<tokio::sync::oneshot::Sender<()>>,
) where
    K: Resource<DynamicType = ()> + FromProto + Clone + DeserializeOwned + Decode + Debug,
    K: Send + 'static,
{
    let mut known = Known::default();
    let mut last_progress = Instant::now();
    let mut stalled = false;
    let mut last_error: Option<String> = None;
    // Kept across the watcher's restarts: JSON asked once the server answered this kind
    // in JSON, and the last version synced, which a stall's relist resumes from (as
    // client-go's reflector keeps `lastSyncResourceVersion`), not from the watch cache's
    // possibly older state.
    let memory = Arc::new(list_watch::Memory::new(reading.wire));
    loop {
        let config = config.clone().timeout(t.watch.as_secs() as u32);
        let stream = list_watch::watch(&api, config, memory.clone(), reading.streaming)
            .backoff(Backoff::new(t.backoff_max));
        futures::pin_mut!(stream);
        let started = Instant::now();
        loop {
            let api_progress = progress.last(kind.name).unwrap_or(last_progress);
            let since = last_progress.max(api_progress);
            let deadline = since.max(started) + t.stall_after;
            let item = tokio::select! {
                item = stream.next() => item,
                _ = tokio::time::sleep_until(deadline.into()) => {
                    if progress.last(kind.name).is_some_and(|p| p > since) {
                        continue; // bytes arrived meanwhile
                    }
                    if !(kind.optional && known.lists == 0) {
                        if !stalled {
                            stalled = true;
                            warn!(
                                kind = kind.name,
                                no_progress_s = since.elapsed().as_secs(),
                                last_error = last_error.as_deref().unwrap_or("none"),
                                from_resource_version = memory.last_synced().as_deref().unwrap_or("none"),
                                "source stalled: no progress from the API; relisting (rules unchanged)"
                            );
                            if !tx.send_async(Event::SourceStalled { source: kind.name.into(), since }).await {
                                return;
                            }
                        } else {
                            debug!(kind = kind.name, "still stalled; relisting");
                        }
                    }
                    break; // a new watcher: relist
                }
            };
            let Some(item) = item else { break };
            let mut out = Vec::new();
            match item {
                Ok(WEvent::Init) => known.seen = Some(BTreeSet::new()),
                Ok(ev) => {
                    last_progress = Instant::now();
                    last_error = None;
                    if stalled {
                        stalled = false;
                        info!(kind = kind.name, "source recovered");
                        out.push(Event::SourceRecovered {
                            source: kind.name.into(),
                        });
                    }
                    match ev {
                        WEvent::Init => {}
                        WEvent::InitApply(o) | WEvent::Apply(o) => {
                            kind.object(&mut known, o, &mut out)
                        }
                        WEvent::Delete(o) => kind.gone(&mut known, &o.meta, &mut out),
                        WEvent::InitDone => {
                            kind.list_done(&mut known, &mut out);
                            if let Some(f) = first_list.take() {
                                let _ = f.send(());
                            }
                        }
                    }
                }
                Err(e) => {
                    let msg = crate::error_chain(&e);
                    if kind.optional && known.lists == 0 {
                        if last_error.is_none() {
                            info!(kind = kind.name, error = %msg, "not available; retrying in the background");
                        }
                        if let Some(f) = first_list.take() {
                            let _ = f.send(());
                        }
                    } else {
                        warn!(kind = kind.name, error = %msg, "watch failed; retrying with backoff (rules unchanged)");
                    }
                    last_error = Some(msg);
                }
            }
            for ev in out {
                if !tx.send_async(ev).await {
                    return; // the engine is gone
                }
            }
        }
    }
}

/// Why the source stopped for good (the daemon exits 1, as kube-proxy's NodeManager
/// fails its start).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `detectLocalMode: NodeCIDR` and the node got no podCIDRs in time.
    #[error("timeout waiting for PodCIDR allocation on node {0:?}")]
    NoPodCidrs(String),
    /// `detectLocalMode: NodeCIDR` and the node does not exist.
    #[error("timeout waiting for node {0:?} to exist")]
    NoNode(String),
}

/// Watch this node, the ServiceCIDRs, then Services and EndpointSlices, forwarding
/// everything to `tx`. The node's and the ServiceCIDRs' first lists complete before the
/// others start, so the engine knows the node (addresses, labels, podCIDRs) and the
/// service CIDRs before its first sync. `reading`: protobuf (kube-proxy's default) or
/// JSON, streamed lists or not.
pub async fn run(
    client: Client,
    reading: Reading,
    node_name: String,
    t: Timing,
    progress: Arc<Progress>,
    tx: EventSender,
) {
    let _ = run_with(client, reading, node_name, None, t, progress, tx).await;
}

/// The node's podCIDRs (its `spec.podCIDRs`), if any.
fn has_pod_cidrs(n: &Option<Node>) -> bool {
    n.as_ref()
        .and_then(|n| n.spec.as_ref())
        .and_then(|s| s.pod_cidrs.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// [`run`], and with `wait_pod_cidrs` (`detectLocalMode: NodeCIDR`) Services and
/// EndpointSlices are not listed before the node has podCIDRs, as kube-proxy's
/// NodeManager waits for them (`pkg/proxy/nodemanager`, 5 minutes, polled every second)
/// before its proxier starts: no sync runs without local-traffic detection. None
/// within the bound: [`SourceError`].
pub async fn run_with(
    client: Client,
    reading: Reading,
    node_name: String,
    wait_pod_cidrs: Option<Duration>,
    t: Timing,
    progress: Arc<Progress>,
    tx: EventSender,
) -> Result<(), SourceError> {
    let node_last: Arc<std::sync::Mutex<Option<Node>>> = Arc::default();
    let watched = node_last.clone();
    let (n1, n2) = (node_last.clone(), node_last);
    let node_kind = Kind::<Node> {
        name: "node",
        applied: Box::new(move |n| {
            *n1.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.clone());
            Some(Event::NodeApplied(n))
        }),
        deleted: Box::new(move |_, _| {
            let n = n2.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            Some(events::node_deleted(n))
        }),
        listed: None,
        optional: false,
    };
    // ServiceCIDRs parsed here, once: a malformed object is refused (named, once) and
    // its last good value kept; the engine gets the union as typed CIDRs.
    let cidrs: Arc<std::sync::Mutex<kube_model::ServiceCidrs>> = Arc::default();
    let (c1, c2) = (cidrs.clone(), cidrs);
    let cidr_kind = Kind::<ServiceCIDR> {
        name: "servicecidr",
        applied: Box::new(move |c: ServiceCIDR| {
            let mut m = c1.lock().unwrap_or_else(|e| e.into_inner());
            let u = m.apply(&c);
            if let Some(e) = &u.refused {
                tracing::warn!(object = %e.object(), error = %e,
                    "Invalid ServiceCIDR ignored; its last good value is kept");
            }
            u.changed.map(Event::ServiceCidrs)
        }),
        deleted: Box::new(move |_, name| {
            let mut m = c2.lock().unwrap_or_else(|e| e.into_inner());
            m.delete(name).map(Event::ServiceCidrs)
        }),
        listed: None,
        optional: true,
    };
    let svc_kind = Kind::<Service> {
        name: "service",
        applied: Box::new(|s| Some(Event::ServiceApplied(s))),
        deleted: Box::new(|ns, name| Some(events::service_deleted(ns, name))),
        listed: Some(Event::ServicesListed),
        optional: false,
    };
    let slice_kind = Kind::<EndpointSlice> {
        name: "endpointslice",
        applied: Box::new(|s| Some(Event::SliceApplied(s))),
        deleted: Box::new(|ns, name| Some(events::slice_deleted(ns, name))),
        listed: Some(Event::SlicesListed),
        optional: false,
    };

    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let node_task = tokio::spawn(pump(
        Api::<Lenient<Node>>::all(client.clone()),
        reading,
        list_config().fields(&format!("metadata.name={node_name}")),
        node_kind,
        t,
        progress.clone(),
        tx.clone(),
        Some(first_tx),
    ));
    if first_rx.await.is_err() {
        return Ok(());
    }
    let node_now = || watched.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(bound) = wait_pod_cidrs.filter(|_| !has_pod_cidrs(&node_now())) {
        info!(node = %node_name, "Waiting for the node's PodCIDRs (detect-local-mode NodeCIDR)");
        let deadline = tokio::time::Instant::now() + bound;
        while !has_pod_cidrs(&node_now()) {
            if tokio::time::Instant::now() >= deadline {
                node_task.abort();
                return Err(match node_now() {
                    None => SourceError::NoNode(node_name),
                    Some(_) => SourceError::NoPodCidrs(node_name),
                });
            }
            tokio::time::sleep(Duration::from_secs(1).min(bound)).await;
        }
        info!(node = %node_name, "The node's PodCIDRs are allocated");
    }
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let cidr_task = tokio::spawn(pump(
        Api::<Lenient<ServiceCIDR>>::all(client.clone()),
        reading,
        list_config(),
        cidr_kind,
        t,
        progress.clone(),
        tx.clone(),
        Some(first_tx),
    ));
    let _ = first_rx.await;
    let svc_task = tokio::spawn(pump(
        Api::<Lenient<Service>>::all(client.clone()),
        reading,
        list_config().labels(LABEL_SELECTOR),
        svc_kind,
        t,
        progress.clone(),
        tx.clone(),
        None,
    ));
    let slice_task = tokio::spawn(pump(
        Api::<Lenient<EndpointSlice>>::all(client),
        reading,
        list_config().labels(LABEL_SELECTOR),
        slice_kind,
        t,
        progress,
        tx,
        None,
    ));
    let _ = futures::join!(node_task, cidr_task, svc_task, slice_task);
    Ok(())
}
