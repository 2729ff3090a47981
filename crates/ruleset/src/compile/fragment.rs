//! One service port in one family as a fragment of the table: the elements it adds to
//! the shared sets and maps, grouped by the destination they are about (a *claim*: two
//! services claiming one destination conflict, and only the first one's elements are
//! used), plus the counted elements several ports may share (ClusterIPs, hairpin) and
//! the chains of session affinity, the one case with per-service objects.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use kube_model::{
    categorize, resolve_endpoints, EndpointSlice, IpFamily, ResolvedEndpoint, Service, ServiceKey,
    ServicePort, TrafficPolicy,
};
use nft_model::*;

use super::affinity;
use super::classes::{class_of, hairpin_elements, Class, Space};
use super::packed::{Packed, SetName};
use super::Ctx;
use crate::error::RulesetError;
use crate::names::*;

/// Conflict priority of a service port: the first service (by namespace and name), then
/// the first port in the service's list, wins a contested destination.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortOrder {
    pub service: ServiceKey,
    pub index: usize,
}

/// The key a claim is about: `addr . proto . port` or, for a NodePort, `proto . port`.
pub type ClaimKey = Vec<Value>;

/// Everything a port puts into the table under one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub key: ClaimKey,
    /// (set or map name, element)
    pub elements: Vec<(SetName, Packed)>,
    /// The endpoint classes these elements use (their chains and maps must exist).
    pub classes: Vec<Class>,
    /// Whether traffic to this destination is sent to endpoints (conntrack cleanup of
    /// UDP flows that went nowhere before; see docs/sync.md).
    pub served: bool,
}

/// One service port in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub id: PortId,
    pub order: PortOrder,
    /// Shared with the mirror, which keeps every claimant of a destination.
    pub claims: Vec<Arc<Claim>>,
    /// Elements of sets shared with other ports (present while any port adds them).
    pub shared: Vec<(SetName, Packed)>,
    /// Per-port chains (session affinity: they need the family's `affinity` set).
    pub chains: Vec<Chain>,
    /// The serving endpoints of a UDP port (conntrack cleanup when one stops serving).
    pub udp_serving: BTreeSet<(IpAddr, u16)>,
    /// Whether the fragment depends on the node (local endpoints, topology, node IPs).
    pub node_dependent: bool,
    pub errors: Vec<RulesetError>,
}

impl Fragment {
    /// Whether the fragment puts nothing into the table and asks for nothing: no
    /// elements, objects, serving endpoints, node dependency or errors.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
            && self.shared.is_empty()
            && self.chains.is_empty()
            && self.udp_serving.is_empty()
            && !self.node_dependent
            && self.errors.is_empty()
    }
}

/// Which list a destination is served from, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Cluster-wide endpoints (ClusterIP with internalTrafficPolicy Cluster).
    Cluster,
    /// Cluster-wide endpoints, masqueraded (external destinations with Cluster policy).
    ClusterMasq,
    /// Node-local endpoints (ClusterIP with internalTrafficPolicy Local).
    Local,
    /// externalTrafficPolicy Local: pods and the host use the cluster-wide endpoints.
    ExternalLocal,
}

