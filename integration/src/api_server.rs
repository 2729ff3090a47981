//! The double's handle, [`ApiServer`]: its server threads, and the knobs it turns on
//! the state (`store`).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cpu::{CpuMeter, ThreadsCpu};
use crate::http::{Meter, Traffic};
use crate::store::{key_of, Res, Shared, State, Stored, WatchEvent};

/// The API-server double. Stops when dropped.
pub struct ApiServer {
    addr: SocketAddr,
    state: Shared,
    stop: Arc<AtomicBool>,
    traffic: Meter,
    cpu: CpuMeter,
}

impl ApiServer {
    /// The double on a free port of 127.0.0.1.
    pub fn start() -> ApiServer {
        ApiServer::start_on("127.0.0.1:0".parse().expect("an address"))
    }

    /// The double on `addr` (port 0: a free port), e.g. an address every network
    /// namespace of a fleet can reach.
    pub fn start_on(addr: SocketAddr) -> ApiServer {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
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
        let traffic = Meter::default();
        let cpu = CpuMeter::default();
        let (st, sp, tr, cm) = (state.clone(), stop.clone(), traffic.clone(), cpu.clone());
        std::thread::spawn(move || {
            let _counted = cm.enter();
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (st, sp, tr, cm) = (st.clone(), sp.clone(), tr.clone(), cm.clone());
                std::thread::spawn(move || {
                    let _counted = cm.enter();
                    let _ = crate::serve::serve(conn, st, sp, tr);
                });
            }
        });
        ApiServer {
            addr,
            state,
            stop,
            traffic,
            cpu,
        }
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
    pub fn apply(&self, obj: Value) -> u64 {
        self.store(obj, None)
    }

    /// [`apply`](Self::apply), with `message` served as the object's protobuf message
    /// (not enveloped) instead of its own encoding: for bytes no encoder writes (a
    /// field of the wrong wire type, a truncated message). The message is served as
    /// given (its resourceVersion is not set).
    pub fn apply_encoded(&self, obj: Value, message: Vec<u8>) -> u64 {
        self.store(obj, Some(message))
    }

    fn store(&self, mut obj: Value, message: Option<Vec<u8>>) -> u64 {
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
            let stored = Stored::new(obj, message);
            s.objects.insert(key.clone(), stored.clone());
            s.events.push(WatchEvent {
                rv,
                res: key.0,
                kind,
                object: stored,
            });
            rv
        })
    }

    /// Delete an object by kind, namespace ("" for nodes) and name.
    /// Returns the deletion's resourceVersion.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> u64 {
        self.with(|s| {
            let res = Res::of(&json!({ "kind": kind }));
            let Some(gone) = s.objects.remove(&(res, namespace.into(), name.into())) else {
                panic!("delete: no {kind} {namespace}/{name}");
            };
            s.rv += 1;
            let mut obj = gone.value.clone();
            obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            s.events.push(WatchEvent {
                rv: s.rv,
                res,
                kind: "DELETED",
                object: Stored::new(obj, None),
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
        self.with(|s| s.requests.iter().map(|(_, line)| line.clone()).collect())
    }

    /// The request lines received so far, each with the address of the client that
    /// sent it (as it connected): a fleet's requests told apart per node.
    pub fn requests_by_peer(&self) -> Vec<(IpAddr, String)> {
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

    /// Answer JSON whatever the request accepts (`true`), as a server without protobuf
    /// for a type does, or negotiate again (`false`, the default). Requests already
    /// answered keep their encoding.
    /// Refuse streamed lists (a watch with `sendInitialEvents=true`) with 422, as
    /// apimachinery's ListOptions validation does when the WatchList feature is off.
    pub fn set_no_watch_list(&self, refuse: bool) {
        self.with(|s| s.no_watch_list = refuse);
    }

    pub fn set_json_only(&self, json_only: bool) {
        self.with(|s| s.json_only = json_only);
    }

    /// What the double has answered so far, per client address and content type.
    pub fn traffic(&self) -> Traffic {
        self.traffic.snapshot()
    }

    /// The CPU time the double's threads (the acceptor and one per connection) used so
    /// far: the ended ones' and the live ones', exact at the moment of the call (not the
    /// caller's, whose `apply` serializes objects on its own thread).
    pub fn cpu(&self) -> ThreadsCpu {
        self.cpu.read()
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
