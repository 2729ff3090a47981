//! ct-netlink against real flows: client -> router (conntrack, DNAT) -> server.
//!
//! Every filter kind x every strategy x IPv4 and IPv6 deletes exactly the entries it
//! should, compared with `conntrack -L` run in the router as the oracle. The flows, the
//! oracle and the shared checks are in the harness (`netns_tests::ct`).

use ct_netlink::{
    Config, Conntrack, DeleteReport, Family, Filter, Strategy, IPPROTO_TCP, IPPROTO_UDP,
};
use netns_tests::ct::*;
use netns_tests::{require_root, Netns};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[test]
fn ipv4_each_filter_deletes_exactly_its_entries_with_each_strategy() {
    require_root!();
    every_filter_every_strategy(false);
}

#[test]
fn ipv6_each_filter_deletes_exactly_its_entries_with_each_strategy() {
    require_root!();
    every_filter_every_strategy(true);
}

#[test]
fn unreplied_udp_entry_is_deleted_by_destination_ip_and_by_destination_port() {
    require_root!();
    let s = setup();
    for v6 in [false, true] {
        let f = Fam::new(v6);
        for strategy in Strategy::ALL {
            let mut ct = open(&s.line.router, strategy);
            for filter in [
                Filter::udp_orig_dst(f.dead, None),
                Filter::udp_nodeport(f.family(), 5400),
            ] {
                let _tcp = s.make_flows(&f);
                let unreplied = oracle(&s.line.router, f.name())
                    .into_iter()
                    .find(|o| o.orig_dst == f.dead && o.reply_src == f.dead)
                    .expect("unreplied entry present");
                let rep = check_filter(&s, &mut ct, &f, filter);
                assert_eq!(rep.deleted, 1, "{strategy} {filter}");
                assert!(!oracle(&s.line.router, f.name()).contains(&unreplied));
            }
        }
    }
}

#[test]
fn many_filters_in_one_call_and_other_family_untouched() {
    require_root!();
    let s = setup();
    let (f4, f6) = (Fam::new(false), Fam::new(true));
    for strategy in Strategy::ALL {
        let mut ct = open(&s.line.router, strategy);
        let _t4 = s.make_flows(&f4);
        // make_flows flushes the table first, so build the IPv6 flows by hand here.
        let sa = SocketAddr::new;
        s.udp_flow(&f6, sa(f6.vip, VIP_PORT));
        s.udp_flow(&f6, sa(f6.server, NODE_PORT));
        let v6_before = oracle(&s.line.router, "ipv6");
        let before = oracle(&s.line.router, "ipv4");
        let filters = [
            Filter::udp_orig_dst(f4.vip, Some(VIP_PORT)),
            Filter::udp_nodeport(Family::V4, NODE_PORT),
            Filter::udp_orig_dst(f4.dead, None),
        ];
        let expected: BTreeSet<Oracle> = before
            .iter()
            .filter(|o| filters.iter().any(|fl| oracle_matches(fl, o)))
            .cloned()
            .collect();
        let rep = ct.delete(&filters).unwrap();
        assert_eq!(rep.deleted, expected.len() as u64, "{strategy}: {rep:?}");
        assert_eq!(
            rep.per_filter
                .iter()
                .map(|r| r.deleted.unwrap())
                .collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        assert_eq!(
            oracle(&s.line.router, "ipv4"),
            before.difference(&expected).cloned().collect()
        );
        assert_eq!(
            oracle(&s.line.router, "ipv6"),
            v6_before,
            "{strategy}: IPv6 entries touched"
        );
    }
}

#[test]
fn probe_picks_the_kernels_strategy_and_deletes_nothing() {
    require_root!();
    probe_picks_the_kernels_strategy_and_deletes_nothing_check();
}

#[test]
fn filtered_flush_without_counting_reports_unknown_count() {
    require_root!();
    let s = setup();
    let f = Fam::new(false);
    let _tcp = s.make_flows(&f);
    let cfg = Config {
        strategy: Some(Strategy::FilteredFlush),
        count_flushed: false,
        ..Config::default()
    };
    let mut ct = s
        .line
        .router
        .run(move || Conntrack::open(cfg))
        .expect("open");
    let rep = ct.delete(&[Filter::udp_orig_dst(f.vip, None)]).unwrap();
    assert!(!rep.exact);
    assert_eq!(rep.per_filter[0].deleted, None);
    assert!(!oracle(&s.line.router, "ipv4")
        .iter()
        .any(|o| o.orig_dst == f.vip && o.proto == "udp"));
}

#[test]
fn work_cap_limits_deletes_per_call() {
    require_root!();
    let s = setup();
    let f = Fam::new(false);
    let _tcp = s.make_flows(&f);
    for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
        let _tcp = s.make_flows(&f);
        let cfg = Config {
            strategy: Some(strategy),
            max_deletes_per_call: 2,
            ..Config::default()
        };
        let mut ct = s
            .line
            .router
            .run(move || Conntrack::open(cfg))
            .expect("open");
        let filter = Filter::udp_orig_dst(f.vip, None); // three entries
        let rep = ct.delete(&[filter]).unwrap();
        assert_eq!((rep.deleted, rep.capped), (2, true), "{strategy}");
        let rep = ct.delete(&[filter]).unwrap();
        assert_eq!((rep.deleted, rep.capped), (1, false), "{strategy}");
    }
}

