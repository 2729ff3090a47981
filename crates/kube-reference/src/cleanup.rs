//! Which UDP conntrack entries upstream kube-proxy deletes at a sync, per IP family, and a
//! generator of the conntrack table a node holds just before that sync ([`flows`]).
//!
//! Written from upstream's sources (kubernetes/kubernetes), not copied:
//!
//! - the judgement ([`CleanupModel::stale`]): `pkg/proxy/conntrack/cleanup.go`
//!   `CleanStaleEntries` as on release-1.32 after the cherry-pick of #130484 (#130505):
//!   the service frontends are matched on address *and* port, the reply source on its
//!   address only. 1.32.0 matched the service IP on any port; 1.33 (#130542) also
//!   compares the reply source port; #139629 cleans services without serving endpoints
//!   and #141371 (1.38) the flows of deleted services. None of those later changes is
//!   modelled.
//! - the gate ([`cleanup_required`]): `pkg/proxy/endpointschangetracker.go`
//!   `EndpointsMap.Update`'s `ConntrackCleanupRequired`, the proxier calling
//!   `CleanStaleEntries` only when it is true.
//! - the maps: `servicechangetracker.go`/`serviceport.go` (which services a family's
//!   service port map holds, their external IPs and LoadBalancer VIPs of the family) and
//!   `endpointslicecache.go`/`endpoint.go` (ports by name and protocol, one endpoint per
//!   address and port, `serving` unset meaning serving), shared with [`crate::model`].
//! - the older 0 -> N rule ([`newly_active`], [`unnated_deletes`]): the iptables proxier
//!   of the 1.20 line after #98305 (cherry-pick #99017): a UDP service port whose
//!   endpoints map entry went from no endpoint to some is "stale"; after the rules are
//!   synced its entries are deleted by original destination address (ClusterIP, external
//!   IPs; LoadBalancer IPs since #104009, on the 1.20 line by #104152) on any port, and by
//!   original destination port = its NodePort on any address. In 1.20 the endpoint slice
//!   cache kept ready endpoints only (the serving and terminating conditions reached the
//!   cache in 1.21, #96371; counting ready ones explicitly came with #106163 in 1.22), so
//!   "some" means some *ready* endpoint.
//!
//! What kube-nlproxy is compared with ([`upstream_deletes`]) is the union: upstream 1.32+
//! for stale endpoints, and 1.20's 0 -> N rule restricted to entries that were not
//! DNAT'ed (the project keeps DNAT'ed entries there: they are judged by the first rule).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

use crate::gen::{endpoints, family_of, Case, Env};
use crate::model::{filtered_out, frontends, hints_of, slice_endpoints, Frontends};

mod table;
#[cfg(test)]
mod tests;
pub mod v138;

pub use table::flows;

/// One UDP conntrack entry (the protocol is implied; the family is `dst`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CtFlow {
    /// The original direction's source.
    pub src: SocketAddr,
    /// The original destination.
    pub dst: SocketAddr,
    /// The reply direction's source: the endpoint the flow was DNAT'ed to, or `dst`
    /// when it was not DNAT'ed.
    pub reply_src: SocketAddr,
}

impl CtFlow {
    /// 0 IPv4, 1 IPv6 (the crate's convention).
    pub fn family(&self) -> usize {
        family_of(&self.dst.ip())
    }

    /// Whether the flow was DNAT'ed (its reply does not come from its destination).
    pub fn is_nated(&self) -> bool {
        self.reply_src != self.dst
    }
}

impl fmt::Display for CtFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_nated() {
            write!(
                f,
                "udp {} -> {} (DNAT {})",
                self.src, self.dst, self.reply_src
            )
        } else {
            write!(f, "udp {} -> {} (not NATed)", self.src, self.dst)
        }
    }
}

