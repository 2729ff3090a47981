//! Tracer tests, one or more per behaviour, over the golden fixtures.

mod common;

use common::case;
use ruleset::trace::Fate;
use ruleset::Packet;

fn set(v: &[&str]) -> std::collections::BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const POD: &str = "198.18.1.50"; // a pod on this node (cluster CIDR 198.18.0.0/20)
const OUTSIDE: &str = "198.19.200.5"; // a client outside the cluster
const NODE: &str = "198.18.200.1";

#[test]
fn cluster_ip_reaches_all_endpoints_unmasqueraded_from_pods() {
    let c = case("cluster-ip-general");
    let t = c.trace(&Packet::tcp(POD, "198.18.100.41", 80).on("veth1"));
    assert_eq!(
        t.targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"]),
        "{t}"
    );
    assert_eq!(t.fate(), Some(Fate::Out));
    assert!(t.none_masqueraded(), "{t}");
    let t = c.trace(&Packet::tcp(POD, "198.18.100.41", 443));
    assert_eq!(t.targets(), set(&["198.18.1.10:8443", "198.18.2.10:8443"]));
    let t = c.trace(&Packet::udp(POD, "198.18.100.10", 53));
    assert_eq!(t.targets(), set(&["198.18.2.11:5353"]));
    let t = c.trace(&Packet::tcp(POD, "198.18.100.10", 53));
    assert_eq!(t.targets(), set(&["198.18.2.11:5353"]));
    let t = c.trace(&Packet::sctp(POD, "198.18.100.42", 3868));
    assert_eq!(t.targets(), set(&["198.18.2.10:3868"]));
}

#[test]
fn cluster_ip_from_host_or_outside_is_masqueraded() {
    let c = case("cluster-ip-general");
    let t = c.trace(&Packet::tcp(NODE, "198.18.100.41", 80).from_host());
    assert!(t.all_masqueraded(), "{t}");
    assert_eq!(t.targets().len(), 2);
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.100.41", 80));
    assert!(t.all_masqueraded(), "{t}");
}

#[test]
fn cluster_ip_wrong_port_rejected_unallocated_dropped() {
    let c = case("cluster-ip-general");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.41", 81)).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::tcp(NODE, "198.18.100.41", 81).from_host())
            .fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::udp(POD, "198.18.100.41", 80)).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.99", 80)).fate(),
        Some(Fate::Drop)
    );
    // outside the service CIDR: not ours
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.150.1", 80)).fate(),
        Some(Fate::Out)
    );
}

#[test]
fn hairpin_is_masqueraded() {
    let c = case("cluster-ip-general");
    let t = c.trace(&Packet::tcp("198.18.1.10", "198.18.100.41", 80).on("veth1"));
    for o in &t.outcomes {
        let to_self = o.dnat.map(|(a, _)| a.to_string()) == Some("198.18.1.10".into());
        assert_eq!(o.masquerade, to_self, "{t}");
    }
}

#[test]
fn node_ports_on_primary_ip_only_never_loopback() {
    let c = case("node-ports");
    let t = c.trace(&Packet::tcp(OUTSIDE, NODE, 30080));
    assert_eq!(
        t.targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"]),
        "{t}"
    );
    assert!(t.all_masqueraded());
    let t = c.trace(&Packet::udp(OUTSIDE, NODE, 30053));
    assert_eq!(t.targets(), set(&["198.18.1.10:5353", "198.18.2.10:5353"]));
    let t = c.trace(&Packet::tcp("127.0.0.1", "127.0.0.1", 30080).from_host());
    assert!(t.targets().is_empty(), "{t}");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30081)).fate(),
        Some(Fate::Local)
    );
}

#[test]
fn node_port_addresses_cidrs_and_all() {
    let c = case("node-ports-cidrs");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30080)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert!(c
        .trace(&Packet::tcp(OUTSIDE, "198.18.201.1", 30080))
        .targets()
        .is_empty());
    assert!(c
        .trace(&Packet::tcp("127.0.0.1", "127.0.0.1", 30080).from_host())
        .targets()
        .is_empty());
    let c = case("node-ports-all");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30080)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert!(c
        .trace(&Packet::tcp("127.0.0.1", "127.0.0.1", 30080).from_host())
        .targets()
        .is_empty());
}

