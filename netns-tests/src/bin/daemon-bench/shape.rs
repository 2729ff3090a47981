//! A production-shaped cluster (`--shape prod`): N services mixing ClusterIP, NodePort
//! and LoadBalancer (some with source ranges, some with `externalTrafficPolicy: Local`),
//! UDP DNS-like services with many endpoints, other UDP services, `sessionAffinity:
//! ClientIP`, dual-stack and multi-port services; endpoints per service heavy-tailed
//! from 1 to 1,000, in EndpointSlices of at most 100 per address family. Deterministic
//! from a seed, and generated in service order, so that the cluster of N services is a
//! prefix of the cluster of any larger N with the same seed. The proportions and where
//! they come from: docs/benchmarks.md ("The production shape").
//!
//! Address plan (only 198.18.0.0/15 and 2001:db8::/32; the space is small for 100k
//! services, so some addresses repeat where the daemon keys on more than the address):
//!
//! | range | use |
//! |---|---|
//! | 198.18.0.1 - 198.18.239.254 | cluster IPs (61,438; past that the addresses repeat, each port shifted by 1: (IP, protocol, port) stays unique) |
//! | 198.18.240.0/22 | cluster IPs of the services the bench creates (never generated) |
//! | 198.18.250.0/24, 198.18.251.0/24 | the client and the endpoint namespaces of the probes (never generated) |
//! | 198.18.252.0/22 | `loadBalancerSourceRanges` |
//! | 198.19.0.0 - 198.19.223.255 | pod IPs (57,344; a pod address serves several services past that, as pods selected by several services do; unique within a service) |
//! | 198.19.224.0/20 | LoadBalancer ingress IPs (4,096; LoadBalancers sharing one have ports shifted by 2 per round) |
//! | 198.19.240.0/20 | the endpoints the bench adds (never generated) |
//! | 2001:db8:0:1::/64, 2001:db8:1::/48 | IPv6 cluster IPs and pod IPs of dual-stack services (unique) |
//!
//! NodePorts (and LoadBalancers' health-check node ports) are allocated in order from
//! 30000-32767, then 20000-29999 (a cluster run with `--service-node-port-range
//! 20000-32767`); when none is left, a NodePort service is made ClusterIP and a
//! LoadBalancer gets `allocateLoadBalancerNodePorts: false` and `externalTrafficPolicy:
//! Cluster`.

use std::collections::HashMap;
use std::net::IpAddr;

use kube_reference::Rng;
use netns_tests::bench_cluster::NODE;
use netns_tests::upstream::Port;
use serde_json::{json, Value};

/// Base ports, spaced by more than the largest shift (see the address plan).
const TCP_PORTS: [(&str, u16, u16); 8] = [
    ("http", 80, 8080),
    ("https", 443, 8443),
    ("grpc", 9090, 9090),
    ("metrics", 9200, 9100),
    ("postgres", 5432, 5432),
    ("redis", 6379, 6379),
    ("mysql", 3306, 3306),
    ("admin", 15000, 15000),
];

/// A pod-IP index into 198.19.0.0 - 198.19.223.255.
const POD_V4: u32 = 224 * 256;
const CIP_V4: u32 = 240 * 256 - 2;
const LB_V4: u32 = 4096;

fn v4(base: u32, n: u32) -> String {
    let a = base + n;
    format!(
        "{}.{}.{}.{}",
        a >> 24,
        (a >> 16) & 255,
        (a >> 8) & 255,
        a & 255
    )
}
const B18: u32 = 0xC612_0000; // 198.18.0.0
const B19: u32 = 0xC613_0000; // 198.19.0.0

