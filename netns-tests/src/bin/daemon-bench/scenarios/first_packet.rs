//! Scenario `first-packet` (issue 24 item 5): what the first packet of a new TCP
//! connection costs through our rules, through upstream's nftables-mode table and with
//! no proxy at all.
//!
//! Setups, each a client -- node (router, conntrack on) -- endpoint line of its own
//! (`bench_cluster::topology`), all in the same run: **ours** (the release daemon from a
//! manifests file of `--services` uniform services plus one probe service whose only
//! endpoint is the endpoint namespace, `--proxy-mode nftables`: the peer's mode; and
//! again in iptables mode, the default, which adds iptables mode's forward rules and
//! upstream's `KUBE-FORWARD` in the iptables-nft `filter` table), **upstream** (upstream's nftables-mode table for
//! the same cluster, `nft -f`), **no proxy** (the client connects to the endpoint
//! directly; conntrack tracks through the host-firewall table every line has), and one
//! more per `--nft-file FILE` (a table loaded by hand, e.g. a variant of ours: its probe
//! must be the same). The client is in the cluster CIDR (198.18.100.0/24, given to both
//! proxies), so neither masquerades: a pod's connection to a ClusterIP.
//!
//! Metric: the TCP `connect()` round trip (SYN out -> SYN/ACK in) of a fresh connection,
//! timed around the syscall in the client namespace, each connection then reset
//! (`SO_LINGER` 0: no TIME_WAIT); batches of [`BATCH`] connections, the setups rotated
//! per round so that load drift falls on all of them alike; the node's conntrack table
//! flushed before each batch (so every batch starts from the same table).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::scale::{cluster_ip, scale_node, scale_service, scale_slice, service_port};
use netns_tests::bench::{loadavg, Daemon};
use netns_tests::bench_cluster::*;
use netns_tests::upstream::{nftables_mode, Port};
use netns_tests::{Line, Netns};
use serde_json::json;

use crate::options::Opts;
use crate::report::*;

/// Connections per batch.
pub const BATCH: usize = 500;
/// The clients' subnet, given to both proxies as the cluster CIDR.
const CLIENTS: &str = "198.18.100.0/24";

/// One setup: its line, where its client connects, what keeps it up.
struct Setup {
    name: String,
    line: Line,
    dst: SocketAddrV4,
    _daemon: Option<Daemon>,
    acceptor: Acceptor,
    rtt_us: Vec<f64>,
    /// Per round: the batch's median.
    batch_med: Vec<f64>,
    failed: usize,
}