#[test]
fn load_balancer_external_ip_and_node_port() {
    let c = case("load-balancer");
    let all = set(&["198.18.1.10:8080", "198.18.2.10:8080"]);
    for (dst, port) in [
        ("198.18.250.1", 80),
        ("198.18.251.1", 80),
        (NODE, 30060),
        ("198.18.100.60", 80),
    ] {
        let t = c.trace(&Packet::tcp(OUTSIDE, dst, port));
        assert_eq!(t.targets(), all, "{dst}:{port}\n{t}");
        assert!(t.all_masqueraded());
    }
    let c = case("load-balancer-ipmode-proxy");
    assert!(c
        .trace(&Packet::tcp(OUTSIDE, "198.18.250.2", 80))
        .targets()
        .is_empty());
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.3", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
}

#[test]
fn source_ranges_filter_lb_ip_only() {
    let c = case("lb-source-ranges");
    let ok = set(&["198.18.2.10:8080"]);
    assert_eq!(
        c.trace(&Packet::tcp("198.19.0.5", "198.18.250.4", 80))
            .targets(),
        ok
    );
    assert_eq!(
        c.trace(&Packet::tcp("198.19.9.1", "198.18.250.4", 80))
            .targets(),
        ok
    );
    let t = c.trace(&Packet::tcp("198.19.100.1", "198.18.250.4", 80));
    assert_eq!(t.fate(), Some(Fate::Drop), "{t}");
    assert!(t.visits("firewall-check"));
    // NodePort and ClusterIP are not filtered
    assert_eq!(
        c.trace(&Packet::tcp("198.19.100.1", NODE, 30062)).targets(),
        ok
    );
    assert_eq!(
        c.trace(&Packet::tcp("198.19.100.1", "198.18.100.62", 80))
            .targets(),
        ok
    );
    // a range holding the node IP also admits the LB IP itself as source
    let ok2 = set(&["198.18.2.10:8443"]);
    assert_eq!(
        c.trace(&Packet::tcp("198.18.250.5", "198.18.250.5", 443).from_host())
            .targets(),
        ok2
    );
    assert_eq!(
        c.trace(&Packet::tcp("198.18.200.7", "198.18.250.5", 443))
            .targets(),
        ok2
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.5", 443)).fate(),
        Some(Fate::Drop)
    );
}

#[test]
fn etp_local_external_only_local_pods_and_host_short_circuit() {
    let c = case("etp-local");
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.250.7", 80));
    assert_eq!(t.targets(), set(&["198.18.1.10:8080"]), "{t}");
    assert!(t.none_masqueraded(), "source IP preserved: {t}");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30070)).targets(),
        set(&["198.18.1.10:8080"])
    );
    let all = set(&["198.18.1.10:8080", "198.18.2.10:8080", "198.18.2.11:8080"]);
    let t = c.trace(&Packet::tcp(POD, "198.18.250.7", 80).on("veth1"));
    assert_eq!(t.targets(), all, "{t}");
    assert!(t.none_masqueraded());
    let t = c.trace(&Packet::tcp(NODE, "198.18.250.7", 80).from_host());
    assert_eq!(t.targets(), all, "{t}");
    assert!(t.all_masqueraded());
    // no local endpoint: external traffic dropped, ClusterIP still served
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30071)).fate(),
        Some(Fate::Drop)
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.71", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
}

/// externalTrafficPolicy Local without a local endpoint (upstream: iptables' KUBE-EXT
/// chain, nftables since kubernetes PR #132456): pods (unmasqueraded) and the host
/// (masqueraded) short-circuit to the cluster-wide endpoints on the LB IP, the external
/// IP and the NodePort; external clients are dropped. With session affinity too.
#[test]
fn etp_local_without_local_endpoint_short_circuits_pods_and_host() {
    let c = case("etp-local");
    for (svc, remote) in [("71", "198.18.2.10:8080"), ("72", "198.18.2.12:8080")] {
        let np: u16 = format!("300{svc}").parse().unwrap();
        let dests = [
            (format!("198.18.250.{svc}"), 80),
            (format!("198.18.251.{svc}"), 80),
            (NODE.to_string(), np),
        ];
        for (dst, port) in &dests {
            if svc == "72" && dst.starts_with("198.18.251") {
                continue; // no external IP
            }
            let t = c.trace(&Packet::tcp(POD, dst, *port).on("veth1"));
            assert_eq!(t.targets(), set(&[remote]), "pod to {dst}:{port}: {t}");
            assert!(t.none_masqueraded(), "pod to {dst}:{port}: {t}");
            let t = c.trace(&Packet::tcp(NODE, dst, *port).from_host());
            assert_eq!(t.targets(), set(&[remote]), "host to {dst}:{port}: {t}");
            assert!(t.all_masqueraded(), "host to {dst}:{port}: {t}");
            let t = c.trace(&Packet::tcp(OUTSIDE, dst, *port));
            assert_eq!(t.fate(), Some(Fate::Drop), "outside to {dst}:{port}: {t}");
        }
    }
}

