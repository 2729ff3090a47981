//! ct-netlink's event socket, listing, delete by flow and the flow index against the
//! kernel, in namespaces of their own (`cargo test -p netns-tests --test ct_events`,
//! as root). `conntrack -L` / `-D` in the namespace are the oracle and the out-of-band
//! tool; the product never spawns a process.

use ct_netlink::testing::{SyntheticEntry, SyntheticFlow};
use ct_netlink::{
    Config, Conntrack, EventConfig, EventSocket, Family, Filter, Flow, FlowEvent, FlowIndex,
    FlowOutcome, ListOutcome, Received, Strategy, IPPROTO_TCP, IPPROTO_UDP,
};
use netns_tests::ct::{setup, Fam, EP_PORT, VIP_PORT};
use netns_tests::{require_root, Netns};
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------
// Helpers

/// A namespace with conntrack in use (synthetic entries need it).
fn ct_ns(role: &str) -> Netns {
    let ns = Netns::new(role);
    ns.enable_conntrack();
    ns
}

/// A ctnetlink socket in `ns` that skips the probe (it inserts an entry of its own,
/// which would show as events).
fn ct_open(ns: &Netns, strategy: Strategy) -> Conntrack {
    let cfg = Config {
        strategy: Some(strategy),
        ipv6_addr_filter: Some(false),
        ..Config::default()
    };
    ns.run(move || Conntrack::open(cfg))
        .expect("open conntrack")
}

fn events_open(ns: &Netns, cfg: EventConfig, filtered: bool) -> EventSocket {
    ns.run(move || {
        if filtered {
            EventSocket::open(cfg)
        } else {
            EventSocket::open_unfiltered(cfg)
        }
    })
    .expect("open event socket")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn flow(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> SyntheticFlow {
    SyntheticFlow {
        src: ip(src),
        dst: ip(dst),
        proto,
        sport,
        dport,
    }
}

fn insert(ct: &mut Conntrack, entries: &[SyntheticEntry]) {
    let rep = ct.insert(entries, 600, 500).expect("insert");
    assert_eq!((rep.failed(), rep.lost_batches), (0, 0), "{rep:?}");
}

/// The flow an inserted entry is (no id: the kernel gives it).
fn expected(e: &SyntheticEntry) -> Flow {
    let (reply_src, reply_sport) = e.reply();
    Flow {
        proto: e.flow.proto,
        src: e.flow.src,
        dst: e.flow.dst,
        sport: e.flow.sport,
        dport: e.flow.dport,
        reply_src,
        reply_sport,
        zone: e.zone,
        id: None,
    }
}

fn without_id(f: &Flow) -> Flow {
    Flow { id: None, ..*f }
}

/// The entries of `proto` in `ns` as `conntrack -L -o id` prints them (both families),
/// with their zone and id.
fn oracle(ns: &Netns, proto: &str) -> HashSet<Flow> {
    let mut set = HashSet::new();
    for fam in ["ipv4", "ipv6"] {
        let out = ns.exec_ok("conntrack", &["-L", "-f", fam, "-p", proto, "-o", "id"]);
        for line in out.lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(num)) = (words.next(), words.next()) else {
                continue;
            };
            if name != proto {
                continue;
            }
            let kv: Vec<(&str, &str)> = words.filter_map(|t| t.split_once('=')).collect();
            let all = |k: &str| -> Vec<&str> {
                kv.iter()
                    .filter(|(key, _)| *key == k)
                    .map(|(_, v)| *v)
                    .collect()
            };
            let one = |k: &str| all(k).first().map(|v| v.to_string());
            let (src, dst, sport, dport) = (all("src"), all("dst"), all("sport"), all("dport"));
            assert!(src.len() == 2 && sport.len() == 2, "odd line {line}");
            set.insert(Flow {
                proto: num.parse().unwrap(),
                src: src[0].parse().unwrap(),
                dst: dst[0].parse().unwrap(),
                sport: sport[0].parse().unwrap(),
                dport: dport[0].parse().unwrap(),
                reply_src: src[1].parse().unwrap(),
                reply_sport: sport[1].parse().unwrap(),
                zone: one("zone").map_or(0, |z| z.parse().unwrap()),
                id: Some(one("id").expect("id printed").parse().unwrap()),
            });
        }
    }
    set
}