/// Build the fragment of `port` (the `index`-th port of `svc`) in `ctx`'s family.
pub fn fragment(
    ctx: &Ctx,
    svc: &Service,
    index: usize,
    port: &ServicePort,
    slices: &[&EndpointSlice],
) -> Fragment {
    let id = PortId::new(&svc.key, port);
    let proto = port.protocol.number();
    let eps = resolve_endpoints(slices, port, ctx.fam, &ctx.node_name);
    let cat = categorize(&eps, &ctx.node_name, ctx.zone.as_deref());
    let mut f = Fragment {
        id: id.clone(),
        order: PortOrder {
            service: svc.key.clone(),
            index,
        },
        claims: Vec::new(),
        shared: Vec::new(),
        chains: Vec::new(),
        udp_serving: if proto == 17 {
            eps.iter()
                .filter(|e| e.ready || e.serving)
                .map(|e| (e.addr, e.port))
                .collect()
        } else {
            BTreeSet::new()
        },
        node_dependent: svc.internal_traffic_policy == TrafficPolicy::Local
            || svc.external_traffic_policy == TrafficPolicy::Local
            || !svc.source_ranges.is_empty()
            || eps
                .iter()
                .any(|e| !e.node_hints.is_empty() || !e.zone_hints.is_empty()),
        errors: Vec::new(),
    };
    let affinity = svc.affinity_timeout;
    let addr_key = |ip: &IpAddr| {
        vec![
            Value::from(*ip),
            Value::Proto(proto),
            Value::Port(port.port),
        ]
    };
    let np_key = |np: u16| vec![Value::Proto(proto), Value::Port(np)];
    // a destination without usable endpoints: rejected, or dropped when endpoints exist
    // but not for this kind of traffic (a Local policy and none on this node)
    let no_endpoint = |key: ClaimKey, nodeport: bool| {
        let set = match (nodeport, cat.any_usable) {
            (false, false) => NO_ENDPOINT_SERVICES,
            (false, true) => NO_LOCAL_ENDPOINT_SERVICES,
            (true, false) => NO_ENDPOINT_NODEPORTS,
            (true, true) => NO_LOCAL_ENDPOINT_NODEPORTS,
        };
        Claim {
            elements: vec![(
                set.into(),
                Packed::values(&key.iter().collect::<Vec<_>>(), None),
            )],
            key,
            classes: Vec::new(),
            served: false,
        }
    };
    let mut claims: Vec<Claim> = Vec::new();
    let mut used_cluster = false;
    let mut used_local = false;

    if let Some(cip) = svc.cluster_ip(ctx.fam) {
        f.shared.push((
            CLUSTER_IPS.into(),
            Packed::values(&[&Value::from(cip)], None),
        ));
        let local = svc.internal_traffic_policy == TrafficPolicy::Local;
        let (list, route) = if local {
            (&cat.local, Route::Local)
        } else {
            (&cat.cluster, Route::Cluster)
        };
        let key = addr_key(&cip);
        if list.is_empty() {
            claims.push(no_endpoint(key, false));
        } else {
            used_local |= local;
            used_cluster |= !local;
            let chain = if local {
                id.local_chain()
            } else {
                id.cluster_chain()
            };
            claims.push(match affinity {
                Some(_) => goto_claim(key, SERVICE_IPS, chain),
                None => {
                    let lists = Lists {
                        cluster: &cat.cluster,
                        local: &cat.local,
                    };
                    route_claim(&id, key, false, route, lists, &mut f.errors)
                }
            });
        }
    }

    // AllowServiceExternalIPs off (KEP-5707): spec.externalIPs are not programmed.
    let external_ips: &[IpAddr] = if ctx.cfg.allow_external_ips {
        &svc.external_ips
    } else {
        &[]
    };
    let ext_ips: Vec<IpAddr> = external_ips
        .iter()
        .chain(svc.load_balancer_ips.iter())
        .filter(|ip| IpFamily::of(ip) == ctx.fam)
        .copied()
        .collect();
    // a service without a ClusterIP of this family is not this family's at all: its
    // NodePorts and external IPs are served only by the families it has (upstream's
    // service change tracker skips it, GetClusterIPByFamily)
    let of_family = svc.cluster_ip(ctx.fam).is_some();
    if of_family && (!ext_ips.is_empty() || port.node_port.is_some()) {
        let local = svc.external_traffic_policy == TrafficPolicy::Local;
        let list = if local { &cat.local } else { &cat.cluster };
        let route = if local {
            Route::ExternalLocal
        } else {
            Route::ClusterMasq
        };
        // externalTrafficPolicy Local without a local endpoint: pods and the host still
        // short-circuit to the cluster-wide endpoints (dispatched as with local
        // endpoints, the local list empty); what is not DNATed (external clients) is
        // dropped by the no-local-endpoint element, as upstream (iptables: KUBE-EXT and
        // KUBE-EXTERNAL-SERVICES; nftables since kubernetes PR #132456)
        let short_circuit = local && list.is_empty() && !cat.cluster.is_empty();
        let mut dests: Vec<(ClaimKey, bool)> =
            ext_ips.iter().map(|ip| (addr_key(ip), false)).collect();
        dests.sort();
        dests.dedup();
        dests.extend(port.node_port.map(|np| (np_key(np), true)));
        let rejects = ctx.localhost_rejects();
        for (key, nodeport) in dests {
            // nftables mode's localhost NodePort reject of this protocol: the port in
            // its set, with the NodePort's claim (the first claimant's only)
            let reject = port
                .node_port
                .filter(|_| nodeport && rejects.contains(&proto))
                .map(|np| {
                    (
                        SetName::from(localhost_reject(proto).0),
                        Packed::values(&[&Value::Port(np)], None),
                    )
                });
            let mut claim = if list.is_empty() && !short_circuit {
                no_endpoint(key, nodeport)
            } else {
                used_cluster = true;
                used_local |= local;
                let mut claim = match affinity {
                    Some(_) => goto_claim(
                        key.clone(),
                        if nodeport {
                            SERVICE_NODEPORTS
                        } else {
                            SERVICE_IPS
                        },
                        id.external_chain(),
                    ),
                    None => {
                        let lists = Lists {
                            cluster: &cat.cluster,
                            local: &cat.local,
                        };
                        route_claim(&id, key.clone(), nodeport, route, lists, &mut f.errors)
                    }
                };
                if short_circuit {
                    claim.elements.extend(no_endpoint(key, nodeport).elements);
                }
                claim
            };
            claim.elements.extend(reject);
            claims.push(claim);
        }
        if affinity.is_some() && (!list.is_empty() || short_circuit) {
            f.chains
                .push(affinity::external_chain(ctx, &id, local, !list.is_empty()));
        }
        add_source_ranges(ctx, svc, proto, port.port, &mut claims);
    }

    let mut affinity_lists: Vec<(bool, &[ResolvedEndpoint])> = Vec::new();
    for (used, list, local) in [
        (used_cluster, &cat.cluster, false),
        (used_local, &cat.local, true),
    ] {
        if !used || list.is_empty() {
            continue;
        }
        let hairpin: SetName = HAIRPIN.into();
        f.shared.extend(
            hairpin_elements(list.iter().map(|e| e.addr))
                .into_iter()
                .map(|e| (hairpin.clone(), e)),
        );
        affinity_lists.push((local, list));
    }
    if let Some(timeout) = affinity {
        if !affinity_lists.is_empty() {
            f.chains
                .extend(affinity::chains(ctx, &id, proto, timeout, &affinity_lists));
        }
    }
    // a destination claimed twice by one port (an external IP equal to its ClusterIP):
    // the first claim holds
    let mut seen = BTreeSet::new();
    claims.retain(|c| seen.insert(c.key.clone()));
    for c in &mut claims {
        c.elements.sort();
        c.elements.dedup();
    }
    f.claims = claims.into_iter().map(Arc::new).collect();
    f.shared.sort();
    f.shared.dedup();
    f
}

