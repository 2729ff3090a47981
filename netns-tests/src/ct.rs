//! Conntrack flows for the ct-netlink tests: client -> router (conntrack, DNAT) ->
//! server, the `conntrack -L` oracle, and the checks that `tests/conntrack.rs` and the
//! kernel suite (`tests/kernel_suite.rs`) run.

use crate::{addr, kernel_release, kernel_version, wait_until, Line, Netns};
use ct_netlink::{
    Config, Conntrack, DeleteReport, Family, Filter, Outcome, Strategy, IPPROTO_TCP, IPPROTO_UDP,
};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

pub const VIP4: &str = "198.18.3.10";
pub const VIP6: &str = "2001:db8:3::10";
pub const SERVER2_4: &str = "198.18.2.3";
pub const SERVER2_6: &str = "2001:db8:2::3";
/// Assigned to the server, nothing listens: UDP to it stays unreplied.
pub const DEAD4: &str = "198.18.2.4";
pub const DEAD6: &str = "2001:db8:2::4";
pub const EP_PORT: u16 = 5353; // endpoint port behind the VIP
pub const VIP_PORT: u16 = 53;
pub const NODE_PORT: u16 = 30053;
pub const OTHER_PORT: u16 = 30054;

/// One conntrack entry as printed by `conntrack -L`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Oracle {
    pub proto: String,
    pub orig_src: IpAddr,
    pub orig_dst: IpAddr,
    pub orig_sport: u16,
    pub orig_dport: u16,
    pub reply_src: IpAddr,
    pub reply_sport: u16,
}

pub fn oracle(router: &Netns, family: &str) -> BTreeSet<Oracle> {
    let out = router.exec_ok("conntrack", &["-L", "-f", family]);
    let mut set = BTreeSet::new();
    for line in out.lines() {
        let proto = line.split_whitespace().next().unwrap_or("").to_string();
        if proto != "udp" && proto != "tcp" {
            continue;
        }
        let kv: Vec<(&str, &str)> = line
            .split_whitespace()
            .filter_map(|t| t.split_once('='))
            .collect();
        let all = |k: &str| {
            kv.iter()
                .filter(|(key, _)| *key == k)
                .map(|(_, v)| *v)
                .collect::<Vec<_>>()
        };
        let (src, dst, sport, dport) = (all("src"), all("dst"), all("sport"), all("dport"));
        assert!(
            src.len() >= 2 && dst.len() >= 2 && sport.len() >= 2 && dport.len() >= 2,
            "odd line {line}"
        );
        set.insert(Oracle {
            proto,
            orig_src: src[0].parse().unwrap(),
            orig_dst: dst[0].parse().unwrap(),
            orig_sport: sport[0].parse().unwrap(),
            orig_dport: dport[0].parse().unwrap(),
            reply_src: src[1].parse().unwrap(),
            reply_sport: sport[1].parse().unwrap(),
        });
    }
    set
}

/// The oracle's reading of a filter.
pub fn oracle_matches(f: &Filter, o: &Oracle) -> bool {
    let proto_name = |p: u8| match p {
        IPPROTO_UDP => "udp",
        IPPROTO_TCP => "tcp",
        _ => "?",
    };
    match *f {
        Filter::OrigDst { addr, port, proto } => {
            o.proto == proto_name(proto)
                && o.orig_dst == addr
                && port.is_none_or(|p| p == o.orig_dport)
        }
        Filter::OrigDstPort {
            family,
            port,
            proto,
        } => {
            o.proto == proto_name(proto)
                && o.orig_dport == port
                && o.orig_dst.is_ipv4() == (family == Family::V4)
        }
        Filter::ReplySrc { addr, port, proto } => {
            o.proto == proto_name(proto) && o.reply_src == addr && o.reply_sport == port
        }
        Filter::Unnated { addr, port, proto } => {
            o.proto == proto_name(proto)
                && o.orig_dst == addr
                && o.orig_dport == port
                && o.reply_src == addr
                && o.reply_sport == port
        }
        Filter::UnnatedPort {
            family,
            port,
            proto,
        } => {
            o.proto == proto_name(proto)
                && o.orig_dport == port
                && o.reply_sport == port
                && o.orig_dst.is_ipv4() == (family == Family::V4)
        }
    }
}

pub struct Fam {
    pub v6: bool,
    pub client: IpAddr,
    pub server: IpAddr,
    pub server2: IpAddr,
    pub dead: IpAddr,
    pub vip: IpAddr,
}

