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
pub const REJECT_CHAIN: &str = "reject-chain";
// sets and maps
pub const CLUSTER_IPS: &str = "cluster-ips";
pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NODEPORT_IPS: &str = "nodeport-ips";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const FIREWALL_IPS: &str = "firewall-ips";
pub const FIREWALL_ALLOW: &str = "firewall-allow";
pub const HAIRPIN: &str = "hairpin";

/// Number of endpoint map shards (see docs/ruleset.md: binding a map to a chain walks
/// its elements, so one map shared by every service chain would make a cold load
/// quadratic, and one map per service makes set-name lookups quadratic).
pub const SHARDS: u32 = 256;

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
    pub port_name: String,
}

impl PortId {
    pub fn new(service: &ServiceKey, port: &ServicePort) -> PortId {
        PortId {
            service: service.clone(),
            port_name: port.name.clone(),
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

    /// The endpoint map shard of this port.
    pub fn shard(&self) -> u32 {
        (self.hash() as u32) % SHARDS
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

    /// Per-endpoint chain (session affinity only).
    pub fn endpoint_chain(&self, addr: &IpAddr, port: u16) -> String {
        format!(
            "ep-{:010x}-{}",
            self.endpoint_hash(addr, port) >> 24,
            self.readable()
        )
    }
    /// Per-endpoint affinity set (session affinity only).
    pub fn affinity_set(&self, addr: &IpAddr, port: u16) -> String {
        format!(
            "aff-{:010x}-{}",
            self.endpoint_hash(addr, port) >> 24,
            self.readable()
        )
    }
}

/// Endpoint map of a shard: `numgen` slot to `address . port`.
pub fn endpoints_map(shard: u32) -> String {
    format!("endpoints-{shard:02x}")
}

/// Endpoint-chain map of a shard: `numgen` slot to `goto ep-...` (session affinity).
pub fn endpoint_chains_map(shard: u32) -> String {
    format!("endpoint-chains-{shard:02x}")
}