/// What the generator made, for the report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub services: u32,
    pub cluster_ip: u32,
    pub node_port: u32,
    pub load_balancer: u32,
    pub source_ranges: u32,
    pub local: u32,
    pub dns: u32,
    pub udp: u32,
    pub affinity: u32,
    pub dual_stack: u32,
    pub multi_port: u32,
    pub endpoints: u64,
    pub max_endpoints: u32,
    pub slices: u32,
    /// NodePort services made ClusterIP, LoadBalancers without node ports: the node
    /// port range ran out.
    pub out_of_node_ports: u32,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let pct = |x: u32| 100.0 * f64::from(x) / f64::from(self.services.max(1));
        write!(
            f,
            "{} services: ClusterIP {:.1}%, NodePort {:.1}%, LoadBalancer {:.1}% ({} with source ranges), ETP Local {}, DNS-like {}, other UDP {}, ClientIP affinity {:.1}%, dual-stack {:.1}%, multi-port {:.1}%; {} endpoints (mean {:.1}, max {}), {} slices; {} out of node ports",
            self.services,
            pct(self.cluster_ip),
            pct(self.node_port),
            pct(self.load_balancer),
            self.source_ranges,
            self.local,
            self.dns,
            self.udp,
            pct(self.affinity),
            pct(self.dual_stack),
            pct(self.multi_port),
            self.endpoints,
            self.endpoints as f64 / f64::from(self.services.max(1)),
            self.max_endpoints,
            self.slices,
            self.out_of_node_ports,
        )
    }
}

/// The cluster: Services and EndpointSlices as the API server returns them.
pub struct Cluster {
    pub services: Vec<Value>,
    pub slices: Vec<Value>,
    pub stats: Stats,
}

/// Endpoints of an ordinary service: heavy-tailed, log-uniform within each band.
fn endpoint_count(r: &mut Rng) -> u32 {
    // (per mille, lo, hi)
    const BANDS: [(u64, u64, u64); 7] = [
        (250, 1, 1),
        (300, 2, 3),
        (250, 4, 9),
        (120, 10, 30),
        (50, 31, 100),
        (22, 101, 300),
        (8, 301, 1000),
    ];
    let mut roll = r.below(1000);
    for (w, lo, hi) in BANDS {
        if roll < w {
            return log_uniform(r, lo, hi);
        }
        roll -= w;
    }
    1
}

fn log_uniform(r: &mut Rng, lo: u64, hi: u64) -> u32 {
    if lo == hi {
        return lo as u32;
    }
    let (a, b) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
    let u = r.below(1 << 20) as f64 / f64::from(1u32 << 20);
    ((a + u * (b - a)).exp().floor() as u64).clamp(lo, hi) as u32
}

/// The node ports left: 30000-32767, then 20000-29999.
struct NodePorts(u32);
impl NodePorts {
    fn take(&mut self, n: usize) -> Option<Vec<u16>> {
        let total = 2768 + 10_000;
        if self.0 as usize + n > total {
            return None;
        }
        let out = (0..n as u32)
            .map(|k| {
                let x = self.0 + k;
                (if x < 2768 {
                    30_000 + x
                } else {
                    20_000 + x - 2768
                }) as u16
            })
            .collect();
        self.0 += n as u32;
        Some(out)
    }
}

