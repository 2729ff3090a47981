//! Daemon-level test support (no root needed):
//!
//! - [`ApiServer`]: an HTTP/1.1 Kubernetes API-server double on 127.0.0.1 that speaks the
//!   real list/watch wire protocol for services, endpointslices and nodes: lists carry a
//!   `resourceVersion`; watches resume from one, stream chunked JSON events
//!   (`ADDED`/`MODIFIED`/`DELETED`), send `BOOKMARK`s when asked, answer a compacted
//!   resourceVersion with a `410 Expired` ERROR event, and can drop every connection or
//!   refuse service for a while (an outage).
//! - [`daemon_binary!`] and [`Daemon`]: the `kube-nlproxy` binary cargo built for the
//!   test, run as a child process and killed on drop.

pub mod proto;
pub mod scale;
pub mod testdata;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The resources the double serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Res {
    Services,
    EndpointSlices,
    Nodes,
    ServiceCidrs,
}

impl Res {
    fn from_path(p: &str) -> Option<Res> {
        match p {
            "/api/v1/services" => Some(Res::Services),
            "/apis/discovery.k8s.io/v1/endpointslices" => Some(Res::EndpointSlices),
            "/api/v1/nodes" => Some(Res::Nodes),
            "/apis/networking.k8s.io/v1/servicecidrs" => Some(Res::ServiceCidrs),
            _ => None,
        }
    }
    fn of(obj: &Value) -> Res {
        match obj["kind"].as_str() {
            Some("Service") => Res::Services,
            Some("EndpointSlice") => Res::EndpointSlices,
            Some("Node") => Res::Nodes,
            Some("ServiceCIDR") => Res::ServiceCidrs,
            k => panic!("the double does not serve kind {k:?}"),
        }
    }
    fn list_kind(self) -> (&'static str, &'static str) {
        match self {
            Res::Services => ("ServiceList", "v1"),
            Res::EndpointSlices => ("EndpointSliceList", "discovery.k8s.io/v1"),
            Res::Nodes => ("NodeList", "v1"),
            Res::ServiceCidrs => ("ServiceCIDRList", "networking.k8s.io/v1"),
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Res::Services => "Service",
            Res::EndpointSlices => "EndpointSlice",
            Res::Nodes => "Node",
            Res::ServiceCidrs => "ServiceCIDR",
        }
    }
}

type ObjKey = (Res, String, String);