impl Fam {
    pub fn new(v6: bool) -> Fam {
        let p = |s: &str| s.parse::<IpAddr>().unwrap();
        if v6 {
            Fam {
                v6,
                client: p(Line::CLIENT6),
                server: p(Line::SERVER6),
                server2: p(SERVER2_6),
                dead: p(DEAD6),
                vip: p(VIP6),
            }
        } else {
            Fam {
                v6,
                client: p(Line::CLIENT4),
                server: p(Line::SERVER4),
                server2: p(SERVER2_4),
                dead: p(DEAD4),
                vip: p(VIP4),
            }
        }
    }
    pub fn name(&self) -> &'static str {
        if self.v6 {
            "ipv6"
        } else {
            "ipv4"
        }
    }
    pub fn family(&self) -> Family {
        if self.v6 {
            Family::V6
        } else {
            Family::V4
        }
    }
}

/// The topology plus DNAT of the VIP to server:5353 (UDP and TCP) in the router, and of
/// UDP to server2:NODE_PORT whose first datagram is long (over 100 bytes) to
/// server:OTHER_PORT (so that one destination has flows DNAT'ed and flows not).
pub struct Setup {
    pub line: Line,
    udp_servers: Vec<UdpSocket>,
    _tcp_servers: Vec<TcpListener>,
}

pub fn setup() -> Setup {
    let line = Line::new();
    for a in [
        "198.18.2.3/24",
        "198.18.2.4/24",
        "2001:db8:2::3/64",
        "2001:db8:2::4/64",
    ] {
        addr(&line.server, "eth0", a);
    }
    line.router.nft(&format!(
        "table ip nlp-dnat {{\n\
         \tchain pre {{\n\
         \t\ttype nat hook prerouting priority -100; policy accept;\n\
         \t\tip daddr {VIP4} udp dport {VIP_PORT} dnat to {s4}:{EP_PORT}\n\
         \t\tip daddr {VIP4} tcp dport {VIP_PORT} dnat to {s4}:{EP_PORT}\n\
         \t\tip daddr {s2_4} udp dport {NODE_PORT} udp length > 100 dnat to {s4}:{OTHER_PORT}\n\
         \t}}\n\
         }}\n\
         table ip6 nlp-dnat {{\n\
         \tchain pre {{\n\
         \t\ttype nat hook prerouting priority -100; policy accept;\n\
         \t\tip6 daddr {VIP6} udp dport {VIP_PORT} dnat to [{s6}]:{EP_PORT}\n\
         \t\tip6 daddr {VIP6} tcp dport {VIP_PORT} dnat to [{s6}]:{EP_PORT}\n\
         \t\tip6 daddr {s2_6} udp dport {NODE_PORT} udp length > 100 dnat to [{s6}]:{OTHER_PORT}\n\
         \t}}\n\
         }}\n",
        s4 = Line::SERVER4,
        s6 = Line::SERVER6,
        s2_4 = SERVER2_4,
        s2_6 = SERVER2_6,
    ));
    let mut udp_servers = Vec::new();
    let mut tcp_servers = Vec::new();
    for v6 in [false, true] {
        let f = Fam::new(v6);
        for (a, p) in [
            (f.server, EP_PORT),
            (f.server2, EP_PORT),
            (f.server, NODE_PORT),
            (f.server2, NODE_PORT),
            (f.server, OTHER_PORT),
        ] {
            let sa = SocketAddr::new(a, p);
            let s = line
                .server
                .run(move || UdpSocket::bind(sa).expect("bind udp server"));
            s.set_nonblocking(true).unwrap();
            udp_servers.push(s);
        }
        for p in [EP_PORT, NODE_PORT] {
            let sa = SocketAddr::new(f.server, p);
            tcp_servers.push(
                line.server
                    .run(move || TcpListener::bind(sa).expect("bind tcp server")),
            );
        }
    }
    Setup {
        line,
        udp_servers,
        _tcp_servers: tcp_servers,
    }
}