/// The cluster's IPv4 service ports as upstream's renderers take them
/// (`netns_tests::upstream`): ClusterIP, port, target, NodePort and the ready IPv4
/// endpoints. What those renderers do not write (LoadBalancer IPs and source ranges,
/// `externalTrafficPolicy: Local`, session affinity's sets, IPv6, and the ports without
/// a ready endpoint, which upstream rejects through a map the renderers do not write) is
/// left out, so the peers' work is a lower bound of what upstream would do for this
/// cluster.
pub fn upstream_ports(c: &Cluster) -> Vec<Port> {
    let mut eps: HashMap<(&str, &str), Vec<&Value>> = HashMap::new();
    for sl in &c.slices {
        if sl["addressType"] != "IPv4" {
            continue;
        }
        let ns = sl["metadata"]["namespace"].as_str().unwrap_or_default();
        let svc = sl["metadata"]["labels"]["kubernetes.io/service-name"]
            .as_str()
            .unwrap_or_default();
        eps.entry((ns, svc)).or_default().push(sl);
    }
    let mut out = Vec::new();
    for s in &c.services {
        let ns = s["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = s["metadata"]["name"].as_str().unwrap_or_default();
        let Some(cip) = s["spec"]["clusterIP"].as_str() else {
            continue;
        };
        let slices = eps.get(&(ns, name)).cloned().unwrap_or_default();
        for p in s["spec"]["ports"].as_array().into_iter().flatten() {
            let pname = p["name"].as_str().unwrap_or_default();
            let endpoints: Vec<IpAddr> = slices
                .iter()
                .flat_map(|sl| sl["endpoints"].as_array().into_iter().flatten())
                .filter(|e| e["conditions"]["ready"] != false)
                .filter_map(|e| e["addresses"][0].as_str()?.parse().ok())
                .collect();
            if endpoints.is_empty() {
                continue;
            }
            out.push(Port {
                ns: ns.to_string(),
                svc: name.to_string(),
                name: pname.to_string(),
                proto: p["protocol"].as_str().unwrap_or("TCP").to_lowercase(),
                cluster_ip: cip.to_string(),
                port: p["port"].as_u64().unwrap_or(0) as u16,
                target: p["targetPort"].as_u64().unwrap_or(0) as u16,
                node_port: p["nodePort"].as_u64().map(|n| n as u16),
                endpoints,
            });
        }
    }
    out
}

/// The production-shaped cluster of `n` services from `seed`.
pub fn cluster(n: u32, seed: u64) -> Cluster {
    let mut st = Stats {
        services: n,
        ..Stats::default()
    };
    let mut node_ports = NodePorts(0);
    let (mut services, mut slices) = (Vec::new(), Vec::new());
    let mut pod = 0u64; // global endpoint counter: pod addresses
    for i in 0..n {
        let mut r = Rng::new(seed ^ u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let roll = r.below(1000);
        let dns = roll < 5;
        let udp = !dns && roll < 25;
        let (mut kind, etp_local, ranges) = if dns || udp {
            ("ClusterIP", false, false)
        } else {
            let t = r.below(100);
            let kind = if t < 78 {
                "ClusterIP"
            } else if t < 90 {
                "NodePort"
            } else {
                "LoadBalancer"
            };
            (
                kind,
                kind != "ClusterIP" && r.chance(30),
                kind == "LoadBalancer" && r.chance(25),
            )
        };
        let affinity = !dns && r.chance(3);
        let dual = r.chance(15);
        let nports = if dns {
            2
        } else if udp {
            1
        } else {
            match r.below(100) {
                0..=69 => 1,
                70..=91 => 2,
                _ => 3 + r.below(2) as usize,
            }
        };
        let eps = if dns {
            log_uniform(&mut r, 50, 500)
        } else {
            endpoint_count(&mut r)
        };
        let round = i / CIP_V4;
        let lb_round = if kind == "LoadBalancer" { i / LB_V4 } else { 0 };
        let shift = (round + 2 * lb_round) as u16;
        // ports: (name, protocol, port, targetPort)
        let mut ports: Vec<(String, &str, u16, u16)> = if dns {
            vec![
                ("dns".into(), "UDP", 53 + shift, 53),
                ("dns-tcp".into(), "TCP", 53 + shift, 53),
            ]
        } else if udp {
            vec![("statsd".into(), "UDP", 8125 + shift, 8125)]
        } else {
            let first = r.below(TCP_PORTS.len() as u64) as usize;
            (0..nports)
                .map(|k| {
                    let (name, p, t) = TCP_PORTS[(first + k) % TCP_PORTS.len()];
                    (name.to_string(), "TCP", p + shift, t)
                })
                .collect()
        };
        ports.truncate(nports);
        // node ports, health-check node port
        let mut nps = None;
        let mut hc = None;
        let mut local = etp_local;
        if kind != "ClusterIP" {
            nps = node_ports.take(ports.len());
            if nps.is_none() {
                st.out_of_node_ports += 1;
                local = false;
                if kind == "NodePort" {
                    kind = "ClusterIP";
                }
            } else if local {
                hc = node_ports.take(1).map(|v| v[0]);
                local = hc.is_some();
            }
        }
        match kind {
            "ClusterIP" => st.cluster_ip += 1,
            "NodePort" => st.node_port += 1,
            _ => st.load_balancer += 1,
        }
        st.dns += u32::from(dns);
        st.udp += u32::from(udp);
        st.affinity += u32::from(affinity);
        st.dual_stack += u32::from(dual);
        st.multi_port += u32::from(ports.len() > 1);
        st.local += u32::from(local);
        st.source_ranges += u32::from(ranges);

        let name = format!("svc-{i}");
        let ns = format!("ns-{}", i % 100);
        let cip4 = v4(B18, 1 + i % CIP_V4);
        let cip6 = format!("2001:db8:0:1::{:x}:{:x}", (i >> 16) + 1, i & 0xffff);
        let (ips, fams, policy) = if dual {
            (
                json!([cip4, cip6]),
                json!(["IPv4", "IPv6"]),
                "PreferDualStack",
            )
        } else {
            (json!([cip4]), json!(["IPv4"]), "SingleStack")
        };
        let sports: Vec<Value> = ports
            .iter()
            .enumerate()
            .map(|(k, (pn, proto, p, t))| {
                let mut v = json!({"name": pn, "protocol": proto, "port": p, "targetPort": t});
                if let Some(np) = &nps {
                    v["nodePort"] = json!(np[k]);
                }
                v
            })
            .collect();
        let mut spec = json!({
            "type": kind, "clusterIP": cip4, "clusterIPs": ips,
            "ipFamilies": fams, "ipFamilyPolicy": policy,
            "internalTrafficPolicy": "Cluster",
            "sessionAffinity": if affinity { "ClientIP" } else { "None" },
            "selector": {"app": format!("app-{i}")},
            "ports": sports,
        });
        if affinity {
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
        }
        if kind != "ClusterIP" {
            spec["externalTrafficPolicy"] = json!(if local { "Local" } else { "Cluster" });
        }
        if let Some(h) = hc {
            spec["healthCheckNodePort"] = json!(h);
        }
        let mut status = json!({"loadBalancer": {}});
        if kind == "LoadBalancer" {
            if nps.is_none() {
                spec["allocateLoadBalancerNodePorts"] = json!(false);
            }
            if ranges {
                let k = 1 + r.below(3) as u32;
                let cidrs: Vec<String> = (0..k)
                    .map(|j| format!("{}/24", v4(B18, (252 << 8) + ((i + j) % 4) * 256)))
                    .collect();
                spec["loadBalancerSourceRanges"] = json!(cidrs);
            }
            status = json!({"loadBalancer": {"ingress": [{"ip": v4(B19, (224 << 8) + i % LB_V4), "ipMode": "VIP"}]}});
        }
        services.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": name, "namespace": ns,
                "uid": format!("00000000-0000-4000-8000-{i:012}"),
                "resourceVersion": format!("{}", 1000 + i),
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"app": format!("app-{i}")}
            },
            "spec": spec, "status": status
        }));
        // endpoints: chunks of at most 100 per family
        st.endpoints += u64::from(eps);
        st.max_endpoints = st.max_endpoints.max(eps);
        let slice_ports: Vec<Value> = ports
            .iter()
            .map(|(pn, proto, _, t)| json!({"name": pn, "protocol": proto, "port": t}))
            .collect();
        let families: &[&str] = if dual { &["IPv4", "IPv6"] } else { &["IPv4"] };
        for fam in families {
            for (c, lo) in (0..eps).step_by(100).enumerate() {
                let hi = (lo + 100).min(eps);
                let e: Vec<Value> = (lo..hi)
                    .map(|j| {
                        let k = pod + u64::from(j);
                        let addr = if *fam == "IPv4" {
                            v4(B19, 1 + (k % u64::from(POD_V4 - 1)) as u32)
                        } else {
                            format!("2001:db8:1::{:x}:{:x}", (k + 1) >> 16, (k + 1) & 0xffff)
                        };
                        // about 2 % terminating (a rollout under way), 1 in 50 on this node
                        let term = (k * 7919) % 50 == 3;
                        let node = if k.is_multiple_of(50) {
                            NODE.to_string()
                        } else {
                            format!("node-{}", k % 50)
                        };
                        json!({
                            "addresses": [addr],
                            "conditions": {"ready": !term, "serving": true, "terminating": term},
                            "nodeName": node, "zone": format!("zone-{}", k % 3),
                            "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("app-{i}-{j}"),
                                          "uid": format!("10000000-0000-4000-8000-{k:012}")}
                        })
                    })
                    .collect();
                st.slices += 1;
                let fam_tag = if *fam == "IPv4" { "" } else { "6" };
                slices.push(json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {
                        "name": format!("{name}-{fam_tag}{c:x}"), "namespace": ns,
                        "uid": format!("20000000-0000-4000-{}-{i:012}", 8000 + c + if *fam == "IPv4" { 0 } else { 1000 }),
                        "resourceVersion": format!("{}", 100_000 + i),
                        "creationTimestamp": "2025-01-01T00:00:00Z",
                        "generateName": format!("{name}-"),
                        "labels": {"kubernetes.io/service-name": name,
                                   "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
                    },
                    "addressType": fam,
                    "ports": slice_ports,
                    "endpoints": e
                }));
            }
        }
        pod += u64::from(eps);
    }
    Cluster {
        services,
        slices,
        stats: st,
    }
}

