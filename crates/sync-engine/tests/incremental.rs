//! The incremental engine against a fresh one: random event sequences (services of every
//! kind and policy, dual-stack, sharing destinations; their slices; the node; the
//! service CIDRs), synced now and then, with failed commits and another program
//! tampering with our tables in between, leave the (fake) kernel with exactly the tables
//! a fresh engine commits given the final state. And every sync's conntrack deletes are
//! exactly the flows that the committed state, compiled from scratch, judges stale, of a
//! conntrack table made before the sync by the rules the kernel held (flows DNAT'ed to
//! the serving endpoints of then, not DNAT'ed to frontends not served then, and to
//! addresses that are no frontend): the incremental engine judges again exactly what
//! may have become stale, and nothing it keeps is stale.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use common::*;
use ct_netlink::Flow;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_model::{Cluster, IpFamily};
use nft_model::Table;
use proptest::prelude::*;
use ruleset::{NodePortAddrs, UdpDest};
use serde_json::json;
use sync_engine::stale::{Delta, Frontend, Judge, NodePortScope};
use sync_engine::*;

#[derive(Debug, Clone)]
enum Step {
    Service {
        i: u32,
        kind: u8,
        udp: bool,
        etp_local: bool,
        itp_local: bool,
        two_ports: bool,
        dual: bool,
        /// Use the external IP of service `ext_of` (two services claiming one).
        ext_of: Option<u32>,
        affinity: bool,
    },
    DeleteService(u32),
    /// (address, local, ready, terminating) per endpoint.
    Slice {
        i: u32,
        v6: bool,
        eps: Vec<(u8, bool, bool, bool)>,
    },
    DeleteSlice {
        i: u32,
        v6: bool,
    },
    Node {
        zone: bool,
        ip: u8,
    },
    Cidrs(bool),
    Sync,
    FailedSync,
    Tamper,
    Resync,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (
            (0u32..5, 0u8..3, any::<bool>(), any::<bool>(), any::<bool>()),
            (any::<bool>(), any::<bool>(), prop::option::weighted(0.2, 0u32..5), prop::bool::weighted(0.15)),
        )
            .prop_map(|((i, kind, udp, etp_local, itp_local), (two_ports, dual, ext_of, affinity))| {
                Step::Service { i, kind, udp, etp_local, itp_local, two_ports, dual, ext_of, affinity }
            }),
        1 => (0u32..5).prop_map(Step::DeleteService),
        5 => (
            0u32..5,
            prop::bool::weighted(0.3),
            prop::collection::vec((0u8..10, any::<bool>(), any::<bool>(), any::<bool>()), 0..6),
        )
            .prop_map(|(i, v6, eps)| Step::Slice { i, v6, eps }),
        1 => (0u32..5, any::<bool>()).prop_map(|(i, v6)| Step::DeleteSlice { i, v6 }),
        1 => (any::<bool>(), 1u8..3).prop_map(|(zone, ip)| Step::Node { zone, ip }),
        1 => any::<bool>().prop_map(Step::Cidrs),
        4 => Just(Step::Sync),
        1 => Just(Step::FailedSync),
        1 => Just(Step::Tamper),
        1 => Just(Step::Resync),
    ]
}

fn cluster_ip(i: u32, v6: bool) -> String {
    if v6 {
        format!("2001:db8:100::{}", i + 1)
    } else {
        format!("198.18.100.{}", i + 1)
    }
}