pub fn first_packet(o: &Opts, dir: &Path) {
    let n = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(10_000);
    let m = o.endpoints;
    // the service CIDR below (198.18.0.0/18) must hold every cluster IP and stay clear
    // of the lines' subnets (198.18.100.0/24, 198.18.101.0/24)
    if n >= 16_000 {
        println!("\n== first-packet: at most 15,999 services (their cluster IPs and the probe's stay in 198.18.0.0/18)");
        return;
    }
    let want = o.connections.max(BATCH);
    let vip = probe_vip(n);
    let server: Ipv4Addr = SERVER_A.parse().expect("an address");
    header(
        "first-packet",
        &format!(
            "{n} x {m} + a probe service ({vip} -> {SERVER_A}:8080); client -- node (router, conntrack on) -- endpoint namespaces per setup; TCP connect() round trip of fresh connections from the client, {want} per setup in rotated batches of {BATCH}, the node's conntrack flushed before each batch"
        ),
    );
    let manifest = write_probe_manifest(dir, n, m);
    let up_file = dir.join(format!("kube-proxy-nftables-{n}-probe.nft"));
    write_synced(&up_file, upstream_table(n, m).as_bytes());

    let mut setups: Vec<Setup> = Vec::new();
    // ours: the daemon from the manifests file, left running, in nftables mode (the
    // peer's mode); in iptables mode (the default) as the fourth setup, below
    match ours(o, &manifest, "nftables", n) {
        Some(s) => setups.push(s),
        None => return,
    }
    // upstream: its nftables-mode table, loaded with nft -f
    {
        let line = topology();
        let out = line.router.exec("nft", &["-f", &up_file.to_string_lossy()]);
        if !out.status.success() {
            println!(
                "   upstream: nft -f failed: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            return;
        }
        setups.push(Setup::new("upstream", line, vip, None));
    }
    // no proxy: routing and conntrack only
    setups.push(Setup::new(
        "no proxy",
        topology(),
        SocketAddrV4::new(server, 8080),
        None,
    ));
    match ours(o, &manifest, "iptables", n) {
        Some(s) => setups.push(s),
        None => return,
    }
    for f in &o.nft_files {
        let line = topology();
        let out = line.router.exec("nft", &["-f", &f.to_string_lossy()]);
        if !out.status.success() {
            println!(
                "   {}: nft -f failed: {}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            return;
        }
        let name = f
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "file".into());
        setups.push(Setup::new(&name, line, vip, None));
    }
    // every setup answers before anything is timed
    for s in &setups {
        let dst = s.dst;
        let ok = s.line.client.run(move || {
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if connect_rtt(dst).is_some() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        if !ok {
            println!("   {}: {} does not answer; nothing measured", s.name, s.dst);
            return;
        }
        // a range of source ports wide enough that none repeats within a batch's
        // conntrack entries (the namespace's own sysctl, gone with it)
        s.line
            .client
            .sysctl("net.ipv4.ip_local_port_range", "1024 65000");
    }
    println!("   load before the batches: {}", loadavg());
    let k = setups.len();
    let rounds = want.div_ceil(BATCH);
    let t0 = Instant::now();
    for r in 0..rounds {
        for j in 0..k {
            let s = &mut setups[(r + j) % k];
            s.line.router.exec("conntrack", &["-F"]);
            let dst = s.dst;
            let (v, failed) = s.line.client.run(move || batch(dst, BATCH));
            s.failed += failed;
            s.batch_med.push(netns_tests::bench::median(&v));
            s.rtt_us.extend(v);
        }
        if (r + 1) % 10 == 0 || r + 1 == rounds {
            println!(
                "   round {}/{rounds}: {:.0} s  [load {}]",
                r + 1,
                t0.elapsed().as_secs_f64(),
                loadavg()
            );
        }
    }
    let mut meds = Vec::new();
    for s in &setups {
        let (p50, p99, max, cnt) = stats(s.rtt_us.clone());
        // a SYN or SYN/ACK lost is resent after 1 s: counted, not hidden
        let resent = s.rtt_us.iter().filter(|&&us| us >= 900_000.0).count();
        println!(
            "   {:<22} median {p50:.1} us, p99 {p99:.1} us, max {max:.0} us ({cnt} connections, {resent} of them >= 0.9 s (a SYN resent), {} failed)",
            s.name, s.failed
        );
        meds.push(p50);
    }
    // ratios of the pooled medians, and the median of the per-round ratios (each round's
    // batches ran back to back: the paired figure)
    let paired = |a: usize, b: usize| {
        let v: Vec<f64> = setups[a]
            .batch_med
            .iter()
            .zip(&setups[b].batch_med)
            .map(|(x, y)| x / y)
            .collect();
        netns_tests::bench::median(&v)
    };
    let (ru, rn) = (meds[0] / meds[1], meds[0] / meds[2]);
    println!(
        "   ours / upstream: {ru:.3}x (per round: {:.3}x; target <= 1.00x: {})",
        paired(0, 1),
        verdict(ru <= 1.0)
    );
    println!(
        "   ours / no proxy: {rn:.3}x (per round: {:.3}x; target <= 1.10x: {})",
        paired(0, 2),
        verdict(rn <= 1.10)
    );
    println!(
        "   upstream / no proxy: {:.3}x (per round: {:.3}x)",
        meds[1] / meds[2],
        paired(1, 2)
    );
    for (i, s) in setups.iter().enumerate().skip(3) {
        println!(
            "   {} / ours: {:.3}x (per round: {:.3}x); / no proxy: {:.3}x",
            s.name,
            meds[i] / meds[0],
            paired(i, 0),
            meds[i] / meds[2]
        );
    }
    for s in setups {
        s.acceptor.stop(&s.line.server);
    }
    footer();
}

/// Our daemon in its line, `--proxy-mode mode`, after its first sync; our table written
/// to the working directory (the base of variants loaded by hand with `--nft-file`).
fn ours(o: &Opts, manifest: &Path, mode: &str, n: u32) -> Option<Setup> {
    let line = topology();
    let args: Vec<String> = [
        "--manifests",
        &manifest.to_string_lossy(),
        "--hostname-override",
        NODE,
        "--cluster-cidr",
        CLIENTS,
        "--proxy-mode",
        mode,
        "-v=2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let d = Daemon::start(&line.router, &o.bin, &args).expect("start the daemon");
    if d.wait_sync(0, Duration::from_secs(600)).is_none() {
        println!("   ours ({mode} mode): no first sync:\n{}", d.tail(20));
        return None;
    }
    let dump = line
        .router
        .exec_ok("nft", &["list", "table", "ip", "kube-nlproxy"]);
    let to = PathBuf::from(format!("first-packet-ours-{mode}-{n}.nft"));
    if std::fs::write(&to, &dump).is_ok() {
        println!(
            "   wrote our table ({mode} mode) to {} ({} lines)",
            to.display(),
            dump.lines().count()
        );
    }
    let name = if mode == "nftables" {
        "ours".to_string()
    } else {
        format!("ours ({mode} mode)")
    };
    Some(Setup::new(&name, line, probe_vip(n), Some(d)))
}

/// The probe service's cluster IP and port (service `n`).
fn probe_vip(n: u32) -> SocketAddrV4 {
    SocketAddrV4::new(
        cluster_ip(n).parse().expect("a cluster IP"),
        service_port(n),
    )
}

impl Setup {
    fn new(name: &str, line: Line, dst: SocketAddrV4, daemon: Option<Daemon>) -> Setup {
        let acceptor = Acceptor::start(&line.server);
        Setup {
            name: name.to_string(),
            line,
            dst,
            _daemon: daemon,
            acceptor,
            rtt_us: Vec::new(),
            batch_med: Vec::new(),
            failed: 0,
        }
    }
}

/// `count` fresh connections to `dst` one after the other (from the calling thread's
/// namespace): their connect() round trips in microseconds, and how many failed.
fn batch(dst: SocketAddrV4, count: usize) -> (Vec<f64>, usize) {
    let mut v = Vec::with_capacity(count);
    let mut failed = 0;
    for _ in 0..count {
        match connect_rtt(dst) {
            Some(d) => v.push(d.as_secs_f64() * 1e6),
            None => failed += 1,
        }
    }
    (v, failed)
}

/// One fresh TCP connection to `dst`: the time connect() takes (SYN sent to SYN/ACK
/// received), the socket then reset. `None` if it failed (connect bounded by 2 s).
fn connect_rtt(dst: SocketAddrV4) -> Option<Duration> {
    // SAFETY: plain socket calls on a descriptor owned here; the structures passed are
    // initialised and their sizes given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        setsockopt(&fd, libc::SO_SNDTIMEO, &tv);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: dst.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*dst.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let t = Instant::now();
        let rc = libc::connect(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let d = t.elapsed();
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        setsockopt(&fd, libc::SO_LINGER, &l);
        (rc == 0).then_some(d)
    }
}

/// `setsockopt(SOL_SOCKET, opt, v)`, its result ignored (a timeout or linger not set
/// shows in the figures).
fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, v: &T) {
    // SAFETY: `v` is a valid T of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        );
    }
}

/// A listener on 0.0.0.0:8080 in the endpoint namespace accepting and dropping every
/// connection, until stopped.
struct Acceptor {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<()>,
}

impl Acceptor {
    fn start(ns: &Netns) -> Acceptor {
        let listener = ns.run(|| std::net::TcpListener::bind("0.0.0.0:8080").expect("bind 8080"));
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            for c in listener.incoming() {
                drop(c);
                if s.load(Ordering::Relaxed) {
                    break;
                }
            }
        });
        Acceptor { stop, handle }
    }

    /// Stop: flag it, then wake its accept with a connection from inside.
    fn stop(self, ns: &Netns) {
        self.stop.store(true, Ordering::Relaxed);
        ns.run(|| {
            let _ = std::net::TcpStream::connect_timeout(
                &"127.0.0.1:8080".parse().expect("an address"),
                Duration::from_secs(1),
            );
        });
        let _ = self.handle.join();
    }
}