/// The node of the production shape: its address is the node namespace's address on
/// the endpoints' side of the probe topology.
pub fn node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "zone-0",
                                                     "kubernetes.io/hostname": NODE}},
        "spec": {"podCIDRs": ["198.19.223.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "198.18.251.1"}]}
    })
}

/// Load the node and the cluster into the API double.
pub fn load(api: &integration::ApiServer, c: Cluster) {
    api.apply(node());
    for s in c.services {
        api.apply(s);
    }
    for s in c.slices {
        api.apply(s);
    }
}

/// The whole cluster as one `kind: List` JSON document.
pub fn manifest(c: &Cluster) -> String {
    let mut items = vec![node()];
    items.extend(c.services.iter().cloned());
    items.extend(c.slices.iter().cloned());
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::IpAddr;

    fn allowed(a: &str) -> bool {
        match a.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v) => (u32::from(v) >> 17) == (B18 >> 17),
            IpAddr::V6(v) => v.segments()[0] == 0x2001 && v.segments()[1] == 0xdb8,
        }
    }

    #[test]
    fn a_seed_reproduces_the_cluster_and_a_smaller_one_is_its_prefix() {
        let a = cluster(3000, 7);
        let b = cluster(3000, 7);
        assert_eq!(a.services, b.services);
        assert_eq!(a.slices, b.slices);
        let small = cluster(1000, 7);
        assert_eq!(small.services[..], a.services[..1000]);
        assert_ne!(cluster(1000, 8).services, small.services);
    }

    #[test]
    fn the_shape_holds_its_proportions_addresses_and_limits() {
        let c = cluster(10_000, 1);
        let s = &c.stats;
        let pct = |x: u32| 100 * x / s.services;
        assert!((75..=81).contains(&pct(s.cluster_ip)), "{s}");
        assert!((9..=15).contains(&pct(s.node_port)), "{s}");
        assert!((8..=12).contains(&pct(s.load_balancer)), "{s}");
        assert!(
            s.dns > 25 && s.udp > 150 && s.affinity > 150 && s.local > 250,
            "{s}"
        );
        assert!(s.max_endpoints > 300 && s.max_endpoints <= 1000, "{s}");
        let mean = s.endpoints as f64 / 10_000.0;
        assert!((8.0..25.0).contains(&mean), "{s}");
        // every (IP, protocol, port) of a service is unique; every address is allowed
        let mut seen = HashSet::new();
        let mut node_ports = HashSet::new();
        for svc in &c.services {
            let spec = &svc["spec"];
            let mut ips: Vec<&str> = spec["clusterIPs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            if let Some(lb) = svc["status"]["loadBalancer"]["ingress"][0]["ip"].as_str() {
                ips.push(lb);
            }
            for ip in &ips {
                assert!(allowed(ip), "{ip}");
                for p in spec["ports"].as_array().unwrap() {
                    let k = (
                        ip.to_string(),
                        p["protocol"].to_string(),
                        p["port"].as_u64(),
                    );
                    assert!(seen.insert(k), "{ip} {p} twice");
                }
            }
            for p in spec["ports"].as_array().unwrap() {
                if let Some(np) = p["nodePort"].as_u64() {
                    assert!(
                        node_ports.insert((np, p["protocol"].to_string())),
                        "nodePort {np} twice"
                    );
                }
            }
            if let Some(r) = spec["loadBalancerSourceRanges"].as_array() {
                for c in r {
                    assert!(allowed(c.as_str().unwrap().split('/').next().unwrap()));
                }
            }
        }
        for sl in &c.slices {
            let eps = sl["endpoints"].as_array().unwrap();
            assert!(!eps.is_empty() && eps.len() <= 100);
            let mut here = HashSet::new();
            for e in eps {
                let a = e["addresses"][0].as_str().unwrap();
                assert!(allowed(a), "{a}");
                assert!(here.insert(a.to_string()));
                // pods only, never the ranges kept for the bench
                if let Ok(IpAddr::V4(v)) = a.parse::<IpAddr>() {
                    assert!(u32::from(v) > B19 && u32::from(v) < B19 + POD_V4, "{a}");
                }
            }
        }
    }
}