#[test]
fn etp_cluster_reaches_all_masqueraded() {
    let c = case("etp-cluster");
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.250.8", 80));
    assert_eq!(t.targets(), set(&["198.18.1.10:8080", "198.18.2.10:8080"]));
    assert!(t.all_masqueraded());
}

#[test]
fn itp_local() {
    let c = case("itp-local");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.80", 80)).targets(),
        set(&["198.18.1.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.81", 80)).fate(),
        Some(Fate::Drop)
    );
}

#[test]
fn masquerade_modes() {
    let c = case("masquerade-all");
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80))
        .all_masqueraded());
    let c = case("detect-local-node-cidr");
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80))
        .none_masqueraded());
    assert!(c
        .trace(&Packet::tcp("198.18.5.5", "198.18.100.90", 80))
        .all_masqueraded());
    let c = case("detect-local-bridge");
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80).on("cbr0"))
        .none_masqueraded());
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80).on("eth0"))
        .all_masqueraded());
    let c = case("detect-local-interface-prefix");
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80).on("veth42"))
        .none_masqueraded());
    assert!(c
        .trace(&Packet::tcp(POD, "198.18.100.90", 80).on("eth0"))
        .all_masqueraded());
    let c = case("detect-local-none");
    let t = c.trace(&Packet::tcp(NODE, "198.18.100.90", 80).from_host());
    assert_eq!(t.targets(), set(&["198.18.2.10:8080"]));
    assert!(t.none_masqueraded());
}

#[test]
fn terminating_endpoints() {
    let c = case("terminating-etp-local");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.10", 80))
            .targets(),
        set(&["198.18.1.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.100", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.11", 80))
            .targets(),
        set(&["198.18.1.10:8080"])
    );
    // no usable endpoint at all: rejected, whatever the policy
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.12", 80)).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.102", 80)).fate(),
        Some(Fate::Reject)
    );
    let c = case("terminating-etp-cluster");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.110", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30111)).targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.112", 80)).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, NODE, 30112)).fate(),
        Some(Fate::Reject)
    );
}

#[test]
fn session_affinity_pins_and_dnats_in_the_list_chain() {
    let c = case("session-affinity");
    let t = c.trace(&Packet::tcp(POD, "198.18.100.120", 80));
    assert_eq!(
        t.targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"]),
        "{t}"
    );
    assert!(
        t.outcomes
            .iter()
            .all(|o| o.path.iter().any(|c| c == "svc-c14e41fc-ns1/aff")
                && !o.path.iter().any(|c| c.starts_with("ep-"))),
        "{t}"
    );
    assert!(
        !c.compiled.tables[0]
            .chains
            .iter()
            .any(|ch| ch.name.starts_with("ep-")),
        "no chain per endpoint"
    );
}

/// Pin `client` to the endpoint `ep` (`addr:port`) of the service port whose chains end
/// in `port` (`ns1/aff`), as the kernel would once the client's first connection went
/// there: the key the `update` of the list chain's rule for that endpoint writes, in
/// the family's `affinity` set.
fn pin(tables: &mut [nft_model::Table], port: &str, ep: &str, client: &str) {
    use nft_model::{Element, Expr, Value};
    let t = &mut tables[0];
    let (addr, p) = ep.split_once(':').unwrap();
    let ids: Vec<u32> = t
        .chains
        .iter()
        .filter(|c| c.name.starts_with("svc-") && c.name.ends_with(&format!("-{port}")))
        .flat_map(|c| c.rules.iter())
        .find(|r| nft_model::render::rule(t.family, r).ends_with(&format!("dnat to {addr}:{p}")))
        .expect("the endpoint's rule")
        .exprs
        .iter()
        .filter_map(|e| match e {
            Expr::Numgen { offset, .. } => Some(*offset),
            _ => None,
        })
        .collect();
    let set = t.sets.iter_mut().find(|s| s.name == "affinity").unwrap();
    set.elements.push(Element::key(vec![
        Value::Ipv4(client.parse().unwrap()),
        Value::Int(ids[0]),
        Value::Int(ids[1]),
    ]));
}