/// The endpoint lists of a port.
#[derive(Clone, Copy)]
struct Lists<'a> {
    cluster: &'a [ResolvedEndpoint],
    local: &'a [ResolvedEndpoint],
}

/// A claim dispatched through a verdict map to a per-port chain (session affinity).
fn goto_claim(key: ClaimKey, map: &str, chain: String) -> Claim {
    Claim {
        elements: vec![(
            map.into(),
            Packed::new(&Element::map(
                key.clone(),
                ElemData::Verdict(Verdict::Goto(chain)),
            )),
        )],
        key,
        classes: Vec::new(),
        served: true,
    }
}

/// A claim dispatched by elements only: the dispatch set for `route`, and the endpoint
/// lists the route uses keyed by this destination.
fn route_claim(
    id: &PortId,
    key: ClaimKey,
    nodeport: bool,
    route: Route,
    lists: Lists,
    errors: &mut Vec<RulesetError>,
) -> Claim {
    let Lists { cluster, local } = lists;
    let (dispatch, lists): (&str, Vec<(Space, &[ResolvedEndpoint])>) = match (route, nodeport) {
        (Route::Cluster, _) => (DISPATCH_CLUSTER, vec![(Space::Cluster, cluster)]),
        (Route::ClusterMasq, false) => (DISPATCH_CLUSTER_MASQ, vec![(Space::Cluster, cluster)]),
        (Route::ClusterMasq, true) => (DISPATCH_NP_CLUSTER_MASQ, vec![(Space::NpCluster, cluster)]),
        (Route::Local, _) => (DISPATCH_LOCAL, vec![(Space::Local, local)]),
        (Route::ExternalLocal, false) => (
            DISPATCH_EXTERNAL_LOCAL,
            vec![(Space::Cluster, cluster), (Space::Local, local)],
        ),
        (Route::ExternalLocal, true) => (
            DISPATCH_NP_EXTERNAL_LOCAL,
            vec![(Space::NpCluster, cluster), (Space::NpLocal, local)],
        ),
    };
    let mut claim = Claim {
        elements: vec![(
            dispatch.into(),
            Packed::values(&key.iter().collect::<Vec<_>>(), None),
        )],
        key,
        classes: Vec::new(),
        served: true,
    };
    for (space, eps) in lists {
        match class_of(space, eps.len()) {
            Some(c) => {
                claim.elements.extend(c.elements(&claim.key, eps));
                claim.classes.push(c);
            }
            None if eps.is_empty() => {}
            None => errors.push(RulesetError::Capacity {
                service: id.service.to_string(),
                port: id.port_name.to_string(),
                endpoints: eps.len(),
            }),
        }
    }
    claim
}