/// How the generator made a flow (for messages and classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// DNAT'ed to an endpoint of the service port that still serves it after the sync.
    Current,
    /// DNAT'ed to an endpoint (address and port) that served the service port before
    /// and does not after (gone, not serving, the service port or service deleted).
    Past,
    /// DNAT'ed to an address that was never an endpoint of that service port.
    Never,
    /// Not DNAT'ed (`reply_src == dst`).
    Unnated,
}

/// A service port name: namespace, service name, port name (empty when unnamed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRef {
    pub namespace: String,
    pub name: String,
    pub port: String,
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Which rule deletes an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// 1.32+: the original destination is a service IP and port of the service port and
    /// the reply source address is none of its serving endpoints' addresses.
    ServiceIp,
    /// 1.32+: the original destination port is the service port's NodePort (on any
    /// address) and the reply source address is none of its serving endpoints'.
    /// `to_node`: the destination address is one of the node's addresses
    /// ([`Env::local_addrs`]); false is another host reached on the same port number.
    NodePort { to_node: bool },
    /// 1.20 0 -> N: a not-NATed entry to one of the newly active port's service IPs
    /// (any port).
    NewlyActiveIp,
    /// 1.20 0 -> N: a not-NATed entry to the newly active port's NodePort (any address;
    /// `to_node` as for [`Rule::NodePort`]).
    NewlyActiveNodePort { to_node: bool },
    /// 1.38 ([`v138`]): to a service IP and port of the service port, which has no serving
    /// endpoint (#139629), any reply source.
    NoEndpointsIp,
    /// 1.38: to the NodePort (any address) of a service port without serving endpoint.
    NoEndpointsNodePort { to_node: bool },
    /// 1.38: to a service IP and port of a service port deleted at this sync (#141371).
    DeletedIp,
    /// 1.38: to the NodePort (any address) of a service port deleted at this sync.
    DeletedNodePort { to_node: bool },
}

/// Why an entry is deleted: the service port and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reason {
    pub port: PortRef,
    pub rule: Rule,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = match self.rule {
            Rule::ServiceIp => "service IP and port, reply not from a serving endpoint",
            Rule::NodePort { to_node: true } => {
                "NodePort on a node address, reply not from a serving endpoint"
            }
            Rule::NodePort { to_node: false } => {
                "NodePort number on another host, reply not from a serving endpoint"
            }
            Rule::NewlyActiveIp => "0 -> N endpoints, not NATed, to a service IP",
            Rule::NewlyActiveNodePort { to_node: true } => {
                "0 -> N endpoints, not NATed, to the NodePort on a node address"
            }
            Rule::NewlyActiveNodePort { to_node: false } => {
                "0 -> N endpoints, not NATed, to the NodePort number on another host"
            }
            Rule::NoEndpointsIp => "service IP and port of a port without serving endpoints",
            Rule::NoEndpointsNodePort { .. } => "NodePort of a port without serving endpoints",
            Rule::DeletedIp => "service IP and port of a deleted service port",
            Rule::DeletedNodePort { .. } => "NodePort of a deleted service port",
        };
        write!(f, "{}: {rule}", self.port)
    }
}

/// An endpoint of the endpoints map (one per address and port, conditions' defaults
/// applied: `ready` and `serving` unset are true, `terminating` unset is false).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapEndpoint {
    pub addr: SocketAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub local: bool,
}

/// A UDP service port of one family's service port map, with its endpoints map entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpServicePort {
    pub port_ref: PortRef,
    pub port: u16,
    pub cluster_ip: IpAddr,
    /// External IPs of the family.
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs of the family, `ipMode: Proxy` ones left out.
    pub lb_vips: Vec<IpAddr>,
    pub node_port: Option<u16>,
    /// Every endpoint of the entry, serving or not.
    pub endpoints: Vec<MapEndpoint>,
}

