//! The clusters, changes and hosts of `daemon-bench` (see its documentation and
//! docs/benchmarks.md): the synthetic cluster of `integration::scale` as a manifests
//! file, loaded into the API-server double, and as upstream kube-proxy's generators see
//! it; the changes applied to it; the client -- node -- server namespaces of the
//! end-to-end scenario.

use std::path::{Path, PathBuf};
use std::time::Duration;

use integration::scale::{scale_manifest, scale_node, scale_service, scale_slice};
use integration::ApiServer;
use serde_json::{json, Value};

use crate::upstream::Port;
use crate::{addr, veth, Line, Netns};

/// The node the daemon runs as.
pub const NODE: &str = "node-a";

///
/// Its modification time is set a minute back: the daemon waits for a file written less
/// than a settle window (up to 2 s) before its first read, in case a writer is half-way
/// through it (docs/operations.md, manifests); a manifest deployed to a node was written long before
/// the daemon starts, and that wait is not what `cold` measures. Without this, the first
/// run of every invocation was 1.7-1.8 s slower than the others (docs/benchmarks.md).
pub fn write_manifest(dir: &Path, n: u32, m: u32) -> PathBuf {
    let p = dir.join(format!("cluster-{n}x{m}.json"));
    if !p.exists() {
        write_synced(&p, scale_manifest(NODE, n, m).as_bytes());
        let past = std::time::SystemTime::now() - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(past))
            .expect("set a benchmark input file's modification time");
    }
    p
}

/// Write a benchmark's input file and wait until it is on disk: the writeback of a
/// freshly written file (tens of MB) otherwise competes with the first timed run.
pub fn write_synced(p: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(p).expect("create a benchmark input file");
    f.write_all(bytes).expect("write a benchmark input file");
    f.sync_all().expect("sync a benchmark input file");
}

/// The API-server double listening inside a namespace. Dropped there: its accept
/// thread is woken by a connection to its own address, which only reaches it from
/// inside (otherwise the thread, and every object it holds, would stay).
pub struct NsApi {
    api: Option<ApiServer>,
    netns: String,
}

impl std::ops::Deref for NsApi {
    type Target = ApiServer;
    fn deref(&self) -> &ApiServer {
        self.api.as_ref().expect("running")
    }
}

impl Drop for NsApi {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            let path = format!("/run/netns/{}", self.netns);
            let _ = std::thread::spawn(move || {
                if let Ok(f) = std::fs::File::open(&path) {
                    use std::os::fd::AsRawFd;
                    // SAFETY: a valid namespace fd; setns affects only this thread.
                    unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
                }
                drop(api);
            })
            .join();
        }
    }
}

/// The API-server double, listening inside `ns`, holding the node, `n` services and
/// their slices of `m` endpoints. Drop it before `ns`.
pub fn api_in(ns: &Netns, n: u32, m: u32) -> NsApi {
    api_with(ns, |api| {
        api.apply(scale_node(NODE));
        for i in 0..n {
            api.apply(scale_service(i));
            api.apply(scale_slice(i, m));
        }
    })
}

/// The API-server double, listening inside `ns`, holding what `load` applies to it.
/// Drop it before `ns`.
pub fn api_with(ns: &Netns, load: impl FnOnce(&ApiServer)) -> NsApi {
    api_on(ns, std::net::Ipv4Addr::LOCALHOST.into(), load)
}

/// The name (`comm`) of the double's threads: its accept thread is started from a thread
/// of this name, and the kernel gives a new thread its creator's name, so every thread
/// of the double (one per connection) carries it (`top -H`, `perf`); their CPU time is
/// `ApiServer::cpu`'s.
pub const DOUBLE_THREADS: &str = "api-double";

/// The API-server double, listening on `ip` (an address of `ns`) inside `ns`, holding
/// what `load` applies to it; its threads are named [`DOUBLE_THREADS`]. Drop it before
/// `ns`.
pub fn api_on(ns: &Netns, ip: std::net::IpAddr, load: impl FnOnce(&ApiServer)) -> NsApi {
    let api = ns.run(move || {
        crate::bench::name_thread(DOUBLE_THREADS);
        ApiServer::start_on(std::net::SocketAddr::new(ip, 0))
    });
    load(&api);
    NsApi {
        api: Some(api),
        netns: ns.name().to_string(),
    }
}

/// The synthetic cluster as upstream's generators see it.
pub fn upstream_ports(n: u32, m: u32) -> Vec<Port> {
    (0..n)
        .map(|i| Port {
            ns: format!("ns-{}", i % 100),
            svc: format!("svc-{i}"),
            name: "http".into(),
            proto: "tcp".into(),
            cluster_ip: integration::scale::cluster_ip(i),
            port: integration::scale::service_port(i),
            target: 8080,
            node_port: None,
            endpoints: (0..m)
                .map(|j| {
                    integration::scale::endpoint_ip(i * m + j)
                        .parse()
                        .expect("an address")
                })
                .collect(),
        })
        .collect()
}

/// The slice of service `i` with its first endpoint's address replaced by `addr`.
pub fn replaced(mut slice: Value, addr: &str) -> Value {
    slice["endpoints"][0]["addresses"] = json!([addr]);
    slice
}

/// The slice with one more endpoint at `addr`.
pub fn plus_one(mut slice: Value, addr: &str) -> Value {
    let mut ep = slice["endpoints"][0].clone();
    ep["addresses"] = json!([addr]);
    ep["targetRef"]["name"] = json!(format!("extra-{addr}"));
    if let Some(a) = slice["endpoints"].as_array_mut() {
        a.push(ep);
    }
    slice
}

pub const SERVER_A: &str = "198.18.101.2";
pub const SERVER_B: &str = "198.18.101.3";

/// client (198.18.100.2) -- node (the daemon's namespace, forwarding, conntrack on) --
/// server (198.18.101.2 and .3): subnets clear of the synthetic cluster's cluster IPs
/// (198.18.0.1 up to 198.18.99.255 below 25,600 services) and endpoints (from
/// 198.18.128.0), which the daemon's rules reject or rewrite.
pub fn topology() -> Line {
    let client = Netns::new("bec");
    let router = Netns::new("ben");
    let server = Netns::new("bes");
    veth(&client, "eth0", &router, "c0");
    veth(&server, "eth0", &router, "s0");
    addr(&client, "eth0", "198.18.100.2/24");
    addr(&router, "c0", "198.18.100.1/24");
    addr(&router, "s0", "198.18.101.1/24");
    addr(&server, "eth0", &format!("{SERVER_A}/24"));
    addr(&server, "eth0", &format!("{SERVER_B}/24"));
    client.ip(&["route", "add", "default", "via", "198.18.100.1"]);
    server.ip(&["route", "add", "default", "via", "198.18.101.1"]);
    router.sysctl("net.ipv4.ip_forward", "1");
    router.enable_conntrack();
    Line {
        client,
        router,
        server,
    }
}

/// A TCP server in `ns` on 0.0.0.0:8080 answering each connection with the address it
/// was reached at, then closing it. Runs until the namespace goes.
pub fn identity_server(ns: &Netns) {
    let listener = ns.run(|| std::net::TcpListener::bind("0.0.0.0:8080").expect("bind 8080"));
    std::thread::spawn(move || {
        use std::io::Write;
        for mut c in listener.incoming().flatten() {
            let me = c
                .local_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default();
            let _ = c.write_all(me.as_bytes());
        }
    });
}

/// Who answers a new connection to `dst` (from the calling thread's namespace).
pub fn who(dst: std::net::SocketAddr) -> Option<String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect_timeout(&dst, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