fn service(s: &Step) -> Service {
    let Step::Service {
        i,
        kind,
        udp,
        etp_local,
        itp_local,
        two_ports,
        dual,
        ext_of,
        affinity,
    } = s
    else {
        unreachable!()
    };
    let kind = ["ClusterIP", "NodePort", "LoadBalancer"][*kind as usize];
    let proto = if *udp { "UDP" } else { "TCP" };
    let mut ports = vec![json!({"name": "p", "port": 53, "protocol": proto, "targetPort": 5353})];
    if *two_ports {
        ports.push(json!({"name": "q", "port": 54, "protocol": "UDP", "targetPort": 5454}));
    }
    if kind != "ClusterIP" {
        for (k, p) in ports.iter_mut().enumerate() {
            p["nodePort"] = json!(30000 + i * 2 + k as u32);
        }
    }
    let mut ips = vec![cluster_ip(*i, false)];
    let mut fams = vec!["IPv4"];
    if *dual {
        ips.push(cluster_ip(*i, true));
        fams.push("IPv6");
    }
    let mut spec = json!({
        "type": kind, "clusterIP": ips[0], "clusterIPs": ips, "ipFamilies": fams,
        "ports": ports,
        "internalTrafficPolicy": if *itp_local { "Local" } else { "Cluster" },
    });
    if kind != "ClusterIP" {
        spec["externalTrafficPolicy"] = json!(if *etp_local { "Local" } else { "Cluster" });
        spec["externalIPs"] = json!([format!("198.18.101.{}", ext_of.unwrap_or(*i) + 1)]);
    }
    if kind == "LoadBalancer" && *etp_local {
        spec["healthCheckNodePort"] = json!(32000 + i);
    }
    if *affinity {
        spec["sessionAffinity"] = json!("ClientIP");
    }
    let mut svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc{i}"), "namespace": "ns"},
        "spec": spec,
    });
    if kind == "LoadBalancer" {
        svc["status"] =
            json!({"loadBalancer": {"ingress": [{"ip": format!("198.18.102.{}", i + 1)}]}});
    }
    serde_json::from_value(svc).unwrap()
}

fn slice_name(i: u32, v6: bool) -> String {
    format!("svc{i}-{}", if v6 { "v6" } else { "v4" })
}

fn endpoint_slice(i: u32, v6: bool, eps: &[(u8, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|(a, local, ready, term)| {
            let addr = if v6 {
                format!("2001:db8:2::{}", a + 1)
            } else {
                format!("198.18.2.{}", a + 1)
            };
            json!({"addresses": [addr], "nodeName": if *local { "node-a" } else { "node-b" },
                   "conditions": {"ready": ready, "serving": *ready || *term, "terminating": term}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": slice_name(i, v6), "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "endpoints": endpoints,
        "ports": [{"name": "p", "port": 5353, "protocol": "UDP"},
                  {"name": "p", "port": 5353, "protocol": "TCP"},
                  {"name": "q", "port": 5454, "protocol": "UDP"}]
    }))
    .unwrap()
}

fn node(zone: bool, ip: u8) -> Node {
    let mut labels = json!({});
    if zone {
        labels["topology.kubernetes.io/zone"] = json!("zone-a");
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "labels": labels},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("198.18.200.{ip}")}]}
    }))
    .unwrap()
}

fn config() -> EngineConfig {
    let mut cfg = World::new().config(true);
    cfg.ruleset.families = vec![IpFamily::V4, IpFamily::V6];
    cfg.ruleset.cluster_cidrs = vec![
        "198.18.0.0/20".parse().expect("cidr"),
        "2001:db8:2::/64".parse().expect("cidr"),
    ];
    cfg
}

/// The final state, as the objects last applied.
#[derive(Default, Clone)]
struct State {
    services: BTreeMap<u32, Service>,
    slices: BTreeMap<(u32, bool), EndpointSlice>,
    node: Option<Node>,
    cidrs: Option<Vec<kube_model::Cidr>>,
}

impl State {
    fn events(&self) -> Vec<Event> {
        let mut v = Vec::new();
        if let Some(n) = &self.node {
            v.push(Event::NodeApplied(n.clone()));
        }
        if let Some(c) = &self.cidrs {
            v.push(Event::ServiceCidrs(c.clone()));
        }
        v.extend(self.services.values().cloned().map(Event::ServiceApplied));
        v.extend(self.slices.values().cloned().map(Event::SliceApplied));
        v.push(Event::ServicesListed);
        v.push(Event::SlicesListed);
        v
    }
}

/// The UDP frontends of `cluster` compiled from scratch, each with the port owning it and
/// that port's serving endpoints, and the NodePort addresses per family.
type Frontends = (
    BTreeMap<UdpDest, (ruleset::names::PortId, Vec<(IpAddr, u16)>)>,
    [NodePortScope; 2],
);

fn frontends(cluster: &Cluster) -> Frontends {
    let c = ruleset::Compiler::new(config().ruleset, cluster);
    let dests = c
        .udp_dests()
        .into_iter()
        .filter_map(|d| Some((d, (c.udp_owner(&d)?, c.udp_serving(&d)?))))
        .collect();
    let scope = |fam| match c.nodeport_addrs(fam) {
        None => NodePortScope::None,
        Some(NodePortAddrs::Addrs(a)) => NodePortScope::Addrs(a.into_iter().collect()),
        Some(NodePortAddrs::AllLocal) => NodePortScope::Any,
    };
    (dests, [scope(IpFamily::V4), scope(IpFamily::V6)])
}