fn key_of(obj: &Value) -> ObjKey {
    (
        Res::of(obj),
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

#[derive(Debug, Clone)]
struct WatchEvent {
    rv: u64,
    res: Res,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct State {
    rv: u64,
    /// Each object with its serialized text (the API server's watch cache also keeps
    /// each object's serialization, so serving a list is copying bytes).
    objects: BTreeMap<ObjKey, (Value, String)>,
    events: Vec<WatchEvent>,
    /// Watches from a resourceVersion older than this get 410 Gone.
    compacted: u64,
    /// Outage: connections are accepted and closed at once.
    down: bool,
    /// Bumped to drop every open watch connection.
    epoch: u64,
    /// Request lines received (for assertions).
    requests: Vec<String>,
    /// Bodies of the POST requests received, with their paths.
    posts: Vec<(String, Value)>,
    bookmark_every: Option<Duration>,
    /// A dead peer: requests are read and never answered, open watches go silent.
    hang: bool,
    /// Watches answer their headers, then send nothing at all (no event, no bookmark,
    /// no end) while this is set; lists are answered.
    silent_watches: bool,
    /// When each event (by resourceVersion) was first written to a watch.
    sent: BTreeMap<u64, Instant>,
}

/// The API-server double. Stops when dropped.
pub struct ApiServer {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// The double listening on `ip` (a port of the kernel's choosing), e.g. a bridge's
    /// address that other network namespaces reach (`daemon-bench`'s fleet).
    pub fn start_on(ip: std::net::IpAddr) -> ApiServer {
        let listener = TcpListener::bind((ip, 0)).expect("bind the double's address");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new((
            Mutex::new(State {
                rv: 100,
                compacted: 0,
                bookmark_every: Some(Duration::from_millis(500)),
                ..State::default()
            }),
            Condvar::new(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                let sp = sp.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, st, sp);
                });
            }
        });
        ApiServer { addr, state, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (m, cv) = &*self.state;
        let r = f(&mut m.lock().unwrap_or_else(|e| e.into_inner()));
        cv.notify_all();
        r
    }

    /// Create or update an object (its kind picks the resource); returns its new
    /// resourceVersion.
    pub fn apply(&self, mut obj: Value) -> u64 {
        self.with(|s| {
            s.rv += 1;
            let rv = s.rv;
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            let key = key_of(&obj);
            let kind = if s.objects.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            let text = obj.to_string();
            s.objects.insert(key.clone(), (obj.clone(), text));
            s.events.push(WatchEvent {
                rv,
                res: key.0,
                kind,
                object: obj,
            });
            rv
        })
    }

    /// Delete an object by kind, namespace ("" for nodes) and name.
    /// Returns the deletion's resourceVersion.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> u64 {
        self.with(|s| {
            let res = Res::of(&json!({ "kind": kind }));
            let Some((mut obj, _)) = s.objects.remove(&(res, namespace.into(), name.into())) else {
                panic!("delete: no {kind} {namespace}/{name}");
            };
            s.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            s.events.push(WatchEvent {
                rv: s.rv,
                res,
                kind: "DELETED",
                object: obj,
            });
            s.rv
        })
    }

    /// Forget the event history: watches resuming from before now get 410 Gone.
    pub fn compact(&self) {
        self.with(|s| s.compacted = s.rv + 1);
    }

    /// Drop every open watch connection (abruptly, without the final chunk).
    pub fn drop_connections(&self) {
        self.with(|s| s.epoch += 1);
    }

    /// Start or end an outage: while down, connections are closed as soon as accepted.
    pub fn set_down(&self, down: bool) {
        self.with(|s| {
            s.down = down;
            s.epoch += 1;
        });
    }

    /// The request lines received so far.
    pub fn requests(&self) -> Vec<String> {
        self.with(|s| s.requests.clone())
    }

    /// The POST requests received so far: (path, JSON body).
    pub fn posts(&self) -> Vec<(String, Value)> {
        self.with(|s| s.posts.clone())
    }

    /// Start or end a hang: while hanging, connections are accepted and requests read
    /// but never answered, and open watches go silent (a dead peer, a stuck load
    /// balancer). Those connections stay open and silent for good; after the hang, new
    /// connections are served.
    pub fn set_hang(&self, hang: bool) {
        self.with(|s| s.hang = hang);
    }

    /// Make watches silent (headers, then nothing) or normal again.
    pub fn set_silent_watches(&self, silent: bool) {
        self.with(|s| s.silent_watches = silent);
    }

    /// When the event of resourceVersion `rv` was first written to a watch (waiting up
    /// to `timeout`): where benchmarks time a change from.
    pub fn sent_at(&self, rv: u64, timeout: Duration) -> Option<Instant> {
        let (m, cv) = &*self.state;
        let deadline = Instant::now() + timeout;
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(t) = s.sent.get(&rv) {
                return Some(*t);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            s = cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// How often a watch that asked for bookmarks gets one (`None`: never). The double
    /// sends one every 500 ms by default (tests want progress soon); the API server's
    /// watch cache sends one about every minute, which is what an idle measurement
    /// wants.
    pub fn set_bookmark_every(&self, every: Option<Duration>) {
        self.with(|s| s.bookmark_every = every);
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.set_down(true);
        let _ = TcpStream::connect(self.addr);
    }
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match h {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `obj` matches `labelSelector` (terms `k`, `!k`, `k=v`, `k!=v`) and
/// `fieldSelector` (`metadata.name=x`, `metadata.namespace=x`).
fn selected(obj: &Value, labels: &str, fields: &str) -> bool {
    let l = &obj["metadata"]["labels"];
    for term in labels.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some(k) = term.strip_prefix('!') {
            l.get(k).is_none()
        } else if let Some((k, v)) = term.split_once("!=") {
            l.get(k).and_then(Value::as_str) != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            l.get(k.trim_end_matches('=')).and_then(Value::as_str) == Some(v)
        } else {
            l.get(term).is_some()
        };
        if !ok {
            return false;
        }
    }
    for term in fields.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some((k, v)) = term.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim_end_matches('='), v);
        let actual = match k {
            "metadata.name" => obj["metadata"]["name"].as_str(),
            "metadata.namespace" => obj["metadata"]["namespace"].as_str(),
            _ => None,
        };
        if actual != Some(v) {
            return false;
        }
    }
    true
}

fn write_response(
    conn: &mut TcpStream,
    code: u16,
    reason: &str,
    body: &Value,
) -> std::io::Result<()> {
    write_text(conn, code, reason, &body.to_string())
}

fn write_text(conn: &mut TcpStream, code: u16, reason: &str, body: &str) -> std::io::Result<()> {
    write!(
        conn,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

fn chunk(conn: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    chunk_text(conn, &v.to_string())
}

fn chunk_text(conn: &mut TcpStream, line: &str) -> std::io::Result<()> {
    // one write: the chunk leaves in one segment (no Nagle wait between its pieces)
    conn.write_all(format!("{:x}\r\n{line}\n\r\n", line.len() + 1).as_bytes())?;
    conn.flush()
}

fn serve(
    mut conn: TcpStream,
    st: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let (m, cv) = &*st;
    let epoch = {
        let s = m.lock().unwrap_or_else(|e| e.into_inner());
        if s.down || stop.load(Ordering::SeqCst) {
            return Ok(()); // closed at once
        }
        s.epoch
    };
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut content_length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; content_length];
    if content_length > 0 {
        reader.read_exact(&mut body)?;
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    m.lock()
        .unwrap_or_else(|e| e.into_inner())
        .requests
        .push(request_line.trim().to_string());
    // A dead peer: hold the request unanswered while the hang lasts.
    {
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        if s.hang {
            // Held open and unanswered for good, like a connection to a dead peer
            // (until the double stops).
            while !stop.load(Ordering::SeqCst) {
                s = cv
                    .wait_timeout(s, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            return Ok(());
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if request_line.starts_with("POST ") {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        m.lock()
            .unwrap_or_else(|e| e.into_inner())
            .posts
            .push((path.to_string(), v.clone()));
        return write_response(&mut conn, 201, "Created", &v);
    }
    let mut q: BTreeMap<String, String> = BTreeMap::new();
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        q.insert(pct_decode(k), pct_decode(v));
    }
    let Some(res) = Res::from_path(path) else {
        return write_response(
            &mut conn,
            404,
            "Not Found",
            &json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}),
        );
    };
    let labels = q.get("labelSelector").cloned().unwrap_or_default();
    let fields = q.get("fieldSelector").cloned().unwrap_or_default();
    let watch = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    if !watch {
        let s = m.lock().unwrap_or_else(|e| e.into_inner());
        // Pages of `limit` items, as the API server serves a quorum list (`continue`
        // is the offset of the next page here); only the page's objects are copied.
        // A list at `resourceVersion=0` is served whole, as the API server's watch
        // cache serves it: the cache ignores `limit` for such lists.
        let from: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
        let from_cache = q.get("resourceVersion").map(String::as_str) == Some("0");
        let limit: usize = q
            .get("limit")
            .and_then(|l| l.parse().ok())
            .filter(|_| !from_cache)
            .unwrap_or(usize::MAX);
        let mut matching = s
            .objects
            .iter()
            .filter(|(k, (o, _))| k.0 == res && selected(o, &labels, &fields))
            .skip(from);
        let (kind, api) = res.list_kind();
        let mut body = String::new();
        for (i, (_, (_, text))) in matching.by_ref().take(limit).enumerate() {
            body.push(if i == 0 { '[' } else { ',' });
            body.push_str(text);
        }
        body.push_str(if body.is_empty() { "[]" } else { "]" });
        let more = matching.next().is_some();
        let mut meta = json!({"resourceVersion": s.rv.to_string()});
        if more {
            meta["continue"] = json!((from + limit).to_string());
        }
        drop(s);
        let head = json!({"kind": kind, "apiVersion": api, "metadata": meta}).to_string();
        // `{...,"items":[...]}`: the head without its closing brace, then the items.
        let body = format!("{},\"items\":{body}}}", &head[..head.len() - 1]);
        return write_text(&mut conn, 200, "OK", &body);
    }
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300));
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )?;
    conn.flush()?;
    {
        let s = m.lock().unwrap_or_else(|e| e.into_inner());
        if from < s.compacted {
            let msg = format!("too old resource version: {from} ({})", s.compacted);
            drop(s);
            chunk(
                &mut conn,
                &json!({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},
                    "status":"Failure","message": msg,"reason":"Expired","code":410}}),
            )?;
            write!(conn, "0\r\n\r\n")?;
            return conn.flush();
        }
    }
    let start = Instant::now();
    let mut last = from;
    let mut last_bookmark = Instant::now();
    let mut dead = false; // saw a hang: silent for good
    loop {
        let (pending, bm, gone) = {
            let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                dead |= s.hang;
                let gone = !dead && (s.epoch != epoch || s.down) || stop.load(Ordering::SeqCst);
                let mute = dead || s.silent_watches;
                // events are kept in resourceVersion order: skip the old ones by search
                let newer = s.events.partition_point(|e| e.rv <= last);
                let pending: Vec<WatchEvent> = s.events[newer..]
                    .iter()
                    .filter(|e| e.res == res && !mute)
                    .cloned()
                    .collect();
                let bm_due = bookmarks
                    && !mute
                    && s.bookmark_every
                        .is_some_and(|d| last_bookmark.elapsed() >= d);
                let ends = start.elapsed() >= timeout && !mute;
                if gone || !pending.is_empty() || bm_due || ends {
                    let rv = s.rv;
                    break (pending, if bm_due { Some(rv) } else { None }, gone);
                }
                s = cv
                    .wait_timeout(s, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if gone {
            // Abrupt drop: no terminating chunk.
            let _ = conn.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        for e in pending {
            last = e.rv;
            if selected(&e.object, &labels, &fields) {
                let text = json!({"type": e.kind, "object": e.object}).to_string();
                // taken before the write: the daemon may read the event before this
                // thread runs again
                let at = Instant::now();
                chunk_text(&mut conn, &text)?;
                let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
                s.sent.entry(e.rv).or_insert(at);
                drop(s);
                cv.notify_all();
            }
        }
        if let Some(rv) = bm {
            last_bookmark = Instant::now();
            last = last.max(rv);
            chunk(
                &mut conn,
                &json!({"type":"BOOKMARK","object":{"kind": res.kind(),
                    "apiVersion": res.list_kind().1, "metadata":{"resourceVersion": rv.to_string()}}}),
            )?;
        }
        let mute = dead || m.lock().unwrap_or_else(|e| e.into_inner()).silent_watches;
        if start.elapsed() >= timeout && !mute {
            write!(conn, "0\r\n\r\n")?;
            return conn.flush();
        }
    }
}

// ---------------------------------------------------------------------------------------
// objects

pub fn node(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "spec": {"podCIDRs": ["198.18.64.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
    })
}

/// A ClusterIP service with one TCP port.
pub fn service(ns: &str, name: &str, cluster_ip: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                 "ports": [{"name": "p", "port": port, "targetPort": port, "protocol": "TCP"}]}
    })
}