/// Read events until at least `want` came and then nothing for 200 ms (so extras
/// show), at most 10 s. A loss fails the test.
fn collect(ev: &mut EventSocket, want: usize) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match ev.recv(&mut out, Some(Duration::from_millis(200))) {
            Ok(Received::Events(_)) => {}
            Ok(Received::Timeout) if out.len() >= want => break,
            Ok(Received::Timeout) => {}
            other => panic!("recv: {other:?} after {} events", out.len()),
        }
    }
    out
}

/// Delete every UDP and TCP entry of both families out of band (`conntrack -D`, which
/// fails when it finds nothing to delete: checked with the oracle instead).
fn delete_all(ns: &Netns) {
    for fam in ["ipv4", "ipv6"] {
        for p in ["udp", "tcp"] {
            ns.exec("conntrack", &["-D", "-f", fam, "-p", p]);
        }
    }
    assert!(oracle(ns, "udp").is_empty() && oracle(ns, "tcp").is_empty());
}

fn news(evs: &[FlowEvent]) -> Vec<Flow> {
    evs.iter()
        .filter_map(|e| match e {
            FlowEvent::New(f) => Some(*f),
            FlowEvent::Destroy(_) => None,
        })
        .collect()
}

fn destroys(evs: &[FlowEvent]) -> Vec<Flow> {
    evs.iter()
        .filter_map(|e| match e {
            FlowEvent::Destroy(f) => Some(*f),
            FlowEvent::New(_) => None,
        })
        .collect()
}

fn set(v: impl IntoIterator<Item = Flow>) -> HashSet<Flow> {
    v.into_iter().collect()
}

/// UDP and TCP entries of both families: plain, DNAT'ed, zoned.
fn mixed_entries() -> (Vec<SyntheticEntry>, Vec<SyntheticEntry>) {
    let udp = vec![
        flow("198.18.0.5", 40000, "198.18.0.10", 53, IPPROTO_UDP).into(),
        flow("198.18.0.5", 40001, "198.18.0.10", 53, IPPROTO_UDP).dnat(ip("198.18.1.7"), 5353),
        flow("198.18.0.6", 40002, "198.18.0.11", 53, IPPROTO_UDP).in_zone(5),
        flow("2001:db8::5", 40003, "2001:db8::10", 53, IPPROTO_UDP).into(),
        flow("2001:db8::5", 40004, "2001:db8::10", 53, IPPROTO_UDP).dnat(ip("2001:db8:1::7"), 5353),
        flow("2001:db8::6", 40005, "2001:db8::11", 53, IPPROTO_UDP).in_zone(6),
    ];
    let tcp = vec![
        flow("198.18.0.5", 41000, "198.18.0.10", 53, IPPROTO_TCP).into(),
        flow("198.18.0.5", 41001, "198.18.0.10", 80, IPPROTO_TCP).dnat(ip("198.18.1.7"), 8080),
        flow("198.18.0.5", 41002, "198.18.0.12", 443, IPPROTO_TCP).into(),
        flow("2001:db8::5", 41003, "2001:db8::10", 53, IPPROTO_TCP).into(),
        flow("2001:db8::5", 41004, "2001:db8::10", 80, IPPROTO_TCP).into(),
    ];
    (udp, tcp)
}

// ---------------------------------------------------------------------------------
// (a) NEW and DESTROY events; the BPF filter