/// The judgement of the committed state `now`, compiled from scratch, after `last`:
/// the frontends of `last` that `now` does not have are those of deleted UDP service
/// ports when no frontend of `now` in their family has their port (each family's
/// proxier has its own service port map), otherwise released.
fn fresh_judge(last: &Frontends, now: &Frontends) -> Judge {
    let mut j = Judge::default();
    let full = |f: &Frontends| Delta {
        full: true,
        dests: f
            .0
            .iter()
            .map(|(d, (_, s))| (*d, Frontend::Serving(s.clone())))
            .collect(),
        nodeports: [Some(f.1[0].clone()), Some(f.1[1].clone())],
    };
    j.apply(full(last));
    let mut d = full(now);
    d.full = false;
    let ports_now: std::collections::BTreeSet<_> = now
        .0
        .iter()
        .map(|(d, (p, _))| (p.clone(), d.family()))
        .collect();
    d.dests.extend(
        last.0
            .iter()
            .filter(|(k, _)| !now.0.contains_key(k))
            .map(|(k, (p, _))| {
                let f = if ports_now.contains(&(p.clone(), k.family())) {
                    Frontend::Released
                } else {
                    Frontend::Deleted
                };
                (*k, f)
            }),
    );
    j.apply(d);
    j
}

/// The conntrack table the rules of `before` made: to each frontend with serving
/// endpoints, a flow DNAT'ed to each; to each frontend of `now` that `before` did not
/// have, one not DNAT'ed; and one to an address that is no frontend.
fn table_made_by(before: &Frontends, now: &Frontends, sport: &mut u16) -> Vec<Flow> {
    let mut out = Vec::new();
    let mut next = |dst: IpAddr, dport: u16, reply: (IpAddr, u16)| {
        *sport = sport.wrapping_add(1);
        Flow {
            proto: 17,
            src: if dst.is_ipv4() {
                ip("198.18.9.9")
            } else {
                ip("2001:db8:9::9")
            },
            dst,
            sport: *sport,
            dport,
            reply_src: reply.0,
            reply_sport: reply.1,
            zone: 0,
            id: Some(u32::from(*sport)),
        }
    };
    let node_addr = |scope: &NodePortScope| match scope {
        NodePortScope::Addrs(a) => a.iter().next().copied(),
        _ => None,
    };
    let addr_of = |d: &UdpDest, f: &Frontends| match *d {
        UdpDest::Addr { addr, port } => Some((addr, port)),
        UdpDest::NodePort { v6, port } => node_addr(&f.1[usize::from(v6)]).map(|a| (a, port)),
    };
    for (d, (_, serving)) in &before.0 {
        let Some((dst, dport)) = addr_of(d, before) else {
            continue;
        };
        for ep in serving {
            out.push(next(dst, dport, *ep));
        }
    }
    for d in now.0.keys().filter(|d| !before.0.contains_key(d)) {
        if let Some((dst, dport)) = addr_of(d, now) {
            out.push(next(dst, dport, (dst, dport)));
        }
    }
    out.push(next(ip("198.18.77.7"), 53, (ip("198.18.77.7"), 53)));
    out
}

