//! Live migration from kube-proxy to kube-nlproxy without loss (issue 13, item 5), on the
//! two-node namespace cluster (root only; see docs/migration.md).
//!
//! Node A runs kube-proxy's rules, built here in the shape upstream generates: (a)
//! iptables mode loaded with `iptables-restore` (KUBE-SERVICES, KUBE-SVC-/KUBE-SEP-/
//! KUBE-EXT- chains with upstream's hashes, DNAT, masquerade mark), (b) nftables mode
//! loaded with `nft -f` (table `ip kube-proxy`: service-ips and service-nodeports verdict
//! maps, per-service chains, numgen vmaps, per-endpoint DNAT chains). Established flows
//! stream through them: two UDP flows at ~200 datagrams/s each (ClusterIP, NodePort) and
//! a TCP connection exchanging a message every 20 ms. Then the real `kube-nlproxy` daemon
//! starts on node A (manifests mode, the same services and endpoints), takes over and
//! removes kube-proxy's rules, while new TCP connections and new UDP flows are probed in
//! a loop. Checked: no datagram lost and every established flow answered by the same pod
//! throughout (its conntrack entry, DNAT'ed by kube-proxy's rules, is the same entry
//! afterwards: our cleanup deletes only entries that were not DNAT'ed); the TCP
//! connection never breaks; every probe answered; afterwards only our
//! tables (and the host's) remain in `nft list tables`, no kube-proxy chain in
//! `iptables-save`.
//!
//! The daemon is `KUBE_NLPROXY_BIN` (.ci/run sets it to the release build), else the
//! debug build next to this test's binary (`cargo test --workspace` builds it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netns_tests::cluster::*;
use netns_tests::host_firewalls::{restore, DOCKER_FILTER_V4, DOCKER_FILTER_V6};
use netns_tests::upstream::{iptables_mode, nftables_mode, Port};
use netns_tests::{bins, require_root, wait_until, Netns};
use serde_json::{json, Value};

const WEB4: &str = "198.18.100.10";
const NP4: &str = "198.18.100.11";
const NODE_PORT: u16 = 30080;
/// The service port and pod port of the long-lived TCP stream.
const STREAM_PORT: u16 = 81;
const STREAM_TARGET: u16 = 8081;
const UDP_INTERVAL: Duration = Duration::from_millis(5);
const TCP_INTERVAL: Duration = Duration::from_millis(20);
/// Every loop of the test ends by then at the latest.
const MAX_RUN: Duration = Duration::from_secs(90);

/// The Services and EndpointSlices of `ports`, as the daemon reads them.
fn manifests(ports: &[Port]) -> Vec<Value> {
    let mut by_svc: BTreeMap<&str, Vec<&Port>> = BTreeMap::new();
    for p in ports {
        by_svc.entry(p.svc.as_str()).or_default().push(p);
    }
    let mut out = Vec::new();
    for (svc, ps) in by_svc {
        let np = ps.iter().any(|p| p.node_port.is_some());
        let sports: Vec<Value> = ps
            .iter()
            .map(|p| {
                let mut v = json!({"name": p.name, "port": p.port, "targetPort": p.target,
                    "protocol": p.proto.to_uppercase()});
                if let Some(n) = p.node_port {
                    v["nodePort"] = json!(n);
                }
                v
            })
            .collect();
        let mut spec = json!({
            "type": if np { "NodePort" } else { "ClusterIP" },
            "clusterIP": ps[0].cluster_ip, "clusterIPs": [ps[0].cluster_ip],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": sports,
        });
        if np {
            spec["externalTrafficPolicy"] = json!("Cluster");
        }
        out.push(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc, "namespace": "conf"}, "spec": spec}));
        let eps: Vec<Value> = ps[0]
            .endpoints
            .iter()
            .map(|ip| {
                let node = if ip.to_string().starts_with("198.18.1.") {
                    NODE_A
                } else {
                    NODE_B
                };
                json!({"addresses": [ip.to_string()], "nodeName": node,
                    "conditions": {"ready": true, "serving": true, "terminating": false}})
            })
            .collect();
        let eports: Vec<Value> = ps
            .iter()
            .map(|p| json!({"name": p.name, "port": p.target, "protocol": p.proto.to_uppercase()}))
            .collect();
        out.push(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{svc}-v4"), "namespace": "conf",
                "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4", "endpoints": eps, "ports": eports}),
        );
    }
    out
}

