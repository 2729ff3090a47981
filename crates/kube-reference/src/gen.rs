//! Random legal clusters.
//!
//! "Legal" as the API server's validation defines it (upstream
//! `pkg/apis/core/validation/validation.go` `ValidateService*`, and
//! `pkg/apis/discovery/validation`): ports unique by name and by (port, protocol), names
//! required when a service has several ports; NodePorts in the cluster's
//! `--service-node-port-range` (`Env::node_port_range`) and unique in it (allocator);
//! ClusterIPs from the service CIDRs, unique, one per family in the
//! order of `ipFamilies`, as `ipFamilyPolicy` allows; `externalTrafficPolicy` only on
//! externally accessible services (NodePort, LoadBalancer, ClusterIP with externalIPs),
//! `healthCheckNodePort` only for LoadBalancer + Local; `loadBalancerSourceRanges` only on
//! LoadBalancer; `ipMode` only on an ingress entry with an IP; namespaces and Service
//! names DNS labels of at most 63 characters; slices of at most 100 endpoints of 1 to 100
//! addresses matching `addressType` (IPv4, IPv6 or FQDN), ports unique by name (name and
//! protocol may be left out, the number too).
//!
//! One constraint the API server does not make: external and LoadBalancer IPs are unique
//! across services (two services on the same IP and port make upstream's whole
//! transaction fail; kube-nlproxy skips one of them, see docs/fuzzing.md).
//!
//! Every address is from 198.18.0.0/15 or 2001:db8::/32, a few of them written in
//! the legacy texts old objects keep (gen/legacy.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::rng::Rng;

mod env;
mod large;
mod legacy;
mod slices;
pub use env::{DetectLocal, Mode};
pub use large::generate_large;
pub(crate) use legacy::{respell_service, respell_slices};
pub(crate) use slices::slices_for;

/// The surroundings of a case: the node and the proxier's settings ([`Env::default`]
/// the common one, [`Env::random`] the environments users run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub node_name: String,
    pub zone: String,
    /// The node's primary IPs (first InternalIP of each family).
    pub node_ips: Vec<IpAddr>,
    /// Every local address of the host (primary ones included).
    pub local_addrs: Vec<IpAddr>,
    /// `clusterCIDR` (read by the ClusterCIDR local-traffic detector).
    pub cluster_cidrs: Vec<(IpAddr, u8)>,
    /// `spec.podCIDRs` of the node.
    pub pod_cidrs: Vec<(IpAddr, u8)>,
    /// The service CIDRs (traffic to an unallocated address in them is dropped).
    pub service_cidrs: Vec<(IpAddr, u8)>,
    /// `masqueradeAll`.
    pub masquerade_all: bool,
    /// `mode`.
    pub mode: Mode,
    /// `detectLocalMode` with its parameter.
    pub detect_local: DetectLocal,
    /// The name of the interface this node's pods' packets arrive on.
    pub pod_interface: String,
    /// `nodePortAddresses` as configured (empty: unset, the mode's default).
    pub node_port_addresses: Vec<String>,
    /// Whether the probes include the node's own to 127.0.0.1 and ::1 on the NodePorts
    /// (localhost NodePorts).
    pub probe_loopback: bool,
    /// The API server's `--service-node-port-range` (what the generator allocates
    /// NodePorts from; the proxy never reads it).
    pub node_port_range: (i32, i32),
}

impl Default for Env {
    fn default() -> Env {
        let (node_ips, local_addrs) = env::default_addrs();
        Env {
            node_name: "node-a".into(),
            zone: "zone-a".into(),
            node_ips,
            local_addrs,
            cluster_cidrs: vec![(ip("198.18.0.0"), 20), (ip("2001:db8::"), 48)],
            pod_cidrs: vec![(ip("198.18.1.0"), 24), (ip("2001:db8:0:1::"), 64)],
            service_cidrs: vec![(ip("198.18.100.0"), 24), (ip("2001:db8:100::"), 112)],
            masquerade_all: false,
            mode: Mode::Nftables,
            detect_local: DetectLocal::ClusterCidr,
            pod_interface: "veth1".into(),
            node_port_addresses: Vec::new(),
            probe_loopback: false,
            node_port_range: (30000, 32767),
        }
    }
}