/// loadBalancerSourceRanges: the LB IP:port is filtered (elements in the claims of the
/// LB IPs): a source is allowed when any range holds it. When a range holds the node's
/// IP, the LB IPs are allowed as sources too (a VIP configured on the node makes
/// node-originated requests come from the LB IP), as upstream does. `firewall-allow` is
/// an interval set, which refuses overlapping elements: the allowed sources of each LB
/// IP:port are merged first (`0.0.0.0/0` with anything, nested and duplicate ranges, an
/// LB IP inside a range).
fn add_source_ranges(ctx: &Ctx, svc: &Service, proto: u8, port: u16, claims: &mut [Claim]) {
    let ranges: Vec<_> = svc
        .source_ranges
        .iter()
        .filter(|c| c.family() == ctx.fam)
        .collect();
    let lb_ips: Vec<IpAddr> = svc
        .load_balancer_ips
        .iter()
        .filter(|ip| IpFamily::of(ip) == ctx.fam)
        .copied()
        .collect();
    if ranges.is_empty() || lb_ips.is_empty() {
        return;
    }
    let node_ip = ctx.node.and_then(|n| n.primary_ip(ctx.fam));
    let allow_from_node = node_ip.is_some_and(|ip| ranges.iter().any(|r| r.contains(&ip)));
    let mut srcs: Vec<(IpAddr, IpAddr)> = ranges.iter().map(|r| (r.addr, r.last())).collect();
    if allow_from_node {
        srcs.extend(lb_ips.iter().map(|ip| (*ip, *ip)));
    }
    let srcs = kube_model::merge_ranges(srcs);
    let allow: SetName = FIREWALL_ALLOW.into();
    for lb in &lb_ips {
        let key = vec![Value::from(*lb), Value::Proto(proto), Value::Port(port)];
        let Some(claim) = claims.iter_mut().find(|c| c.key == key) else {
            continue;
        };
        claim.elements.push((
            FIREWALL_IPS.into(),
            Packed::values(&key.iter().collect::<Vec<_>>(), None),
        ));
        for (a, z) in &srcs {
            let mut k = key.clone();
            k.push(Value::from(*a));
            let mut e = key.clone();
            e.push(Value::from(*z));
            claim
                .elements
                .push((allow.clone(), Packed::new(&Element::key(k).with_key_end(e))));
        }
    }
}