/// Inserted UDP entries (IPv4 and IPv6, DNAT'ed, zoned) each give one NEW event with
/// their tuple, reply source, zone and the kernel's id; deleting them gives one
/// DESTROY each with the same id. TCP entries never reach the filtered socket: an
/// unfiltered socket in the same namespace receives their datagrams, the filtered one
/// receives exactly one datagram per UDP event.
///
/// Negative controls (run by hand): with `bpf::udp_only` ending in `ret ACCEPT` for the
/// non-UDP case, or with its 16-bit constants compared without the host-endian swap
/// (`ne16` returning its argument: no layout is confirmed, everything is accepted),
/// this test fails with "filtered socket: 22 datagrams for 12 UDP events: EventStats {
/// datagrams: 22, events: 12, skipped: 10, .. }" (the 10 TCP events got through), and
/// `real_packets_give_new_events_with_the_dnat_reply` with "filtered: EventStats {
/// datagrams: 6, events: 4, skipped: 2, .. }"; the unit tests of the filter fail too.
#[test]
fn inserted_flows_give_new_and_destroy_events_and_tcp_never_reaches_the_filtered_socket() {
    require_root!();
    let ns = ct_ns("ev-ins");
    let mut ct = ct_open(&ns, Strategy::FilteredDump);
    let mut filtered = events_open(&ns, EventConfig::default(), true);
    let mut all = events_open(&ns, EventConfig::default(), false);
    let (udp, tcp) = mixed_entries();
    insert(&mut ct, &udp);
    insert(&mut ct, &tcp);
    let evs = collect(&mut filtered, udp.len());
    let new = news(&evs);
    assert_eq!(destroys(&evs), vec![], "no DESTROY yet");
    assert_eq!(
        set(new.iter().map(without_id)),
        set(udp.iter().map(expected)),
        "NEW events are exactly the UDP inserts"
    );
    assert_eq!(new.len(), udp.len(), "one NEW per entry");
    // The ids are the kernel's (the oracle's).
    assert_eq!(set(new.iter().copied()), oracle(&ns, "udp"));
    // Deleted (out of band): one DESTROY each, same flows and ids.
    delete_all(&ns);
    let evs = collect(&mut filtered, udp.len());
    assert_eq!(news(&evs), vec![]);
    assert_eq!(set(destroys(&evs)), set(new.iter().copied()));
    assert_eq!(destroys(&evs).len(), udp.len());
    // The BPF filter: the filtered socket got one datagram per UDP event, nothing else.
    let st = filtered.stats();
    let udp_events = 2 * udp.len() as u64;
    assert_eq!(
        (st.datagrams, st.events, st.skipped, st.malformed, st.losses),
        (udp_events, udp_events, 0, 0, 0),
        "filtered socket: {} datagrams for {udp_events} UDP events: {st:?}",
        st.datagrams
    );
    // The unfiltered socket got the TCP events too (and dropped them in user space).
    let evs = collect(&mut all, 2 * udp.len());
    assert_eq!(evs.len(), 2 * udp.len(), "user space keeps UDP only");
    let st = all.stats();
    let tcp_events = 2 * tcp.len() as u64;
    assert_eq!(
        (st.datagrams, st.events, st.skipped),
        (udp_events + tcp_events, udp_events, tcp_events),
        "unfiltered socket: {st:?}"
    );
}

/// Real packets through a router that DNATs the VIP: the NEW event of a UDP flow to the
/// VIP carries the NAT'ed reply (from the endpoint), a flow straight to the server is
/// not NAT'ed, and a TCP connection to the VIP reaches only the unfiltered socket (see
/// the negative controls above).
#[test]
fn real_packets_give_new_events_with_the_dnat_reply() {
    require_root!();
    let s = setup();
    let router = &s.line.router;
    let mut filtered = events_open(router, EventConfig::default(), true);
    let mut all = events_open(router, EventConfig::default(), false);
    for v6 in [false, true] {
        let f = Fam::new(v6);
        s.udp_flow(&f, SocketAddr::new(f.vip, VIP_PORT));
        s.udp_flow(&f, SocketAddr::new(f.server, EP_PORT));
        let _tcp = s.tcp_flow(&f, SocketAddr::new(f.vip, VIP_PORT));
        let evs = collect(&mut filtered, 2);
        let new = news(&evs);
        assert_eq!(new.len(), 2, "{}: {evs:#?}", f.name());
        let to_vip = new
            .iter()
            .find(|n| n.dst == f.vip)
            .expect("flow to the VIP");
        assert_eq!(
            (
                to_vip.src,
                to_vip.dport,
                to_vip.reply_src,
                to_vip.reply_sport
            ),
            (f.client, VIP_PORT, f.server, EP_PORT),
            "{}: the NEW event carries the DNAT'ed reply: {to_vip}",
            f.name()
        );
        assert!(!to_vip.is_unnated());
        let direct = new.iter().find(|n| n.dst == f.server).expect("direct flow");
        assert!(direct.is_unnated(), "{direct}");
        assert!(new.iter().all(|n| n.id.is_some() && n.zone == 0));
        // The unfiltered socket saw the TCP connection's NEW as well.
        let _ = collect(&mut all, 2);
    }
    let (fs, us) = (filtered.stats(), all.stats());
    assert_eq!((fs.datagrams, fs.skipped), (4, 0), "filtered: {fs:?}");
    // (ICMPv6 entries of the router's own traffic, if any, are skipped there too)
    assert!(us.events == 4 && us.skipped >= 2, "unfiltered: {us:?}");
}