/// A client pinned to an endpoint of a port reaches it whichever of the port's addresses
/// it uses (ClusterIP, external IP, LoadBalancer IP, NodePort); another client is not
/// pinned by it; another service on the same endpoints is not either.
#[test]
fn session_affinity_pins_a_client_per_port_whichever_address() {
    let c = case("session-affinity");
    let mut tables = c.compiled.tables.clone();
    pin(&mut tables, "ns1/aff", "198.18.2.10:8080", OUTSIDE);
    let local = c.local_addrs();
    let tr = |src: &str, dst: &str, port: u16| {
        ruleset::trace(&tables, &local, &Packet::tcp(src, dst, port))
    };
    for (dst, port) in [
        ("198.18.100.120", 80),
        ("198.18.250.20", 80),
        ("198.18.251.20", 80),
        (NODE, 30120),
    ] {
        let t = tr(OUTSIDE, dst, port);
        assert_eq!(t.targets(), set(&["198.18.2.10:8080"]), "{dst}:{port}\n{t}");
        let t = tr("198.19.200.6", dst, port);
        assert_eq!(t.targets().len(), 2, "another client: {dst}:{port}\n{t}");
    }
    // aff2 has the same endpoints and its own pins
    let t = tr(OUTSIDE, "198.18.100.121", 80);
    assert_eq!(
        t.targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"]),
        "{t}"
    );
}

/// A client pinned to an endpoint that is removed is drawn afresh among the others from
/// the tables without it, its pin still in the set (and, the control, pinned to it while
/// it was there).
#[test]
fn session_affinity_removed_endpoints_pins_stop_applying() {
    let mut c = case("session-affinity");
    let mut tables = c.compiled.tables.clone();
    pin(&mut tables, "ns1/aff", "198.18.2.10:8080", OUTSIDE);
    // while the endpoint is there, the pin applies
    let t = ruleset::trace(
        &tables,
        &c.local_addrs(),
        &Packet::tcp(OUTSIDE, "198.18.100.120", 80),
    );
    assert_eq!(t.targets(), set(&["198.18.2.10:8080"]), "{t}");
    let pins = tables[0].set("affinity").unwrap().elements.clone();
    let svc = kube_model::ServiceKey::new("ns1", "aff");
    let mut s = c.cluster.slices_of(&svc).next().unwrap().clone();
    s.endpoints.retain(|e| e.addr.to_string() != "198.18.2.10");
    c.cluster.insert_slice(s);
    let mut tables = ruleset::compile(&c.cluster, &c.config).unwrap().tables;
    let aff = tables[0]
        .sets
        .iter_mut()
        .find(|s| s.name == "affinity")
        .unwrap();
    aff.elements = pins;
    let t = ruleset::trace(
        &tables,
        &c.local_addrs(),
        &Packet::tcp(OUTSIDE, "198.18.100.120", 80),
    );
    assert_eq!(t.targets(), set(&["198.18.1.10:8080"]), "{t}");
}

#[test]
fn no_endpoints_rejected() {
    let c = case("no-endpoints-reject");
    for (dst, port) in [
        ("198.18.100.130", 80),
        ("198.18.251.2", 80),
        ("198.18.250.13", 80),
        (NODE, 30130),
        ("198.18.100.131", 80),
    ] {
        let t = c.trace(&Packet::tcp(OUTSIDE, dst, port));
        assert_eq!(t.fate(), Some(Fate::Reject), "{dst}:{port}\n{t}");
    }
    assert_eq!(
        c.trace(&Packet::tcp(NODE, "198.18.100.130", 80).from_host())
            .fate(),
        Some(Fate::Reject)
    );
}

#[test]
fn bad_ips_skip_only_the_bad() {
    let c = case("bad-ips");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.140", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.251.4", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.146", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.141", 80)).fate(),
        Some(Fate::Drop)
    );
    let objects: Vec<String> = c.model_errors.iter().map(|e| e.to_string()).collect();
    for name in [
        "bad-cluster-ip",
        "port-zero",
        "port-big",
        "bad-proto",
        "dup-ports",
        "wrong-family",
        "orphan-1",
    ] {
        assert!(
            objects.iter().any(|e| e.contains(&format!("ns1/{name}"))),
            "{name} not reported: {objects:#?}"
        );
    }
}

