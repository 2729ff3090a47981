//! The world of one generated case (`kube-reference`), for the fuzzer's packet sample
//! (`tests/fuzz_packets.rs`, docs/fuzzing.md): namespaces where a probe's packet can be
//! sent for real and its fate observed.
//!
//! ```text
//!   external clients (X: every External source of the sample)
//!        | eth0 (the node's primary network, 198.18.200.0/24, 2001:db8:200::/64)
//!   node (N: the case's tables, forwarding, its local addresses)
//!        |-- l0: endpoints (L: every endpoint address of the case, the cluster CIDRs)
//!        |-- k0: sink (K: the sample's destinations that are not the node's, default route)
//!        `-- p0, p1, ...: one namespace per Pod source of the sample (P: its address,
//!            and the servers of the endpoints with that address: hairpin)
//! ```
//!
//! Every server answers with a label and the source address it saw (the reply format of
//! `echo-server`, so [`crate::cluster::probe_here`] reads it): `ep:<addr:port>` for an
//! endpoint, `host` for the node itself, `routed` for the sink. Servers bind the exact
//! address and port (an endpoint's address tells which endpoint answered; a UDP reply
//! leaves from the address the datagram was sent to). Link addresses of the node's
//! side legs are 198.18.(220+i).0/24 and 2001:db8:40i::/64 for leg i < 16 (within
//! 198.18.220.0-198.18.235.255 and 2001:db8:400::/52), which no case uses.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kube_reference::{Case, Origin, Probe, Verdict};

use crate::cluster::{probe, Outcome, Proto};
use crate::sctp::{self, Seen};
use crate::{addr, veth, Netns};

/// The longest a server thread lives (a bound on its loop; a case takes seconds).
const SERVER_LIFETIME: Duration = Duration::from_secs(600);

/// Why a probe cannot be sent in this world (`None`: it can). SCTP probes are raw
/// INIT chunks (`crate::sctp`).
pub fn unrealisable(p: &Probe) -> Option<&'static str> {
    match p.proto {
        6 | 17 | 132 => None,
        _ => Some("unknown protocol"),
    }
}

/// The most Pod sources a world has (one leg each, legs 2..16).
pub const MAX_POD_SOURCES: usize = 14;

/// The protocol of a realisable probe.
fn proto(p: &Probe) -> Proto {
    if p.proto == 17 {
        Proto::Udp
    } else {
        Proto::Tcp
    }
}

/// One socket a server owns, with its label.
struct Listen {
    addr: SocketAddr,
    udp: bool,
    label: String,
}

/// The namespaces and servers of one case; everything goes when it is dropped.
pub struct World {
    pub node: Netns,
    ext: Netns,
    /// The endpoints' and the sink's namespaces, held for the world's lifetime.
    _endpoints: Netns,
    _sink: Netns,
    /// Per Pod source address, its namespace.
    pods: BTreeMap<IpAddr, Netns>,
    local: BTreeSet<IpAddr>,
    /// The SCTP INITs the receivers saw, by initiate tag.
    sctp_seen: Seen,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

/// Sets the flag when dropped, unless disarmed.
struct StopOnDrop(Option<Arc<AtomicBool>>);

impl StopOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in self.servers.drain(..) {
            let _ = h.join();
        }
    }
}

fn link4(i: u8, host: u8) -> String {
    format!("198.18.{}.{host}", 220 + i)
}
fn link6(i: u8, host: u8) -> String {
    format!("2001:db8:4{i:02x}::{host}")
}
fn host_prefix(a: &IpAddr) -> String {
    format!("{a}/{}", if a.is_ipv4() { 32 } else { 128 })
}