// ---------------------------------------------------------------------------------
// (b) Loss and shutdown

/// A receive buffer far too small for thousands of inserts: the next `recv` reports
/// `Lost` (ENOBUFS is not suppressed), empties the queue, and events flow again.
#[test]
fn a_full_receive_buffer_is_reported_as_lost_and_events_resume() {
    require_root!();
    let ns = ct_ns("ev-lost");
    let mut ct = ct_open(&ns, Strategy::FilteredDump);
    let mut ev = events_open(
        &ns,
        EventConfig {
            rcvbuf: 4096,
            ..EventConfig::default()
        },
        true,
    );
    assert!(ev.rcvbuf() < 64 << 10, "rcvbuf {}", ev.rcvbuf());
    let many: Vec<SyntheticEntry> = (0..3000u16)
        .map(|i| flow("198.18.0.5", 10_000 + i, "198.18.0.10", 53, IPPROTO_UDP).into())
        .collect();
    insert(&mut ct, &many);
    let mut out = Vec::new();
    let mut lost = false;
    for _ in 0..10 {
        match ev
            .recv(&mut out, Some(Duration::from_secs(1)))
            .expect("recv")
        {
            Received::Lost => {
                lost = true;
                break;
            }
            Received::Events(_) => {}
            r => panic!("{r:?} before any loss"),
        }
    }
    assert!(lost, "no loss reported: {:?}", ev.stats());
    assert!(out.len() < many.len(), "{} events", out.len());
    let st = ev.stats();
    assert_eq!(st.losses, 1, "{st:?}");
    // The queue was emptied: nothing is pending, and a new event arrives alone.
    assert_eq!(
        ev.recv(&mut out, Some(Duration::ZERO)).unwrap(),
        Received::Timeout
    );
    let one: SyntheticEntry = flow("198.18.0.9", 9, "198.18.0.10", 53, IPPROTO_UDP).into();
    insert(&mut ct, &[one]);
    let mut after = Vec::new();
    assert_eq!(
        ev.recv(&mut after, Some(Duration::from_secs(5))).unwrap(),
        Received::Events(1)
    );
    assert_eq!(without_id(after[0].flow()), expected(&one));
}

/// `recv_until` returns `Stopped` when another thread writes the stop eventfd, and
/// `Timeout` when nothing happens.
#[test]
fn recv_until_wakes_up_for_shutdown() {
    require_root!();
    let ns = ct_ns("ev-stop");
    let mut ev = events_open(&ns, EventConfig::default(), true);
    // SAFETY: eventfd has no memory preconditions; the descriptor is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor owned from here on.
    let stop = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut out = Vec::new();
    assert_eq!(
        ev.recv_until(stop.as_fd(), &mut out, Some(Duration::from_millis(50)))
            .unwrap(),
        Received::Timeout
    );
    let started = Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the eventfd.
            let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
            assert_eq!(n, 8);
        });
        let r = ev.recv_until(stop.as_fd(), &mut out, Some(Duration::from_secs(10)));
        assert_eq!(r.unwrap(), Received::Stopped);
    });
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------
// (c) Seed + events == the table

/// Apply events to the index (NEW inserts or replaces, DESTROY removes).
fn apply(ix: &mut FlowIndex, evs: &[FlowEvent]) {
    for e in evs {
        match e {
            FlowEvent::New(f) => {
                ix.insert(*f);
            }
            FlowEvent::Destroy(f) => {
                ix.remove(f);
            }
        }
    }
}