fn canon(t: &[Table]) -> Vec<Table> {
    let mut v: Vec<Table> = t
        .iter()
        .map(Table::canonical)
        .filter(|t| !t.sets.is_empty() || !t.chains.is_empty())
        .collect();
    v.sort_by_key(|t| format!("{:?}", t.family));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn incremental_engine_commits_what_a_fresh_engine_commits(steps in prop::collection::vec(step(), 1..40)) {
        let w = World::new();
        let mut e = w.engine_with(config());
        e.handle(Event::NodeApplied(node(false, 1)));
        listed(&mut e);
        let mut state = State { node: Some(node(false, 1)), ..State::default() };
        // the committed state, compiled from scratch, as of the last successful sync
        let mut last: Frontends = (BTreeMap::new(), Default::default());
        let mut sport = 0u16;
        let mut synced = 0;
        let mut sync = |e: &mut Engine<FakeNft, FakeCt, FakeClock>, last: &mut Frontends| -> Result<(), TestCaseError> {
            w.clock.advance(Duration::from_secs(2));
            let now = frontends(e.cluster());
            w.ct_table.lock().unwrap().clear();
            let table = table_made_by(last, &now, &mut sport);
            w.flows(&table);
            w.take();
            e.sync().map_err(|err| TestCaseError::fail(format!("sync: {err}")))?;
            let after = w.tables.lock().unwrap().clone();
            let judge = fresh_judge(last, &now);
            let mut want: Vec<Flow> = table.iter().filter(|f| judge.judge(f).is_some()).copied().collect();
            want.sort_by_key(|f| (f.sport, f.dport));
            prop_assert_eq!(deletes(&w.take()), want);
            *last = now;
            prop_assert_eq!(canon(&after), canon(&e.committed().unwrap()));
            Ok(())
        };
        for s in &steps {
            match s {
                Step::Service { i, .. } => {
                    let svc = service(s);
                    state.services.insert(*i, svc.clone());
                    e.handle(Event::ServiceApplied(svc));
                }
                Step::DeleteService(i) => {
                    if let Some(svc) = state.services.remove(i) {
                        e.handle(Event::ServiceDeleted(svc));
                    }
                }
                Step::Slice { i, v6, eps } => {
                    let sl = endpoint_slice(*i, *v6, eps);
                    state.slices.insert((*i, *v6), sl.clone());
                    e.handle(Event::SliceApplied(sl));
                }
                Step::DeleteSlice { i, v6 } => {
                    if let Some(sl) = state.slices.remove(&(*i, *v6)) {
                        e.handle(Event::SliceDeleted(sl));
                    }
                }
                Step::Node { zone, ip } => {
                    state.node = Some(node(*zone, *ip));
                    e.handle(Event::NodeApplied(node(*zone, *ip)));
                }
                Step::Cidrs(on) => {
                    let c = if *on {
                        vec![kube_model::parse_cidr_sloppy("198.18.100.0/24").expect("cidr")]
                    } else {
                        vec![]
                    };
                    state.cidrs = Some(c.clone());
                    e.handle(Event::ServiceCidrs(c));
                }
                Step::Sync => {
                    sync(&mut e, &mut last)?;
                    synced += 1;
                }
                Step::FailedSync => {
                    *w.fail_commits.lock().unwrap() = 1;
                    w.clock.advance(Duration::from_secs(2));
                    let before = w.tables.lock().unwrap().clone();
                    let r = e.sync();
                    *w.fail_commits.lock().unwrap() = 0;
                    if r.is_err() {
                        prop_assert_eq!(&*w.tables.lock().unwrap(), &before);
                        prop_assert!(deletes(&w.take()).is_empty(), "no delete after a failed commit");
                    } else {
                        // nothing to commit: nothing failed, and the sync succeeded
                        prop_assert_eq!(&*w.tables.lock().unwrap(), &before);
                        w.take();
                        last = frontends(e.cluster());
                    }
                }
                Step::Tamper => {
                    let mut t = w.tables.lock().unwrap();
                    for table in t.iter_mut() {
                        for c in &mut table.chains {
                            c.rules.clear();
                        }
                    }
                    let mut g = w.gen.lock().unwrap();
                    *g = next_generation(*g);
                    drop((t, g));
                    e.request_repair();
                }
                Step::Resync => e.handle(Event::Resync),
            }
        }
        sync(&mut e, &mut last)?;
        let _ = synced;

        let fresh_world = World::new();
        let mut fresh = fresh_world.engine_with(config());
        for ev in state.events() {
            fresh.handle(ev);
        }
        fresh.sync().map_err(|err| TestCaseError::fail(format!("fresh sync: {err}")))?;
        prop_assert_eq!(
            canon(&w.tables.lock().unwrap()),
            canon(&fresh_world.tables.lock().unwrap())
        );
        prop_assert_eq!(e.cluster(), fresh.cluster());
        let (a, b) = (e.status().snapshot(), fresh.status().snapshot());
        prop_assert_eq!(a.health_checks, b.health_checks);
        prop_assert_eq!((a.no_local_internal, a.no_local_external), (b.no_local_internal, b.no_local_external));
        let (ra, rb) = (a.last_report.unwrap(), b.last_report.unwrap());
        prop_assert_eq!((ra.services, ra.endpoints), (rb.services, rb.endpoints));
        let (mut ea, mut eb) = (ra.errors, rb.errors);
        ea.sort();
        eb.sort();
        prop_assert_eq!(ea, eb);
    }
}
