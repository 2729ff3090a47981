//! The packets to ask about, derived from the case's objects: every service IP (ClusterIPs,
//! external IPs, every LoadBalancer ingress IP, `ipMode: Proxy` ones included) on each
//! service port, on a port and a protocol it does not use, NodePorts on every node
//! address (primary or not), an unallocated address of the service CIDRs; from a pod on
//! this node, an endpoint itself (hairpin), the node, and clients outside the cluster
//! inside and outside the source ranges.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::gen::{family_of, outside_ip, pod_ip, v4, v6, Case};
use crate::rng::Rng;

/// Where the packet comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A pod on this node (arrives on its veth; source in the cluster CIDR).
    Pod,
    /// A process of the node itself (output path; source the node's primary IP).
    Node,
    /// A client outside the cluster (arrives on the node's uplink).
    External,
}

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Probe {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IANA protocol number: 6 TCP, 17 UDP, 132 SCTP.
    pub proto: u8,
    pub dport: u16,
    pub origin: Origin,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.proto {
            6 => "tcp",
            17 => "udp",
            132 => "sctp",
            _ => "?",
        };
        write!(
            f,
            "{proto} {:?} {} -> {} port {}",
            self.origin, self.src, self.dst, self.dport
        )
    }
}

fn proto_number(p: Option<&str>) -> u8 {
    match p {
        Some("UDP") => 17,
        Some("SCTP") => 132,
        _ => 6,
    }
}

/// The sources of family `fam`, each with its origin.
fn sources(case: &Case, fam: usize) -> Vec<(IpAddr, Origin)> {
    // the node's own packets from its IP of the family (none when it has none)
    let node = case.env.node_ips.iter().find(|a| family_of(a) == fam);
    let mut v = vec![
        (pod_ip(fam, true, 200), Origin::Pod),
        (pod_ip(fam, false, 201), Origin::Pod),
    ];
    v.extend(node.map(|a| (*a, Origin::Node)));
    v.extend([
        (outside_ip(fam, 0), Origin::External), // 198.19.0.1: inside the /24, /23, /32
        (outside_ip(fam, 251), Origin::External), // 198.19.1.2
        (outside_ip(fam, 3 * 250 + 9), Origin::External), // 198.19.3.10: only in /16
        (
            if fam == 0 { v4(200, 77) } else { v6(0x200, 77) },
            Origin::External,
        ), // the node's block
    ]);
    // hairpin: an endpoint of the family connecting to its own service
    if let Some(a) = case
        .slices
        .iter()
        .flat_map(crate::gen::endpoints)
        .filter_map(|e| crate::ip::parse_ip(e.addresses.first()?))
        .find(|a| family_of(a) == fam && a.to_string() != v[0].0.to_string())
    {
        v.push((a, Origin::Pod));
    }
    v
}

/// The most probes a case gives when asked for all of them ([`probes`] with `max` 0): a
/// case of thousands of services has hundreds of thousands, which are sampled down.
pub const ALL_PROBES_CAP: usize = 20_000;

/// Every probe of `case`, then at most `max` of them sampled with `rng` (all of them
/// when `max` is 0, but never more than [`ALL_PROBES_CAP`]).
pub fn probes(case: &Case, rng: &mut Rng, max: usize) -> Vec<Probe> {
    let mut dsts: BTreeSet<(IpAddr, u8, u16)> = BTreeSet::new();
    let node_addrs: Vec<IpAddr> = case.env.local_addrs.clone();
    let mut node_ports: BTreeSet<(u8, u16)> = BTreeSet::new();
    for svc in &case.services {
        let Some(spec) = &svc.spec else { continue };
        let mut ips: Vec<IpAddr> = Vec::new();
        for s in spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.external_ips.iter().flatten())
        {
            ips.extend(crate::ip::parse_ip(s));
        }
        let ing = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        for i in ing.into_iter().flatten() {
            ips.extend(i.ip.as_deref().and_then(crate::ip::parse_ip));
        }
        for p in spec.ports.iter().flatten() {
            let proto = proto_number(p.protocol.as_deref());
            let port = p.port as u16;
            let other = if proto == 6 { 17 } else { 6 };
            for ip in &ips {
                dsts.insert((*ip, proto, port));
                dsts.insert((*ip, proto, port.wrapping_add(1).max(1)));
                dsts.insert((*ip, other, port));
            }
            if let Some(np) = p.node_port {
                for a in &node_addrs {
                    dsts.insert((*a, proto, np as u16));
                    dsts.insert((*a, other, np as u16));
                }
                node_ports.insert((proto, np as u16));
                node_ports.insert((other, np as u16));
            }
        }
    }
    // unallocated addresses of the service CIDRs, and one outside them
    for (a, _) in &case.env.service_cidrs {
        let u = match a {
            IpAddr::V4(_) => v4(100, 255),
            IpAddr::V6(_) => v6(0x100, 0xffff),
        };
        dsts.insert((u, 6, 80));
    }
    dsts.insert((v4(150, 1), 6, 80));
    let mut out = Vec::new();
    for (dst, proto, dport) in dsts {
        for (src, origin) in sources(case, family_of(&dst)) {
            out.push(Probe {
                src,
                dst,
                proto,
                dport,
                origin,
            });
        }
    }
    // localhost NodePorts: the node's own connections to 127.0.0.1 and ::1 on every
    // NodePort number (environments other than the common one: the kernel sample's
    // world holds only the documentation ranges)
    if case.env.probe_loopback {
        for (proto, dport) in node_ports {
            for lo in [
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ] {
                out.push(Probe {
                    src: lo,
                    dst: lo,
                    proto,
                    dport,
                    origin: Origin::Node,
                });
            }
        }
    }
    let max = if max == 0 { ALL_PROBES_CAP } else { max };
    if out.len() > max {
        // partial Fisher-Yates: a uniform sample
        for i in 0..max {
            let j = i + rng.below((out.len() - i) as u64) as usize;
            out.swap(i, j);
        }
        out.truncate(max);
    }
    out
}
