//! The UDP service destinations of the desired tables and the serving endpoints of the
//! service port owning each: what the conntrack cleanup judges UDP flows against
//! (docs/decisions/0013). A flow sent to one of these destinations is stale when its
//! reply source (address and port) is not a serving endpoint of *that* port, as
//! kube-proxy's `CleanStaleEntries` decides it.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kube_model::IpFamily;
use nft_model::Value;

use super::{Compiler, FamilyState, Update};
use crate::compile::fragment::ClaimKey;
use crate::compile::fragment::Fragment;
use crate::config::NodePortAddrs;

/// A UDP service destination: a ClusterIP, external IP or LoadBalancer IP with the
/// service port, or a NodePort (on the node's NodePort addresses of the family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UdpDest {
    Addr { addr: IpAddr, port: u16 },
    NodePort { v6: bool, port: u16 },
}

impl UdpDest {
    /// The destination a UDP claim key stands for (None: not UDP, or not a key).
    pub fn of_key(key: &[Value], fam: IpFamily) -> Option<UdpDest> {
        match key {
            [a, Value::Proto(17), Value::Port(port)] => Some(UdpDest::Addr {
                addr: a.ip()?,
                port: *port,
            }),
            [Value::Proto(17), Value::Port(port)] => Some(UdpDest::NodePort {
                v6: fam == IpFamily::V6,
                port: *port,
            }),
            _ => None,
        }
    }

    /// The family of the destination.
    pub fn family(&self) -> IpFamily {
        match *self {
            UdpDest::Addr { addr, .. } => IpFamily::of(&addr),
            UdpDest::NodePort { v6: true, .. } => IpFamily::V6,
            UdpDest::NodePort { v6: false, .. } => IpFamily::V4,
        }
    }

    fn key(&self) -> ClaimKey {
        match *self {
            UdpDest::Addr { addr, port } => {
                vec![Value::from(addr), Value::Proto(17), Value::Port(port)]
            }
            UdpDest::NodePort { port, .. } => vec![Value::Proto(17), Value::Port(port)],
        }
    }
}

impl std::fmt::Display for UdpDest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            UdpDest::Addr { addr, port } => {
                write!(f, "udp {}", std::net::SocketAddr::new(addr, port))
            }
            UdpDest::NodePort { v6, port } => {
                write!(
                    f,
                    "udp nodeport {} {port}",
                    if v6 { "ipv6" } else { "ipv4" }
                )
            }
        }
    }
}

impl FamilyState {
    /// The serving endpoints (address, target port) of the port owning `key`, sorted
    /// (None: no port owns it).
    fn udp_serving(&self, key: &ClaimKey) -> Option<Vec<(IpAddr, u16)>> {
        let owner = self.mirror.owner(key)?;
        let frag = self
            .fragments
            .get(&owner.service)
            .and_then(|fs| fs.iter().find(|f| f.id == owner))?;
        Some(frag.udp_serving.iter().copied().collect())
    }
}

impl Compiler {
    fn family_state(&self, fam: IpFamily) -> Option<&FamilyState> {
        self.families.iter().find(|f| f.fam == fam)
    }

    /// The serving endpoints (address, target port) of the UDP service port owning `d`
    /// in the desired tables, sorted (empty: the port has none). None: no UDP service
    /// port owns it (its service or port was deleted, or it is not programmed).
    pub fn udp_serving(&self, d: &UdpDest) -> Option<Vec<(IpAddr, u16)>> {
        self.family_state(d.family())?.udp_serving(&d.key())
    }

    /// The service port owning a UDP frontend in the desired tables.
    pub fn udp_owner(&self, d: &UdpDest) -> Option<crate::names::PortId> {
        self.family_state(d.family())?.mirror.owner(&d.key())
    }

    /// Every UDP destination of the desired tables (owned by a port, with or without
    /// serving endpoints).
    pub fn udp_dests(&self) -> BTreeSet<UdpDest> {
        let mut out = BTreeSet::new();
        for f in &self.families {
            for frag in f.fragments.values().flatten() {
                for c in &frag.claims {
                    if let Some(d) = UdpDest::of_key(&c.key, f.fam) {
                        out.insert(d);
                    }
                }
            }
        }
        out
    }

    /// Whether `id` is a UDP service port of family `fam` in the desired tables.
    pub fn is_udp_port(&self, id: &crate::names::PortId, fam: IpFamily) -> bool {
        self.family_state(fam)
            .and_then(|f| f.fragments.get(&id.service))
            .is_some_and(|frags| {
                frags.iter().any(|fr| {
                    fr.id == *id
                        && fr
                            .claims
                            .iter()
                            .any(|c| UdpDest::of_key(&c.key, fam).is_some())
                })
            })
    }

    /// Where this family's NodePorts are served (None: the family is not programmed).
    pub fn nodeport_addrs(&self, fam: IpFamily) -> Option<NodePortAddrs> {
        self.family_state(fam)?;
        let primary: Option<&[IpAddr]> = self.node.as_ref().map(|n| n.primary_ips.as_slice());
        Some(self.cfg.node_port_addrs(fam, primary))
    }
}

/// The UDP frontends of the service ports of `old` that the same port no longer claims
/// in `new` (the port deleted, or the frontend dropped from it), each with the port: the
/// engine tells a deletion from a release by whether that port is still a UDP port when
/// it commits.
pub(super) fn udp_released(old: &[Fragment], new: &[Fragment], fam: IpFamily, out: &mut Update) {
    let udp = |f: &Fragment| -> Vec<UdpDest> {
        f.claims
            .iter()
            .filter_map(|c| UdpDest::of_key(&c.key, fam))
            .collect()
    };
    for f in old {
        let keys = udp(f);
        if keys.is_empty() {
            continue;
        }
        let kept: Vec<UdpDest> = new.iter().filter(|n| n.id == f.id).flat_map(udp).collect();
        for k in keys.into_iter().filter(|k| !kept.contains(k)) {
            out.udp_released.entry(k).or_insert_with(|| f.id.clone());
        }
    }
}