impl Setup {
    /// Answer whatever reached the UDP servers (echo), a few rounds.
    pub fn echo(&self) {
        let mut buf = [0u8; 64];
        for s in &self.udp_servers {
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
    }

    /// A replied UDP flow from a fresh client socket to `dst`; returns once the client
    /// got the echo.
    pub fn udp_flow(&self, f: &Fam, dst: SocketAddr) {
        self.udp_flow_with(f, dst, b"hello")
    }

    /// A replied UDP flow sending `payload`.
    pub fn udp_flow_with(&self, f: &Fam, dst: SocketAddr, payload: &[u8]) {
        let bind = SocketAddr::new(f.client, 0);
        let c = self
            .line
            .client
            .run(move || UdpSocket::bind(bind).expect("bind client"));
        c.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut buf = [0u8; 64];
        let ok = wait_until(Duration::from_secs(5), || {
            c.send_to(payload, dst).expect("send");
            // Bounded: a few short polls for the request to cross the router.
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(1));
                self.echo();
                if c.recv_from(&mut buf).is_ok() {
                    return true;
                }
            }
            false
        });
        assert!(ok, "no reply from {dst}");
    }

    /// An unreplied UDP flow (nothing listens at `dst`): the client socket, kept so the
    /// same datagram can be sent again on the same tuple (one conntrack entry).
    pub fn udp_unreplied(&self, f: &Fam, dst: SocketAddr) -> UdpSocket {
        let bind = SocketAddr::new(f.client, 0);
        let c = self
            .line
            .client
            .run(move || UdpSocket::bind(bind).expect("bind client"));
        c.send_to(b"anyone?", dst).expect("send");
        c
    }

    pub fn tcp_flow(&self, f: &Fam, dst: SocketAddr) -> TcpStream {
        let _ = f;
        self.line.client.run(move || {
            TcpStream::connect_timeout(&dst, Duration::from_secs(5)).expect("tcp connect")
        })
    }

    /// Flush the router's table (test tool), then create the standard set of flows.
    pub fn make_flows(&self, f: &Fam) -> Vec<TcpStream> {
        self.line.router.exec_ok("conntrack", &["-F"]);
        let sa = SocketAddr::new;
        for _ in 0..3 {
            self.udp_flow(f, sa(f.vip, VIP_PORT)); // DNAT'ed to server:5353
        }
        self.udp_flow(f, sa(f.server, EP_PORT)); // direct to the endpoint
        self.udp_flow(f, sa(f.server2, EP_PORT)); // another address, same port
        self.udp_flow(f, sa(f.server, NODE_PORT)); // "NodePort" on two addresses
        self.udp_flow(f, sa(f.server2, NODE_PORT));
        // the same destination, DNAT'ed to server:OTHER_PORT
        self.udp_flow_with(f, sa(f.server2, NODE_PORT), &[b'x'; 200]);
        self.udp_flow(f, sa(f.server, OTHER_PORT)); // other port
        let dead = sa(f.dead, 5400);
        let unreplied = self.udp_unreplied(f, dead);
        let tcp = vec![
            self.tcp_flow(f, sa(f.vip, VIP_PORT)),
            self.tcp_flow(f, sa(f.server, NODE_PORT)),
        ];
        // Both directions of the UDP flows and the unreplied one must be visible.
        let want = |o: &BTreeSet<Oracle>| {
            o.iter().filter(|e| e.proto == "udp").count() >= 10
                && o.iter().filter(|e| e.proto == "tcp").count() >= 2
        };
        // A lone datagram can be lost on a slow (emulated) host; sending it again on the
        // same socket can only refresh the one entry, never add another.
        let seen = wait_until(Duration::from_secs(10), || {
            let ok = want(&oracle(&self.line.router, f.name()));
            if !ok {
                let _ = unreplied.send_to(b"anyone?", dead);
            }
            ok
        });
        assert!(
            seen,
            "the router's table never held 10 UDP and 2 TCP entries; it holds {:#?}",
            oracle(&self.line.router, f.name())
        );
        tcp
    }
}

pub fn open(router: &Netns, strategy: Strategy) -> Conntrack {
    let cfg = Config {
        strategy: Some(strategy),
        count_flushed: true,
        ..Config::default()
    };
    router
        .run(move || Conntrack::open(cfg))
        .expect("open conntrack")
}

/// Delete with one filter and check against the oracle: exactly the matching entries
/// are gone, everything else stays, and the report counts them.
pub fn check_filter(s: &Setup, ct: &mut Conntrack, f: &Fam, filter: Filter) -> DeleteReport {
    let before = oracle(&s.line.router, f.name());
    let expected: BTreeSet<Oracle> = before
        .iter()
        .filter(|o| oracle_matches(&filter, o))
        .cloned()
        .collect();
    assert!(
        !expected.is_empty(),
        "{filter}: test set up no matching flow: {before:#?}"
    );
    assert!(
        expected.len() < before.len(),
        "{filter}: everything matches; nothing would show over-deletion"
    );
    let rep = ct
        .delete(&[filter])
        .unwrap_or_else(|e| panic!("{} {filter}: {e}", ct.strategy()));
    let after = oracle(&s.line.router, f.name());
    let want: BTreeSet<Oracle> = before.difference(&expected).cloned().collect();
    assert_eq!(
        after,
        want,
        "{} {filter}: wrong entries deleted\nexpected gone: {expected:#?}",
        ct.strategy()
    );
    assert_eq!(
        rep.deleted,
        expected.len() as u64,
        "{} {filter}: report {rep:?}",
        ct.strategy()
    );
    assert!(rep.exact && !rep.capped && !rep.incomplete, "{rep:?}");
    assert_eq!(rep.per_filter[0].failed, 0);
    rep
}