fn seed(ct: &mut Conntrack, ix: &mut FlowIndex) {
    let mut flows = Vec::new();
    for fam in [Family::V4, Family::V6] {
        let o = ct.list_proto(fam, IPPROTO_UDP, &mut flows).expect("list");
        assert_eq!(o, ListOutcome::Complete);
    }
    for f in flows {
        assert!(ix.insert(f), "{f}");
    }
}

/// Subscribe, seed the index with one dump per family, then apply the events of
/// inserts and deletes (ours, by flow, and out of band): the index equals the table's
/// UDP entries, ids and zones included. The namespace has `nf_conntrack_events = 1`, so
/// the entries made before subscribing send their DESTROY too.
#[test]
fn seed_plus_events_equals_the_table() {
    require_root!();
    let ns = ct_ns("ev-seed");
    ns.sysctl("net.netfilter.nf_conntrack_events", "1");
    assert_eq!(
        ns.run(ct_netlink::events_sysctl),
        ct_netlink::EventsSysctl::On
    );
    let mut ct = ct_open(&ns, Strategy::FilteredDump);
    let (udp, tcp) = mixed_entries();
    insert(&mut ct, &udp[..3]); // before subscribing
    let mut ev = events_open(&ns, EventConfig::default(), true);
    insert(&mut ct, &udp[3..]); // after subscribing, before seeding
    let mut ix = FlowIndex::new();
    seed(&mut ct, &mut ix);
    assert_eq!(set(ix.iter()), oracle(&ns, "udp"), "after seeding");
    // More flows, TCP ones, and deletes of every kind.
    let more: Vec<SyntheticEntry> = (0..20u16)
        .map(|i| {
            let v6 = i % 2 == 1;
            let (src, dst) = if v6 {
                ("2001:db8::20", "2001:db8::30")
            } else {
                ("198.18.0.20", "198.18.0.30")
            };
            let e: SyntheticEntry = flow(src, 20_000 + i, dst, 53 + i % 3, IPPROTO_UDP).into();
            if i % 4 == 0 {
                e.dnat(ip(if v6 { "2001:db8:1::9" } else { "198.18.1.9" }), 5353)
            } else {
                e.in_zone(i % 3)
            }
        })
        .collect();
    insert(&mut ct, &more);
    insert(&mut ct, &tcp);
    let evs = collect(&mut ev, udp.len() - 3 + more.len());
    apply(&mut ix, &evs);
    assert_eq!(set(ix.iter()), oracle(&ns, "udp"), "after inserts");
    // Delete some by flow (from the index: one made before subscribing), some out of
    // band.
    let victims: Vec<Flow> = ix.iter().step_by(3).collect();
    let outcomes = ct.delete_flows(&victims);
    assert!(
        outcomes.iter().all(|o| *o == FlowOutcome::Deleted),
        "{outcomes:?}"
    );
    for dst in ["198.18.0.30", "198.18.0.10"] {
        ns.exec("conntrack", &["-D", "-p", "udp", "-d", dst]);
    }
    assert!(!oracle(&ns, "udp")
        .iter()
        .any(|f| f.dst == ip("198.18.0.30")));
    let evs = collect(&mut ev, victims.len());
    apply(&mut ix, &evs);
    let table = oracle(&ns, "udp");
    assert!(!table.is_empty() && table.len() < udp.len() + more.len());
    assert_eq!(set(ix.iter()), table, "after deletes");
    assert_eq!(ev.stats().losses, 0);
}

