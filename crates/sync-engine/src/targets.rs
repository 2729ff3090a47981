//! Conntrack cleanup targets: what a committed batch makes stale.
//!
//! Two kinds (see docs/sync.md):
//! - *Destinations*: a UDP service destination (ClusterIP, ExternalIP or LoadBalancer IP
//!   with the service port; or a NodePort) that the new rules send to endpoints while the
//!   old rules did not (its usable endpoints went from 0 to > 0, or it is new). Derived
//!   from the tables themselves (`service-ips` and `service-nodeports` maps), so that the
//!   same rule holds after a restart, when the old rules are the ones dumped from the kernel.
//! - *Endpoints*: a UDP endpoint (address, target port) that served a service port before
//!   and no longer does (removed, no longer serving, service deleted or scaled to 0).
//!   Derived from the model per service port; on the first sync after a restart, from the
//!   endpoint maps of the dumped tables.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ct_netlink::Filter;
use kube_model::{resolve_endpoints, Cluster, IpFamily, Protocol, ServiceKey};
use nft_model::{ElemData, Family, Table, Value};
use ruleset::names::{SERVICE_IPS, SERVICE_NODEPORTS};

const UDP: u8 = 17;

/// One conntrack cleanup target (UDP only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Flows whose original destination is this address and port.
    Dst { addr: IpAddr, port: u16 },
    /// Flows whose original destination port is this NodePort (any address of the family).
    NodePort { v6: bool, port: u16 },
    /// Flows DNAT'ed to this endpoint (reply source address and port).
    Endpoint { addr: IpAddr, port: u16 },
}

impl Target {
    pub fn filter(&self) -> Filter {
        match *self {
            Target::Dst { addr, port } => Filter::udp_orig_dst(addr, Some(port)),
            Target::NodePort { v6, port } => Filter::udp_nodeport(
                if v6 {
                    ct_netlink::Family::V6
                } else {
                    ct_netlink::Family::V4
                },
                port,
            ),
            Target::Endpoint { addr, port } => Filter::udp_reply_src(addr, port),
        }
    }
}

fn ip_of(v: &Value) -> Option<IpAddr> {
    match v {
        Value::Ipv4(a) => Some(IpAddr::V4(*a)),
        Value::Ipv6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The UDP destinations the tables send to endpoints: keys of `service-ips` (address .
/// protocol . port) and of `service-nodeports` (protocol . port).
pub fn served_destinations(tables: &[Table]) -> BTreeSet<Target> {
    let mut out = BTreeSet::new();
    for t in tables {
        let v6 = t.family == Family::Ip6;
        for s in &t.sets {
            if s.name == SERVICE_IPS {
                for e in &s.elements {
                    if let [a, Value::Proto(UDP), Value::Port(port)] = e.key.as_slice() {
                        if let Some(addr) = ip_of(a) {
                            out.insert(Target::Dst { addr, port: *port });
                        }
                    }
                }
            } else if s.name == SERVICE_NODEPORTS {
                for e in &s.elements {
                    if let [Value::Proto(UDP), Value::Port(port)] = e.key.as_slice() {
                        out.insert(Target::NodePort { v6, port: *port });
                    }
                }
            }
        }
    }
    out
}

/// Every `address . port` DNAT target in the endpoint maps of the tables (all protocols:
/// the maps do not say; used only on the first sync after a restart).
pub fn table_endpoints(tables: &[Table]) -> BTreeSet<(IpAddr, u16)> {
    let mut out = BTreeSet::new();
    for t in tables {
        for s in t.sets.iter().filter(|s| s.name.starts_with("endpoints-")) {
            for e in &s.elements {
                if let Some(ElemData::Values(v)) = &e.data {
                    if let [a, Value::Port(port)] = v.as_slice() {
                        if let Some(addr) = ip_of(a) {
                            out.insert((addr, *port));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Per UDP service port and family: the endpoints that serve it (ready or serving).
pub type EndpointSnapshot = BTreeMap<(ServiceKey, String, IpFamily), BTreeSet<(IpAddr, u16)>>;

/// The serving endpoints of every UDP service port, per family.
pub fn endpoint_snapshot(cluster: &Cluster, families: &[IpFamily]) -> EndpointSnapshot {
    let idx = cluster.endpoint_index();
    let mut out = EndpointSnapshot::new();
    for svc in cluster.services.values() {
        let slices = idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]);
        for port in svc.ports.iter().filter(|p| p.protocol == Protocol::Udp) {
            for fam in families {
                let eps: BTreeSet<(IpAddr, u16)> = resolve_endpoints(slices, port, *fam)
                    .into_iter()
                    .filter(|e| e.ready || e.serving)
                    .map(|e| (e.addr, e.port))
                    .collect();
                if !eps.is_empty() {
                    out.insert((svc.key.clone(), port.name.clone(), *fam), eps);
                }
            }
        }
    }
    out
}

/// Endpoints that served a UDP service port in `old` and do not serve it in `new`.
pub fn stale_endpoints(old: &EndpointSnapshot, new: &EndpointSnapshot) -> BTreeSet<Target> {
    let empty = BTreeSet::new();
    let mut out = BTreeSet::new();
    for (k, eps) in old {
        let now = new.get(k).unwrap_or(&empty);
        for (addr, port) in eps.difference(now) {
            out.insert(Target::Endpoint {
                addr: *addr,
                port: *port,
            });
        }
    }
    out
}

/// The destination targets of moving from `old` to `new` served destinations.
pub fn new_destinations(old: &BTreeSet<Target>, new: &BTreeSet<Target>) -> BTreeSet<Target> {
    new.difference(old).copied().collect()
}
