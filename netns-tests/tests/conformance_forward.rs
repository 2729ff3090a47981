//! Forwarded service traffic on hosts whose `FORWARD` drops (root only; the real daemon
//! in iptables mode on node A of the two-node cluster, `netns_tests::cluster`). Node A
//! holds another program's ruleset, loaded with that program's own tool: Docker's
//! filter table with `FORWARD` policy DROP (`iptables-nft-restore`), or firewalld's
//! `inet firewalld` table (`nft -f`). The client's packets to a ClusterIP and to a
//! NodePort of node A are DNATed to a pod on node B and forwarded by node A. See
//! docs/ruleset.md, "Outside our tables: KUBE-FORWARD".

use std::time::Duration;

use netns_tests::cluster::*;
use netns_tests::host_firewalls::{firewalld_table, load_docker};
use netns_tests::{bins, require_root};
use serde_json::Value;

const NP: u16 = 30090;

fn cip(f: Fam) -> &'static str {
    f.pick("198.18.100.30", "2001:db8:100::30")
}

/// A NodePort service (ClusterIP too) with its one endpoint, pod b1 on node B.
fn objects(c: &Cluster) -> Vec<Value> {
    let mut objs = vec![Svc::new("fwd", &[cip(Fam::V4), cip(Fam::V6)])
        .node_port(NP)
        .to_json()];
    objs.extend(
        Fam::BOTH
            .iter()
            .map(|f| slice("fwd", *f, &[Ep::ready(c.pod("b1"), *f)])),
    );
    objs
}

/// The daemon in iptables mode on node A (after `setup` loaded the host's ruleset).
fn cluster(setup: impl FnOnce(&Cluster)) -> Cluster {
    cluster_in("iptables", setup)
}

fn cluster_in(mode: &'static str, setup: impl FnOnce(&Cluster)) -> Cluster {
    use_daemon();
    let mut c = Cluster::new(bins!(), &[("b1", On::B)]);
    setup(&c);
    let objs = objects(&c);
    let settings = ProxySettings {
        mode,
        ..ProxySettings::default()
    };
    c.start_proxy_with(&objs, Duration::from_secs(60), settings);
    c
}

/// Every family and protocol, to the ClusterIP and to the NodePort.
fn targets() -> Vec<(Proto, std::net::SocketAddr)> {
    let mut t = Vec::new();
    for f in Fam::BOTH {
        for proto in Proto::BOTH {
            t.push((proto, sa(cip(f), SERVICE_PORT)));
            t.push((proto, sa(f.pick(NODE_A4, NODE_A6), NP)));
        }
    }
    t
}

/// One new connection / flow to each target: the outcomes that are not b1's reply.
fn failures(c: &Cluster) -> Vec<(Proto, std::net::SocketAddr, Outcome)> {
    targets()
        .into_iter()
        .map(|(proto, dst)| {
            (
                proto,
                dst,
                probe(&c.client, proto, dst, None, REPLY_TIMEOUT),
            )
        })
        .filter(|(_, _, o)| o.pod() != Some("b1"))
        .collect()
}

/// Delete our jump from `FORWARD` in both families (iptables' own tool).
fn remove_our_jump(c: &Cluster) {
    for program in ["iptables-nft", "ip6tables-nft"] {
        c.node_a.exec_ok(
            program,
            &[
                "-D",
                "FORWARD",
                "-m",
                "comment",
                "--comment",
                "kubernetes forwarding rules",
                "-j",
                "KUBE-FORWARD",
            ],
        );
    }
}

#[test]
fn service_traffic_passes_dockers_forward_drop() {
    require_root!();
    let c = cluster(|c| load_docker(&c.node_a));
    let s = c.node_a.exec_ok("iptables-nft", &["-S", "FORWARD"]);
    assert!(s.contains("-P FORWARD DROP"), "Docker's policy stays: {s}");
    assert_eq!(failures(&c), vec![], "through Docker's FORWARD DROP");
    // our write outside our tables is ours for the tamper watcher too: no repair
    let tamper: Vec<String> = c
        .proxy()
        .lines()
        .into_iter()
        .filter(|l| l.contains("another program changed our nftables tables"))
        .collect();
    assert!(tamper.is_empty(), "{tamper:?}");
    // control: without our jump (our table alone), Docker's policy drops it all
    remove_our_jump(&c);
    let f = failures(&c);
    assert_eq!(
        f.len(),
        targets().len(),
        "without KUBE-FORWARD every forwarded probe is dropped: {f:?}"
    );
    assert!(f.iter().all(|(_, _, o)| *o == Outcome::Timeout), "{f:?}");
}

/// firewalld (default `StrictForwardPorts=no`) accepts DNATed forwarded packets itself
/// (`ct status dnat accept`): service traffic passes with or without `KUBE-FORWARD`.
#[test]
fn firewalld_accepts_dnated_service_traffic_itself() {
    require_root!();
    let c = cluster(|c| c.node_a.nft(&firewalld_table(false)));
    assert_eq!(failures(&c), vec![], "with firewalld's table");
    remove_our_jump(&c);
    assert_eq!(
        failures(&c),
        vec![],
        "firewalld's own ct status dnat accept lets it pass without KUBE-FORWARD"
    );
}

/// firewalld with `StrictForwardPorts=yes` rejects DNATed forwarded packets in its own
/// base chain (priority filter + 10): an accept in `ip filter` (upstream's
/// `KUBE-FORWARD`, present here) cannot undo that. As upstream: operators must let the
/// traffic through in firewalld (docs/operations.md).
#[test]
fn firewalld_strict_forward_ports_rejects_even_with_kube_forward() {
    require_root!();
    let c = cluster(|c| c.node_a.nft(&firewalld_table(true)));
    let s = c.node_a.exec_ok("iptables-nft", &["-S", "FORWARD"]);
    assert!(
        s.contains("-j KUBE-FORWARD"),
        "KUBE-FORWARD is in place: {s}"
    );
    let f = failures(&c);
    assert_eq!(
        f.len(),
        targets().len(),
        "firewalld rejects them all: {f:?}"
    );
    assert!(
        f.iter().all(|(_, _, o)| *o != Outcome::Timeout),
        "rejected (icmpx admin-prohibited), not dropped: {f:?}"
    );
}

/// nftables mode writes nothing outside our tables, as upstream's nftables proxier: on
/// Docker's host the forwarded service traffic is dropped by Docker's policy (the
/// operator lets it through in `DOCKER-USER`, docs/operations.md).
#[test]
fn nftables_mode_writes_nothing_in_filter() {
    require_root!();
    let c = cluster_in("nftables", |c| load_docker(&c.node_a));
    for program in ["iptables-nft", "ip6tables-nft"] {
        let s = c.node_a.exec_ok(program, &["-S"]);
        assert!(!s.contains("KUBE-FORWARD"), "{program}: {s}");
    }
    let f = failures(&c);
    assert_eq!(f.len(), targets().len(), "Docker's DROP applies: {f:?}");
}