/// With `nf_conntrack_events = 2` (auto, the default), an entry made before any
/// listener existed has no event extension and its DESTROY may never come (whether it
/// does depends on listeners anywhere on the machine: the kernel's listener mask is
/// global). The index then keeps a ghost; deleting it by flow says `AlreadyGone`, which
/// is how the cleanup drops ghosts: after that the index equals the table again.
#[test]
fn ghosts_of_missed_destroys_are_already_gone() {
    require_root!();
    let ns = ct_ns("ev-ghost");
    assert_eq!(
        ns.run(ct_netlink::events_sysctl),
        ct_netlink::EventsSysctl::Auto
    );
    let mut ct = ct_open(&ns, Strategy::FilteredDump);
    let (udp, _) = mixed_entries();
    insert(&mut ct, &udp); // before subscribing
    let mut ev = events_open(&ns, EventConfig::default(), true);
    let mut ix = FlowIndex::new();
    seed(&mut ct, &mut ix);
    delete_all(&ns);
    let mut evs = Vec::new();
    let r = ev.recv(&mut evs, Some(Duration::from_millis(500))).unwrap();
    eprintln!(
        "{} DESTROY events of {} entries made before subscribing ({r:?})",
        destroys(&evs).len(),
        udp.len()
    );
    apply(&mut ix, &evs);
    let table = oracle(&ns, "udp");
    let ghosts: Vec<Flow> = ix.iter().filter(|f| !table.contains(f)).collect();
    let outcomes = ct.delete_flows(&ghosts);
    assert!(
        outcomes.iter().all(|o| *o == FlowOutcome::AlreadyGone),
        "{outcomes:?}"
    );
    for g in &ghosts {
        ix.remove(g);
    }
    assert_eq!(set(ix.iter()), table);
    assert_eq!(oracle(&ns, "udp"), table, "nothing else deleted");
}

// ---------------------------------------------------------------------------------
// (d) Listing with filters

fn filter_matches(f: &Filter, e: &Flow) -> bool {
    match *f {
        Filter::OrigDst { addr, port, proto } => {
            e.proto == proto && e.dst == addr && port.is_none_or(|p| p == e.dport)
        }
        Filter::OrigDstPort {
            family,
            port,
            proto,
        } => e.proto == proto && e.dport == port && e.family() == family,
        Filter::ReplySrc { addr, port, proto } => {
            e.proto == proto && e.reply_src == addr && e.reply_sport == port
        }
        _ => unreachable!("not used here"),
    }
}

/// Entries for the listing tests: UDP to two destinations on two ports per family,
/// DNAT'ed or not, zoned or not, and TCP to the same destinations.
fn listing_entries() -> Vec<SyntheticEntry> {
    let mut v = Vec::new();
    for (src, a, b, ep) in [
        ("198.18.0.5", "198.18.0.10", "198.18.0.11", "198.18.1.7"),
        (
            "2001:db8::5",
            "2001:db8::10",
            "2001:db8::11",
            "2001:db8:1::7",
        ),
    ] {
        for i in 0..12u16 {
            let dst = if i % 2 == 0 { a } else { b };
            let dport = if i % 3 == 0 { 53 } else { 30053 };
            let e: SyntheticEntry = flow(src, 30_000 + i, dst, dport, IPPROTO_UDP).into();
            v.push(match i % 4 {
                0 => e.dnat(ip(ep), 5353),
                1 => e.in_zone(3),
                _ => e,
            });
            v.push(flow(src, 31_000 + i, dst, dport, IPPROTO_TCP).into());
        }
    }
    v
}

