//! Random changes of a cluster, for the property tests: services of every kind and
//! policy (TCP or UDP), their slices (up to 12 endpoints, local or remote, ready,
//! terminating, with zone hints), the node (name, zone, address), and destinations
//! claimed by two services.

use std::collections::{BTreeMap, BTreeSet};

use super::model::*;
use kube_model::{Cidr, Cluster, Node, Protocol, ServiceKey, ServiceType, TrafficPolicy};
use proptest::prelude::*;

#[derive(Debug, Clone)]
pub enum Change {
    UpsertService {
        i: u32,
        kind: u8,
        etp_local: bool,
        itp_local: bool,
        affinity: Option<u32>,
        ranges: bool,
        two_ports: bool,
        udp: bool,
        /// Use the external IP of service `ext_of` (two services claiming one).
        ext_of: Option<u32>,
    },
    RemoveService(u32),
    UpsertSlice {
        i: u32,
        /// (address, local, ready, terminating)
        eps: Vec<(u32, bool, bool, bool)>,
        /// Zone hints: even addresses for zone-a, odd ones for zone-b.
        zoned: bool,
    },
    RemoveSlice(u32),
    Node {
        other_name: bool,
        zone: bool,
        ip: u8,
    },
}

impl Change {
    /// The service whose objects this change touches (`None` for the node).
    pub fn service(&self) -> Option<ServiceKey> {
        match self {
            Change::UpsertService { i, .. }
            | Change::RemoveService(i)
            | Change::UpsertSlice { i, .. }
            | Change::RemoveSlice(i) => Some(service(*i).key),
            Change::Node { .. } => None,
        }
    }
}

pub fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (
            (0u32..6, 0u8..3, any::<bool>(), any::<bool>()),
            (
                prop::option::of(prop::sample::select(vec![60u32, 600])),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                prop::option::weighted(0.2, 0u32..6),
            ),
        )
            .prop_map(
                |((i, kind, etp_local, itp_local), (affinity, ranges, two_ports, udp, ext_of))| {
                    Change::UpsertService {
                        i,
                        kind,
                        etp_local,
                        itp_local,
                        affinity,
                        ranges,
                        two_ports,
                        udp,
                        ext_of,
                    }
                }
            ),
        1 => (0u32..6).prop_map(Change::RemoveService),
        4 => (
            0u32..6,
            prop::collection::vec((0u32..16, any::<bool>(), any::<bool>(), any::<bool>()), 0..13),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(i, eps, zoned)| Change::UpsertSlice { i, eps, zoned }),
        1 => (0u32..6).prop_map(Change::RemoveSlice),
        1 => (any::<bool>(), any::<bool>(), 1u8..3)
            .prop_map(|(other_name, zone, ip)| Change::Node { other_name, zone, ip }),
    ]
}

pub fn play(c: &mut Cluster, ch: &Change) {
    match ch {
        Change::UpsertService {
            i,
            kind,
            etp_local,
            itp_local,
            affinity,
            ranges,
            two_ports,
            udp,
            ext_of,
        } => {
            let mut s = service(*i);
            s.service_type = [
                ServiceType::ClusterIp,
                ServiceType::NodePort,
                ServiceType::LoadBalancer,
            ][*kind as usize];
            if *udp {
                s.ports[0].protocol = Protocol::Udp;
            }
            if s.service_type != ServiceType::ClusterIp {
                s.ports[0].node_port = Some(30000 + *i as u16);
                let e = ext_of.unwrap_or(*i);
                s.external_ips = vec![format!("198.18.251.{}", e + 1).parse().unwrap()];
                if *etp_local {
                    s.external_traffic_policy = TrafficPolicy::Local;
                }
            }
            if s.service_type == ServiceType::LoadBalancer {
                s.load_balancer_ips = vec![format!("198.18.250.{}", i + 1).parse().unwrap()];
                if *ranges {
                    s.source_ranges = vec![Cidr::new("198.19.0.0".parse().unwrap(), 16).unwrap()];
                }
            }
            if *itp_local {
                s.internal_traffic_policy = TrafficPolicy::Local;
            }
            s.affinity_timeout = *affinity;
            if *two_ports {
                let mut p = s.ports[0].clone();
                p.name = "other".into();
                p.port = 81;
                p.node_port = p.node_port.map(|n| n + 100);
                s.ports.push(p);
            }
            c.services.insert(s.key.clone(), s);
        }
        Change::RemoveService(i) => {
            c.services.remove(&service(*i).key);
        }
        Change::UpsertSlice { i, eps, zoned } => {
            let eps: BTreeMap<_, _> = eps
                .iter()
                .map(|(a, local, ready, term)| {
                    let mut e = endpoint(
                        pod(*a),
                        if *local { "node-a" } else { "node-b" },
                        *ready,
                        *term,
                    );
                    if *zoned {
                        let z = if a % 2 == 0 { "zone-a" } else { "zone-b" };
                        e.set_hints(BTreeSet::from([z.to_string()]), BTreeSet::new());
                    }
                    (*a, e)
                })
                .collect();
            let mut sl = slice(*i, eps.into_values().collect());
            let http = sl.ports[0].clone();
            sl.ports = vec![
                http.clone(),
                kube_model::SlicePort {
                    protocol: Protocol::Udp,
                    ..http
                },
            ];
            for protocol in [Protocol::Tcp, Protocol::Udp] {
                sl.ports.push(kube_model::SlicePort {
                    name: "other".into(),
                    protocol,
                    port: 9090,
                });
            }
            c.insert_slice(sl);
        }
        Change::RemoveSlice(i) => {
            c.remove_slice(&slice(*i, vec![]).key);
        }
        Change::Node {
            other_name,
            zone,
            ip,
        } => {
            c.node = Some(Node {
                name: if *other_name { "node-x" } else { "node-a" }.into(),
                zone: zone.then(|| "zone-a".to_string()),
                pod_cidrs: vec![],
                primary_ips: vec![format!("198.18.200.{ip}").parse().unwrap()],
            });
        }
    }
}