impl Env {
    /// The proxier settings as an `NlproxyConfig` document (JSON): the one description
    /// of the environment that the comparison and the kernel tests both read.
    pub fn config_json(&self) -> String {
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cidrs = |v: &[(IpAddr, u8)]| {
            list(
                &v.iter()
                    .map(|(a, l)| format!("{a}/{l}"))
                    .collect::<Vec<_>>(),
            )
        };
        format!(
            "{{\"kind\": \"NlproxyConfig\", \"nodeName\": \"{}\", \"families\": [\"IPv4\", \"IPv6\"], \
             \"masqueradeAll\": {}, \"clusterCIDRs\": [{}], \"serviceCIDRs\": [{}], \"localAddresses\": [{}]{}{}}}",
            self.node_name,
            self.masquerade_all,
            cidrs(&self.cluster_cidrs),
            cidrs(&self.service_cidrs),
            // the host's addresses as the daemon lists them: loopback's too
            list(
                &self
                    .local_addrs
                    .iter()
                    .map(|a| a.to_string())
                    .chain(["127.0.0.1".to_string(), "::1".to_string()])
                    .collect::<Vec<_>>()
            ),
            self.mode_json(),
            self.detect_local_json(),
        )
    }
}

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

/// One generated case: the objects as the API server would hand them out.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub seed: u64,
    pub env: Env,
    pub services: Vec<core::Service>,
    pub slices: Vec<discovery::EndpointSlice>,
    pub node: core::Node,
}

/// Address pools, per family (index 0 IPv4, 1 IPv6).
pub(crate) fn v4(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, a, b))
}
pub(crate) fn v6(group: u16, last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, group, 0, 0, 0, 0, last))
}
/// A pod address: `local` ones in the node's pod CIDR, others on another node.
pub(crate) fn pod_ip(fam: usize, local: bool, n: u16) -> IpAddr {
    let n = n % 250 + 1;
    if fam == 0 {
        v4(if local { 1 } else { 2 }, n as u8)
    } else {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            if local { 1 } else { 2 },
            0,
            0,
            0,
            n,
        ))
    }
}
/// An address of a client outside the cluster.
pub(crate) fn outside_ip(fam: usize, n: u16) -> IpAddr {
    if fam == 0 {
        IpAddr::V4(Ipv4Addr::new(
            198,
            19,
            (n / 250) as u8 % 4,
            (n % 250) as u8 + 1,
        ))
    } else {
        v6(0x300 + (n / 250) % 4, n % 250 + 1)
    }
}
pub(crate) fn family_of(a: &IpAddr) -> usize {
    usize::from(a.is_ipv6())
}

/// A service proxied by another proxy (kube-proxy's informers filter it out).
pub const LABEL_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Set by the EndpointSlice controller on a headless service's slices (kube-proxy's
/// informers filter out any object carrying it).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
const COMMON_PORTS: [i32; 6] = [53, 80, 443, 8080, 3868, 9000];

/// Cluster-wide allocators (unique ClusterIPs, NodePorts, external IPs).
#[derive(Debug)]
pub(crate) struct Alloc {
    cluster_ips: BTreeSet<IpAddr>,
    node_port_range: (i32, i32),
    node_ports: BTreeSet<i32>,
    vips: BTreeSet<IpAddr>,
    /// Pools for thousands of services (gen/large.rs): the environment's IPv4 service
    /// CIDR is wider than a /24.
    wide: bool,
}

