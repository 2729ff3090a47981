//! The conntrack table a node holds just before a sync: UDP client flows to every
//! service frontend of the family, created under the rules of the state before the sync.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use super::{CleanupModel, CtFlow, Origin, PortRef, UdpServicePort};
use crate::gen::{endpoints, family_of, outside_ip, pod_ip, Case};
use crate::model::{Model, Verdict};
use crate::packets::{self, Probe};
use crate::rng::Rng;

#[cfg(test)]
mod tests;

/// What a destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A service IP and port (ClusterIP, external IP, LoadBalancer VIP).
    Frontend,
    /// The NodePort on one of the node's addresses.
    NodePort,
    /// Another host reached on a NodePort's number (traffic the node forwards).
    OtherHost,
    /// A ClusterIP on a port its service does not have.
    UnusedPort,
}

/// A client address of the family: a pod on this node, a pod on another node, a host
/// outside the cluster, or the node itself.
fn source(rng: &mut Rng, case: &Case, fam: usize) -> (IpAddr, packets::Origin) {
    let n = rng.below(250) as u16;
    match rng.below(7) {
        0 | 1 => (pod_ip(fam, true, n), packets::Origin::Pod),
        2 | 3 => (pod_ip(fam, false, n), packets::Origin::Pod),
        4 | 5 => (
            outside_ip(fam, rng.below(1000) as u16),
            packets::Origin::External,
        ),
        _ => match case.env.node_ips.iter().find(|a| family_of(a) == fam) {
            Some(a) => (*a, packets::Origin::Node),
            None => (outside_ip(fam, n), packets::Origin::External),
        },
    }
}

