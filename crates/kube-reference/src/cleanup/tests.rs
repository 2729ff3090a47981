//! Unit tests of the cleanup model (and the generator on hand-made cases). Each test names the change
//! to the code that made it fail (its negative control, run by hand).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::gen::{node, Case, Env};
use crate::model::{Model, Verdict};
use crate::packets::{self, Probe};
use crate::rng::Rng;

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("literal socket address")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

fn case(services: Vec<core::Service>, slices: Vec<discovery::EndpointSlice>) -> Case {
    let env = Env::default();
    Case {
        seed: 0,
        node: node(&env),
        env,
        services,
        slices,
    }
}

/// A port of a service: name, protocol, port, NodePort (0: none).
type P<'a> = (&'a str, &'a str, i32, i32);

fn service(
    ns: &str,
    name: &str,
    cluster_ip: &str,
    external: &[&str],
    lb: &[&str],
    ports: &[P],
) -> core::Service {
    core::Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(core::ServiceSpec {
            type_: Some(
                if lb.is_empty() {
                    "NodePort"
                } else {
                    "LoadBalancer"
                }
                .into(),
            ),
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            external_ips: (!external.is_empty())
                .then(|| external.iter().map(|s| s.to_string()).collect()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, proto, port, np)| core::ServicePort {
                        name: Some(n.to_string()),
                        protocol: Some(proto.to_string()),
                        port: *port,
                        node_port: (*np != 0).then_some(*np),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: (!lb.is_empty()).then(|| core::ServiceStatus {
            load_balancer: Some(core::LoadBalancerStatus {
                ingress: Some(
                    lb.iter()
                        .map(|a| core::LoadBalancerIngress {
                            ip: Some(a.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        }),
    }
}

/// An endpoint: address, ready, serving, terminating.
type E<'a> = (&'a str, Option<bool>, Option<bool>, Option<bool>);

fn slice(
    ns: &str,
    owner: &str,
    name: &str,
    ports: &[(&str, &str, i32)],
    eps: &[E],
) -> discovery::EndpointSlice {
    let v6 = eps.first().is_some_and(|e| e.0.contains(':'));
    discovery::EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_string(),
                owner.to_string(),
            )])),
            ..Default::default()
        },
        address_type: if v6 { "IPv6" } else { "IPv4" }.into(),
        endpoints: Some(
            eps.iter()
                .map(|(a, ready, serving, terminating)| discovery::Endpoint {
                    addresses: vec![a.to_string()],
                    conditions: Some(discovery::EndpointConditions {
                        ready: *ready,
                        serving: *serving,
                        terminating: *terminating,
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: Some(
            ports
                .iter()
                .map(|(n, proto, port)| discovery::EndpointPort {
                    name: Some(n.to_string()),
                    protocol: Some(proto.to_string()),
                    port: Some(*port),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

fn flow(src: &str, dst: &str, reply: &str) -> CtFlow {
    CtFlow {
        src: sa(src),
        dst: sa(dst),
        reply_src: sa(reply),
    }
}

const CLIENT: &str = "198.19.0.1:40000";

/// Upstream's `TestCleanStaleEntries` and `TestServiceWithoutEndpoints`
/// (`pkg/proxy/conntrack/cleanup_test.go`) as data, with their addresses moved into
/// 198.18.0.0/15: ClusterIP 172.30.1.1 -> 198.18.100.1, external IP 192.168.99.100 ->
/// 198.18.250.100, LoadBalancer IP 1.2.3.4 -> 198.18.251.4, endpoints 10.240.0.4
/// (serving), 10.240.1.5 (not serving), 10.240.2.6 (deleted) -> 198.18.2.4/.5/.6. Service
/// port 8000 (TCP, UDP with NodePort 32000, SCTP), endpoint port 9090, a port no service
/// has 3000. Only the UDP entries are CtFlows (the TCP and SCTP ones are left by
/// construction). Upstream's NodePort entries have no destination address: here one to
/// the node and one to another host. The entries DNAT'ed to the serving endpoint's
/// address on its old port 8080 are deleted from 1.33 (#130542) and kept by 1.32, which
/// compares addresses only: the model keeps them.
///
/// Negative control: matching the service IP on any port (1.32.0, `is_frontend`
/// ignoring the port) fails on `198.18.100.1:3000 (DNAT 198.18.2.5:9090)`.
#[test]
fn upstream_cleanup_test_cases() {
    let svc = service(
        "test",
        "cleanup-test",
        "198.18.100.1",
        &["198.18.250.100"],
        &["198.18.251.4"],
        &[
            ("test-tcp", "TCP", 8000, 0),
            ("test-udp", "UDP", 8000, 32000),
            ("test-sctp", "SCTP", 8000, 32000),
        ],
    );
    let ports = [
        ("test-tcp", "TCP", 9090),
        ("test-udp", "UDP", 9090),
        ("test-sctp", "SCTP", 9090),
    ];
    let eps = [
        ("198.18.2.4", None, Some(true), None),
        ("198.18.2.5", None, Some(false), None),
    ];
    let c = case(
        vec![svc.clone()],
        vec![slice(
            "test",
            "cleanup-test",
            "cleanup-test-0",
            &ports,
            &eps,
        )],
    );
    let m = CleanupModel::new(&c);
    assert_eq!(m.ports(0).len(), 1, "one UDP service port");
    assert_eq!(m.ports(0)[0].endpoints.len(), 2);
    assert_eq!(
        m.ports(0)[0].serving_ips(),
        BTreeSet::from([ip("198.18.2.4")])
    );

    let frontends = ["198.18.100.1", "198.18.251.4", "198.18.250.100"];
    let mut cases: Vec<(CtFlow, bool)> = Vec::new();
    for d in frontends {
        cases.push((flow(CLIENT, &format!("{d}:8000"), "198.18.2.4:8080"), false));
    }
    for ep in ["198.18.2.4", "198.18.2.5", "198.18.2.6"] {
        for d in frontends {
            for port in [8000, 3000] {
                let deleted = port == 8000 && ep != "198.18.2.4";
                cases.push((
                    flow(CLIENT, &format!("{d}:{port}"), &format!("{ep}:9090")),
                    deleted,
                ));
            }
        }
        for d in ["198.18.200.1", "198.19.3.3"] {
            let f = flow(CLIENT, &format!("{d}:32000"), &format!("{ep}:9090"));
            cases.push((f, ep != "198.18.2.4"));
        }
    }
    for d in frontends {
        for port in [8000, 3000] {
            let a = format!("{d}:{port}");
            cases.push((flow(CLIENT, &a, &a), port == 8000));
        }
    }
    assert_eq!(cases.len(), 33);
    assert_eq!(cases.iter().filter(|c| c.1).count(), 13);
    for (f, deleted) in &cases {
        let got = m.stale(f);
        assert_eq!(got.is_some(), *deleted, "{f}: {got:?}");
        if let Some(r) = got {
            assert_eq!(r.port.to_string(), "test/cleanup-test:test-udp");
            let rule = match f.dst.ip() {
                a if a == ip("198.18.200.1") => Rule::NodePort { to_node: true },
                a if a == ip("198.19.3.3") => Rule::NodePort { to_node: false },
                _ => Rule::ServiceIp,
            };
            assert_eq!(r.rule, rule, "{f}");
        }
    }

    // TestServiceWithoutEndpoints: the slice belongs to another service
    let c = case(
        vec![svc],
        vec![slice(
            "test",
            "non-existing-service",
            "cleanup-test-0",
            &ports,
            &eps,
        )],
    );
    let m = CleanupModel::new(&c);
    for f in [
        flow(CLIENT, "198.18.250.100:8000", "198.18.2.4:9090"),
        flow(CLIENT, "198.18.250.100:8000", "198.18.2.6:9090"),
    ] {
        assert_eq!(m.stale(&f), None, "{f}");
    }
}

fn dns_service(name: &str, cluster_ip: &str) -> core::Service {
    service("ns1", name, cluster_ip, &[], &[], &[("dns", "UDP", 53, 0)])
}

fn dns_slice(owner: &str, eps: &[E]) -> discovery::EndpointSlice {
    slice(
        "ns1",
        owner,
        &format!("{owner}-v40"),
        &[("dns", "UDP", 5353)],
        eps,
    )
}

const SERVING: (Option<bool>, Option<bool>, Option<bool>) = (Some(true), Some(true), Some(false));

fn ep(addr: &str) -> E<'_> {
    (addr, SERVING.0, SERVING.1, SERVING.2)
}

/// Two UDP services select the same pod and port, one is deleted: the other's flows to
/// that pod are `Current` and kept, the deleted one's are `Past` and left (1.32+), a flow
/// of the remaining service to an address it never had is deleted.
///
/// Negative control: classifying a flow `Past` when its endpoint left *any* service port
/// (a rule by endpoint, not by service port, in `table.rs`'s `still`) fails on `flows to
/// b via the shared pod are Current`.
#[test]
fn a_pod_shared_by_two_services_keeps_the_remaining_ones_flows() {
    let shared = "198.18.1.10";
    let before = case(
        vec![
            dns_service("a", "198.18.100.10"),
            dns_service("b", "198.18.100.11"),
        ],
        vec![
            dns_slice("a", &[ep(shared)]),
            dns_slice("b", &[ep(shared), ep("198.18.1.11")]),
        ],
    );
    let mut after = before.clone();
    after
        .services
        .retain(|s| s.metadata.name.as_deref() != Some("a"));
    after
        .slices
        .retain(|s| s.metadata.name.as_deref() != Some("a-v40"));
    assert!(cleanup_required(&before, &after, 0));

    let table = [
        flow(CLIENT, "198.18.100.11:53", "198.18.1.10:5353"),
        flow(CLIENT, "198.18.100.10:53", "198.18.1.10:5353"),
        flow(CLIENT, "198.18.100.11:53", "198.18.1.99:5353"),
    ];
    let deletes = upstream_deletes(&before, &after, 0, &table);
    let want = BTreeMap::from([(
        2,
        Reason {
            port: PortRef {
                namespace: "ns1".into(),
                name: "b".into(),
                port: "dns".into(),
            },
            rule: Rule::ServiceIp,
        },
    )]);
    assert_eq!(deletes, want);

    let mut seen = (0, 0);
    for seed in 0..40 {
        let gen = flows(&before, &after, 0, &mut Rng::new(seed), 1000);
        let fs: Vec<CtFlow> = gen.iter().map(|g| g.0).collect();
        let deletes = upstream_deletes(&before, &after, 0, &fs);
        for (i, (f, o)) in gen.iter().enumerate() {
            if f.reply_src != sa("198.18.1.10:5353") {
                continue;
            }
            if f.dst == sa("198.18.100.11:53") {
                assert_eq!(
                    *o,
                    Origin::Current,
                    "flows to b via the shared pod are Current: {f}"
                );
                seen.0 += 1;
            } else if f.dst == sa("198.18.100.10:53") {
                assert_eq!(*o, Origin::Past, "flows to the deleted a are Past: {f}");
                seen.1 += 1;
            }
            assert!(!deletes.contains_key(&i), "{f} deleted: {:?}", deletes[&i]);
        }
    }
    assert!(
        seen.0 > 0 && seen.1 > 0,
        "the generator made both kinds: {seen:?}"
    );
}

/// A readiness flap (not ready and not serving -> ready): nothing DNAT'ed to the
/// endpoint that serves after the sync is stale, nor to the one that served throughout;
/// the not-NATed entry to the service IP and port is (1.32+ deletes those too).
///
/// Negative control: judging with the state before the sync (`CleanupModel::new(before)`
/// in `upstream_deletes`) fails, deleting the flows DNAT'ed to `198.18.1.20:5353`
/// (entries 0 and 2).
#[test]
fn a_readiness_flap_deletes_nothing_of_the_serving_endpoints() {
    let svc = service(
        "ns1",
        "s",
        "198.18.100.20",
        &[],
        &[],
        &[("dns", "UDP", 53, 30053)],
    );
    let before = case(
        vec![svc.clone()],
        vec![dns_slice(
            "s",
            &[
                ("198.18.1.20", Some(false), Some(false), None),
                ep("198.18.1.21"),
            ],
        )],
    );
    let after = case(
        vec![svc],
        vec![dns_slice(
            "s",
            &[("198.18.1.20", Some(true), None, None), ep("198.18.1.21")],
        )],
    );
    assert!(cleanup_required(&before, &after, 0));
    assert!(
        newly_active(&before, &after, 0).is_empty(),
        "198.18.1.21 was ready"
    );
    let table = [
        flow(CLIENT, "198.18.100.20:53", "198.18.1.20:5353"),
        flow(CLIENT, "198.18.100.20:53", "198.18.1.21:5353"),
        flow(CLIENT, "198.18.200.1:30053", "198.18.1.20:5353"),
        flow(CLIENT, "198.18.100.20:53", "198.18.100.20:53"),
    ];
    let deletes = upstream_deletes(&before, &after, 0, &table);
    assert_eq!(
        deletes.keys().copied().collect::<Vec<_>>(),
        vec![3],
        "{deletes:?}"
    );
    assert_eq!(deletes[&3].rule, Rule::ServiceIp);
}

/// An endpoint ready but not serving (`serving: false` set explicitly): the rules DNAT
/// to it (the reference model's verdict), and the cleanup, reading `IsServing` only,
/// deletes those flows at the next sync that runs it.
///
/// Negative control: taking `ready` for serving in `serving_ips` fails (`left: None`).
#[test]
fn a_ready_endpoint_that_is_not_serving_is_stale() {
    let svc = service(
        "ns1",
        "s",
        "198.18.100.21",
        &[],
        &[],
        &[("dns", "UDP", 53, 0)],
    );
    let odd = ("198.18.1.30", Some(true), Some(false), None);
    let c = case(vec![svc], vec![dns_slice("s", &[odd, ep("198.18.1.31")])]);
    let v = Model::new(&c).verdict(&Probe {
        src: ip("198.18.1.200"),
        dst: ip("198.18.100.21"),
        proto: 17,
        dport: 53,
        origin: packets::Origin::Pod,
    });
    let Verdict::Dnat(eps) = v else {
        panic!("{v:?}")
    };
    assert!(eps.contains_key(&sa("198.18.1.30:5353")));
    let f = flow(CLIENT, "198.18.100.21:53", "198.18.1.30:5353");
    assert_eq!(
        CleanupModel::new(&c).stale(&f).map(|r| r.rule),
        Some(Rule::ServiceIp)
    );
}

/// A service whose endpoints all stop serving: 1.32+ deletes nothing of it (a service
/// without serving endpoints takes no part; #139629 changed that later).
///
/// Negative control: letting ports without serving endpoints take part (no `serving`
/// filter in `stale`'s `live`) fails with four deletions.
#[test]
fn a_service_without_serving_endpoints_deletes_nothing() {
    let svc = service(
        "ns1",
        "s",
        "198.18.100.22",
        &[],
        &[],
        &[("dns", "UDP", 53, 30054)],
    );
    let before = case(
        vec![svc.clone()],
        vec![dns_slice("s", &[ep("198.18.1.40")])],
    );
    let gone = ("198.18.1.40", Some(false), Some(false), Some(true));
    let after = case(vec![svc], vec![dns_slice("s", &[gone])]);
    assert!(cleanup_required(&before, &after, 0));
    let table = [
        flow(CLIENT, "198.18.100.22:53", "198.18.1.40:5353"),
        flow(CLIENT, "198.18.100.22:53", "198.18.1.99:5353"),
        flow(CLIENT, "198.18.200.1:30054", "198.18.1.40:5353"),
        flow(CLIENT, "198.18.100.22:53", "198.18.100.22:53"),
    ];
    assert_eq!(
        upstream_deletes(&before, &after, 0, &table),
        BTreeMap::new()
    );
}

/// A deleted service's flows are left to time out (1.32+; #141371 cleans them in 1.38).
///
/// Negative control: judging with the state before the sync (`CleanupModel::new(before)`
/// in `upstream_deletes`) fails (the flow DNAT'ed to `198.18.1.99` and the not-NATed one
/// deleted).
#[test]
fn a_deleted_services_flows_are_left() {
    let before = case(
        vec![dns_service("s", "198.18.100.23")],
        vec![dns_slice("s", &[ep("198.18.1.50")])],
    );
    let after = case(vec![], vec![]);
    assert!(cleanup_required(&before, &after, 0));
    let table = [
        flow(CLIENT, "198.18.100.23:53", "198.18.1.50:5353"),
        flow(CLIENT, "198.18.100.23:53", "198.18.1.99:5353"),
        flow(CLIENT, "198.18.100.23:53", "198.18.100.23:53"),
    ];
    assert_eq!(
        upstream_deletes(&before, &after, 0, &table),
        BTreeMap::new()
    );
}

/// 0 -> N (1.20): of a service port whose endpoints map entry gains its first ready
/// endpoint, the not-NATed entries to its service IPs (any port) and to its NodePort
/// (any address) are deleted, the DNAT'ed ones are not; an endpoint serving and
/// terminating but not ready before does not count (1.20's map held ready ones only);
/// one that stays not ready makes nothing active. The union with the 1.32 rules also
/// takes an unchanged service's not-NATed entry (the cleanup judges every service once
/// it runs).
///
/// Negative controls: counting serving endpoints instead of ready ones before the sync in
/// `newly_active` fails on the terminating variant (`terminating: []`); dropping the
/// `is_nated` filter in `unnated_deletes` fails (entries 6 and 7, DNAT'ed, deleted).
#[test]
fn zero_to_n_deletes_only_not_nated_entries() {
    let svc = service(
        "ns1",
        "s",
        "198.18.100.30",
        &["198.18.250.30"],
        &["198.18.251.30"],
        &[("dns", "UDP", 53, 30055)],
    );
    let other = dns_service("t", "198.18.100.31");
    let t_slice = dns_slice("t", &[ep("198.18.1.61")]);
    let after = case(
        vec![svc.clone(), other.clone()],
        vec![dns_slice("s", &[ep("198.18.1.60")]), t_slice.clone()],
    );
    let table = [
        flow(CLIENT, "198.18.100.30:53", "198.18.100.30:53"),
        flow(CLIENT, "198.18.100.30:54", "198.18.100.30:54"),
        flow(CLIENT, "198.18.250.30:53", "198.18.250.30:53"),
        flow(CLIENT, "198.18.251.30:53", "198.18.251.30:53"),
        flow(CLIENT, "198.18.200.1:30055", "198.18.200.1:30055"),
        flow(CLIENT, "198.19.0.9:30055", "198.19.0.9:30055"),
        flow(CLIENT, "198.18.100.30:53", "198.18.1.60:5353"),
        flow(CLIENT, "198.18.100.30:53", "198.18.1.99:5353"),
        flow(CLIENT, "198.18.100.31:53", "198.18.100.31:53"),
        flow(
            "[2001:db8:300::1]:40000",
            "[2001:db8:100::30]:53",
            "[2001:db8:100::30]:53",
        ),
    ];
    let s = |rule| Reason {
        port: PortRef {
            namespace: "ns1".into(),
            name: "s".into(),
            port: "dns".into(),
        },
        rule,
    };
    let want = BTreeMap::from([
        (0, s(Rule::NewlyActiveIp)),
        (1, s(Rule::NewlyActiveIp)),
        (2, s(Rule::NewlyActiveIp)),
        (3, s(Rule::NewlyActiveIp)),
        (4, s(Rule::NewlyActiveNodePort { to_node: true })),
        (5, s(Rule::NewlyActiveNodePort { to_node: false })),
    ]);
    for (what, eps) in [
        ("no endpoint", vec![]),
        (
            "not ready",
            vec![("198.18.1.60", Some(false), Some(false), None)],
        ),
        (
            "terminating",
            vec![("198.18.1.60", Some(false), Some(true), Some(true))],
        ),
    ] {
        let mut slices = vec![t_slice.clone()];
        if !eps.is_empty() {
            slices.push(dns_slice("s", &eps));
        }
        let before = case(vec![svc.clone(), other.clone()], slices);
        let active = newly_active(&before, &after, 0);
        assert_eq!(active.len(), 1, "{what}: {active:?}");
        assert_eq!(active[0].port_ref, want[&0].port);
        assert_eq!(unnated_deletes(&before, &after, 0, &table), want, "{what}");
        assert!(newly_active(&before, &after, 1).is_empty());
        // the union: the stale DNAT'ed entry too, the not-NATed ones to the service IP
        // and port and the NodePort by the 1.32 rules first; once the cleanup runs it
        // judges every service: the not-NATed entry to t (unchanged) goes as well
        let all = upstream_deletes(&before, &after, 0, &table);
        let keys: Vec<usize> = all.keys().copied().collect();
        assert_eq!(keys, vec![0, 1, 2, 3, 4, 5, 7, 8], "{what}: {all:?}");
        assert_eq!(all[&8].port.name, "t");
        assert_eq!(all[&0].rule, Rule::ServiceIp);
        assert_eq!(all[&1].rule, Rule::NewlyActiveIp);
        assert_eq!(all[&5].rule, Rule::NodePort { to_node: false });
    }
    // stays not ready: nothing active, nothing deleted by the rule
    let not_ready = ("198.18.1.60", Some(false), Some(false), None);
    let before = case(
        vec![svc.clone(), other.clone()],
        vec![dns_slice("s", &[not_ready]), t_slice.clone()],
    );
    let still = case(
        vec![svc, other],
        vec![
            dns_slice("s", &[not_ready, ("198.18.1.62", Some(false), None, None)]),
            t_slice,
        ],
    );
    assert!(newly_active(&before, &still, 0).is_empty());
    assert_eq!(unnated_deletes(&before, &still, 0, &table), BTreeMap::new());
}

/// Upstream's gate: a changed service with a UDP entry in its previous or current
/// endpoints map, per family; TCP-only changes, unchanged slices and UDP ports without
/// endpoints do not count.
///
/// Negative control: looking at the current map only (no `has_udp_entry(&before...)`)
/// fails on `slice deleted`.
#[test]
fn cleanup_is_required_when_a_changed_service_has_a_udp_entry() {
    let base = case(
        vec![],
        vec![
            dns_slice("u", &[ep("198.18.1.70")]),
            slice(
                "ns1",
                "t",
                "t-v40",
                &[("http", "TCP", 80)],
                &[ep("198.18.1.71")],
            ),
            slice("ns1", "e", "e-v40", &[("dns", "UDP", 53)], &[]),
            slice(
                "ns1",
                "u",
                "u-v60",
                &[("dns", "UDP", 53)],
                &[ep("2001:db8:0:1::70")],
            ),
        ],
    );
    let with = |f: &dyn Fn(&mut Case)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    let flip = |name: &'static str| {
        move |c: &mut Case| {
            let sl = c
                .slices
                .iter_mut()
                .find(|s| s.metadata.name.as_deref() == Some(name));
            let e = &mut sl.unwrap().endpoints.as_mut().unwrap()[0];
            e.conditions.as_mut().unwrap().serving = Some(false);
        }
    };
    assert!(!cleanup_required(&base, &base, 0), "unchanged");
    assert!(
        !cleanup_required(&base, &with(&flip("t-v40")), 0),
        "TCP only"
    );
    assert!(
        cleanup_required(&base, &with(&flip("u-v40")), 0),
        "UDP endpoint"
    );
    let deleted = with(&|c| {
        c.slices
            .retain(|s| s.metadata.name.as_deref() != Some("u-v40"))
    });
    assert!(cleanup_required(&base, &deleted, 0), "slice deleted");
    assert!(cleanup_required(&deleted, &base, 0), "slice added");
    let port_added = with(&|c| {
        let sl = c
            .slices
            .iter_mut()
            .find(|s| s.metadata.name.as_deref() == Some("e-v40"));
        sl.unwrap()
            .ports
            .as_mut()
            .unwrap()
            .push(discovery::EndpointPort {
                name: Some("other".into()),
                protocol: Some("UDP".into()),
                port: Some(54),
                ..Default::default()
            });
    });
    assert!(
        !cleanup_required(&base, &port_added, 0),
        "UDP ports without endpoints"
    );
    let v6 = with(&flip("u-v60"));
    assert!(!cleanup_required(&base, &v6, 0), "IPv6 slice, IPv4 family");
    assert!(cleanup_required(&base, &v6, 1), "IPv6 slice, IPv6 family");
}