/// `list` returns exactly the oracle's matches (ids included, each entry once) for
/// OrigDst (with and without port), OrigDstPort and ReplySrc filters, IPv4 and IPv6,
/// with every strategy forced and with the probed automatic choice; it deletes nothing.
#[test]
fn list_returns_exactly_the_matching_entries_with_each_strategy() {
    require_root!();
    let ns = ct_ns("ev-list");
    let mut ct = ct_open(&ns, Strategy::FilteredDump);
    insert(&mut ct, &listing_entries());
    let table: HashSet<Flow> = oracle(&ns, "udp")
        .into_iter()
        .chain(oracle(&ns, "tcp"))
        .collect();
    assert_eq!(table.len(), 48);
    let mut filters = Vec::new();
    for (a, b, ep, fam) in [
        ("198.18.0.10", "198.18.0.11", "198.18.1.7", Family::V4),
        ("2001:db8::10", "2001:db8::11", "2001:db8:1::7", Family::V6),
    ] {
        filters.extend([
            Filter::udp_orig_dst(ip(a), None),
            Filter::udp_orig_dst(ip(b), Some(53)),
            Filter::udp_nodeport(fam, 53),
            Filter::udp_reply_src(ip(ep), 5353),
        ]);
    }
    let want: HashSet<Flow> = table
        .iter()
        .filter(|e| filters.iter().any(|f| filter_matches(f, e)))
        .copied()
        .collect();
    // 8 of the 12 UDP entries per family: b on port 30053 matches nothing
    assert_eq!(want.len(), 16);
    let mut probed = ns
        .run(|| Conntrack::open(Config::default()))
        .expect("open probed");
    let mut runs: Vec<(String, ct_netlink::ListReport)> = Strategy::ALL
        .iter()
        .map(|&s| (s.to_string(), ct.list_with(s, &filters)))
        .collect();
    runs.push(("automatic".into(), probed.list(&filters)));
    // One filter alone, each, automatic.
    for f in &filters {
        let rep = probed.list(std::slice::from_ref(f));
        let w: HashSet<Flow> = table
            .iter()
            .filter(|e| filter_matches(f, e))
            .copied()
            .collect();
        assert_eq!(set(rep.flows.iter().copied()), w, "{f} alone");
        assert_eq!(rep.walks, 1, "{f} alone: {rep:?}");
    }
    for (name, rep) in &runs {
        assert_eq!(
            rep.flows.len(),
            set(rep.flows.iter().copied()).len(),
            "{name}: an entry listed twice"
        );
        assert_eq!(
            set(rep.flows.iter().copied()),
            want,
            "{name}: {:?}",
            rep.plans
        );
        assert!(rep.all_complete(), "{name}: {:?}", rep.per_filter);
        eprintln!("{name}: {} walks, plans {:?}", rep.walks, rep.plans);
    }
    // Walks: one per filter for filtered dumps, one per family for full dumps.
    let walks = |s: &str| runs.iter().find(|(n, _)| n == s).unwrap().1.walks;
    assert_eq!(walks("filtered-dump"), filters.len());
    assert_eq!(
        walks("filtered-flush"),
        filters.len(),
        "a flush lists by dumps"
    );
    assert_eq!(walks("full-dump"), 2);
    // per family: port 53 (b's filter and the node port's), reply port 5353, and a
    // (no port) alone
    assert_eq!(walks("port-dump"), 6);
    let all: HashSet<Flow> = oracle(&ns, "udp")
        .into_iter()
        .chain(oracle(&ns, "tcp"))
        .collect();
    assert_eq!(all, table, "listing deleted something");
    // An invalid filter fails alone.
    let bad = Filter::OrigDst {
        addr: ip("198.18.0.10"),
        port: None,
        proto: 0,
    };
    let rep = ct.list(&[bad, filters[0]]);
    assert_eq!(rep.per_filter[0], ListOutcome::Failed(libc::EINVAL));
    assert_eq!(rep.per_filter[1], ListOutcome::Complete);
}

/// `list_proto` returns every entry of the protocol of the family, nothing else.
#[test]
fn list_proto_returns_every_entry_of_the_protocol() {
    require_root!();
    let ns = ct_ns("ev-lproto");
    for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
        let mut ct = ct_open(&ns, strategy);
        ns.exec("conntrack", &["-F"]);
        ns.exec("conntrack", &["-F", "-f", "ipv6"]);
        insert(&mut ct, &listing_entries());
        for (proto, name) in [(IPPROTO_UDP, "udp"), (IPPROTO_TCP, "tcp")] {
            let mut got = Vec::new();
            for fam in [Family::V4, Family::V6] {
                ct.list_proto(fam, proto, &mut got).unwrap();
            }
            assert_eq!(got.len(), 24, "{strategy} {name}");
            assert_eq!(set(got), oracle(&ns, name), "{strategy} {name}");
        }
        let mut v4 = Vec::new();
        ct.list_proto(Family::V4, IPPROTO_UDP, &mut v4).unwrap();
        assert!(v4.iter().all(|f| f.family() == Family::V4) && v4.len() == 12);
    }
}

// ---------------------------------------------------------------------------------
// (e) Delete by flow