impl UdpServicePort {
    /// ClusterIP, external IPs, LoadBalancer VIPs.
    pub fn service_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.cluster_ip)
            .chain(self.external_ips.iter().copied())
            .chain(self.lb_vips.iter().copied())
    }

    /// The addresses (not ports) of the serving endpoints (`IsServing`).
    pub fn serving_ips(&self) -> BTreeSet<IpAddr> {
        self.endpoints
            .iter()
            .filter(|e| e.serving)
            .map(|e| e.addr.ip())
            .collect()
    }

    /// Whether `dst` is one of its service IPs on its port.
    pub fn is_frontend(&self, dst: &SocketAddr) -> bool {
        dst.port() == self.port && self.service_ips().any(|a| a == dst.ip())
    }
}

/// Upstream's UDP service ports and endpoints maps of a case, per family, as
/// `CleanStaleEntries` reads them after a sync.
#[derive(Debug, Clone)]
pub struct CleanupModel {
    env: Env,
    ports: [Vec<UdpServicePort>; 2],
}

pub(crate) fn namespace(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

fn map_endpoints(
    env: &Env,
    fam: usize,
    port: &PortRef,
    slices: &[discovery::EndpointSlice],
) -> Vec<MapEndpoint> {
    slice_endpoints(
        env,
        fam,
        &port.namespace,
        &port.name,
        &port.port,
        "UDP",
        slices,
    )
    .into_iter()
    .map(|e| MapEndpoint {
        addr: e.addr,
        ready: e.ready,
        serving: e.serving,
        terminating: e.terminating,
        local: e.local,
    })
    .collect()
}

impl CleanupModel {
    pub fn new(case: &Case) -> CleanupModel {
        CleanupModel::of(&case.env, &case.services, &case.slices)
    }

    pub fn of(
        env: &Env,
        services: &[core::Service],
        slices: &[discovery::EndpointSlice],
    ) -> CleanupModel {
        let mut ports = [Vec::new(), Vec::new()];
        for svc in services {
            let Some(spec) = &svc.spec else { continue };
            for (fam, into) in ports.iter_mut().enumerate() {
                let Some(Frontends {
                    cluster_ip,
                    external,
                    lb_vips,
                }) = frontends(fam, svc)
                else {
                    continue;
                };
                for p in spec.ports.iter().flatten() {
                    if p.protocol.as_deref() != Some("UDP") {
                        continue;
                    }
                    let port_ref = PortRef {
                        namespace: namespace(&svc.metadata).to_string(),
                        name: svc.metadata.name.clone().unwrap_or_default(),
                        port: p.name.clone().unwrap_or_default(),
                    };
                    let endpoints = map_endpoints(env, fam, &port_ref, slices);
                    into.push(UdpServicePort {
                        port_ref,
                        port: p.port as u16,
                        cluster_ip,
                        external_ips: external.clone(),
                        lb_vips: lb_vips.clone(),
                        node_port: p.node_port.filter(|n| *n > 0).map(|n| n as u16),
                        endpoints,
                    });
                }
            }
        }
        CleanupModel {
            env: env.clone(),
            ports,
        }
    }

    /// The UDP service ports of `family`'s service port map.
    pub fn ports(&self, family: usize) -> &[UdpServicePort] {
        &self.ports[family]
    }

    /// The 1.32+ judgement of `CleanStaleEntries` (ungated: whether the sync runs it at
    /// all is [`cleanup_required`]). Only service ports with at least one serving
    /// endpoint take part. The entry is stale (a) when its original destination is a
    /// service IP and port of such a port and its reply source address is none of the
    /// port's serving endpoint addresses, or (b) when its original destination port is
    /// such a port's NodePort (any destination address) and the same holds. Both are
    /// checked, (a) first: an entry kept by (a) can still fall to (b) when its port
    /// number is another service's NodePort. Two ports claiming one frontend (not
    /// generated) are resolved by the first here, by map order upstream.
    pub fn stale(&self, f: &CtFlow) -> Option<Reason> {
        let fam = f.family();
        let reply = f.reply_src.ip();
        let live = || {
            self.ports[fam]
                .iter()
                .filter(|p| p.endpoints.iter().any(|e| e.serving))
        };
        if let Some(p) = live().find(|p| p.is_frontend(&f.dst)) {
            if !p.serving_ips().contains(&reply) {
                return Some(Reason {
                    port: p.port_ref.clone(),
                    rule: Rule::ServiceIp,
                });
            }
        }
        if let Some(p) = live().find(|p| p.node_port == Some(f.dst.port())) {
            if !p.serving_ips().contains(&reply) {
                return Some(Reason {
                    port: p.port_ref.clone(),
                    rule: Rule::NodePort {
                        to_node: self.env.local_addrs.contains(&f.dst.ip()),
                    },
                });
            }
        }
        None
    }
}

/// What upstream's endpoint slice cache keeps of an endpoint (`endpointInfo`); a slice
/// whose kept information did not change is no change for the proxier.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EpInfo {
    addresses: Vec<String>,
    node_name: Option<String>,
    zone: Option<String>,
    zone_hints: BTreeSet<String>,
    node_hints: BTreeSet<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
}

