//! The list-then-watch of one kind in protobuf (`application/vnd.kubernetes.protobuf`,
//! kube-proxy's default content type) or JSON, yielding what kube-rs' `watcher()` yields
//! (`Init`, `InitApply`, `InitDone`, `Apply`, `Delete` of [`Lenient`] objects, and
//! `watcher::Error`s), so that `kube_source`'s pump handles it as kube-rs' watcher.
//!
//! - A streamed list first, as client-go's reflector since 1.35: a watch with
//!   `sendInitialEvents=true` from the last synced version (`""` at first): its objects
//!   are the list's until the bookmark `k8s.io/initial-events-end`, then the same
//!   response is the watch. Refused (a server without the WatchList feature): list +
//!   watch for this round.
//! - Relists from the last synced version (client-go's `relistResourceVersion`), from
//!   the most recent state once the server called it expired or too large; a new stream
//!   of the kind (the pump's relist after a stall) too: the version is kept in the
//!   kind's [`Memory`], which outlives its streams.
//! - The list: `GET` with `Accept: application/vnd.kubernetes.protobuf, */*` (as
//!   client-go asks), the selectors and `resourceVersion` semantics of the
//!   `watcher::Config` the JSON path uses, read as the body arrives (`list_body`:
//!   protobuf through `kube-proto`'s `ListReader`, JSON through `json_list`'s scanner):
//!   each item is handed on as soon as its last byte arrived, never the whole list in
//!   memory. A `continue` token is followed (one list, no new `Init`).
//! - The watch: from the list's (then the last event's or bookmark's) resourceVersion,
//!   `watch=true&timeoutSeconds=...&allowWatchBookmarks=true`, through [`WatchReader`];
//!   the stream's end resumes from the last version, no byte for the timeout plus 5 s
//!   too (as kube-rs).
//! - 410 Gone (a watch's ERROR event, or the watch request refused with it): the error
//!   is yielded and the kind relisted. Other ERROR events are yielded and the watch goes
//!   on, as kube-rs' watcher does.
//! - An object that does not decode is a [`Lenient`] with its error (named from its
//!   metadata), never a failed list or watch.
//! - A server that answers `application/json` is read as JSON for that response (the
//!   list item by item, the watch line by line), and the kind asks for JSON from then
//!   on.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http_body::Body as _;
use kube::api::{Api, ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::{Request, Status};
use kube::runtime::watcher::{self, Event as WEvent, ListSemantic};
use kube::{Client, Resource};
use kube_model::lean::Decode;
use kube_proto::FromProto;
use serde::de::DeserializeOwned;
use tracing::{debug, info};

use crate::lenient::Lenient;

mod frames;
mod json_list;
mod list_body;
mod streamed;
use frames::{frames_fed, Decoded, Frames};
use list_body::{ListBody, Listed};

/// Kubernetes' protobuf media type (`clientConnection.contentType`'s default).
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What client-go's protobuf client accepts: protobuf, else whatever the server has.
pub const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, */*";
pub const JSON: &str = "application/json";

/// Beyond the watch's `timeoutSeconds`, how long a silent watch is waited for.
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(5);
/// The most of an error response's body read, or of a JSON watch line buffered.
const MAX_ERROR_BODY: usize = 1 << 20;
const MAX_JSON_LINE: usize = kube_proto::stream::MAX_ITEM;

/// The encoding the API client asks for (`clientConnection.contentType`,
/// `--kube-api-content-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Protobuf asked (JSON read when the server answers it): upstream's default.
    Protobuf,
    /// JSON asked.
    Json,
}

/// How the API client lists and watches: the encoding, and whether streamed lists are
/// tried first (client-go's `WatchListClient` gate, which kube-proxy registers into its
/// `--feature-gates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub wire: Wire,
    pub streaming: bool,
}

impl Wire {
    /// The wire for a configured content type: protobuf for Kubernetes' protobuf type,
    /// JSON for anything else (`application/json`).
    pub fn from_content_type(content_type: &str) -> Wire {
        match media_type(content_type).as_str() {
            PROTOBUF => Wire::Protobuf,
            _ => Wire::Json,
        }
    }
}

/// Why a protobuf list or watch could not be read, naming the request's path.
#[derive(Debug, thiserror::Error)]
pub enum ListWatchError {
    #[error("{path}: {source}")]
    Protobuf {
        path: String,
        source: kube_proto::Error,
    },
    #[error("{path}: JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {source}")]
    JsonList {
        path: String,
        source: json_list::JsonListError,
    },
    #[error("{path}: a response of content type {content_type:?}, neither protobuf nor JSON")]
    ContentType { path: String, content_type: String },
    #[error("{path}: a JSON watch line of over {max} bytes")]
    LineTooLong { path: String, max: usize },
}

impl ListWatchError {
    fn into_kube(self) -> kube::Error {
        kube::Error::Service(Box::new(self))
    }
}

/// `type/subtype` of a Content-Type, without parameters (`;stream=watch`), lowercased.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// What a response's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Protobuf,
    Json,
}

fn answer_of(resp: &http::Response<Body>, path: &str) -> Result<Answer, ListWatchError> {
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match media_type(ct).as_str() {
        PROTOBUF => Ok(Answer::Protobuf),
        JSON => Ok(Answer::Json),
        _ => Err(ListWatchError::ContentType {
            path: path.to_string(),
            content_type: ct.to_string(),
        }),
    }
}

/// The next data of a body (trailers skipped); `None` at its end.
async fn next_data(body: &mut Body) -> Option<Result<Bytes, kube::Error>> {
    loop {
        let frame = futures::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        match frame {
            Err(e) => return Some(Err(e)),
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    return Some(Ok(d));
                }
            }
        }
    }
}

/// A watch's connection closed mid-chunk: its end, as kube-rs takes it (resumed, no
/// error).
fn cut_short(e: &kube::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
            || err.to_string().contains("unexpected EOF during chunk")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// A watch response's next bytes; `None`: it ended (or went idle past its timeout plus
/// a margin, or its connection closed mid-chunk: resumed without an error, as kube-rs
/// does).
async fn watch_data(
    path: &str,
    timeout: Option<u32>,
    body: &mut Body,
) -> Result<Option<Bytes>, kube::Error> {
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + WATCH_IDLE_MARGIN;
    match tokio::time::timeout(idle, next_data(body)).await {
        Err(_) => {
            debug!(%path, "watch idle; resuming");
            Ok(None)
        }
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) if cut_short(&e) => {
            debug!(%path, error = %e, "watch cut short; resuming");
            Ok(None)
        }
        Ok(Some(r)) => r.map(Some),
    }
}

/// The server cannot serve from the resourceVersion asked: 410 (Expired, Gone) or a
/// version it has not reached (`ResourceVersionTooLarge`, a 504 Timeout whose cause
/// says so); client-go then asks for the most recent state.
fn unavailable_version(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 410
                || s.reason == "Expired"
                || s.reason == "Gone"
                || s.message.contains("Too large resource version")
        }
        _ => false,
    }
}

/// A whole body, up to `max` bytes (`None` beyond).
async fn collect(body: &mut Body, max: usize) -> Result<Option<Vec<u8>>, kube::Error> {
    let mut out = Vec::new();
    while let Some(d) = next_data(body).await {
        out.extend_from_slice(&d?);
        if out.len() > max {
            return Ok(None);
        }
    }
    Ok(Some(out))
}

/// A refused request (4xx, 5xx) as kube-rs reports it: the Status of its body (protobuf
/// or JSON), else one made of its code and text.
async fn refused(resp: http::Response<Body>) -> kube::Error {
    let code = resp.status().as_u16();
    let answer = answer_of(&resp, "");
    let mut body = resp.into_body();
    let bytes = match collect(&mut body, MAX_ERROR_BODY).await {
        Ok(b) => b.unwrap_or_default(),
        Err(e) => return e,
    };
    let status = match answer {
        Ok(Answer::Protobuf) => kube_proto::envelope::status(&bytes).ok().map(|s| Status {
            code: s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(code),
            message: s.message.unwrap_or_default(),
            reason: s.reason.unwrap_or_default(),
            ..Status::failure("", "")
        }),
        _ => serde_json::from_slice::<Status>(&bytes).ok(),
    };
    let status = status.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&bytes);
        Status::failure(text.trim(), "Failed to parse error data").with_code(code)
    });
    kube::Error::Api(status.boxed())
}

/// A request sent with `accept`; a refused one is an error.
async fn send(
    client: Client,
    accept: &'static str,
    req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<http::Response<Body>, kube::Error> {
    let mut req = req.map_err(kube::Error::BuildRequest)?;
    req.headers_mut()
        .insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
    let resp = client.send(req.map(Body::from)).await?;
    if resp.status().is_client_error() || resp.status().is_server_error() {
        return Err(refused(resp).await);
    }
    Ok(resp)
}

enum Phase<K> {
    /// Nothing listed: the next step starts a streamed list, or a list.
    Empty,
    /// A streamed list to request (a watch with `sendInitialEvents=true`).
    Stream,
    /// A streamed list being read: its objects until the bookmark that ends them,
    /// then the same response goes on as the watch.
    Streaming {
        body: Body,
        frames: Frames<K>,
        rv: String,
    },
    /// A list (or its next page) to request.
    List { r#continue: Option<String> },
    /// A list response being read, item by item.
    Listing {
        body: Body,
        reader: ListBody<K>,
        rv: Option<String>,
        r#continue: Option<String>,
    },
    /// Listed or watched up to this resourceVersion: the next watch starts there.
    Listed(String),
    Watching {
        body: Body,
        frames: Frames<K>,
        rv: String,
    },
}

type Item<K> = watcher::Result<WEvent<Lenient<K>>>;

struct Machine<K> {
    client: Client,
    path: String,
    config: watcher::Config,
    /// Whether to ask for JSON, and the version relists resume from: kept across the
    /// restarts of this kind's stream.
    memory: Arc<Memory>,
    /// Streamed lists are tried (client-go's `WatchListClient`, on by default since 1.35).
    streaming: bool,
    phase: Phase<K>,
    out: VecDeque<Item<K>>,
}

/// What one kind's list-then-watch keeps across the restarts of its stream (the pump
/// starts a new one when the kind stalls), as client-go's reflector keeps its fields
/// across `ListAndWatch` calls: whether the server answered the kind in JSON (then JSON
/// is asked), the last resourceVersion synced (relists and streamed lists resume from
/// it), and whether the server called that version unavailable.
#[derive(Debug, Default)]
pub struct Memory {
    json: AtomicBool,
    synced: Mutex<Synced>,
}

/// Where a kind's relist resumes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Synced {
    /// The last resourceVersion synced (a list's, an event's, a bookmark's).
    rv: Option<String>,
    /// The last resourceVersion is too old or too new for the server (it said Expired,
    /// Gone or too large): the next list is of the most recent state (`""`).
    unavailable: bool,
}

impl Memory {
    /// Nothing synced yet; JSON asked when `wire` says so.
    pub fn new(wire: Wire) -> Memory {
        Memory {
            json: AtomicBool::new(wire == Wire::Json),
            synced: Mutex::default(),
        }
    }

    /// The last resourceVersion synced, if any.
    pub fn last_synced(&self) -> Option<String> {
        self.synced().rv
    }

    fn synced(&self) -> Synced {
        self.synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Synced)) {
        f(&mut self.synced.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// The list-then-watch stream of one kind. `memory` is what the kind's streams share
/// across restarts: a new stream resumes from the version the last one synced, in the
/// encoding it settled on; `streaming`: try a streamed list first (falling back to list
/// + watch).
pub fn watch<K>(
    api: &Api<Lenient<K>>,
    config: watcher::Config,
    memory: Arc<Memory>,
    streaming: bool,
) -> impl Stream<Item = Item<K>> + Send + 'static
where
    K: FromProto + Resource<DynamicType = ()> + Decode + DeserializeOwned,
    K: Clone + Debug + Send + 'static,
{
    let m = Machine {
        client: api.clone().into_client(),
        path: api.resource_url().to_string(),
        config,
        memory,
        streaming,
        phase: Phase::Empty,
        out: VecDeque::new(),
    };
    futures::stream::unfold(m, |mut m| async move {
        let item = m.next().await;
        Some((item, m))
    })
}

impl<K> Machine<K>
where
    K: FromProto + Resource<DynamicType = ()> + Decode + DeserializeOwned,
    K: Clone + Debug + Send + 'static,
{
    async fn next(&mut self) -> Item<K> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return item;
            }
            let phase = std::mem::replace(&mut self.phase, Phase::Empty);
            self.phase = self.step(phase).await;
        }
    }

    fn accept(&self) -> &'static str {
        if self.memory.json.load(Ordering::Relaxed) {
            JSON
        } else {
            ACCEPT_PROTOBUF
        }
    }

    fn answered(&self, answer: Answer) {
        if answer == Answer::Json && !self.memory.json.swap(true, Ordering::Relaxed) {
            info!(path = %self.path, "the API server answers in JSON; reading JSON");
        }
    }

    /// client-go's `relistResourceVersion`: the configured semantic for the first list
    /// (`"0"`, the watch cache), the last synced version after that (not paged, so that
    /// the watch cache serves it), the most recent state when that version is
    /// unavailable.
    fn list_params(&self, r#continue: Option<String>) -> ListParams {
        let c = &self.config;
        let synced = self.memory.synced();
        let (resource_version, version_match, limit) = match (&synced.rv, &c.list_semantic) {
            _ if synced.unavailable => (None, None, c.page_size),
            (Some(rv), _) => (Some(rv.clone()), Some(VersionMatch::NotOlderThan), None),
            (None, ListSemantic::Any) => (
                Some("0".to_string()),
                Some(VersionMatch::NotOlderThan),
                c.page_size,
            ),
            (None, ListSemantic::MostRecent) => (None, None, c.page_size),
        };
        ListParams {
            label_selector: c.label_selector.clone(),
            field_selector: c.field_selector.clone(),
            resource_version,
            version_match,
            limit,
            continue_token: r#continue,
            ..ListParams::default()
        }
    }

    fn watch_params(&self, send_initial_events: bool) -> WatchParams {
        let c = &self.config;
        WatchParams {
            label_selector: c.label_selector.clone(),
            field_selector: c.field_selector.clone(),
            timeout: c.timeout,
            bookmarks: c.bookmarks || send_initial_events,
            send_initial_events,
        }
    }

    fn push(&mut self, item: Item<K>) {
        self.out.push_back(item);
    }

    fn list_failed(&mut self, e: kube::Error) -> Phase<K> {
        debug!(path = %self.path, error = %crate::error_chain(&e), "list failed");
        if unavailable_version(&e) {
            self.unavailable();
        }
        self.push(Err(watcher::Error::InitialListFailed(e)));
        Phase::Empty
    }

    async fn step(&mut self, phase: Phase<K>) -> Phase<K> {
        match phase {
            Phase::Empty => {
                self.push(Ok(WEvent::Init));
                if self.streaming {
                    Phase::Stream
                } else {
                    Phase::List { r#continue: None }
                }
            }
            Phase::Stream => self.start_stream().await,
            Phase::Streaming {
                mut body,
                mut frames,
                rv,
            } => match watch_data(&self.path, self.config.timeout, &mut body).await {
                Ok(Some(chunk)) => {
                    let events = frames_fed(&mut frames, &chunk, &self.path);
                    self.streamed(body, events, frames, rv)
                }
                Ok(None) => {
                    // the response ended before its initial events did: again, as
                    // client-go's watchList retries
                    debug!(path = %self.path, "streamed list ended early; again");
                    Phase::Empty
                }
                Err(e) => {
                    self.push(Err(watcher::Error::WatchFailed(e)));
                    Phase::Empty
                }
            },
            Phase::List { r#continue } => self.list(r#continue).await,
            Phase::Listing {
                mut body,
                mut reader,
                mut rv,
                mut r#continue,
            } => match next_data(&mut body).await {
                Some(Ok(chunk)) => match reader.feed(&chunk, &self.path) {
                    Ok(items) => {
                        for item in items {
                            match item {
                                Listed::Meta {
                                    resource_version,
                                    r#continue: c,
                                } => {
                                    rv = resource_version.filter(|s| !s.is_empty());
                                    r#continue = c.filter(|s| !s.is_empty());
                                }
                                Listed::Object(o) => self.push(Ok(WEvent::InitApply(o))),
                            }
                        }
                        Phase::Listing {
                            body,
                            reader,
                            rv,
                            r#continue,
                        }
                    }
                    Err(e) => self.list_failed(e.into_kube()),
                },
                Some(Err(e)) => self.list_failed(e),
                None => match reader.finish(&self.path) {
                    Err(e) => self.list_failed(e.into_kube()),
                    Ok(()) => self.listed(rv, r#continue),
                },
            },
            Phase::Listed(rv) => self.start_watch(rv).await,
            Phase::Watching {
                mut body,
                mut frames,
                rv,
            } => match watch_data(&self.path, self.config.timeout, &mut body).await {
                Ok(Some(chunk)) => {
                    let events = frames_fed(&mut frames, &chunk, &self.path);
                    self.watched(body, events, frames, rv)
                }
                Ok(None) => Phase::Listed(rv),
                Err(e) => {
                    self.push(Err(watcher::Error::WatchFailed(e)));
                    Phase::Listed(rv)
                }
            },
        }
    }

    /// Synced up to `rv` (a list, an event, a bookmark).
    fn synced(&self, rv: &str) {
        self.memory.update(|s| {
            s.rv = Some(rv.to_string());
            s.unavailable = false;
        });
    }

    /// The server cannot serve from the last synced version: relist the most recent
    /// state.
    fn unavailable(&self) {
        self.memory.update(|s| s.unavailable = true);
    }

    /// A list (page) requested; its body is read as it arrives.
    async fn list(&mut self, r#continue: Option<String>) -> Phase<K> {
        let req = Request::new(&self.path).list(&self.list_params(r#continue));
        let resp = match send(self.client.clone(), self.accept(), req).await {
            Ok(r) => r,
            Err(e) => return self.list_failed(e),
        };
        let answer = match answer_of(&resp, &self.path) {
            Ok(a) => a,
            Err(e) => return self.list_failed(e.into_kube()),
        };
        self.answered(answer);
        Phase::Listing {
            body: resp.into_body(),
            reader: ListBody::of(answer),
            rv: None,
            r#continue: None,
        }
    }

    /// A list response read to its end.
    fn listed(&mut self, rv: Option<String>, r#continue: Option<String>) -> Phase<K> {
        match (r#continue, rv) {
            (Some(c), _) => Phase::List {
                r#continue: Some(c),
            },
            (None, Some(rv)) => {
                self.synced(&rv);
                self.push(Ok(WEvent::InitDone));
                Phase::Listed(rv)
            }
            (None, None) => {
                self.push(Err(watcher::Error::NoResourceVersion));
                Phase::Empty
            }
        }
    }

    async fn start_watch(&mut self, rv: String) -> Phase<K> {
        let req = Request::new(&self.path).watch(&self.watch_params(false), &rv);
        let resp = match send(self.client.clone(), self.accept(), req).await {
            Ok(r) => r,
            Err(e) => {
                let gone = matches!(&e, kube::Error::Api(s) if s.code == 410);
                self.push(Err(watcher::Error::WatchStartFailed(e)));
                return if gone {
                    Phase::Empty
                } else {
                    Phase::Listed(rv)
                };
            }
        };
        match answer_of(&resp, &self.path) {
            Ok(answer) => {
                self.answered(answer);
                Phase::Watching {
                    body: resp.into_body(),
                    frames: Frames::of(answer),
                    rv,
                }
            }
            Err(e) => {
                self.push(Err(watcher::Error::WatchStartFailed(e.into_kube())));
                Phase::Listed(rv)
            }
        }
    }

    /// The events a watch's bytes completed, as kube-rs' watcher yields them.
    fn watched(
        &mut self,
        body: Body,
        events: Result<Vec<Decoded<K>>, ListWatchError>,
        frames: Frames<K>,
        mut rv: String,
    ) -> Phase<K> {
        let events = match events {
            Ok(ev) => ev,
            Err(e) => {
                // A broken frame cannot be resynchronised: watch again from here.
                self.push(Err(watcher::Error::WatchFailed(e.into_kube())));
                return Phase::Listed(rv);
            }
        };
        for ev in events {
            match ev {
                Decoded::Object { deleted, object } => {
                    let Some(v) = object
                        .meta()
                        .resource_version
                        .clone()
                        .filter(|v| !v.is_empty())
                    else {
                        self.push(Err(watcher::Error::NoResourceVersion));
                        return Phase::Empty;
                    };
                    rv = v;
                    self.synced(&rv);
                    self.push(Ok(if deleted {
                        WEvent::Delete(object)
                    } else {
                        WEvent::Apply(object)
                    }));
                }
                Decoded::Bookmark(v, _) => {
                    if let Some(v) = v.filter(|v| !v.is_empty()) {
                        rv = v;
                        self.synced(&rv);
                    }
                }
                Decoded::Error(status) => {
                    let gone = status.code == 410;
                    debug!(path = %self.path, code = status.code, reason = %status.reason, "watch error event");
                    self.push(Err(watcher::Error::WatchError(status)));
                    if gone {
                        return Phase::Empty;
                    }
                }
            }
        }
        Phase::Watching { body, frames, rv }
    }
}

#[cfg(test)]
mod tests;