#[test]
fn dual_stack() {
    let c = case("dual-stack");
    let t = c.trace(&Packet::tcp("2001:db8:1:1::50", "2001:db8:100::96", 80));
    assert_eq!(
        t.targets(),
        set(&["[2001:db8:1:1::10]:8080", "[2001:db8:1:2::10]:8080"]),
        "{t}"
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:8::1", "2001:db8:250::15", 80))
            .fate(),
        Some(Fate::Drop)
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:9::1", "2001:db8:250::15", 80))
            .targets()
            .len(),
        2
    );
    // the IPv6 ranges do not filter IPv4
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.15", 80))
            .targets()
            .len(),
        2
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:9::1", "2001:db8:200::1", 30150))
            .targets()
            .len(),
        2
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:1:1::50", "2001:db8:100::97", 443))
            .targets(),
        set(&["[2001:db8:1:2::11]:8443"])
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:1:1::50", "2001:db8:100::97", 80))
            .fate(),
        Some(Fate::Reject)
    );
}

#[test]
fn topology_hints() {
    let c = case("topology");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.160", 80)).targets(),
        set(&["198.18.1.10:8080", "198.18.2.10:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.161", 80)).targets(),
        set(&["198.18.2.10:8080", "198.18.2.11:8080"])
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.162", 80)).targets(),
        set(&["198.18.1.10:8080"])
    );
}

#[test]
fn ignored_services_are_not_proxied() {
    let c = case("ignored-services");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.170", 80)).fate(),
        Some(Fate::Drop)
    );
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.171", 80)).targets(),
        set(&["198.18.2.10:8080"])
    );
}

#[test]
fn overall_mix() {
    let c = case("overall");
    let t = c.trace(&Packet::tcp("198.18.160.5", "198.18.250.20", 80));
    assert_eq!(t.fate(), Some(Fate::Drop), "source range: {t}");
    let t = c.trace(&Packet::tcp("198.19.3.3", "198.18.250.20", 443));
    assert_eq!(t.targets(), set(&["198.18.1.10:8443"]), "{t}");
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.3", 80)).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8::9", "2001:db8:200::1", 30003))
            .targets(),
        set(&["[2001:db8:1:1::10]:8080"])
    );
}

/// Lists of more than 8 endpoints draw `mod 16` up to ten times (a draw past the 10th
/// endpoint finds nothing and the next rule draws again), then `mod 8`: every endpoint
/// is reachable, nothing else is, and the packet never falls through undecided.
#[test]
fn many_endpoints_draws_reach_every_endpoint() {
    let c = case("many-endpoints");
    let all: Vec<String> = (0..10)
        .map(|i| format!("198.18.2.{}:5353", 10 + i))
        .collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let t = c.trace(&Packet::udp(POD, "198.18.100.50", 53));
    assert_eq!(t.targets(), set(&all), "{t}");
    assert_eq!(t.fate(), Some(Fate::Out), "{t}");
    assert!(t.visits("pick-cluster-16"), "{t}");
    let t = c.trace(&Packet::udp(OUTSIDE, NODE, 30053));
    assert_eq!(t.targets(), set(&all), "{t}");
    assert!(t.all_masqueraded(), "{t}");
    let t = c.trace(&Packet::tcp(POD, "198.18.100.51", 80));
    assert_eq!(
        t.targets(),
        set(&[
            "198.18.2.30:8080",
            "198.18.2.31:8080",
            "198.18.2.32:8080",
            "198.18.2.33:8080"
        ])
    );
    // the protocol is part of the key: TCP to the UDP port is not a service
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.50", 53)).fate(),
        Some(Fate::Reject)
    );
}

/// Every clusterCIDR of a family marks local pods (issue 12 item 8): a pod in the second
/// CIDR is not masqueraded and short-circuits externalTrafficPolicy Local like one in
/// the first; a source in neither is masqueraded. Both families.
#[test]
fn every_cluster_cidr_detects_local_pods() {
    let c = case("detect-local-cluster-cidrs");
    let both4 = set(&["198.18.1.10:8080", "198.18.33.10:8080"]);
    for pod in ["198.18.1.50", "198.18.33.5"] {
        let t = c.trace(&Packet::tcp(pod, "198.18.100.160", 80).on("veth1"));
        assert!(t.none_masqueraded(), "{pod}: {t}");
        let t = c.trace(&Packet::tcp(pod, "198.18.250.16", 80).on("veth1"));
        assert_eq!(t.targets(), both4, "{pod}: {t}");
        assert!(t.none_masqueraded(), "{pod}: {t}");
    }
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.100.160", 80));
    assert!(t.all_masqueraded(), "{t}");
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.250.16", 80));
    assert_eq!(t.targets(), set(&["198.18.1.10:8080"]), "{t}");
    let both6 = set(&["[2001:db8:1:1::10]:8080", "[2001:db8:2:1::10]:8080"]);
    for pod in ["2001:db8:1:1::50", "2001:db8:2:7::5"] {
        let t = c.trace(&Packet::tcp(pod, "2001:db8:250::16", 80).on("veth1"));
        assert_eq!(t.targets(), both6, "{pod}: {t}");
        assert!(t.none_masqueraded(), "{pod}: {t}");
        let t = c.trace(&Packet::tcp(pod, "2001:db8:100::a0", 80).on("veth1"));
        assert!(t.none_masqueraded(), "{pod}: {t}");
    }
    let t = c.trace(&Packet::tcp("2001:db8:9::1", "2001:db8:100::a0", 80));
    assert!(t.all_masqueraded(), "{t}");
}