/// (port, name, protocol, appProtocol) of each slice port, and the endpoints, sorted.
type SliceInfo = (
    Vec<(Option<i32>, Option<String>, Option<String>, Option<String>)>,
    Vec<EpInfo>,
);

/// The slice's owner as the cache keys it (namespace, `kubernetes.io/service-name`).
fn owner(sl: &discovery::EndpointSlice) -> Option<(String, String)> {
    let name = sl
        .metadata
        .labels
        .as_ref()?
        .get("kubernetes.io/service-name")?;
    (!name.is_empty()).then(|| (namespace(&sl.metadata).to_string(), name.clone()))
}

/// The slices of `fam` (by address type, as the dual-stack proxier hands them to the
/// family's tracker) per owner and slice name.
fn slice_infos(
    slices: &[discovery::EndpointSlice],
    fam: usize,
) -> BTreeMap<(String, String), BTreeMap<String, SliceInfo>> {
    let mut out: BTreeMap<(String, String), BTreeMap<String, SliceInfo>> = BTreeMap::new();
    for sl in slices {
        if sl.address_type != ["IPv4", "IPv6"][fam] || filtered_out(&sl.metadata) {
            continue;
        }
        let Some(key) = owner(sl) else { continue };
        let mut ports: Vec<_> = sl
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.port,
                    p.name.clone(),
                    p.protocol.clone(),
                    p.app_protocol.clone(),
                )
            })
            .collect();
        ports.sort();
        let mut eps: Vec<EpInfo> = endpoints(sl)
            .iter()
            .map(|e| {
                let c = e.conditions.clone().unwrap_or_default();
                let (zone_hints, node_hints) = hints_of(e);
                EpInfo {
                    addresses: e.addresses.clone(),
                    node_name: e.node_name.clone(),
                    zone: e.zone.clone(),
                    zone_hints,
                    node_hints,
                    ready: c.ready.unwrap_or(true),
                    serving: c.serving.unwrap_or(true),
                    terminating: c.terminating.unwrap_or(false),
                }
            })
            .collect();
        eps.sort();
        out.entry(key)
            .or_default()
            .insert(sl.metadata.name.clone().unwrap_or_default(), (ports, eps));
    }
    out
}

/// Whether the owner's endpoints map (`fam`) has a UDP entry: a slice port of protocol
/// UDP with a name and a port number other than 0, and an endpoint of the family (the
/// cache keeps no entry without endpoints).
fn has_udp_entry(slices: &[discovery::EndpointSlice], key: &(String, String), fam: usize) -> bool {
    slices.iter().any(|sl| {
        // a name left out is "" (the API server's default), so every port has one
        sl.address_type == ["IPv4", "IPv6"][fam]
            && !filtered_out(&sl.metadata)
            && owner(sl).as_ref() == Some(key)
            && sl
                .ports
                .iter()
                .flatten()
                .any(|p| p.protocol.as_deref() == Some("UDP") && p.port.is_some_and(|n| n != 0))
            && endpoints(sl).iter().any(|e| {
                e.addresses
                    .first()
                    .and_then(|a| crate::ip::parse_ip(a))
                    .is_some_and(|a| family_of(&a) == fam)
            })
    })
}