impl Alloc {
    pub(crate) fn new(env: &Env) -> Alloc {
        Alloc {
            cluster_ips: BTreeSet::new(),
            node_port_range: env.node_port_range,
            node_ports: BTreeSet::new(),
            vips: BTreeSet::new(),
            wide: env
                .service_cidrs
                .iter()
                .any(|(a, l)| a.is_ipv4() && *l < 24),
        }
    }
    pub(crate) fn of(env: &Env, services: &[core::Service]) -> Alloc {
        let mut a = Alloc::new(env);
        for s in services {
            let Some(spec) = &s.spec else { continue };
            for c in spec.cluster_ips.iter().flatten() {
                a.cluster_ips.extend(crate::ip::parse_ip(c));
            }
            for p in spec.ports.iter().flatten() {
                a.node_ports.extend(p.node_port);
            }
            a.node_ports.extend(spec.health_check_node_port);
            for e in spec.external_ips.iter().flatten() {
                a.vips.extend(crate::ip::parse_ip(e));
            }
            let st = s.status.as_ref().and_then(|s| s.load_balancer.as_ref());
            for i in st.and_then(|l| l.ingress.as_ref()).into_iter().flatten() {
                a.vips.extend(i.ip.as_deref().and_then(crate::ip::parse_ip));
            }
        }
        a
    }
    fn cluster_ip(&mut self, rng: &mut Rng, fam: usize) -> IpAddr {
        loop {
            let a = match (fam, self.wide) {
                (0, false) => v4(100, rng.range(1, 254) as u8),
                // 198.18.96.0/20 (large::SERVICE_CIDR4), not the probes' unallocated
                // 198.18.100.255
                (0, true) => {
                    let n = rng.range(1, 4094) as u16;
                    let a = v4(96 + (n >> 8) as u8, n as u8);
                    if a == v4(100, 255) {
                        continue;
                    }
                    a
                }
                (_, false) => v6(0x100, rng.range(1, 254) as u16),
                (_, true) => v6(0x100, rng.range(1, 65534) as u16),
            };
            if self.cluster_ips.insert(a) {
                return a;
            }
        }
    }
    fn node_port(&mut self, rng: &mut Rng) -> i32 {
        loop {
            let (lo, hi) = self.node_port_range;
            let n = rng.range(lo as u64, hi as u64) as i32;
            if self.node_ports.insert(n) {
                return n;
            }
        }
    }
    fn vip(&mut self, rng: &mut Rng, fam: usize, lb: bool) -> IpAddr {
        loop {
            let a = match (fam, self.wide) {
                (0, false) => v4(250 + u8::from(lb), rng.range(1, 254) as u8),
                // 198.18.240.0/21 external, 198.18.248.0/21 LoadBalancer
                (0, true) => v4(
                    240 + 8 * u8::from(lb) + rng.below(8) as u8,
                    rng.range(1, 254) as u8,
                ),
                (_, false) => v6(0x250 + u16::from(lb), rng.range(1, 254) as u16),
                (_, true) => v6(0x250 + u16::from(lb), rng.range(1, 65534) as u16),
            };
            if self.vips.insert(a) {
                return a;
            }
        }
    }
}

/// A slice's endpoints (none when the list is absent).
pub fn endpoints(sl: &discovery::EndpointSlice) -> &[discovery::Endpoint] {
    sl.endpoints.as_deref().unwrap_or(&[])
}

/// Generate the case of `seed` in the common environment ([`Env::default`]).
pub fn generate(seed: u64) -> Case {
    generate_in(seed, Env::default())
}

/// Generate the case of `seed` in an environment drawn from the seed too
/// ([`Env::random`], from its own stream: the objects are [`generate`]'s).
pub fn generate_varied(seed: u64) -> Case {
    generate_in(
        seed,
        Env::random(&mut Rng::new(seed ^ 0xe4e4_e4e4_e4e4_e4e4)),
    )
}

