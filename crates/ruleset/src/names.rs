//! Stable names, derived from object identity (never from counters), so that a restarted
//! daemon computes the same names and its first batch touches only what changed.

use std::net::IpAddr;

use kube_model::{ServiceKey, ServicePort};

/// Our table's name, in both families.
pub const TABLE: &str = "kube-nlproxy";

// base chains
pub const FIREWALL_PREROUTING: &str = "firewall-prerouting";
pub const FIREWALL_OUTPUT: &str = "firewall-output";
pub const NAT_PREROUTING: &str = "nat-prerouting";
pub const NAT_OUTPUT: &str = "nat-output";
pub const NAT_POSTROUTING: &str = "nat-postrouting";
pub const FILTER_INPUT: &str = "filter-input";
pub const FILTER_FORWARD: &str = "filter-forward";
pub const FILTER_OUTPUT: &str = "filter-output";
// regular chains with fixed content
pub const SERVICES: &str = "services";
pub const MASQUERADING: &str = "masquerading";
pub const FIREWALL_CHECK: &str = "firewall-check";
pub const ENDPOINTS_CHECK: &str = "endpoints-check";
pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
pub const NODEPORTS: &str = "nodeports";
pub const EXTERNAL_LOCAL: &str = "external-local";
pub const NP_EXTERNAL_LOCAL: &str = "np-external-local";
// endpoint selection per space (`compile::classes::Space::pick_chain`)
pub const PICK_CLUSTER: &str = "pick-cluster";
pub const PICK_LOCAL: &str = "pick-local";
pub const PICK_NP_CLUSTER: &str = "pick-np-cluster";
pub const PICK_NP_LOCAL: &str = "pick-np-local";
// sets and maps
pub const CLUSTER_IPS: &str = "cluster-ips";
pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
// destinations served by elements only, by route
pub const DISPATCH_CLUSTER: &str = "dispatch-cluster";
pub const DISPATCH_CLUSTER_MASQ: &str = "dispatch-cluster-masq";
pub const DISPATCH_LOCAL: &str = "dispatch-local";
pub const DISPATCH_EXTERNAL_LOCAL: &str = "dispatch-external-local";
pub const DISPATCH_NP_CLUSTER_MASQ: &str = "dispatch-np-cluster-masq";
pub const DISPATCH_NP_EXTERNAL_LOCAL: &str = "dispatch-np-external-local";
/// Every set whose keys are destinations (or NodePorts) sent to endpoints.
pub const SERVED_SETS: [&str; 8] = [
    DISPATCH_CLUSTER,
    DISPATCH_CLUSTER_MASQ,
    DISPATCH_LOCAL,
    DISPATCH_EXTERNAL_LOCAL,
    DISPATCH_NP_CLUSTER_MASQ,
    DISPATCH_NP_EXTERNAL_LOCAL,
    SERVICE_IPS,
    SERVICE_NODEPORTS,
];
pub const NODEPORT_IPS: &str = "nodeport-ips";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_LOCAL_ENDPOINT_SERVICES: &str = "no-local-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const NO_LOCAL_ENDPOINT_NODEPORTS: &str = "no-local-endpoint-nodeports";
pub const FIREWALL_IPS: &str = "firewall-ips";
pub const FIREWALL_ALLOW: &str = "firewall-allow";
pub const HAIRPIN: &str = "hairpin";
/// Session affinity's pins: `client . service port id . endpoint id`, dynamic, one
/// element per pinned client, service port and endpoint (present while a service port
/// of the family has session affinity).
pub const AFFINITY: &str = "affinity";

/// iptables mode's localhost NodePorts: the named counter of the packets accepted on a
/// loopback NodePort (upstream's nfacct counter `localhost_nps_accepted_pkts`).
pub const LOCALHOST_ACCEPTED: &str = "localhost_nps_accepted_pkts";

/// nftables mode's localhost NodePort rejects: per protocol, the set of NodePorts and
/// the named counter (upstream's `LocalhostNodePortRejectedCounterName`:
/// `localhost-nodeport-rejected-` and the protocol in lower case).
pub fn localhost_reject(proto: u8) -> (&'static str, &'static str) {
    match proto {
        6 => ("localhost-reject-tcp", "localhost-nodeport-rejected-tcp"),
        132 => ("localhost-reject-sctp", "localhost-nodeport-rejected-sctp"),
        _ => ("localhost-reject-udp", "localhost-nodeport-rejected-udp"),
    }
}

/// 64-bit FNV-1a: tiny, stable across releases and platforms.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // separator, so that ("ab","c") and ("a","bc") differ
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Keep a readable name part to the characters nft accepts in names.
fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// Identity of one service port: `namespace/name/portname`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId {
    pub service: ServiceKey,
    pub port_name: kube_model::CompactString,
}

impl PortId {
    pub fn new(service: &ServiceKey, port: &ServicePort) -> PortId {
        PortId {
            service: service.clone(),
            port_name: port.name.as_str().into(),
        }
    }

    pub fn hash(&self) -> u64 {
        fnv1a(&[
            self.service.namespace.as_bytes(),
            self.service.name.as_bytes(),
            self.port_name.as_bytes(),
        ])
    }

    /// `ns/name` or `ns/name/port`, nft-safe, at most ~150 bytes.
    pub fn readable(&self) -> String {
        let mut s = format!(
            "{}/{}",
            sanitize(&self.service.namespace, 63),
            sanitize(&self.service.name, 63)
        );
        if !self.port_name.is_empty() {
            s.push('/');
            s.push_str(&sanitize(&self.port_name, 20));
        }
        s
    }

    fn named(&self, prefix: &str) -> String {
        format!(
            "{prefix}-{:08x}-{}",
            (self.hash() >> 32) as u32,
            self.readable()
        )
    }

    /// Chain selecting among the cluster-wide endpoints.
    pub fn cluster_chain(&self) -> String {
        self.named("svc")
    }
    /// Chain selecting among the node-local endpoints.
    pub fn local_chain(&self) -> String {
        self.named("local")
    }
    /// Chain for traffic to the external destinations (NodePort, external IPs, LB IPs).
    pub fn external_chain(&self) -> String {
        self.named("ext")
    }

    fn endpoint_hash(&self, addr: &IpAddr, port: u16) -> u64 {
        fnv1a(&[
            self.service.namespace.as_bytes(),
            self.service.name.as_bytes(),
            self.port_name.as_bytes(),
            addr.to_string().as_bytes(),
            &port.to_be_bytes(),
        ])
    }

    /// The identifier of this service port in its session-affinity pins
    /// ([`AFFINITY`]): the hash's first 32 bits, the hexadecimal digits of its chain
    /// names (`svc-<id>-...`).
    pub fn affinity_id(&self) -> u32 {
        (self.hash() >> 32) as u32
    }

    /// The identifier of an endpoint of this service port in its session-affinity pins:
    /// the first 32 bits of the endpoint's hash (the first 8 hexadecimal digits of the
    /// per-endpoint chain's name before decision 0014's amendment, `ep-<digits>...`), or
    /// with `salt` > 0 another hash of the same endpoint
    /// (the compiler's way out of two endpoints of one port with the same identifier).
    /// With [`PortId::affinity_id`], 64 bits naming the pair.
    pub fn endpoint_affinity_id(&self, addr: &IpAddr, port: u16, salt: u32) -> u32 {
        let h = if salt == 0 {
            self.endpoint_hash(addr, port)
        } else {
            fnv1a(&[
                &self.endpoint_hash(addr, port).to_be_bytes(),
                &salt.to_be_bytes(),
            ])
        };
        (h >> 32) as u32
    }
}