/// A second call finds nothing left to match: no error, nothing counted. (This never
/// reaches a delete by tuple; the kernel's ENOENT answer is exercised by
/// `delete_answered_enoent_counts_as_already_gone`.)
#[test]
fn deleting_entries_that_are_already_gone_is_success() {
    require_root!();
    let s = setup();
    let f = Fam::new(false);
    let _tcp = s.make_flows(&f);
    for strategy in Strategy::ALL {
        let mut ct = open(&s.line.router, strategy);
        let filter = Filter::udp_orig_dst(f.vip, Some(VIP_PORT));
        ct.delete(&[filter]).unwrap();
        let rep = ct.delete(&[filter]).unwrap();
        assert_eq!(rep.deleted, 0, "{strategy}");
        assert_eq!(rep.per_filter[0].failed, 0);
    }
}

/// Remove `victims` from the router's table out of band, with `conntrack -D` on their
/// full original tuple, and check they are gone.
fn delete_out_of_band(s: &Setup, f: &Fam, victims: &[Oracle]) {
    for v in victims {
        let (src, dst) = (v.orig_src.to_string(), v.orig_dst.to_string());
        let (sport, dport) = (v.orig_sport.to_string(), v.orig_dport.to_string());
        s.line.router.exec_ok(
            "conntrack",
            &[
                "-D",
                "-f",
                f.name(),
                "-p",
                &v.proto,
                "--orig-src",
                &src,
                "--orig-dst",
                &dst,
                "--orig-port-src",
                &sport,
                "--orig-port-dst",
                &dport,
            ],
        );
    }
    let now = oracle(&s.line.router, f.name());
    for v in victims {
        assert!(!now.contains(v), "conntrack -D left {v:?}");
    }
}