/// Generate the case of `seed` in `env`.
pub fn generate_in(seed: u64, mut env: Env) -> Case {
    let mut rng = Rng::new(seed);
    // one cluster in ten with another `--service-node-port-range`
    if rng.chance(10) {
        env.node_port_range = *rng.pick(&[(20000, 22767), (80, 32767), (1, 65535)]);
    }
    let mut alloc = Alloc::new(&env);
    let n = rng.range(1, 6);
    let mut services = Vec::new();
    let mut slices = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for i in 0..n {
        let (ns, name) = service_key(&mut rng, i, &keys);
        keys.push((ns.clone(), name.clone()));
        let svc = service(&mut rng, &mut alloc, &ns, &name);
        slices.extend(slices_for(&mut rng, &env, &svc));
        services.push(svc);
    }
    // legacy spellings of addresses on a few objects (gen/legacy.rs), drawn apart
    legacy::respell(
        &mut Rng::new(seed ^ 0x001e_9ac5),
        &mut services,
        &mut slices,
    );
    Case {
        seed,
        node: node(&env),
        env,
        services,
        slices,
    }
}

/// A DNS label of 63 characters (the longest a namespace or a Service name may be)
/// starting with `prefix`.
fn long_label(prefix: &str) -> String {
    let mut s = format!("{prefix}-");
    while s.len() < 62 {
        s.push(char::from(b'a' + (s.len() % 26) as u8));
    }
    s.push('9');
    s
}

/// The namespace and name of the `i`th service: mostly `ns1/svc<i>`; some in other
/// namespaces (one of them with the longest name allowed), some with the longest name,
/// and some with an earlier service's name in another namespace.
fn service_key(rng: &mut Rng, i: u64, earlier: &[(String, String)]) -> (String, String) {
    let ns = if rng.chance(80) {
        "ns1".to_string()
    } else {
        match rng.below(4) {
            0 => "ns2".to_string(),
            1 => "ns3".to_string(),
            2 => "kube-system".to_string(),
            _ => long_label("ns"),
        }
    };
    let mut name = if rng.chance(5) {
        long_label(&format!("svc{i}"))
    } else {
        format!("svc{i}")
    };
    if rng.chance(10) {
        let free = |(n, other): &&(String, String)| {
            *n != ns && !earlier.iter().any(|(m, o)| *m == ns && o == other)
        };
        if let Some((_, other)) = earlier.iter().find(free) {
            name = other.clone();
        }
    }
    (ns, name)
}