/// Two services claiming one external IP:port and one NodePort: the first service keeps
/// both; each keeps its own ClusterIP.
#[test]
fn conflicts_first_service_keeps_the_destination() {
    let c = case("conflicts");
    let alpha = set(&["198.18.2.70:8080"]);
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.251.17", 80))
            .targets(),
        alpha
    );
    assert_eq!(c.trace(&Packet::tcp(OUTSIDE, NODE, 30170)).targets(), alpha);
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.171", 80)).targets(),
        set(&["198.18.2.71:8080"])
    );
    let msgs: Vec<String> = c.compiled.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(msgs
        .iter()
        .all(|m| m.contains("ns1/alpha") && m.contains("ns1/beta")));
}

/// nodePortAddresses with CIDRs of IPv4 only (upstream: the IPv6 family gets `::/0`):
/// IPv4 NodePorts only on the addresses in them, IPv6 NodePorts on every local address.
#[test]
fn node_port_addresses_of_one_family_leave_the_other_on_every_address() {
    let c = case("node-ports-one-family");
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.200.1", 30030));
    assert_eq!(t.targets(), set(&["198.18.2.10:8080"]), "{t}");
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.201.1", 30030)).fate(),
        Some(Fate::Local),
        "not a NodePort address: the node's own port"
    );
    for dst in ["2001:db8:200::1", "2001:db8:201::1"] {
        let t = c.trace(&Packet::tcp("2001:db8:77::5", dst, 30030));
        assert_eq!(t.targets(), set(&["[2001:db8:2::10]:8080"]), "{dst}: {t}");
    }
}

/// Localhost NodePorts, iptables mode (`iptables.localhostNodePorts`, nodePortAddresses
/// holding IPv4 loopback): the host reaches IPv4 NodePorts on 127.0.0.1, masqueraded
/// (both policies: a loopback source is local), never on ::1; packets to 127.0.0.0/8
/// from elsewhere are dropped unless DNATed (the iptables proxier's KUBE-FIREWALL rule),
/// so a neighbour reaches a NodePort on 127.0.0.1 (as upstream) but no other local port.
#[test]
fn localhost_node_ports_in_iptables_mode() {
    for name in ["localhost-node-ports", "localhost-node-ports-cidrs"] {
        let c = case(name);
        for (np, ep) in [(30040, "198.18.2.10:8080"), (30041, "198.18.2.11:8080")] {
            let t = c.trace(&Packet::tcp("127.0.0.1", "127.0.0.1", np).from_host());
            assert_eq!(t.targets(), set(&[ep]), "{name} {np}: {t}");
            assert!(t.all_masqueraded(), "{name} {np}: {t}");
            let t = c.trace(&Packet::tcp(NODE, "198.18.200.1", np).from_host());
            assert_eq!(t.targets(), set(&[ep]), "{name} {np}: {t}");
        }
        let t = c.trace(&Packet::tcp("::1", "::1", 30040).from_host());
        assert!(t.targets().is_empty(), "{name}: no NodePort on ::1: {t}");
        let t = c.trace(&Packet::tcp(OUTSIDE, "127.0.0.1", 22));
        assert_eq!(
            t.fate(),
            Some(Fate::Drop),
            "{name}: martian to loopback: {t}"
        );
        let t = c.trace(&Packet::tcp(OUTSIDE, "127.0.0.1", 30040));
        assert_eq!(
            t.targets(),
            set(&["198.18.2.10:8080"]),
            "{name}: DNATed, not dropped: {t}"
        );
    }
    // nftables mode (and iptables mode without the option): loopback is never served
    let c = case("node-ports-all");
    let t = c.trace(&Packet::tcp("127.0.0.1", "127.0.0.1", 30080).from_host());
    assert!(t.targets().is_empty(), "{t}");
    // nftables mode on a node whose route_localnet is 1: the same guard, no loopback NodePorts
    let c = case("route-localnet-nftables");
    let t = c.trace(&Packet::tcp(OUTSIDE, "127.0.0.1", 22));
    assert_eq!(t.fate(), Some(Fate::Drop), "martian to loopback: {t}");
    let t = c.trace(&Packet::tcp("127.0.0.1", "127.0.0.1", 30040).from_host());
    assert!(t.targets().is_empty(), "no NodePort on loopback: {t}");
}