/// `delete_flows` deletes exactly the given entries (the others stay), in batches; a
/// second delete of the same entries is `AlreadyGone`; a flow with a wrong id is
/// `AlreadyGone` and its entry stays; a zoned entry is deleted with its zone while the
/// same tuple in zone 0 stays, and without its zone it is not found.
///
/// Negative control (run by hand): with `Flow::put_delete` not sending CTA_ID, the
/// wrong-id delete deletes the entry and the test fails with "wrong id: [Deleted]"
/// (`left: [Deleted]`, `right: [AlreadyGone]`).
#[test]
fn delete_flows_deletes_exactly_the_given_entries() {
    require_root!();
    let ns = ct_ns("ev-del");
    let mut ct = ns
        .run(|| {
            Conntrack::open(Config {
                strategy: Some(Strategy::FilteredDump),
                ipv6_addr_filter: Some(false),
                delete_batch: 4,
                ..Config::default()
            })
        })
        .expect("open");
    let mut entries = listing_entries();
    // The same tuple in zone 0 and zone 9, both families.
    for (src, dst) in [
        ("198.18.0.40", "198.18.0.41"),
        ("2001:db8::40", "2001:db8::41"),
    ] {
        let f = flow(src, 4000, dst, 53, IPPROTO_UDP);
        entries.push(f.into());
        entries.push(f.in_zone(9));
    }
    insert(&mut ct, &entries);
    let table = oracle(&ns, "udp");
    assert_eq!(table.len(), 28);
    let mut all: Vec<Flow> = table.iter().copied().collect();
    all.sort_by_key(|f| (f.family() == Family::V6, f.dst, f.sport, f.zone));
    // Every other entry, and the zoned twins (not their zone-0 tuples).
    let victims: Vec<Flow> = all
        .iter()
        .enumerate()
        .filter(|(i, f)| (i % 2 == 0 && f.sport != 4000) || f.zone == 9)
        .map(|(_, f)| *f)
        .collect();
    assert!(victims.iter().any(|f| f.zone == 9) && victims.len() > 10);
    let out = ct.delete_flows(&victims);
    assert_eq!(
        out,
        vec![FlowOutcome::Deleted; victims.len()],
        "first delete"
    );
    let left = oracle(&ns, "udp");
    let want: HashSet<Flow> = table
        .iter()
        .filter(|f| !victims.contains(f))
        .copied()
        .collect();
    assert_eq!(left, want, "exactly the victims are gone");
    for twin in left.iter().filter(|f| f.sport == 4000) {
        assert_eq!(twin.zone, 0, "the zone-0 twin stays");
    }
    // Again: already gone.
    let out = ct.delete_flows(&victims);
    assert_eq!(
        out,
        vec![FlowOutcome::AlreadyGone; victims.len()],
        "second delete"
    );
    // A wrong id: not found, the entry stays.
    let keep = *left
        .iter()
        .find(|f| f.zone == 0 && f.sport != 4000)
        .unwrap();
    let wrong = Flow {
        id: keep.id.map(|i| i ^ 1),
        ..keep
    };
    let out = ct.delete_flows(&[wrong]);
    assert_eq!(out, vec![FlowOutcome::AlreadyGone], "wrong id: {out:?}");
    assert!(
        oracle(&ns, "udp").contains(&keep),
        "wrong id deleted the entry"
    );
    // A zoned entry given without its zone is not found; the zone-0 twin's delete
    // leaves nothing of the tuple.
    let zoned: SyntheticEntry =
        flow("198.18.0.50", 5000, "198.18.0.51", 53, IPPROTO_UDP).in_zone(4);
    insert(&mut ct, &[zoned]);
    let z = *oracle(&ns, "udp").iter().find(|f| f.sport == 5000).unwrap();
    assert_eq!(z.zone, 4);
    assert_eq!(
        ct.delete_flows(&[Flow { zone: 0, ..z }]),
        vec![FlowOutcome::AlreadyGone]
    );
    assert_eq!(ct.delete_flows(&[z]), vec![FlowOutcome::Deleted]);
    // Without an id, the tuple and zone decide.
    let no_id = Flow { id: None, ..keep };
    assert_eq!(ct.delete_flows(&[no_id]), vec![FlowOutcome::Deleted]);
    assert!(!oracle(&ns, "udp").contains(&keep));
}