/// The proxier's Node object.
pub fn node(env: &Env) -> core::Node {
    let addr = |t: &str, a: &str| core::NodeAddress {
        type_: t.into(),
        address: a.into(),
    };
    core::Node {
        metadata: ObjectMeta {
            name: Some(env.node_name.clone()),
            labels: Some(BTreeMap::from([(
                "topology.kubernetes.io/zone".to_string(),
                env.zone.clone(),
            )])),
            ..Default::default()
        },
        spec: Some(core::NodeSpec {
            pod_cidrs: Some(
                env.pod_cidrs
                    .iter()
                    .map(|(a, l)| format!("{a}/{l}"))
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(core::NodeStatus {
            addresses: Some(
                env.node_ips
                    .iter()
                    .map(|a| addr("InternalIP", &a.to_string()))
                    .chain(
                        // the host's other addresses of the node's families (a
                        // single-stack node's host may hold one of the other family)
                        env.local_addrs
                            .iter()
                            .filter(|a| !env.node_ips.contains(a))
                            .filter(|a| env.node_ips.iter().any(|n| family_of(n) == family_of(a)))
                            .map(|a| addr("ExternalIP", &a.to_string())),
                    )
                    .chain([addr("Hostname", &env.node_name)])
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

/// A random source range for family `fam`: everything, nested and overlapping blocks,
/// host routes, the node's own address and its block.
fn source_range(rng: &mut Rng, fam: usize) -> String {
    let opts4 = [
        "0.0.0.0/0",
        "198.19.0.0/16",
        "198.19.0.0/24",
        "198.19.1.0/24",
        "198.19.0.0/23",
        "198.19.0.1/32",
        "198.19.2.5/32",
        "198.18.200.1/32",
        "198.18.200.0/24",
        "198.18.0.0/15",
        "198.18.1.0/24",
    ];
    let opts6 = [
        "::/0",
        "2001:db8:300::/48",
        "2001:db8:300::/64",
        "2001:db8:301::/64",
        "2001:db8:300::1/128",
        "2001:db8:200::1/128",
        "2001:db8:200::/64",
        "2001:db8::/32",
        "2001:db8::/48",
    ];
    if fam == 0 {
        rng.pick(&opts4).to_string()
    } else {
        rng.pick(&opts6).to_string()
    }
}

/// Port names: IANA service names (lower case, a letter, at most 15 characters).
fn port_name(i: usize) -> String {
    ["http", "dns", "metrics", "grpc", "p-4", "p-5"][i % 6].to_string()
}

/// One random legal Service named `name` in namespace `ns`.
pub(crate) fn service(rng: &mut Rng, alloc: &mut Alloc, ns: &str, name: &str) -> core::Service {
    let kind = rng.below(100);
    let type_ = match kind {
        0..=34 => "ClusterIP",
        35..=59 => "NodePort",
        60..=94 => "LoadBalancer",
        _ => "ExternalName",
    };
    let headless = type_ == "ClusterIP" && rng.chance(8);
    let mut spec = core::ServiceSpec {
        type_: Some(type_.into()),
        ..Default::default()
    };
    if type_ == "ExternalName" {
        spec.external_name = Some("db.example.test".into());
    }
    // families
    let (policy, fams): (&str, Vec<usize>) = match rng.below(6) {
        0 | 1 => ("SingleStack", vec![0]),
        2 => ("SingleStack", vec![1]),
        3 => ("PreferDualStack", vec![0, 1]),
        4 => ("RequireDualStack", vec![1, 0]),
        _ => ("PreferDualStack", vec![0]), // a single-stack cluster's answer to Prefer
    };
    if type_ != "ExternalName" {
        spec.ip_family_policy = Some(policy.into());
        spec.ip_families = Some(
            fams.iter()
                .map(|f| ["IPv4", "IPv6"][*f].to_string())
                .collect(),
        );
        if headless {
            spec.cluster_ip = Some("None".into());
            spec.cluster_ips = Some(vec!["None".into()]);
        } else {
            let ips: Vec<String> = fams
                .iter()
                .map(|f| alloc.cluster_ip(rng, *f).to_string())
                .collect();
            spec.cluster_ip = Some(ips[0].clone());
            spec.cluster_ips = Some(ips);
        }
    }
    // ports
    let nports = if rng.chance(70) {
        1
    } else {
        rng.range(2, 4) as usize
    };
    let with_node_ports = match type_ {
        "NodePort" => true,
        "LoadBalancer" => {
            let alloc_np = rng.chance(85);
            if !alloc_np {
                spec.allocate_load_balancer_node_ports = Some(false);
            }
            alloc_np
        }
        _ => false,
    };
    let mut used: BTreeSet<(i32, &str)> = BTreeSet::new();
    let mut ports = Vec::new();
    let mut i = 0;
    while ports.len() < nports {
        let proto = *rng.pick(&PROTOCOLS);
        let port = if rng.chance(70) {
            *rng.pick(&COMMON_PORTS)
        } else {
            rng.range(1, 65535) as i32
        };
        if !used.insert((port, proto)) {
            continue;
        }
        let name = if nports == 1 && rng.chance(50) {
            None
        } else {
            Some(port_name(i))
        };
        i += 1;
        ports.push(core::ServicePort {
            name,
            protocol: Some(proto.into()),
            port,
            target_port: Some(IntOrString::Int(rng.range(1, 65535) as i32)),
            node_port: with_node_ports.then(|| alloc.node_port(rng)),
            ..Default::default()
        });
        // the same port number for another protocol (DNS over TCP and UDP)
        if ports.len() < nports && rng.chance(20) {
            let other = if proto == "UDP" { "TCP" } else { "UDP" };
            if used.insert((port, other)) {
                ports.push(core::ServicePort {
                    name: Some(port_name(i)),
                    protocol: Some(other.into()),
                    port,
                    target_port: Some(IntOrString::Int(rng.range(1, 65535) as i32)),
                    node_port: with_node_ports.then(|| alloc.node_port(rng)),
                    ..Default::default()
                });
                i += 1;
            }
        }
    }
    if ports.len() > 1 {
        for (j, p) in ports.iter_mut().enumerate() {
            p.name.get_or_insert_with(|| port_name(j + 10));
        }
    }
    spec.ports = Some(ports);
    if type_ != "ExternalName" && !headless {
        // external IPs (any family: those of a family the service lacks are ignored)
        if rng.chance(30) {
            let k = rng.range(1, 2);
            spec.external_ips = Some(
                (0..k)
                    .map(|_| {
                        let f = if rng.chance(80) {
                            *rng.pick(&fams)
                        } else {
                            rng.below(2) as usize
                        };
                        alloc.vip(rng, f, false).to_string()
                    })
                    .collect(),
            );
        }
        let externally = type_ != "ClusterIP" || spec.external_ips.is_some();
        if externally {
            let local = rng.chance(45);
            spec.external_traffic_policy = Some(if local { "Local" } else { "Cluster" }.into());
            if local && type_ == "LoadBalancer" {
                spec.health_check_node_port = Some(alloc.node_port(rng));
            }
        }
        if rng.chance(25) {
            spec.internal_traffic_policy = Some("Local".into());
        } else {
            spec.internal_traffic_policy = Some("Cluster".into());
        }
        if rng.chance(25) {
            spec.session_affinity = Some("ClientIP".into());
            let t = match rng.below(3) {
                0 => 1,
                1 => 86400,
                _ => rng.range(1, 86400) as i32,
            };
            spec.session_affinity_config = Some(core::SessionAffinityConfig {
                client_ip: Some(core::ClientIPConfig {
                    timeout_seconds: Some(t),
                }),
            });
        } else {
            spec.session_affinity = Some("None".into());
        }
        if rng.chance(15) {
            spec.traffic_distribution = Some("PreferClose".into());
        }
    }
    let mut status = None;
    if type_ == "LoadBalancer" {
        if rng.chance(50) {
            let k = rng.range(1, 4);
            spec.load_balancer_source_ranges = Some(
                (0..k)
                    .map(|_| {
                        let f = if rng.chance(85) {
                            *rng.pick(&fams)
                        } else {
                            rng.below(2) as usize
                        };
                        source_range(rng, f)
                    })
                    .collect(),
            );
        }
        if rng.chance(85) {
            let k = rng.range(1, 2);
            let ingress = (0..k)
                .map(|_| {
                    let f = *rng.pick(&fams);
                    // a load balancer known by a hostname only (no IP, so no ipMode:
                    // validation allows ipMode only with an ip)
                    if rng.chance(10) {
                        return core::LoadBalancerIngress {
                            hostname: Some(format!("lb-{}.example.test", rng.below(10))),
                            ..Default::default()
                        };
                    }
                    core::LoadBalancerIngress {
                        ip: Some(alloc.vip(rng, f, true).to_string()),
                        hostname: rng
                            .chance(5)
                            .then(|| format!("lb-{}.example.test", rng.below(10))),
                        ip_mode: match rng.below(6) {
                            0 => Some("Proxy".into()),
                            1 | 2 => Some("VIP".into()),
                            _ => None,
                        },
                        ..Default::default()
                    }
                })
                .collect();
            status = Some(core::ServiceStatus {
                load_balancer: Some(core::LoadBalancerStatus {
                    ingress: Some(ingress),
                }),
                ..Default::default()
            });
        }
    }
    // the labels kube-proxy's informers leave out (cmd/kube-proxy/app/server.go: one
    // selector, "no service-proxy-name and no headless label", for Services and
    // EndpointSlices alike): another proxy's service, and the headless label set by hand
    let mut labels = BTreeMap::new();
    if rng.chance(3) {
        let v = *rng.pick(&["", "other-proxy"]);
        labels.insert(LABEL_PROXY_NAME.to_string(), v.to_string());
    }
    if rng.chance(2) {
        labels.insert(LABEL_HEADLESS.to_string(), String::new());
    }
    core::Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        spec: Some(spec),
        status,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod coverage;