pub fn filters_for(f: &Fam) -> Vec<Filter> {
    vec![
        Filter::udp_orig_dst(f.vip, None), // ClusterIP, any port
        Filter::udp_orig_dst(f.server2, Some(EP_PORT)), // address and port
        Filter::udp_nodeport(f.family(), NODE_PORT), // NodePort, any address
        Filter::udp_reply_src(f.server, EP_PORT), // DNAT'ed to a removed endpoint
        // a destination newly served: its flows not DNAT'ed (one is)
        Filter::udp_unnated(f.server2, NODE_PORT),
        Filter::udp_unnated(f.dead, 5400), // unreplied
        Filter::udp_unnated_nodeport(f.family(), NODE_PORT), // not the DNAT'ed one
        Filter::OrigDst {
            addr: f.vip,
            port: Some(VIP_PORT),
            proto: IPPROTO_TCP,
        }, // other protocol
    ]
}

/// Every filter kind with every strategy the running kernel supports deletes exactly
/// its entries (oracle: `conntrack -L`); a strategy it lacks, forced, is refused and
/// deletes nothing.
pub fn every_filter_every_strategy(v6: bool) {
    let s = setup();
    let f = Fam::new(v6);
    let release = kernel_release();
    let version = kernel_version(&release).expect("kernel version");
    for strategy in Strategy::ALL {
        let mut ct = open(&s.line.router, strategy);
        assert_eq!(ct.strategy(), strategy);
        if !supports(version, strategy) {
            // Forced on a kernel without it: refused, and nothing is deleted.
            let _tcp = s.make_flows(&f);
            let before = oracle(&s.line.router, f.name());
            let filter = Filter::udp_nodeport(f.family(), NODE_PORT);
            let rep = ct
                .delete(&[filter])
                .expect("a refusal is reported per filter");
            eprintln!("kernel {release}: {strategy} refused: {rep:?}");
            assert_eq!(
                rep.outcomes(),
                vec![Outcome::Failed(libc::EINVAL)],
                "kernel {release}: {strategy} must be refused"
            );
            assert_eq!(oracle(&s.line.router, f.name()), before, "{strategy}");
            continue;
        }
        for filter in filters_for(&f) {
            let _tcp = s.make_flows(&f);
            check_filter(&s, &mut ct, &f, filter);
        }
    }
}

/// Whether a kernel of this version has what a strategy needs: the filtered flush from
/// 6.12, CTA_FILTER dumps from 5.8; the full dump everywhere.
pub fn supports(version: (u32, u32), strategy: Strategy) -> bool {
    match strategy {
        Strategy::FilteredFlush => version >= (6, 12),
        Strategy::FilteredDump | Strategy::PortDump => version >= (5, 8),
        Strategy::FullDump => true,
    }
}

/// The strategy the probe must choose on a kernel: filtered flush from 6.12, filtered
/// dump from 5.8 (CTA_FILTER), the full dump before.
pub fn expected_strategy(version: (u32, u32)) -> Strategy {
    [Strategy::FilteredFlush, Strategy::FilteredDump]
        .into_iter()
        .find(|s| supports(version, *s))
        .unwrap_or(Strategy::FullDump)
}

/// The probe on the running kernel chooses [`expected_strategy`] (a filtered flush
/// refused with EINVAL before 6.12), deletes no entry, and leaves no entry of its own.
pub fn probe_picks_the_kernels_strategy_and_deletes_nothing_check() {
    let s = setup();
    let f = Fam::new(false);
    let _tcp = s.make_flows(&f);
    let before = oracle(&s.line.router, "ipv4");
    let ct = s
        .line
        .router
        .run(|| Conntrack::open(Config::default()))
        .expect("open");
    assert_eq!(
        oracle(&s.line.router, "ipv4"),
        before,
        "probing deleted entries"
    );
    let release = kernel_release();
    let version = kernel_version(&release).expect("kernel version");
    assert_eq!(
        ct.strategy(),
        expected_strategy(version),
        "kernel {release}: {:?}",
        ct.probe()
    );
    let flush_errno = if version >= (6, 12) { 0 } else { libc::EINVAL };
    assert_eq!(
        ct.probe().flush_errno,
        Some(flush_errno),
        "kernel {release}"
    );
    // The IPv6 CTA_FILTER probe inserts and removes an entry of its own (100::/64).
    let leftovers = s.line.router.exec_ok("conntrack", &["-L", "-f", "ipv6"]);
    assert!(
        !leftovers.contains("src=100::1"),
        "probe entry left behind: {leftovers}"
    );
    eprintln!("kernel {release}: probe {:?}", ct.probe());
}