#[test]
fn etp_local_applies_to_the_external_ips_of_a_cluster_ip_service() {
    // fuzz finding (seed 2): upstream's ExternallyAccessible counts a ClusterIP service
    // with externalIPs, so its externalTrafficPolicy Local holds on the external IPs
    let c = case("etp-local-external-ips");
    let t = c.trace(&Packet::sctp(OUTSIDE, "198.18.250.70", 8080));
    assert_eq!(t.targets(), set(&["198.18.1.15:17247"]), "{t}");
    assert!(t.none_masqueraded(), "{t}");
    let t = c.trace(&Packet::sctp(POD, "198.18.250.70", 8080).on("veth1"));
    assert_eq!(
        t.targets(),
        set(&["198.18.1.15:17247", "198.18.2.23:17247"]),
        "{t}"
    );
    assert!(t.none_masqueraded(), "{t}");
    // the ClusterIP follows internalTrafficPolicy (Cluster)
    let t = c.trace(&Packet::sctp(POD, "198.18.100.70", 8080));
    assert_eq!(t.targets().len(), 2, "{t}");
}

#[test]
fn node_ports_and_external_ips_only_in_the_services_families() {
    // fuzz finding (seed 1): a single-stack service is not the other family's at all
    let c = case("node-port-one-family");
    let t = c.trace(&Packet::udp(OUTSIDE, NODE, 30111));
    assert_eq!(t.fate(), Some(Fate::Local), "{t}");
    let t = c.trace(&Packet::udp("2001:db8:300::1", "2001:db8:200::1", 30111));
    assert_eq!(t.fate(), Some(Fate::Reject), "{t}");
    let t = c.trace(&Packet::tcp("2001:db8:300::1", "2001:db8:200::1", 30112));
    assert_eq!(t.fate(), Some(Fate::Local), "{t}");
    let t = c.trace(&Packet::tcp("2001:db8:300::1", "2001:db8:250::12", 80));
    assert_eq!(t.fate(), Some(Fate::Out), "{t}");
    let t = c.trace(&Packet::tcp(OUTSIDE, NODE, 30112));
    assert_eq!(t.fate(), Some(Fate::Reject), "{t}");
}

/// Localhost NodePorts, nftables mode with `KubeProxyNFTablesLocalhostNodePorts`: the
/// host's UDP and SCTP packets to a NodePort on 127.0.0.0/8 or ::1 are rejected (and
/// counted) in both families; TCP too when no proxy serves the family (no loopback in
/// nodePortAddresses), else it reaches the proxy's listener (a local socket); a port
/// that is no NodePort, the gate off, or iptables mode: the kernel's own answer (local).
#[test]
fn localhost_node_ports_rejected_in_nftables_mode() {
    let fate = |c: &common::Case, p: Packet| c.trace(&p.from_host()).fate();
    let c = case("nftables-localhost-rejects");
    for lo in ["127.0.0.1", "127.0.0.5", "::1"] {
        assert_eq!(
            fate(&c, Packet::udp(lo, lo, 30051)),
            Some(Fate::Reject),
            "{lo}"
        );
        assert_eq!(
            fate(&c, Packet::sctp(lo, lo, 30052)),
            Some(Fate::Reject),
            "{lo}"
        );
        assert_eq!(
            fate(&c, Packet::tcp(lo, lo, 30050)),
            Some(Fate::Local),
            "{lo}"
        );
        assert_eq!(
            fate(&c, Packet::udp(lo, lo, 30050)),
            Some(Fate::Local),
            "{lo}"
        );
    }
    // not on other addresses: the node's address is a NodePort address (served)
    let t = c.trace(&Packet::udp(NODE, NODE, 30051).from_host());
    assert_eq!(t.targets(), set(&["198.18.2.21:8080"]), "{t}");
    let c = case("nftables-localhost-rejects-no-proxy");
    for lo in ["127.0.0.1", "::1"] {
        assert_eq!(
            fate(&c, Packet::tcp(lo, lo, 30050)),
            Some(Fate::Reject),
            "{lo}"
        );
        assert_eq!(
            fate(&c, Packet::udp(lo, lo, 30051)),
            Some(Fate::Reject),
            "{lo}"
        );
    }
    for name in [
        "nftables-localhost-gate-off",
        "iptables-localhost-no-rejects",
    ] {
        let c = case(name);
        for lo in ["127.0.0.1", "::1"] {
            assert_eq!(
                fate(&c, Packet::udp(lo, lo, 30051)),
                Some(Fate::Local),
                "{name} {lo}"
            );
        }
    }
}