/// Upstream's gate (`ConntrackCleanupRequired`) for the sync from `before` to `after` in
/// `family`: some service whose EndpointSlices of the family changed (what the cache
/// keeps of them, a slice added or removed) has a UDP entry in its previous or its
/// current endpoints map. The Service objects play no part. A change undone within one
/// sync period is a change upstream and none here (two snapshots cannot show it).
pub fn cleanup_required(before: &Case, after: &Case, family: usize) -> bool {
    let b = slice_infos(&before.slices, family);
    let a = slice_infos(&after.slices, family);
    let keys: BTreeSet<&(String, String)> = b.keys().chain(a.keys()).collect();
    let changed = keys.into_iter().any(|k| {
        b.get(k) != a.get(k)
            && (has_udp_entry(&before.slices, k, family) || has_udp_entry(&after.slices, k, family))
    });
    changed
}

/// The 1.20 rule's "stale services": the UDP service ports of `after`'s service port
/// map (`family`) whose endpoints map entry has a ready endpoint after and had none
/// before (1.20's map held ready endpoints only: see the module's notes). Their
/// frontends are `after`'s.
pub fn newly_active(before: &Case, after: &Case, family: usize) -> Vec<UdpServicePort> {
    CleanupModel::new(after).ports[family]
        .iter()
        .filter(|p| {
            p.endpoints.iter().any(|e| e.ready)
                && !map_endpoints(&before.env, family, &p.port_ref, &before.slices)
                    .iter()
                    .any(|e| e.ready)
        })
        .cloned()
        .collect()
}

/// Of `flows` (their indices), the entries of `family` the 1.20 0 -> N rule deletes,
/// restricted to those that were not DNAT'ed: to a service IP of a newly active port on
/// any port (`conntrack -D --orig-dst`), or to its NodePort on any address.
pub fn unnated_deletes(
    before: &Case,
    after: &Case,
    family: usize,
    flows: &[CtFlow],
) -> BTreeMap<usize, Reason> {
    let active = newly_active(before, after, family);
    let mut out = BTreeMap::new();
    for (i, f) in flows.iter().enumerate() {
        if f.family() != family || f.is_nated() {
            continue;
        }
        let reason = if let Some(p) = active
            .iter()
            .find(|p| p.service_ips().any(|a| a == f.dst.ip()))
        {
            Some((p, Rule::NewlyActiveIp))
        } else {
            active
                .iter()
                .find(|p| p.node_port == Some(f.dst.port()))
                .map(|p| {
                    let to_node = after.env.local_addrs.contains(&f.dst.ip());
                    (p, Rule::NewlyActiveNodePort { to_node })
                })
        };
        if let Some((p, rule)) = reason {
            out.insert(
                i,
                Reason {
                    port: p.port_ref.clone(),
                    rule,
                },
            );
        }
    }
    out
}

/// What upstream deletes at the sync from `before` to `after` in `family`, by index in
/// `flows`: upstream 1.32+ for stale endpoints (every entry [`CleanupModel::stale`]
/// under `after`, when [`cleanup_required`]), and 1.20.5 restricted to not-DNAT'ed
/// entries for 0 -> N ([`unnated_deletes`]). An entry both delete carries the first's
/// reason. Entries of the other family are never deleted (another conntrack table).
pub fn upstream_deletes(
    before: &Case,
    after: &Case,
    family: usize,
    flows: &[CtFlow],
) -> BTreeMap<usize, Reason> {
    let mut out = BTreeMap::new();
    if cleanup_required(before, after, family) {
        let m = CleanupModel::new(after);
        for (i, f) in flows.iter().enumerate() {
            if f.family() != family {
                continue;
            }
            if let Some(r) = m.stale(f) {
                out.insert(i, r);
            }
        }
    }
    for (i, r) in unnated_deletes(before, after, family, flows) {
        out.entry(i).or_insert(r);
    }
    out
}