/// `ip -n <ns> -batch -` with these commands (one `ip` for many addresses and routes).
fn ip_batch(ns: &Netns, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let mut child = std::process::Command::new("ip")
        .args(["-n", ns.name(), "-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ip -batch");
    let mut text = lines.join("\n");
    text.push('\n');
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write ip batch");
    let out = child.wait_with_output().expect("wait ip -batch");
    assert!(
        out.status.success(),
        "ip -batch in {} failed: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `addr add` lines for `addrs` on `dev` (IPv6 without duplicate address detection).
fn addr_lines(addrs: &BTreeSet<IpAddr>, dev: &str) -> Vec<String> {
    addrs
        .iter()
        .map(|a| {
            let nodad = if a.is_ipv6() { " nodad" } else { "" };
            format!("addr add {} dev {dev}{nodad}", host_prefix(a))
        })
        .collect()
}

/// A leg from the node: veth `n_if` (node) to `eth0` (peer), link addresses of index
/// `i`, the peer's default route via the node.
fn leg(node: &Netns, n_if: &str, peer: &Netns, i: u8) {
    veth(node, n_if, peer, "eth0");
    addr(node, n_if, &format!("{}/24", link4(i, 1)));
    addr(node, n_if, &format!("{}/64", link6(i, 1)));
    addr(peer, "eth0", &format!("{}/24", link4(i, 2)));
    addr(peer, "eth0", &format!("{}/64", link6(i, 2)));
    peer.ip(&["route", "add", "default", "via", &link4(i, 1)]);
    peer.ip(&["-6", "route", "add", "default", "via", &link6(i, 1)]);
}

/// Sysctls every namespace of the world gets before its links: no ICMP rate limits (a
/// refusal must not be lost to them), no reverse-path filter, no duplicate address
/// detection (a tentative link-local address sends no neighbour solicitation for
/// forwarded packets).
fn quiet(ns: &Netns) {
    for (k, v) in [
        ("net.ipv6.conf.all.accept_dad", "0"),
        ("net.ipv6.conf.default.accept_dad", "0"),
        ("net.ipv4.icmp_ratelimit", "0"),
        ("net.ipv6.icmp.ratelimit", "0"),
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
    ] {
        ns.sysctl(k, v);
    }
}

/// Wait until every link of `nss` has its carrier and no IPv6 address is tentative (a
/// veth's carrier, and with it IPv6 on the link, comes up asynchronously; on a loaded
/// machine a first packet can find the link not ready: `no route`). Bounded: panics
/// after 5 s (scaled).
fn settle(nss: &[&Netns]) {
    let deadline = Instant::now() + crate::scaled(Duration::from_secs(5));
    loop {
        let pending: Vec<String> = nss
            .iter()
            .filter(|ns| {
                ns.ip(&["-o", "link", "show"]).contains("NO-CARRIER")
                    || !ns
                        .ip(&["-6", "-o", "addr", "show", "tentative"])
                        .trim()
                        .is_empty()
            })
            .map(|ns| ns.name().to_string())
            .collect();
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the links of {pending:?} are not up after 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bind `list` in `ns` and answer on a thread until `stop`.
fn serve(ns: &Netns, list: Vec<Listen>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    enum Sock {
        Tcp(TcpListener),
        Udp(UdpSocket),
    }
    let socks: Vec<(Sock, String)> = ns.run(move || {
        list.into_iter()
            .map(|l| {
                let s = if l.udp {
                    let s = UdpSocket::bind(l.addr)
                        .unwrap_or_else(|e| panic!("bind udp {}: {e}", l.addr));
                    s.set_nonblocking(true).expect("nonblocking");
                    Sock::Udp(s)
                } else {
                    let s = TcpListener::bind(l.addr)
                        .unwrap_or_else(|e| panic!("bind tcp {}: {e}", l.addr));
                    s.set_nonblocking(true).expect("nonblocking");
                    Sock::Tcp(s)
                };
                (s, l.label)
            })
            .collect()
    });
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut fds: Vec<libc::pollfd> = socks
            .iter()
            .map(|(s, _)| libc::pollfd {
                fd: match s {
                    Sock::Tcp(t) => t.as_raw_fd(),
                    Sock::Udp(u) => u.as_raw_fd(),
                },
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut buf = [0u8; 600];
        while !stop.load(Ordering::SeqCst) && started.elapsed() < SERVER_LIFETIME {
            // SAFETY: `fds` is a valid array of pollfd for the sockets `socks` owns.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
            if n <= 0 {
                continue;
            }
            for (pfd, (s, label)) in fds.iter_mut().zip(&socks) {
                if pfd.revents == 0 {
                    continue;
                }
                pfd.revents = 0;
                match s {
                    Sock::Tcp(t) => {
                        if let Ok((mut c, peer)) = t.accept() {
                            let _ = c.set_nonblocking(false);
                            let _ = writeln!(c, "{label} {}", peer.ip().to_canonical());
                        }
                    }
                    Sock::Udp(u) => match u.recv_from(&mut buf) {
                        Ok((_, peer)) => {
                            let line = format!("{label} {}", peer.ip().to_canonical());
                            let _ = u.send_to(line.as_bytes(), peer);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => {}
                    },
                }
            }
        }
    })
}

/// Raise this process's open-file limit to its hard limit (a case may bind a thousand
/// sockets).
pub fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Every endpoint of the case as (address, protocol, port), from its slices.
fn endpoint_sockets(case: &Case) -> BTreeSet<(IpAddr, u8, u16)> {
    let mut out = BTreeSet::new();
    for sl in &case.slices {
        let ports: Vec<(u8, u16)> = sl
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let proto = match p.protocol.as_deref() {
                    Some("UDP") => 17,
                    Some("SCTP") => 132,
                    _ => 6,
                };
                Some((proto, u16::try_from(p.port?).ok()?))
            })
            .collect();
        for e in kube_reference::gen::endpoints(sl) {
            let Some(a) = e
                .addresses
                .first()
                .and_then(|s| kube_reference::ip::parse_ip(s))
            else {
                continue;
            };
            for (proto, port) in &ports {
                out.insert((a, *proto, *port));
            }
        }
    }
    out
}

/// A UDP probe of the node's own, as [`crate::cluster::probe_here`] sends one (three
/// datagrams on one flow within `timeout`), except that a send refused with EPERM
/// (netfilter took the datagram on the output path, rejected or dropped) is followed by
/// the read all the same: a reject's ICMP error arrives as ECONNREFUSED, a drop leaves
/// silence.
fn node_udp(dst: SocketAddr, src: IpAddr, timeout: Duration) -> Outcome {
    let sock = match UdpSocket::bind((src, 0)) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(format!("bind {src}: {e}")),
    };
    if let Err(e) = sock.connect(dst) {
        return Outcome::Error(format!("connect {dst}: {e}"));
    }
    const SENDS: u32 = 3;
    if let Err(e) = sock.set_read_timeout(Some(timeout / SENDS)) {
        return Outcome::Error(format!("timeout: {e}"));
    }
    let mut buf = [0u8; 600];
    for _ in 0..SENDS {
        match sock.send(b"probe") {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Outcome::Refused,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Outcome::Error(format!("send {dst}: {e}")),
        }
        match sock.recv(&mut buf) {
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                let mut w = text.split_whitespace();
                return match (w.next(), w.next().and_then(|s| s.parse().ok())) {
                    (Some(pod), Some(seen)) => Outcome::Reply {
                        pod: pod.to_string(),
                        seen,
                    },
                    _ => Outcome::Error(format!("bad reply {text:?}")),
                };
            }
            Err(e) => match e.kind() {
                ErrorKind::ConnectionRefused => return Outcome::Refused,
                ErrorKind::WouldBlock | ErrorKind::TimedOut => continue,
                _ => return Outcome::Error(format!("recv {dst}: {e}")),
            },
        }
    }
    Outcome::Timeout
}

/// Whether `a` is in the test ranges, 198.18.0.0/15 and 2001:db8::/32.
pub fn in_test_ranges(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[0] == 198 && v.octets()[1] & 0xfe == 18,
        IpAddr::V6(v) => v.segments()[0] == 0x2001 && v.segments()[1] == 0x0db8,
    }
}

impl World {
    /// The world of `case` for the realisable probes `sample`. The caller commits the
    /// tables in [`World::node`].
    pub fn build(case: &Case, sample: &[Probe]) -> World {
        World::build_for(&[case], sample)
    }

    /// The world of the cases of a change sequence (one node, the same environment):
    /// the endpoints of every one of them, for the realisable probes `sample` of all
    /// (at most [`MAX_POD_SOURCES`] Pod sources).
    pub fn build_for(cases: &[&Case], sample: &[Probe]) -> World {
        let case = cases.first().expect("a case");
        let env = &case.env;
        assert!(
            cases.iter().all(|c| c.env == case.env),
            "seed {}: the cases of one world share their environment",
            case.seed
        );
        let eps: BTreeSet<(IpAddr, u8, u16)> =
            cases.iter().flat_map(|c| endpoint_sockets(c)).collect();
        // every address the world gets from the case (the link addresses are literals)
        let used = sample
            .iter()
            .flat_map(|p| [p.src, p.dst])
            .chain(eps.iter().map(|(a, _, _)| *a))
            .chain(env.local_addrs.iter().copied());
        for a in used {
            assert!(
                in_test_ranges(&a),
                "seed {}: {a} is outside 198.18.0.0/15 and 2001:db8::/32",
                case.seed
            );
        }
        let node = Netns::new("fzn");
        let ext = Netns::new("fzx");
        let endpoints = Netns::new("fzl");
        let sink = Netns::new("fzk");
        for ns in [&node, &ext, &endpoints, &sink] {
            quiet(ns);
        }
        node.sysctl("net.ipv4.ip_forward", "1");
        node.sysctl("net.ipv6.conf.all.forwarding", "1");
        let local: BTreeSet<IpAddr> = env.local_addrs.iter().copied().collect();

        // the node's primary network, with the external clients on it
        veth(&node, "eth0", &ext, "eth0");
        let mut node_cmds = Vec::new();
        for a in &env.node_ips {
            let len = if a.is_ipv4() { 24 } else { 64 };
            let nodad = if a.is_ipv6() { " nodad" } else { "" };
            node_cmds.push(format!("addr add {a}/{len} dev eth0{nodad}"));
        }
        let others: BTreeSet<IpAddr> = local
            .iter()
            .filter(|a| !env.node_ips.contains(a))
            .copied()
            .collect();
        node_cmds.extend(addr_lines(&others, "lo"));
        ip_batch(&node, &node_cmds);
        // X's own address on that network: the "node's block" source, 198.18.200.77
        let x4: IpAddr = "198.18.200.77".parse().expect("literal");
        let x6: IpAddr = "2001:db8:200::4d".parse().expect("literal");
        addr(&ext, "eth0", &format!("{x4}/24"));
        addr(&ext, "eth0", &format!("{x6}/64"));
        let gw4 = env
            .node_ips
            .iter()
            .find(|a| a.is_ipv4())
            .expect("IPv4 node IP");
        let gw6 = env
            .node_ips
            .iter()
            .find(|a| a.is_ipv6())
            .expect("IPv6 node IP");
        ext.ip(&["route", "add", "default", "via", &gw4.to_string()]);
        ext.ip(&["-6", "route", "add", "default", "via", &gw6.to_string()]);
        let ext_srcs: BTreeSet<IpAddr> = sample
            .iter()
            .filter(|p| p.origin == Origin::External && p.src != x4 && p.src != x6)
            .map(|p| p.src)
            .collect();
        ip_batch(&ext, &addr_lines(&ext_srcs, "lo"));
        let routes: Vec<String> = ext_srcs
            .iter()
            .map(|a| {
                let via = if a.is_ipv4() { x4 } else { x6 };
                format!("route add {} via {via}", host_prefix(a))
            })
            .collect();
        ip_batch(&node, &routes);

        // endpoints and pod sources
        leg(&node, "l0", &endpoints, 0);
        leg(&node, "k0", &sink, 1);
        let mut node_routes: Vec<String> = env
            .cluster_cidrs
            .iter()
            .map(|(a, l)| {
                let via = if a.is_ipv4() {
                    link4(0, 2)
                } else {
                    link6(0, 2)
                };
                format!("route add {a}/{l} via {via}")
            })
            .collect();
        node_routes.push(format!("route add default via {}", link4(1, 2)));
        node_routes.push(format!("route add ::/0 via {}", link6(1, 2)));
        let pod_srcs: BTreeSet<IpAddr> = sample
            .iter()
            .filter(|p| p.origin == Origin::Pod)
            .map(|p| p.src)
            .collect();
        let mut pods = BTreeMap::new();
        for (i, s) in pod_srcs.iter().enumerate() {
            // at most 3 Pod sources a family per case (packets.rs), MAX_POD_SOURCES for
            // a sequence: legs 2..16
            let i = u8::try_from(i + 2)
                .ok()
                .filter(|i| usize::from(*i) < MAX_POD_SOURCES + 2)
                .expect("at most MAX_POD_SOURCES pod sources");
            let ns = Netns::new("fzp");
            quiet(&ns);
            leg(&node, &format!("p{i}"), &ns, i);
            ip_batch(&ns, &addr_lines(&BTreeSet::from([*s]), "lo"));
            let via = if s.is_ipv4() {
                link4(i, 2)
            } else {
                link6(i, 2)
            };
            node_routes.push(format!("route add {} via {via}", host_prefix(s)));
            pods.insert(*s, ns);
        }
        ip_batch(&node, &node_routes);

        // servers: endpoints where their address lives, the node's own addresses, the sink
        let stop = Arc::new(AtomicBool::new(false));
        // a panic before the world exists (a bind failing) stops the servers started
        let guard = StopOnDrop(Some(stop.clone()));
        let mut at_l: Vec<Listen> = Vec::new();
        let mut at_pod: BTreeMap<IpAddr, Vec<Listen>> = BTreeMap::new();
        let mut l_addrs = BTreeSet::new();
        for (a, proto, port) in eps {
            if proto == 132 {
                // no SCTP server: the namespace's raw SCTP receiver notes the INIT
                if !pods.contains_key(&a) {
                    l_addrs.insert(a);
                }
                continue;
            }
            let sa = SocketAddr::new(a, port);
            let l = Listen {
                addr: sa,
                udp: proto == 17,
                label: format!("ep:{sa}"),
            };
            if pods.contains_key(&a) {
                at_pod.entry(a).or_default().push(l);
            } else {
                l_addrs.insert(a);
                at_l.push(l);
            }
        }
        ip_batch(&endpoints, &addr_lines(&l_addrs, "lo"));
        let mut at_node = Vec::new();
        let mut at_sink = Vec::new();
        let mut sink_addrs = BTreeSet::new();
        let dsts: BTreeSet<(IpAddr, u8, u16)> =
            sample.iter().map(|p| (p.dst, p.proto, p.dport)).collect();
        for (dst, proto, dport) in dsts {
            let sa = SocketAddr::new(dst, dport);
            let udp = proto == 17;
            if proto == 132 {
                if !local.contains(&dst) && !l_addrs.contains(&dst) && !pods.contains_key(&dst) {
                    sink_addrs.insert(dst);
                }
                continue;
            }
            if local.contains(&dst) {
                at_node.push(Listen {
                    addr: sa,
                    udp,
                    label: "host".into(),
                });
            } else if !l_addrs.contains(&dst) && !pods.contains_key(&dst) {
                sink_addrs.insert(dst);
                at_sink.push(Listen {
                    addr: sa,
                    udp,
                    label: "routed".into(),
                });
            }
        }
        ip_batch(&sink, &addr_lines(&sink_addrs, "lo"));
        let mut servers = vec![
            serve(&endpoints, at_l, stop.clone()),
            serve(&node, at_node, stop.clone()),
            serve(&sink, at_sink, stop.clone()),
        ];
        for (a, list) in at_pod {
            servers.push(serve(&pods[&a], list, stop.clone()));
        }
        // SCTP: a raw receiver in every namespace a probe may arrive in
        let sctp_seen = Seen::default();
        let ep_label = |a: SocketAddr| format!("ep:{a}");
        for ns in std::iter::once(&endpoints).chain(pods.values()) {
            servers.push(sctp::receive(
                ns,
                ep_label,
                sctp_seen.clone(),
                stop.clone(),
                SERVER_LIFETIME,
            ));
        }
        servers.push(sctp::receive(
            &node,
            |_| "host".to_string(),
            sctp_seen.clone(),
            stop.clone(),
            SERVER_LIFETIME,
        ));
        servers.push(sctp::receive(
            &sink,
            |_| "routed".to_string(),
            sctp_seen.clone(),
            stop.clone(),
            SERVER_LIFETIME,
        ));
        let mut all: Vec<&Netns> = vec![&node, &ext, &endpoints, &sink];
        all.extend(pods.values());
        settle(&all);
        guard.disarm();
        World {
            node,
            ext,
            _endpoints: endpoints,
            _sink: sink,
            pods,
            local,
            sctp_seen,
            stop,
            servers,
        }
    }

    /// Send `p` for real from where it comes from and see what answers.
    pub fn send(&self, p: &Probe, timeout: Duration) -> Outcome {
        let dst = SocketAddr::new(p.dst, p.dport);
        if p.proto == 132 {
            let ns = match p.origin {
                Origin::Node => &self.node,
                Origin::External => &self.ext,
                Origin::Pod => &self.pods[&p.src],
            };
            let (src, seen) = (p.src, self.sctp_seen.clone());
            return ns.run(move || sctp::probe_here(src, dst, &seen, timeout));
        }
        if p.origin == Origin::Node && p.proto == 17 {
            let src = p.src;
            return self.node.run(move || node_udp(dst, src, timeout));
        }
        let ns = match p.origin {
            Origin::Node => &self.node,
            Origin::External => &self.ext,
            Origin::Pod => &self.pods[&p.src],
        };
        probe(ns, proto(p), dst, Some(p.src), timeout)
    }

    /// Whether what the kernel did (`got`) is the verdict `want` (docs/fuzzing.md, the
    /// mapping): DNAT to one of its endpoints, that endpoint answering and seeing the
    /// source rewritten exactly when the verdict masquerades; a refusal (TCP RST or ICMP
    /// unreachable) for reject; silence for drop; no match: the node's own server for
    /// its addresses, the sink (routed on) for any other.
    pub fn agrees(&self, want: &Verdict, p: &Probe, got: &Outcome) -> bool {
        match (want, got) {
            (Verdict::Dnat(eps), Outcome::Reply { pod, seen }) => pod
                .strip_prefix("ep:")
                .and_then(|a| a.parse::<SocketAddr>().ok())
                .and_then(|a| eps.get(&a))
                .is_some_and(|masq| *masq == (*seen != p.src)),
            (Verdict::Reject, Outcome::Refused) => true,
            (Verdict::Drop, Outcome::Timeout) => true,
            (Verdict::NoMatch, Outcome::Reply { pod, seen }) => {
                let expect = if self.local.contains(&p.dst) {
                    "host"
                } else {
                    "routed"
                };
                pod == expect && *seen == p.src
            }
            _ => false,
        }
    }
}