/// Run `f` on a new thread inside namespace `ns` (by name).
fn spawn_in<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let path = format!("/run/netns/{}", ns.name());
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid namespace fd; setns affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        f()
    })
}

/// A line-echo TCP server on [::]:STREAM_TARGET in a pod: every line comes back as
/// `POD LINE`. Ends with `stop`.
fn stream_server(pod: &Pod, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let name = pod.name.clone();
    spawn_in(&pod.ns, move || {
        let l = TcpListener::bind(("::", STREAM_TARGET)).unwrap();
        l.set_nonblocking(true).unwrap();
        let start = Instant::now();
        while !stop.load(Ordering::SeqCst) && start.elapsed() < MAX_RUN {
            match l.accept() {
                Ok((c, _)) => {
                    let (name, stop) = (name.clone(), stop.clone());
                    std::thread::spawn(move || {
                        c.set_nonblocking(false).unwrap();
                        c.set_read_timeout(Some(Duration::from_millis(200)))
                            .unwrap();
                        let mut w = c.try_clone().unwrap();
                        let mut r = BufReader::new(c);
                        let mut line = String::new();
                        while !stop.load(Ordering::SeqCst) && start.elapsed() < MAX_RUN {
                            match r.read_line(&mut line) {
                                Ok(0) => break,
                                Ok(_) => {
                                    if w.write_all(format!("{name} {line}").as_bytes()).is_err() {
                                        break;
                                    }
                                    line.clear();
                                }
                                Err(_) => {} // timeout: check stop
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    })
}

/// What one established UDP flow saw.
#[derive(Debug, Default)]
struct UdpFlow {
    sent: u64,
    /// seq -> pod that answered
    answers: BTreeMap<u64, String>,
}

/// One UDP flow (one socket, one source port) from the client to `dst`, a datagram
/// every UDP_INTERVAL until `stop`, then 1 s for the last answers. Returns the flow's
/// source port too.
fn udp_flow(ns: &Netns, dst: SocketAddr, stop: Arc<AtomicBool>) -> (u16, JoinHandle<UdpFlow>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = spawn_in(ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(dst).unwrap();
        tx.send(s.local_addr().unwrap().port()).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut f = UdpFlow::default();
        let mut buf = [0u8; 700];
        let start = Instant::now();
        let mut next = Instant::now();
        let mut drain_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if drain_until.is_none() && (stop.load(Ordering::SeqCst) || start.elapsed() > MAX_RUN) {
                drain_until = Some(now + Duration::from_secs(1));
            }
            if drain_until.is_some_and(|d| now > d) {
                break;
            }
            if drain_until.is_none() && now >= next {
                // an ICMP error would show as a send error: counted as sent, never answered
                let _ = s.send(format!("seq{}", f.sent).as_bytes());
                f.sent += 1;
                next += UDP_INTERVAL;
            }
            while let Ok(n) = s.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]);
                let mut w = text.split_whitespace();
                let pod = w.next().unwrap_or("?").to_string();
                if let Some(seq) = w
                    .nth(2)
                    .and_then(|p| p.strip_prefix("seq"))
                    .and_then(|n| n.parse().ok())
                {
                    f.answers.insert(seq, pod);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        f
    });
    let port = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the UDP flow's source port");
    (port, h)
}

/// The ids of node `ns`'s UDP conntrack entries from source port `sport` (an entry
/// deleted and created again by a later packet gets a new id).
fn conntrack_ids(ns: &Netns, sport: u16) -> BTreeSet<String> {
    let out = ns.exec_ok(
        "conntrack",
        &[
            "-L",
            "-p",
            "udp",
            "--orig-port-src",
            &sport.to_string(),
            "-o",
            "id",
        ],
    );
    out.lines()
        .flat_map(|l| l.split_whitespace())
        .filter(|t| t.starts_with("id="))
        .map(str::to_string)
        .collect()
}

/// What the established TCP connection saw.
#[derive(Debug, Default)]
struct TcpFlow {
    exchanged: u64,
    pods: BTreeSet<String>,
    error: Option<String>,
}

/// One TCP connection from the client to `dst`, a line every TCP_INTERVAL, each
/// answered within 2 s, until `stop` or the first error.
fn tcp_flow(ns: &Netns, dst: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<TcpFlow> {
    spawn_in(ns, move || {
        let mut f = TcpFlow::default();
        let c = match TcpStream::connect_timeout(&dst, Duration::from_secs(2)) {
            Ok(c) => c,
            Err(e) => {
                f.error = Some(format!("connect: {e}"));
                return f;
            }
        };
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut w = c.try_clone().unwrap();
        let mut r = BufReader::new(c);
        let start = Instant::now();
        while !stop.load(Ordering::SeqCst) && start.elapsed() < MAX_RUN {
            let msg = format!("m{}\n", f.exchanged);
            if let Err(e) = w.write_all(msg.as_bytes()) {
                f.error = Some(format!("write {}: {e}", f.exchanged));
                break;
            }
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) => {
                    f.error = Some(format!("closed after {}", f.exchanged));
                    break;
                }
                Ok(_) => {
                    let mut parts = line.split_whitespace();
                    let pod = parts.next().unwrap_or("?").to_string();
                    if parts.next() != Some(msg.trim()) {
                        f.error = Some(format!("bad echo {line:?} for {msg:?}"));
                        break;
                    }
                    f.pods.insert(pod);
                    f.exchanged += 1;
                }
                Err(e) => {
                    f.error = Some(format!("read {}: {e}", f.exchanged));
                    break;
                }
            }
            std::thread::sleep(TCP_INTERVAL);
        }
        f
    })
}

/// A probe that failed: what was probed and what came back.
type Failed = (Proto, SocketAddr, Outcome);

/// New connections and new flows in a loop until `stop`: the number of probes, and
/// (destination, outcome) of every probe not answered by one of the target's pods (node
/// B's sink answers a ClusterIP that no rule DNATs).
fn prober(
    ns: &Netns,
    targets: Vec<(Proto, SocketAddr, [&'static str; 2])>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<(usize, Vec<Failed>)> {
    spawn_in(ns, move || {
        let (mut n, mut bad) = (0, Vec::new());
        let start = Instant::now();
        while !stop.load(Ordering::SeqCst) && start.elapsed() < MAX_RUN {
            for &(proto, dst, pods) in &targets {
                let o = probe_here(proto, dst, None, REPLY_TIMEOUT);
                n += 1;
                if !o.pod().is_some_and(|p| pods.contains(&p)) {
                    bad.push((proto, dst, o));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (n, bad)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Iptables,
    Nftables,
}

/// No kube-proxy chain left (but `KUBE-FORWARD` when `keep_forward`: ours in iptables
/// mode), no kube-proxy table.
fn kube_proxy_gone(node: &Netns, keep_forward: bool) -> bool {
    let saved = node.exec_ok("iptables-save", &[]);
    let tables = node.exec_ok("nft", &["list", "tables"]);
    !saved
        .lines()
        .any(|l| l.contains("KUBE-") && !(keep_forward && l.contains("KUBE-FORWARD")))
        && !tables.contains("kube-proxy")
}

/// The handle of `KUBE-FORWARD`'s jump in `ip filter FORWARD` and of the chain's rules.
fn kube_forward_handles(node: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for chain in ["FORWARD", "KUBE-FORWARD"] {
        let listed = node.exec_ok("nft", &["-a", "list", "chain", "ip", "filter", chain]);
        out.extend(
            listed
                .lines()
                .filter(|l| chain == "KUBE-FORWARD" || l.contains("jump KUBE-FORWARD"))
                .filter_map(|l| l.split("# handle ").nth(1))
                .map(|h| format!("{chain} {}", h.trim())),
        );
    }
    out
}

/// `mode` is kube-proxy's; `docker`: node A also has Docker's filter table (`FORWARD`
/// policy DROP) and the daemon runs in iptables mode, taking kube-proxy's
/// `KUBE-FORWARD` over in place.
fn migrate_without_loss(mode: Mode, docker: bool) {
    use_daemon();
    let mut c = Cluster::new(bins!(), &[("a1", On::A), ("a2", On::A), ("b1", On::B)]);
    let (a1, a2, b1) = (c.pod("a1").v4, c.pod("a2").v4, c.pod("b1").v4);
    let s = |x: &str| x.to_string();
    let ports = vec![
        Port {
            ns: s("conf"),
            svc: s("web"),
            name: s("tcp"),
            proto: s("tcp"),
            cluster_ip: s(WEB4),
            port: SERVICE_PORT,
            target: TARGET_PORT,
            node_port: None,
            endpoints: vec![a1, b1],
        },
        Port {
            ns: s("conf"),
            svc: s("web"),
            name: s("udp"),
            proto: s("udp"),
            cluster_ip: s(WEB4),
            port: SERVICE_PORT,
            target: TARGET_PORT,
            node_port: None,
            endpoints: vec![a1, b1],
        },
        Port {
            ns: s("conf"),
            svc: s("web"),
            name: s("stream"),
            proto: s("tcp"),
            cluster_ip: s(WEB4),
            port: STREAM_PORT,
            target: STREAM_TARGET,
            node_port: None,
            endpoints: vec![a1, b1],
        },
        Port {
            ns: s("conf"),
            svc: s("np"),
            name: s("tcp"),
            proto: s("tcp"),
            cluster_ip: s(NP4),
            port: SERVICE_PORT,
            target: TARGET_PORT,
            node_port: Some(NODE_PORT),
            endpoints: vec![a2, b1],
        },
        Port {
            ns: s("conf"),
            svc: s("np"),
            name: s("udp"),
            proto: s("udp"),
            cluster_ip: s(NP4),
            port: SERVICE_PORT,
            target: TARGET_PORT,
            node_port: Some(NODE_PORT),
            endpoints: vec![a2, b1],
        },
    ];
    match mode {
        Mode::Iptables => {
            let rules = iptables_mode(&ports);
            let mut child = std::process::Command::new("ip")
                .args(["netns", "exec", c.node_a.name(), "iptables-restore"])
                .stdin(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(rules.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}\n{rules}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Mode::Nftables => c.node_a.nft(&nftables_mode(&ports)),
    }
    if docker {
        restore(
            &c.node_a,
            "iptables-nft-restore",
            &["--noflush"],
            DOCKER_FILTER_V4,
        );
        restore(
            &c.node_a,
            "ip6tables-nft-restore",
            &["--noflush"],
            DOCKER_FILTER_V6,
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = ["a1", "b1"]
        .iter()
        .map(|p| stream_server(c.pod(p), stop.clone()))
        .collect();

    // kube-proxy's rules serve the services
    let web = sa(WEB4, SERVICE_PORT);
    let np = sa(NODE_A4, NODE_PORT);
    reach_all(&c.client, Proto::Tcp, web, &["a1", "b1"], 40);
    reach_all(&c.client, Proto::Udp, web, &["a1", "b1"], 40);
    reach_all(&c.client, Proto::Udp, np, &["a2", "b1"], 40);
    reach_all(&c.client, Proto::Tcp, np, &["a2", "b1"], 40);

    // established flows, and probes of new ones
    let flows_stop = Arc::new(AtomicBool::new(false));
    let (web_port, udp_web) = udp_flow(&c.client, web, flows_stop.clone());
    let (np_port, udp_np) = udp_flow(&c.client, np, flows_stop.clone());
    let tcp = tcp_flow(&c.client, sa(WEB4, STREAM_PORT), flows_stop.clone());
    let probes = prober(
        &c.client,
        vec![
            (Proto::Tcp, web, ["a1", "b1"]),
            (Proto::Udp, web, ["a1", "b1"]),
            (Proto::Tcp, np, ["a2", "b1"]),
            (Proto::Udp, np, ["a2", "b1"]),
        ],
        flows_stop.clone(),
    );
    std::thread::sleep(Duration::from_secs(1));
    // kube-proxy's DNAT'ed conntrack entries of the established UDP flows
    let entries_before: Vec<BTreeSet<String>> = [web_port, np_port]
        .iter()
        .map(|p| conntrack_ids(&c.node_a, *p))
        .collect();
    assert!(
        entries_before.iter().all(|ids| ids.len() == 1),
        "one conntrack entry per established UDP flow: {entries_before:?}"
    );

    // the takeover (watched by `nft monitor`: no delete of KUBE-FORWARD may show)
    let handles_before = docker.then(|| kube_forward_handles(&c.node_a));
    let mut monitor = docker.then(|| {
        std::process::Command::new("ip")
            // line-buffered: the events must not sit in a buffer when it is killed
            .args([
                "netns",
                "exec",
                c.node_a.name(),
                "stdbuf",
                "-oL",
                "nft",
                "monitor",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("nft monitor")
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    if docker {
        let settings = ProxySettings {
            mode: "iptables",
            ..ProxySettings::default()
        };
        c.start_proxy_with(&manifests(&ports), Duration::from_secs(30), settings);
    } else {
        c.start_proxy(&manifests(&ports), Duration::from_secs(30));
    }
    let ours_in = start.elapsed();
    assert!(
        wait_until(Duration::from_secs(30), || kube_proxy_gone(
            &c.node_a, docker
        )),
        "kube-proxy's rules are still there: {}\n{}",
        c.node_a.exec_ok("iptables-save", &[]),
        c.node_a.exec_ok("nft", &["list", "tables"])
    );
    let gone = start.elapsed();
    eprintln!("{mode:?}: our rules in after {ours_in:?}, kube-proxy's gone after {gone:?}");
    std::thread::sleep(Duration::from_secs(2));
    if let Some(mut m) = monitor.take() {
        let _ = m.kill();
        let mut events = String::new();
        let _ = std::io::Read::read_to_string(&mut m.stdout.take().unwrap(), &mut events);
        let _ = m.wait();
        assert!(
            events.contains("delete chain ip filter KUBE-SERVICES"),
            "the monitor saw the migration: {events}"
        );
        // kube-proxy's (IPv4) chain and jump: no event about them (the IPv6 ones, which
        // kube-proxy's rules here do not have, are created)
        let about_ipv4: Vec<&str> = events
            .lines()
            .filter(|l| l.contains(" ip filter ") && l.contains("KUBE-FORWARD"))
            .collect();
        assert!(
            about_ipv4.is_empty(),
            "KUBE-FORWARD was deleted, re-added or rewritten during the takeover: {about_ipv4:?}\n{events}"
        );
        assert!(
            events.contains("add chain ip6 filter KUBE-FORWARD"),
            "{events}"
        );
        assert_eq!(
            Some(kube_forward_handles(&c.node_a)),
            handles_before,
            "kube-proxy's KUBE-FORWARD and jump are the same rules (same handles)"
        );
        let s = c.node_a.exec_ok("iptables-nft", &["-S", "FORWARD"]);
        assert!(s.contains("-P FORWARD DROP"), "{s}");
    }
    // Our cleanup kept the entries kube-proxy's rules had DNAT'ed (only entries that
    // were not DNAT'ed are a destination's targets): the same entries, same ids.
    let entries_after: Vec<BTreeSet<String>> = [web_port, np_port]
        .iter()
        .map(|p| conntrack_ids(&c.node_a, *p))
        .collect();
    flows_stop.store(true, Ordering::SeqCst);
    let (udp_web, udp_np, tcp, (nprobes, failed)) = (
        udp_web.join().unwrap(),
        udp_np.join().unwrap(),
        tcp.join().unwrap(),
        probes.join().unwrap(),
    );
    stop.store(true, Ordering::SeqCst);
    for s in servers {
        s.join().unwrap();
    }

    for (what, f) in [
        ("UDP to the ClusterIP", &udp_web),
        ("UDP to the NodePort", &udp_np),
    ] {
        let lost: Vec<u64> = (0..f.sent).filter(|s| !f.answers.contains_key(s)).collect();
        let pods: Vec<&String> = f.answers.values().collect();
        let moves = pods.windows(2).filter(|w| w[0] != w[1]).count();
        eprintln!(
            "{mode:?}: {what}: {} sent, {} lost, answered by {:?}, {moves} move(s)",
            f.sent,
            lost.len(),
            pods.iter().collect::<BTreeSet<_>>()
        );
        assert!(f.sent > 600, "{what}: only {} datagrams sent", f.sent);
        assert!(
            lost.is_empty(),
            "{what}: {} of {} datagrams lost: {lost:?}",
            lost.len(),
            f.sent
        );
        // Our first sync's conntrack cleanup deletes only the entries of the newly
        // served destinations that were not DNAT'ed: kube-proxy's DNAT'ed entries stay,
        // so an established UDP flow keeps its pod.
        assert_eq!(
            moves, 0,
            "{what}: the established flow moved {moves} times: {pods:?}"
        );
    }
    assert_eq!(
        entries_after, entries_before,
        "the established UDP flows' conntrack entries were deleted at the takeover"
    );
    eprintln!(
        "{mode:?}: TCP stream: {} messages, pods {:?}",
        tcp.exchanged, tcp.pods
    );
    assert_eq!(tcp.error, None, "the established TCP connection broke");
    assert!(tcp.exchanged > 50 && tcp.pods.len() == 1, "{tcp:?}");
    eprintln!(
        "{mode:?}: {nprobes} new connections/flows probed, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "new connections failed during the takeover: {failed:?}"
    );

    // afterwards: only our tables (and the host's) in nftables; no kube-proxy chain, no
    // rule left in iptables-nft's tables
    let tables = c.node_a.exec_ok("nft", &["list", "tables"]);
    let tables: BTreeSet<&str> = tables.lines().collect();
    let allowed: BTreeSet<&str> = [
        "table ip kube-nlproxy",
        "table ip6 kube-nlproxy",
        "table inet nlp-host-firewall",
        "table ip nat",
        "table ip filter",
        "table ip mangle",
        "table ip6 filter",
    ]
    .into();
    assert!(tables.is_subset(&allowed), "{tables:?}");
    let saved = c.node_a.exec_ok("iptables-save", &[]);
    // (with Docker: Docker's rules, and KUBE-FORWARD, ours now)
    let foreign = |l: &str| docker && (l.contains("DOCKER") || l.contains("KUBE-FORWARD"));
    assert!(
        !saved
            .lines()
            .any(|l| (l.starts_with("-A ") || l.starts_with(":KUBE-")) && !foreign(l)),
        "iptables rules or kube-proxy chains left:\n{saved}"
    );
    // and the services still work on our rules alone
    reach_all(&c.client, Proto::Tcp, web, &["a1", "b1"], 40);
    reach_all(&c.client, Proto::Udp, np, &["a2", "b1"], 40);
}

#[test]
fn live_migration_from_iptables_mode_loses_nothing() {
    require_root!();
    migrate_without_loss(Mode::Iptables, false);
}

/// kube-proxy in iptables mode on a Docker host (`FORWARD` policy DROP), taken over by
/// the daemon in iptables mode: kube-proxy's `KUBE-FORWARD` is adopted in place (never
/// deleted, the same rules), and no forwarded packet is lost.
#[test]
fn live_migration_from_iptables_mode_on_a_docker_host_keeps_kube_forward() {
    require_root!();
    migrate_without_loss(Mode::Iptables, true);
}

#[test]
fn live_migration_from_nftables_mode_loses_nothing() {
    require_root!();
    migrate_without_loss(Mode::Nftables, false);
}
