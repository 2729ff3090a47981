//! The internal model: validated, family-aware, free of Kubernetes API types.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

pub use compact_str::CompactString;

use crate::ip::Cidr;
pub use crate::ip::IpFamily;

/// A transport protocol kube-proxy serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
    pub fn from_number(n: u8) -> Option<Protocol> {
        match n {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        }
    }
    /// Kubernetes' name (`TCP`); a missing protocol is TCP.
    pub fn from_k8s(s: Option<&str>) -> Option<Protocol> {
        match s {
            None | Some("TCP") => Some(Protocol::Tcp),
            Some("UDP") => Some(Protocol::Udp),
            Some("SCTP") => Some(Protocol::Sctp),
            _ => None,
        }
    }
    /// nft's lower-case name.
    pub fn nft_name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Namespace and name of a Service (or of any namespaced object), ordered by namespace,
/// then name, byte by byte. Each is held inline up to 24 bytes (`CompactString`): the
/// ordered maps keyed by it (the cluster, the engine's changes, the compiler's ports)
/// compare keys in their nodes instead of reaching two heap strings per comparison
/// (their comparisons were the top user-space cost of a cold start at 100,000
/// services: docs/benchmarks.md, ninth stop).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: CompactString,
    pub name: CompactString,
}

impl ServiceKey {
    pub fn new(namespace: impl Into<CompactString>, name: impl Into<CompactString>) -> ServiceKey {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Service type (only the proxied ones; headless and ExternalName are never in the model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

/// externalTrafficPolicy / internalTrafficPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServicePort {
    /// Port name; empty for the single unnamed port of a service.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    /// Allocated node port (NodePort and LoadBalancer services only).
    pub node_port: Option<u16>,
}

/// A proxied Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Service {
    pub key: ServiceKey,
    pub service_type: ServiceType,
    /// Cluster IPs, at most one per family.
    pub cluster_ips: Vec<IpAddr>,
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs (type LoadBalancer only; `ipMode: Proxy` ones left out).
    pub load_balancer_ips: Vec<IpAddr>,
    /// loadBalancerSourceRanges (type LoadBalancer only).
    pub source_ranges: Vec<Cidr>,
    pub ports: Vec<ServicePort>,
    /// Local only for externally accessible services (NodePort, LoadBalancer, ClusterIP
    /// with external IPs).
    pub external_traffic_policy: TrafficPolicy,
    pub internal_traffic_policy: TrafficPolicy,
    /// ClientIP session affinity timeout in seconds, when affinity is on.
    pub affinity_timeout: Option<u32>,
    pub health_check_node_port: Option<u16>,
    pub traffic_distribution: Option<String>,
}

impl Service {
    /// A ClusterIP service with one port, every other field at its default: the common
    /// case, for tests and benchmarks that build the model directly.
    pub fn new_cluster_ip(key: ServiceKey, ip: IpAddr, port: ServicePort) -> Service {
        Service {
            key,
            service_type: ServiceType::ClusterIp,
            cluster_ips: vec![ip],
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            ports: vec![port],
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
        }
    }

    pub fn cluster_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.cluster_ips
            .iter()
            .copied()
            .find(|ip| IpFamily::of(ip) == family)
    }
    pub fn port(&self, name: &str) -> Option<&ServicePort> {
        self.ports.iter().find(|p| p.name == name)
    }
}

/// One port of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// One endpoint of an EndpointSlice.
///
/// The model holds one per endpoint of the cluster (millions at 100,000 services), so
/// it is kept small (64 bytes): names as boxed strings, the rare topology hints boxed
/// (`None` when the slice carries none: see [`Endpoint::set_hints`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<Box<str>>,
    pub zone: Option<Box<str>>,
    /// Topology hints; `None` whenever both are empty (one representation).
    hints: Option<Box<Hints>>,
}

/// An endpoint's topology hints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Hints {
    /// `hints.forZones`.
    zones: BTreeSet<String>,
    /// `hints.forNodes`.
    nodes: BTreeSet<String>,
}

static NO_HINTS: BTreeSet<String> = BTreeSet::new();