/// The conntrack table (`family`) a node holds just before the sync from `before` to
/// `after`, at most `max` flows (a uniform sample of them), sorted, the same for the same
/// seed of `rng`.
///
/// Destinations: every UDP service IP and port and every UDP NodePort on each node
/// address (`Env::local_addrs` of the family), of `before`'s and `after`'s service port
/// maps; sometimes (30 % of the ports) a NodePort's number on another host, and a
/// ClusterIP on a port its service does not have. One to three client flows to each
/// (sources: pods on this node and on others, outside hosts, the node).
///
/// Each flow as `before`'s rules made it: to a frontend `before` served (the reference
/// model's verdict DNATs, or the port has serving endpoints) DNAT'ed to one of the
/// verdict's endpoints or of the port's serving ones, [`Origin::Current`] when that
/// endpoint (address and port) still serves the same service port name in `after`,
/// [`Origin::Past`] otherwise; [`Origin::Unnated`] where `before` had no serving endpoint
/// for it, had no such service, or no rule applies (a NodePort on a node address other
/// than the primary one), and for the other hosts and unused ports. Plus, for a quarter of
/// the frontends, one flow DNAT'ed to an address that was never an endpoint of that
/// service port, before or after ([`Origin::Never`]): an endpoint of another service or
/// another pod. Two services sharing an endpoint address get flows to it each, judged
/// each by its own service port.
pub fn flows(
    before: &Case,
    after: &Case,
    family: usize,
    rng: &mut Rng,
    max: usize,
) -> Vec<(CtFlow, Origin)> {
    let fam = family;
    let mb = CleanupModel::new(before);
    let ma = CleanupModel::new(after);
    let verdicts = Model::new(before);
    let node_addrs: Vec<IpAddr> = before
        .env
        .local_addrs
        .iter()
        .copied()
        .filter(|a| family_of(a) == fam)
        .collect();
    let all_ports: Vec<&UdpServicePort> = mb.ports(fam).iter().chain(ma.ports(fam)).collect();

    // every endpoint address a port name had, before or after (for Never)
    let mut known: BTreeMap<&PortRef, BTreeSet<IpAddr>> = BTreeMap::new();
    for p in &all_ports {
        known
            .entry(&p.port_ref)
            .or_default()
            .extend(p.endpoints.iter().map(|e| e.addr.ip()));
    }
    // every endpoint of the family in either case (any service, any port)
    let mut cluster_eps: BTreeSet<SocketAddr> = BTreeSet::new();
    for sl in before.slices.iter().chain(&after.slices) {
        let port = sl.ports.iter().flatten().find_map(|p| p.port);
        for e in endpoints(sl) {
            let Some(a) = e.addresses.first().and_then(|s| crate::ip::parse_ip(s)) else {
                continue;
            };
            if family_of(&a) == fam {
                cluster_eps.insert(SocketAddr::new(a, port.unwrap_or(53) as u16));
            }
        }
    }
    let cluster_eps: Vec<SocketAddr> = cluster_eps.into_iter().collect();

    // destinations, each once (the first port naming it)
    let mut dsts: BTreeMap<SocketAddr, (PortRef, Kind)> = BTreeMap::new();
    let mut order: Vec<SocketAddr> = Vec::new();
    let mut add = |d: SocketAddr, k: &PortRef, kind: Kind| {
        if let std::collections::btree_map::Entry::Vacant(v) = dsts.entry(d) {
            v.insert((k.clone(), kind));
            order.push(d);
        }
    };
    for p in &all_ports {
        for ip in p.service_ips() {
            add(SocketAddr::new(ip, p.port), &p.port_ref, Kind::Frontend);
        }
        if let Some(np) = p.node_port {
            for a in &node_addrs {
                add(SocketAddr::new(*a, np), &p.port_ref, Kind::NodePort);
            }
            if rng.chance(30) {
                let other = if rng.chance(50) {
                    outside_ip(fam, rng.below(1000) as u16)
                } else {
                    pod_ip(fam, false, rng.below(250) as u16)
                };
                add(SocketAddr::new(other, np), &p.port_ref, Kind::OtherHost);
            }
        }
        if rng.chance(30) {
            let q = p.port.wrapping_add(1).max(1);
            let used = all_ports
                .iter()
                .any(|o| o.cluster_ip == p.cluster_ip && o.port == q);
            if !used {
                add(
                    SocketAddr::new(p.cluster_ip, q),
                    &p.port_ref,
                    Kind::UnusedPort,
                );
            }
        }
    }

    let mut seen: BTreeSet<(SocketAddr, SocketAddr)> = BTreeSet::new();
    let mut out: Vec<(CtFlow, Origin)> = Vec::new();
    let mut push = |f: CtFlow, o: Origin, out: &mut Vec<(CtFlow, Origin)>| {
        if seen.insert((f.src, f.dst)) {
            out.push((f, o));
        }
    };
    for d in order {
        let (key, kind) = dsts[&d].clone();
        let served_by = |p: &&UdpServicePort| {
            p.port_ref == key
                && match kind {
                    Kind::Frontend => p.is_frontend(&d),
                    Kind::NodePort => p.node_port == Some(d.port()),
                    _ => false,
                }
        };
        let before_port = mb.ports(fam).iter().find(served_by);
        for _ in 0..rng.range(1, 3) {
            let (ip, origin) = source(rng, before, fam);
            let src = SocketAddr::new(ip, rng.range(1024, 65535) as u16);
            let unnated = CtFlow {
                src,
                dst: d,
                reply_src: d,
            };
            let Some(bp) = before_port else {
                push(unnated, Origin::Unnated, &mut out);
                continue;
            };
            let verdict = verdicts.verdict(&Probe {
                src: ip,
                dst: d.ip(),
                proto: 17,
                dport: d.port(),
                origin,
            });
            let mut targets: BTreeSet<SocketAddr> = bp
                .endpoints
                .iter()
                .filter(|e| e.serving)
                .map(|e| e.addr)
                .collect();
            if let Verdict::Dnat(eps) = &verdict {
                targets.extend(eps.keys());
            }
            if verdict == Verdict::NoMatch || targets.is_empty() {
                push(unnated, Origin::Unnated, &mut out);
                continue;
            }
            let targets: Vec<SocketAddr> = targets.into_iter().collect();
            let ep = *rng.pick(&targets);
            let still = ma
                .ports(fam)
                .iter()
                .filter(|p| p.port_ref == key)
                .any(|p| p.endpoints.iter().any(|e| e.addr == ep && e.serving));
            let f = CtFlow {
                src,
                dst: d,
                reply_src: ep,
            };
            push(
                f,
                if still { Origin::Current } else { Origin::Past },
                &mut out,
            );
        }
        if matches!(kind, Kind::Frontend | Kind::NodePort) && rng.chance(25) {
            let was = known.get(&key).cloned().unwrap_or_default();
            let others: Vec<SocketAddr> = cluster_eps
                .iter()
                .copied()
                .filter(|e| !was.contains(&e.ip()))
                .collect();
            let ep = if !others.is_empty() && rng.chance(50) {
                Some(*rng.pick(&others))
            } else {
                (0..8)
                    .map(|_| pod_ip(fam, rng.chance(50), rng.below(250) as u16))
                    .find(|a| !was.contains(a))
                    .map(|a| SocketAddr::new(a, rng.range(1, 65535) as u16))
            };
            if let Some(ep) = ep {
                let (ip, _) = source(rng, before, fam);
                let f = CtFlow {
                    src: SocketAddr::new(ip, rng.range(1024, 65535) as u16),
                    dst: d,
                    reply_src: ep,
                };
                push(f, Origin::Never, &mut out);
            }
        }
    }
    if out.len() > max {
        // partial Fisher-Yates: a uniform sample
        for i in 0..max {
            let j = i + rng.below((out.len() - i) as u64) as usize;
            out.swap(i, j);
        }
        out.truncate(max);
    }
    out.sort();
    out
}