/// The manifests file: the uniform cluster of `n` x `m` plus the probe service (index
/// `n`) with the endpoint namespace as its only endpoint.
fn write_probe_manifest(dir: &Path, n: u32, m: u32) -> PathBuf {
    let p = dir.join(format!("cluster-{n}x{m}-probe.json"));
    let mut probe = scale_slice(n, 1);
    probe["endpoints"][0]["addresses"] = json!([SERVER_A]);
    let mut items = vec![scale_node(NODE)];
    items.extend((0..=n).map(scale_service));
    items.extend((0..n).map(|i| scale_slice(i, m)));
    items.push(probe);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    write_synced(&p, list.as_bytes());
    // written long before the daemon starts, as deployed (see write_manifest)
    let past = std::time::SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&p)
        .and_then(|f| f.set_modified(past))
        .expect("set the manifests file's modification time");
    p
}

/// Upstream's nftables-mode table for the same cluster and probe, with the same cluster
/// CIDR as ours (the clients: no masquerade) and a service CIDR holding the cluster IPs.
fn upstream_table(n: u32, m: u32) -> String {
    let mut ports = upstream_ports(n, m);
    ports.push(Port {
        ns: format!("ns-{}", n % 100),
        svc: format!("svc-{n}"),
        name: "http".into(),
        proto: "tcp".into(),
        cluster_ip: cluster_ip(n),
        port: service_port(n),
        target: 8080,
        node_port: None,
        endpoints: vec![SERVER_A.parse().expect("an address")],
    });
    nftables_mode(&ports)
        .replace(
            &format!("ip saddr != {}", netns_tests::cluster::CLUSTER_CIDR4),
            &format!("ip saddr != {CLIENTS}"),
        )
        .replace(
            &format!("ip daddr {} drop", netns_tests::cluster::SERVICE_CIDR4),
            "ip daddr 198.18.0.0/18 drop",
        )
}