impl Endpoint {
    /// A ready, serving endpoint at `addr` on `node`, without zone or hints.
    pub fn ready_on(addr: IpAddr, node: Option<&str>) -> Endpoint {
        Endpoint {
            addr,
            ready: true,
            serving: true,
            terminating: false,
            node_name: node.map(Into::into),
            zone: None,
            hints: None,
        }
    }

    /// `hints.forZones`, when the slice carries zone hints for this endpoint.
    pub fn zone_hints(&self) -> &BTreeSet<String> {
        self.hints.as_ref().map_or(&NO_HINTS, |h| &h.zones)
    }

    /// `hints.forNodes`.
    pub fn node_hints(&self) -> &BTreeSet<String> {
        self.hints.as_ref().map_or(&NO_HINTS, |h| &h.nodes)
    }

    /// Set the topology hints (zones, nodes).
    pub fn set_hints(&mut self, zones: BTreeSet<String>, nodes: BTreeSet<String>) {
        self.hints =
            (!zones.is_empty() || !nodes.is_empty()).then(|| Box::new(Hints { zones, nodes }));
    }

    pub fn with_hints(mut self, zones: BTreeSet<String>, nodes: BTreeSet<String>) -> Endpoint {
        self.set_hints(zones, nodes);
        self
    }
}

/// An EndpointSlice of one family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointSlice {
    /// Namespace and name of the slice itself.
    pub key: ServiceKey,
    /// The service it belongs to (label `kubernetes.io/service-name`).
    pub service: ServiceKey,
    pub family: IpFamily,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<Endpoint>,
}

/// What the proxier needs of its own Node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Node {
    pub name: String,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// `spec.podCIDRs`, at most one per family.
    pub pod_cidrs: Vec<Cidr>,
    /// The node's primary IPs: the first InternalIP of each family (else the first ExternalIP).
    pub primary_ips: Vec<IpAddr>,
}

impl Node {
    pub fn pod_cidr(&self, family: IpFamily) -> Option<Cidr> {
        self.pod_cidrs
            .iter()
            .copied()
            .find(|c| c.family() == family)
    }
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.primary_ips
            .iter()
            .copied()
            .find(|ip| IpFamily::of(ip) == family)
    }
}

/// An endpoint of one service port, resolved from the slices (address and target port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedEndpoint {
    pub addr: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<String>,
    pub zone_hints: BTreeSet<String>,
    pub node_hints: BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model holds one per endpoint of the cluster: keep it small.
    #[test]
    fn an_endpoint_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Endpoint>(), 64);
    }

    /// A text that often shares its first eight bytes, or all of them, with another:
    /// a head from a few (shorter than, exactly and longer than eight bytes, with a NUL)
    /// and a short tail.
    fn text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        let heads = vec![
            "",
            "ns",
            "ns-1234",
            "ns-12345",
            "ns-12345\0",
            "é-long-name-past-24-bytes",
        ];
        (proptest::sample::select(heads), "[a\\x00é]{0,3}").prop_map(|(h, t)| format!("{h}{t}"))
    }

    proptest::proptest! {
        /// The order of keys is the order of their (namespace, name) texts, byte by
        /// byte, whatever the bytes (NULs, shared heads, lengths across eight and 24).
        #[test]
        fn keys_order_as_their_texts(a in (text(), text()), b in (text(), text())) {
            let ka = ServiceKey::new(a.0.as_str(), a.1.as_str());
            let kb = ServiceKey::new(b.0.as_str(), b.1.as_str());
            proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            proptest::prop_assert_eq!(ka.cmp(&kb) == std::cmp::Ordering::Equal, ka == kb);
        }
    }

    /// Empty hints are no hints (one representation: equal endpoints compare equal).
    #[test]
    fn empty_hints_are_none() {
        let a = Endpoint::ready_on("198.18.0.1".parse().unwrap(), Some("node-a"));
        let b = a.clone().with_hints(BTreeSet::new(), BTreeSet::new());
        assert_eq!(a, b);
        let zoned = a
            .clone()
            .with_hints(BTreeSet::from(["z".to_string()]), BTreeSet::new());
        assert_ne!(a, zoned);
        assert!(zoned.zone_hints().contains("z") && zoned.node_hints().is_empty());
        assert!(a.zone_hints().is_empty());
    }
}