/// An IPv4 endpoint slice for `service` with ready endpoints on `node`.
pub fn slice(ns: &str, service: &str, name: &str, addrs: &[&str], port: u16, node: &str) -> Value {
    let eps: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}, "nodeName": node}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": port, "protocol": "TCP"}],
        "endpoints": eps
    })
}

// ---------------------------------------------------------------------------------------
// the daemon

/// The `kube-nlproxy` binary cargo built for the calling test target
/// (`CARGO_BIN_EXE_kube-nlproxy`): the daemon-level tests are test targets of the
/// `kube-nlproxy` package (see its Cargo.toml), so cargo rebuilds the daemon, with every
/// crate it depends on, before running them.
#[macro_export]
macro_rules! daemon_binary {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_kube-nlproxy"))
    };
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("nlp-it-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon; killed on drop. Its stderr (the log) goes to a file.
pub struct Daemon {
    child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(bin: &Path, args: &[&str], log: PathBuf) -> Daemon {
        Daemon::start_wrapped(bin, &[], args, log)
    }

    /// The daemon started through `wrapper` (a command that execs the rest, e.g.
    /// `prlimit --nofile=1024:1024 --`).
    pub fn start_wrapped(bin: &Path, wrapper: &[&str], args: &[&str], log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).expect("log file");
        // Unless a test picks them, the health and metrics servers listen on free
        // loopback ports, so parallel daemons never compete for kube-proxy's ports (port
        // 0 is refused by kube-proxy's validation).
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for flag in ["--healthz-bind-address", "--metrics-bind-address"] {
            if !args.iter().any(|a| a.starts_with(flag)) {
                args.extend([flag.to_string(), format!("127.0.0.1:{}", free_port())]);
            }
        }
        // syncs are logged at verbosity 2, as kube-proxy's
        if !args
            .iter()
            .any(|a| a.starts_with("--v") || a.starts_with("-v"))
        {
            args.push("--v=2".into());
        }
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("start kube-nlproxy");
        Daemon { child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET over HTTP/1.1 with a plain TCP stream: (status code, headers, body), or None if
/// nothing answers. Enough for our own small JSON and text responses.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((code, head.to_string(), body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Poll `cond` every 50 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file's text, or "" when it does not exist (yet).
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