/// Legacy texts (issue 39 item 2, found by the fuzzer's legacy spellings): a 4-digit
/// octet, a 5-digit IPv6 group, dotted tails with leading zeros, IPv4-mapped addresses
/// and prefixes read as `ParseIPSloppy`/`ParseCIDRSloppy` read them. Before the parser
/// learnt them both services were refused (bad cluster IP), the mapped /120 range was
/// dropped and the mapped /24 one read as IPv4.
#[test]
fn legacy_ip_texts_are_read_as_upstream_reads_them() {
    let c = case("legacy-ips");
    let eps = set(&["198.18.2.11:8080", "198.18.2.12:8080"]);
    assert_eq!(
        c.trace(&Packet::tcp(POD, "198.18.100.150", 80)).targets(),
        eps
    );
    assert_eq!(
        c.trace(&Packet::tcp(OUTSIDE, "198.18.250.7", 80)).targets(),
        eps
    );
    // ::ffff:198.19.0.0/120 and 198.019.008.000/0021
    assert_eq!(
        c.trace(&Packet::tcp("198.19.0.5", "198.18.251.5", 80))
            .targets(),
        eps
    );
    assert_eq!(
        c.trace(&Packet::tcp("198.19.9.5", "198.18.251.5", 80))
            .targets(),
        eps
    );
    assert_eq!(
        c.trace(&Packet::tcp("198.19.3.3", "198.18.251.5", 80))
            .fate(),
        Some(Fate::Drop)
    );
    let eps6 = set(&["[2001:db8:0:2::b]:8080"]);
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:1:1::5", "2001:db8:100::97", 80))
            .targets(),
        eps6
    );
    // the IPv6 service's only range is ::/24: every client of ours is outside it
    assert_eq!(
        c.trace(&Packet::tcp("2001:db8:300::5", "2001:db8:251::6", 80))
            .fate(),
        Some(Fate::Drop)
    );
}

/// iptables mode: a NodePort without endpoints is rejected, and one without local
/// endpoints (externalTrafficPolicy Local) dropped, on every local address, loopback
/// included, as upstream's `KUBE-EXTERNAL-SERVICES` (`-m addrtype --dst-type LOCAL`)
/// does whatever nodePortAddresses selects; served (DNATed) only on the primary IPs.
/// Found by the fuzzer's iptables environments (`FUZZ_SEED=1`, seed 6: `sctp External
/// 198.18.200.77 -> 198.18.201.1 port 31967: model Reject, ruleset Ok(NoMatch)`).
#[test]
fn iptables_nodeports_without_endpoints_refused_on_every_local_address() {
    let c = case("iptables-nodeport-no-endpoints-every-address");
    for dst in ["198.18.200.1", "198.18.201.1"] {
        let t = c.trace(&Packet::tcp(OUTSIDE, dst, 30080));
        assert_eq!(t.fate(), Some(Fate::Reject), "{dst}: {t}");
    }
    let t = c.trace(&Packet::tcp("2001:db8:300::5", "2001:db8:201::1", 30080));
    assert_eq!(t.fate(), Some(Fate::Reject), "{t}");
    // the node's own connections to loopback
    for lo in ["127.0.0.1", "::1"] {
        let t = c.trace(&Packet::tcp(lo, lo, 30080).from_host());
        assert_eq!(t.fate(), Some(Fate::Reject), "{lo}: {t}");
    }
    let t = c.trace(&Packet::udp(OUTSIDE, "198.18.201.1", 30081));
    assert_eq!(t.fate(), Some(Fate::Drop), "{t}");
    // another port on the same address: untouched
    let t = c.trace(&Packet::tcp(OUTSIDE, "198.18.201.1", 30082));
    assert!(
        t.targets().is_empty() && t.fate() == Some(Fate::Local),
        "{t}"
    );
}