/// The kernel really answers ENOENT to a delete by tuple: the entries are collected by
/// a dump, then removed out of band (`conntrack -D`) before our deletes go out. Those
/// deletes must count as `already_gone` (success), not as `failed`, and no error.
#[test]
fn delete_answered_enoent_counts_as_already_gone() {
    require_root!();
    let s = setup();
    for v6 in [false, true] {
        let f = Fam::new(v6);
        let filter = Filter::udp_orig_dst(f.vip, Some(VIP_PORT)); // three entries
        for strategy in Strategy::ALL {
            let mut ct = open(&s.line.router, strategy);
            if strategy == Strategy::FilteredFlush && (!v6 || ct.probe().ipv6_addr_filter) {
                // Flushed by the kernel in one request: no delete by tuple, no window.
                continue;
            }
            // Round 1: one of three removed in between; round 2: all three.
            for gone in [1usize, 3] {
                let _tcp = s.make_flows(&f);
                let before = oracle(&s.line.router, f.name());
                let matching: Vec<Oracle> = before
                    .iter()
                    .filter(|o| oracle_matches(&filter, o))
                    .cloned()
                    .collect();
                assert_eq!(matching.len(), 3, "{strategy} {filter}: {before:#?}");
                let mut collected = None;
                let rep = ct
                    .delete_with_pause(strategy, &[filter], &mut |n| {
                        collected = Some(n);
                        delete_out_of_band(&s, &f, &matching[..gone]);
                    })
                    .unwrap_or_else(|e| panic!("{strategy} {filter}: {e}"));
                assert_eq!(collected, Some(3), "{strategy} {filter}: hook not reached");
                let r = &rep.per_filter[0];
                assert_eq!(
                    (r.already_gone, r.deleted, r.failed),
                    (gone as u64, Some(3 - gone as u64), 0),
                    "{strategy} {filter} ({gone} removed out of band): {rep:?}"
                );
                assert_eq!(rep.deleted, 3 - gone as u64, "{rep:?}");
                assert!(rep.exact && !rep.capped && !rep.incomplete, "{rep:?}");
                // Everything else is untouched.
                let want: BTreeSet<Oracle> = before
                    .iter()
                    .filter(|o| !oracle_matches(&filter, o))
                    .cloned()
                    .collect();
                assert_eq!(oracle(&s.line.router, f.name()), want, "{strategy}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Per-filter outcomes, fault injection, and the one-walk-per-family choice, on
// synthetic entries (IPCTNL_MSG_CT_NEW) in a namespace of their own.

use ct_netlink::testing::SyntheticFlow;
use ct_netlink::Outcome;

/// A namespace with conntrack in use, for synthetic entries.
fn synth_ns(role: &str) -> Netns {
    let ns = Netns::new(role);
    ns.ip(&["link", "set", "lo", "up"]);
    ns.enable_conntrack();
    ns
}

fn synth_open(ns: &Netns, cfg: Config) -> Conntrack {
    ns.run(move || Conntrack::open(cfg))
        .expect("open conntrack")
}

/// The k-th target address of a family.
fn target(v6: bool, k: u16) -> IpAddr {
    if v6 {
        format!("2001:db8:4::{:x}", k + 1).parse().unwrap()
    } else {
        format!("198.18.4.{}", k + 1).parse().unwrap()
    }
}

/// `n` UDP entries to each of `dsts` (port 53), from distinct source ports.
fn flows_to(dsts: &[IpAddr], n: u16) -> Vec<SyntheticFlow> {
    let mut v = Vec::new();
    for (d, &dst) in dsts.iter().enumerate() {
        let src: IpAddr = if dst.is_ipv6() {
            "2001:db8:1::2".parse().unwrap()
        } else {
            "198.18.1.2".parse().unwrap()
        };
        for i in 0..n {
            v.push(SyntheticFlow {
                src,
                dst,
                proto: IPPROTO_UDP,
                sport: 10_000 + (d as u16) * 64 + i,
                dport: VIP_PORT,
            });
        }
    }
    v
}

fn fill(ct: &mut Conntrack, flows: &[SyntheticFlow]) {
    let rep = ct.insert(flows, 600, 500).expect("insert");
    assert_eq!((rep.failed(), rep.lost_batches), (0, 0), "{rep:?}");
}

/// Entries matching `f` left in the namespace (conntrack -L as the oracle).
fn left(ns: &Netns, f: &Filter) -> usize {
    let fam = match f {
        Filter::OrigDst { addr, .. }
        | Filter::ReplySrc { addr, .. }
        | Filter::Unnated { addr, .. }
            if addr.is_ipv6() =>
        {
            "ipv6"
        }
        Filter::OrigDstPort {
            family: Family::V6, ..
        }
        | Filter::UnnatedPort {
            family: Family::V6, ..
        } => "ipv6",
        _ => "ipv4",
    };
    oracle(ns, fam)
        .iter()
        .filter(|o| oracle_matches(f, o))
        .count()
}

/// A filter is done exactly when nothing matching it is left.
fn assert_done_iff_nothing_left(ns: &Netns, rep: &DeleteReport, what: &str) {
    for r in &rep.per_filter {
        let n = left(ns, &r.filter);
        assert_eq!(
            r.is_done(),
            n == 0,
            "{what}: {} is {:?} with {n} entries left",
            r.filter,
            r.outcome()
        );
    }
}

fn udp_to(dst: IpAddr) -> Filter {
    Filter::udp_orig_dst(dst, Some(VIP_PORT))
}

#[test]
fn each_filter_gets_its_outcome_deleted_already_gone_or_nothing() {
    require_root!();
    let ns = synth_ns("outcome");
    for v6 in [false, true] {
        for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
            let mut ct = synth_open(
                &ns,
                Config {
                    strategy: Some(strategy),
                    ..Config::default()
                },
            );
            let (a, b, c) = (target(v6, 0), target(v6, 1), target(v6, 2));
            fill(&mut ct, &flows_to(&[a, b], 3));
            let filters = [udp_to(a), udp_to(b), udp_to(c)];
            // All of a's entries vanish between collecting and deleting: ENOENT.
            let ns2 = &ns;
            let fam = if v6 { "ipv6" } else { "ipv4" };
            let a_s = a.to_string();
            let rep = ct
                .delete_with_pause(strategy, &filters, &mut |_| {
                    ns2.exec_ok("conntrack", &["-D", "-f", fam, "-d", &a_s]);
                })
                .unwrap();
            assert_eq!(
                rep.outcomes(),
                vec![
                    Outcome::AlreadyGone,
                    Outcome::Deleted(Some(3)),
                    Outcome::Deleted(Some(0))
                ],
                "{strategy} v6={v6}: {rep:?}"
            );
            assert!(rep.all_done());
            assert_done_iff_nothing_left(&ns, &rep, "outcome");
        }
    }
}

#[test]
fn capped_filters_are_not_done_and_finish_later() {
    require_root!();
    let ns = synth_ns("capped");
    for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
        let mut ct = synth_open(
            &ns,
            Config {
                strategy: Some(strategy),
                max_deletes_per_call: 5,
                ..Config::default()
            },
        );
        let t: Vec<IpAddr> = (0..4).map(|k| target(false, k)).collect();
        fill(&mut ct, &flows_to(&t, 3)); // 12 entries, cap 5 per call
        let filters: Vec<Filter> = t.iter().map(|&a| udp_to(a)).collect();
        let mut calls = 0;
        loop {
            calls += 1;
            let rep = ct.delete(&filters).unwrap();
            assert_done_iff_nothing_left(&ns, &rep, &format!("{strategy} call {calls}"));
            assert_eq!(rep.capped, !rep.all_done(), "{rep:?}");
            assert!(rep
                .per_filter
                .iter()
                .all(|r| r.is_done() || r.outcome() == Outcome::Capped));
            if rep.all_done() {
                break;
            }
            assert!(calls < 5, "{strategy}: not done after {calls} calls");
        }
        assert_eq!(calls, 3, "{strategy}: 12 entries at 5 per call");
    }
}

/// Sets NLM_F_DUMP_INTR on every message header of a datagram.
fn set_dump_intr(buf: &mut [u8]) {
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        let flags = u16::from_ne_bytes([buf[off + 6], buf[off + 7]]) | 0x10;
        buf[off + 6..off + 8].copy_from_slice(&flags.to_ne_bytes());
        if len < 16 {
            break;
        }
        off += (len + 3) & !3;
    }
}

/// Whether a datagram holds an NLMSG_ERROR (an ACK or an error), i.e. answers to
/// requests rather than dump data.
fn has_ack(buf: &[u8]) -> bool {
    buf.len() >= 6 && u16::from_ne_bytes([buf[4], buf[5]]) == 2
}

#[test]
fn dumps_interrupted_for_good_make_their_filters_incomplete() {
    require_root!();
    let ns = synth_ns("intr");
    for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
        let mut ct = synth_open(
            &ns,
            Config {
                strategy: Some(strategy),
                max_dump_retries: 2,
                ..Config::default()
            },
        );
        let a = target(false, 0);
        fill(&mut ct, &flows_to(&[a], 3));
        ct.inject_recv_fault(Some(Box::new(|_, buf: &mut Vec<u8>| {
            if !has_ack(buf) {
                set_dump_intr(buf);
            }
            None
        })));
        let rep = ct.delete(&[udp_to(a)]).unwrap();
        assert_eq!(
            rep.outcomes(),
            vec![Outcome::Incomplete],
            "{strategy}: {rep:?}"
        );
        assert!(rep.incomplete && rep.dump_retries == 2, "{rep:?}");
        // Interrupted once only: the restart completes the filter.
        fill(&mut ct, &flows_to(&[a], 3));
        ct.inject_recv_fault(Some(Box::new(|n, buf: &mut Vec<u8>| {
            if n == 1 {
                set_dump_intr(buf);
            }
            None
        })));
        let rep = ct.delete(&[udp_to(a)]).unwrap();
        assert_eq!(
            rep.outcomes(),
            vec![Outcome::Deleted(Some(3))],
            "{strategy}: {rep:?}"
        );
        assert_eq!(rep.dump_retries, 1);
        ct.inject_recv_fault(None);
        assert_done_iff_nothing_left(&ns, &rep, "intr once");
    }
}

#[test]
fn lost_and_malformed_dump_replies_are_retried() {
    require_root!();
    let ns = synth_ns("enobufs");
    for strategy in [Strategy::FilteredDump, Strategy::FullDump] {
        for fault in ["enobufs", "truncated"] {
            let mut ct = synth_open(
                &ns,
                Config {
                    strategy: Some(strategy),
                    ..Config::default()
                },
            );
            let a = target(false, 0);
            fill(&mut ct, &flows_to(&[a], 3));
            let enobufs = fault == "enobufs";
            ct.inject_recv_fault(Some(Box::new(move |n, buf: &mut Vec<u8>| {
                if n != 1 {
                    return None;
                }
                if enobufs {
                    return Some(std::io::Error::from_raw_os_error(libc::ENOBUFS));
                }
                // Cut the first datagram inside its first message.
                buf.truncate(20);
                None
            })));
            let rep = ct.delete(&[udp_to(a)]).unwrap();
            ct.inject_recv_fault(None);
            assert_eq!(
                rep.outcomes(),
                vec![Outcome::Deleted(Some(3))],
                "{strategy} {fault}: {rep:?}"
            );
            assert!(rep.dump_retries >= 1, "{strategy} {fault}: {rep:?}");
            assert_done_iff_nothing_left(&ns, &rep, fault);
        }
    }
}

#[test]
fn unacknowledged_deletes_leave_the_filter_incomplete() {
    require_root!();
    let ns = synth_ns("unacked");
    let mut ct = synth_open(
        &ns,
        Config {
            strategy: Some(Strategy::FilteredDump),
            recv_timeout: Duration::from_millis(200),
            ..Config::default()
        },
    );
    let (a, b) = (target(false, 0), target(false, 1));
    fill(&mut ct, &flows_to(&[a, b], 2));
    // Every answer to a request is lost (as on a full receive buffer): the deletes are
    // resent, then given up on.
    ct.inject_recv_fault(Some(Box::new(|_, buf: &mut Vec<u8>| {
        has_ack(buf).then(|| std::io::Error::from_raw_os_error(libc::ENOBUFS))
    })));
    let rep = ct.delete(&[udp_to(a), udp_to(b)]).unwrap();
    ct.inject_recv_fault(None);
    assert_eq!(
        rep.outcomes(),
        vec![Outcome::Incomplete, Outcome::Incomplete],
        "{rep:?}"
    );
    assert_eq!(
        (rep.per_filter[0].unacked, rep.per_filter[0].failed),
        (2, 0),
        "{rep:?}"
    );
    // The next call finds what is left (here: nothing; the kernel did delete) and is done.
    let rep = ct.delete(&[udp_to(a), udp_to(b)]).unwrap();
    assert!(rep.all_done(), "{rep:?}");
    assert_done_iff_nothing_left(&ns, &rep, "after unacked");
}

#[test]
fn a_refused_filter_fails_alone() {
    require_root!();
    let ns = synth_ns("refused");
    let mut ct = synth_open(
        &ns,
        Config {
            strategy: Some(Strategy::FilteredDump),
            delete_batch: 1,
            ..Config::default()
        },
    );
    let (a, b) = (target(false, 0), target(false, 1));
    fill(&mut ct, &flows_to(&[a, b], 2));
    let bad = Filter::OrigDst {
        addr: a,
        port: None,
        proto: 0,
    };
    // The kernel's first ACK to a delete is turned into EPERM (a malformed, hostile or
    // refusing answer): that entry's filter fails, the other is done.
    ct.inject_recv_fault(Some(Box::new(|_, buf: &mut Vec<u8>| {
        if has_ack(buf) && buf.len() >= 20 && buf[16..20] == [0, 0, 0, 0] {
            buf[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        }
        None
    })));
    let rep = ct.delete(&[bad, udp_to(a), udp_to(b)]).unwrap();
    ct.inject_recv_fault(None);
    // Every ACK was rewritten: both real filters fail with EPERM; the invalid one with
    // EINVAL; nothing else happens to the call.
    assert_eq!(
        rep.outcomes(),
        vec![
            Outcome::Failed(libc::EINVAL),
            Outcome::Failed(libc::EPERM),
            Outcome::Failed(libc::EPERM)
        ],
        "{rep:?}"
    );
    assert!(!rep.all_done());
    // Without the fault, the same call completes.
    let rep = ct.delete(&[udp_to(a), udp_to(b)]).unwrap();
    assert!(rep.all_done(), "{rep:?}");
}

#[test]
fn many_filters_take_one_walk_per_family() {
    require_root!();
    let ns = synth_ns("onewalk");
    let mut ct = synth_open(&ns, Config::default()); // probed, automatic choice
    let v4: Vec<IpAddr> = (0..200).map(|k| target(false, k)).collect();
    let v6: Vec<IpAddr> = (0..200).map(|k| target(true, k)).collect();
    // Entries for half the targets of each family, and some that match nothing.
    fill(&mut ct, &flows_to(&v4[..100], 2));
    fill(&mut ct, &flows_to(&v6[..100], 2));
    fill(
        &mut ct,
        &flows_to(
            &[
                "198.18.5.1".parse().unwrap(),
                "2001:db8:5::1".parse().unwrap(),
            ],
            5,
        ),
    );
    // TCP to a target's address and port: no UDP filter may touch it, and the full dump
    // asks the kernel for UDP entries only (nothing else is copied to user space).
    let tcp: Vec<SyntheticFlow> = flows_to(&[v4[0], v6[0]], 3)
        .into_iter()
        .map(|f| SyntheticFlow {
            proto: IPPROTO_TCP,
            ..f
        })
        .collect();
    fill(&mut ct, &tcp);
    let filters: Vec<Filter> = v4.iter().chain(&v6).map(|&a| udp_to(a)).collect();
    let rep = ct.delete(&filters).unwrap();
    assert_eq!(rep.walks, 2, "{:?}", rep.plans);
    assert_eq!(
        rep.scanned,
        400 + 10,
        "only UDP entries are dumped: {rep:?}"
    );
    for a in [v4[0], v6[0]] {
        let tcp_filter = Filter::OrigDst {
            addr: a,
            port: Some(VIP_PORT),
            proto: IPPROTO_TCP,
        };
        assert_eq!(left(&ns, &tcp_filter), 3, "TCP entries to {a} were touched");
    }
    // they all name the same port: one dump of that port per family
    assert!(
        rep.plans.iter().all(|p| p.strategy == Strategy::PortDump),
        "{:?}",
        rep.plans
    );
    assert_eq!(rep.deleted, 400);
    assert!(rep.all_done());
    assert_done_iff_nothing_left(&ns, &rep, "one walk");
    // Destinations without a port share nothing: one full dump per family.
    fill(&mut ct, &flows_to(&v4[..100], 2));
    fill(&mut ct, &flows_to(&v6[..100], 2));
    let no_port: Vec<Filter> = v4
        .iter()
        .chain(&v6)
        .map(|&a| Filter::udp_orig_dst(a, None))
        .collect();
    let rep = ct.delete(&no_port).unwrap();
    assert_eq!(rep.walks, 2, "{:?}", rep.plans);
    assert!(
        rep.plans.iter().all(|p| p.strategy == Strategy::FullDump),
        "{:?}",
        rep.plans
    );
    assert_eq!(rep.deleted, 400);
    assert_done_iff_nothing_left(&ns, &rep, "one full dump");
    let bystanders = Filter::udp_orig_dst("198.18.5.1".parse().unwrap(), None);
    assert_eq!(
        left(&ns, &bystanders),
        5,
        "an entry no filter names was deleted"
    );
    // One filter: one per-filter request, never a full dump.
    fill(&mut ct, &flows_to(&v4[..1], 2));
    let rep = ct.delete(&filters[..1]).unwrap();
    assert_eq!(rep.walks, 1);
    assert_eq!(rep.plans[0].strategy, ct.probe().strategy);
    assert_eq!(
        rep.outcomes(),
        vec![Outcome::Deleted(Some(2).filter(|_| rep.exact))]
    );
    // Forced per-filter requests make one walk per filter (what the choice avoids).
    let rep = ct
        .delete_with(Strategy::FilteredDump, &filters[..10])
        .unwrap();
    assert_eq!(rep.walks, 10);
}

/// A rolling update of a UDP service: every removed endpoint has the service's target
/// port, so the automatic choice makes one kernel walk (a dump filtered on the reply
/// source port, no address) and copies only that port's entries to user space, however
/// large the table and however many endpoints go. (Negative control: without the port
/// groups the choice is a full dump, which copies every UDP entry: `scanned` 1,202.)
#[test]
fn a_rolling_update_is_one_walk_that_copies_only_its_port() {
    require_root!();
    let ns = synth_ns("rolling");
    let mut ct = synth_open(&ns, Config::default());
    let ep = |i: u8| -> IpAddr { IpAddr::from([198, 18, 6, i]) };
    let flow = |dst: IpAddr, sport: u16, dport: u16| SyntheticFlow {
        src: "198.18.1.2".parse().unwrap(),
        dst,
        proto: IPPROTO_UDP,
        sport,
        dport,
    };
    let mut flows: Vec<SyntheticFlow> = (0..100u8)
        .flat_map(|i| (0..2).map(move |j| (i, j)))
        .map(|(i, j)| flow(ep(i), 20_000 + u16::from(i) * 2 + j, 8053))
        .collect();
    // the same endpoints on another port, and a thousand flows elsewhere
    flows.extend((0..2u8).map(|i| flow(ep(i), 30_000 + u16::from(i), 9000)));
    flows.extend((0..1000u16).map(|k| {
        flow(
            IpAddr::from([198, 18, 7, (k % 250) as u8]),
            40_000 + k,
            9000,
        )
    }));
    fill(&mut ct, &flows);
    let gone: Vec<Filter> = (0..50u8)
        .map(|i| Filter::udp_reply_src(ep(i), 8053))
        .collect();
    let rep = ct.delete(&gone).unwrap();
    if ct.probe().strategy == Strategy::FullDump {
        eprintln!("kernel without CTA_FILTER: no port dump here");
        return;
    }
    assert_eq!(rep.plans.len(), 1);
    assert_eq!(rep.plans[0].strategy, Strategy::PortDump, "{rep:?}");
    assert_eq!(rep.walks, 1, "{rep:?}");
    assert_eq!(
        rep.scanned, 200,
        "only port 8053's entries are copied: {rep:?}"
    );
    assert_eq!(rep.deleted, 100);
    assert!(rep.all_done());
    assert_done_iff_nothing_left(&ns, &rep, "rolling update");
    for i in 0..2u8 {
        let other_port = Filter::udp_reply_src(ep(i), 9000);
        assert_eq!(
            left(&ns, &other_port),
            1,
            "the endpoint's other port was touched"
        );
    }
    for i in 50..100u8 {
        assert_eq!(
            left(&ns, &Filter::udp_reply_src(ep(i), 8053)),
            2,
            "a kept endpoint lost flows"
        );
    }
}
