//! Upstream kube-proxy's own packet-flow tests, run with real packets against the daemon
//! (`tests/upstream_flows.rs`; docs/conformance.md, "Upstream's packet-flow tests").
//!
//! Upstream's proxier tests (`pkg/proxy/iptables/proxier_test.go`,
//! `pkg/proxy/nftables/proxier_test.go`) describe services and endpoints, sync the
//! proxier, and trace packets through the generated rules with a model of netfilter
//! (`runPacketFlowTests`): each case is a source, a destination and the expected result
//! (the endpoints the packet may be DNATed to, `REJECT`, `DROP`, `ACCEPT`, or nothing
//! matched) and whether it is masqueraded. Here a case is written with upstream's own
//! addresses and names and run as a real connection (TCP, or a UDP flow) through the
//! two-node cluster of [`crate::cluster`], the daemon running in the configured mode:
//!
//! - upstream's addresses are mapped onto the cluster ([`Map`]): pod IPs to pods (an
//!   endpoint on `test-node` is a pod on node A, any other node's a pod on node B, any
//!   other pod address a client pod on node A), ClusterIPs into the service CIDR, the
//!   node's IPs to node A's, LoadBalancer and external IPs to 198.18.250.0/24 and
//!   198.18.251.0/24 (192.168.99.11, one of upstream's node IPs, is an address of node
//!   A), external clients to the client namespace;
//! - a source on the node is a connection from node A's namespace bound to that
//!   address, a pod source one from the pod, an external one from the client;
//! - every endpoint pod answers on every target port with the name `<pod>:<port>`, so a
//!   reply names the endpoint *and* the port the connection was DNATed to;
//! - the expected result becomes: every listed endpoint answers within a bounded number
//!   of new connections and no other one does, with the source address the endpoint
//!   saw being node A's (masqueraded) or the client's own; `REJECT`: the connection is
//!   refused; `DROP`: nothing comes back; `ACCEPT`: the connection is accepted (the
//!   health-check server answers); nothing matched: the same outcome as the same probe
//!   before the proxy started (node B's sink and node A's host sink answer the ports
//!   the scenario uses, so that "not handled" is told apart from "rejected").

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster::*;
use crate::Netns;

/// The upstream proxier a scenario comes from, and the mode the daemon runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Iptables,
    Nftables,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }
}

/// A service port as upstream's test writes it.
#[derive(Clone, Debug)]
pub struct UPort {
    pub name: &'static str,
    pub port: u16,
    pub proto: &'static str,
    pub node_port: Option<u16>,
}

/// A Service as upstream's test builds it, with upstream's addresses.
#[derive(Clone, Debug, Default)]
pub struct USvc {
    pub ns: &'static str,
    pub name: &'static str,
    pub type_: &'static str,
    pub cluster_ip: &'static str,
    pub ports: Vec<UPort>,
    pub external_ips: Vec<&'static str>,
    pub lb_ips: Vec<&'static str>,
    pub source_ranges: Vec<&'static str>,
    pub etp_local: bool,
    pub itp_local: bool,
    pub hc_port: Option<u16>,
    pub affinity: Option<u32>,
}

impl USvc {
    pub fn new(ns: &'static str, name: &'static str, cluster_ip: &'static str) -> USvc {
        USvc {
            ns,
            name,
            type_: "ClusterIP",
            cluster_ip,
            ..USvc::default()
        }
    }
    pub fn type_(mut self, t: &'static str) -> USvc {
        self.type_ = t;
        self
    }
    pub fn port(mut self, name: &'static str, port: u16, proto: &'static str) -> USvc {
        self.ports.push(UPort {
            name,
            port,
            proto,
            node_port: None,
        });
        self
    }
    pub fn node_port(
        mut self,
        name: &'static str,
        port: u16,
        proto: &'static str,
        np: u16,
    ) -> USvc {
        self.ports.push(UPort {
            name,
            port,
            proto,
            node_port: Some(np),
        });
        self
    }
    pub fn lb(mut self, ips: &[&'static str]) -> USvc {
        self.lb_ips = ips.to_vec();
        self
    }
    pub fn external(mut self, ips: &[&'static str]) -> USvc {
        self.external_ips = ips.to_vec();
        self
    }
    pub fn ranges(mut self, r: &[&'static str]) -> USvc {
        self.source_ranges = r.to_vec();
        self
    }
    pub fn etp_local(mut self) -> USvc {
        self.etp_local = true;
        self
    }
    pub fn itp_local(mut self) -> USvc {
        self.itp_local = true;
        self
    }
    pub fn hc(mut self, port: u16) -> USvc {
        self.hc_port = Some(port);
        self
    }
    pub fn affinity(mut self, timeout: u32) -> USvc {
        self.affinity = Some(timeout);
        self
    }
}

/// An endpoint as upstream's test writes it: `node` is its `nodeName` (`test-node` is
/// this node); unset conditions stay unset.
#[derive(Clone, Debug)]
pub struct UEp {
    pub ip: &'static str,
    pub node: Option<&'static str>,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
}

/// `test-node`, upstream's name of the node the proxier runs on.
pub const TEST_NODE: &str = "test-node";

/// An endpoint without conditions.
pub fn ep(ip: &'static str, node: Option<&'static str>) -> UEp {
    UEp {
        ip,
        node,
        ready: None,
        serving: None,
        terminating: None,
    }
}

/// An endpoint with its three conditions set.
pub fn ep_cond(
    ip: &'static str,
    node: &'static str,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> UEp {
    UEp {
        ip,
        node: Some(node),
        ready: Some(ready),
        serving: Some(serving),
        terminating: Some(terminating),
    }
}

/// An EndpointSlice of `svc`: endpoints and ports (name, port, protocol).
#[derive(Clone, Debug)]
pub struct USlice {
    pub ns: &'static str,
    pub svc: &'static str,
    pub eps: Vec<UEp>,
    pub ports: Vec<(&'static str, u16, &'static str)>,
}

pub fn slice_of(
    ns: &'static str,
    svc: &'static str,
    eps: Vec<UEp>,
    ports: &[(&'static str, u16, &'static str)],
) -> USlice {
    USlice {
        ns,
        svc,
        eps,
        ports: ports.to_vec(),
    }
}

/// One packet-flow case, as upstream writes it.
#[derive(Clone, Debug)]
pub struct Flow {
    pub name: String,
    pub src: &'static str,
    pub proto: &'static str,
    pub dst: &'static str,
    pub port: u16,
    /// `ip:port, ...`, `REJECT`, `DROP`, `ACCEPT` or `` (nothing matched).
    pub output: String,
    pub masq: bool,
}

pub fn flow(
    name: &str,
    src: &'static str,
    dst: &'static str,
    port: u16,
    output: &str,
    masq: bool,
) -> Flow {
    Flow {
        name: name.to_string(),
        src,
        proto: "tcp",
        dst,
        port,
        output: output.to_string(),
        masq,
    }
}

impl Flow {
    pub fn udp(mut self) -> Flow {
        self.proto = "udp";
        self
    }
    pub fn sctp(mut self) -> Flow {
        self.proto = "sctp";
        self
    }
}

/// One sync of upstream's test: the objects, then the flows checked against them.
#[derive(Clone, Debug, Default)]
pub struct Step {
    pub services: Vec<USvc>,
    pub slices: Vec<USlice>,
    pub flows: Vec<Flow>,
}

/// One upstream test (or subtest): its configuration and steps.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// `TestName` or `TestName/subtest`.
    pub test: String,
    pub mode: Mode,
    /// upstream's `nodePortAddresses` CIDRs (`None`: the fake proxier's: unset in iptables
    /// mode, the node IPs in nftables mode)
    pub node_port_addresses: Option<Vec<&'static str>>,
    pub localhost_node_ports: bool,
    pub masquerade_all: bool,
    /// a local-traffic detector (upstream's fake proxier: by the pod CIDR)
    pub detector: bool,
    /// upstream addresses to make local on node A (a VIP on the node)
    pub local: Vec<&'static str>,
    pub steps: Vec<Step>,
}

impl Scenario {
    pub fn new(mode: Mode, test: &str) -> Scenario {
        Scenario {
            test: test.to_string(),
            mode,
            node_port_addresses: None,
            localhost_node_ports: true,
            masquerade_all: false,
            detector: true,
            local: Vec::new(),
            steps: Vec::new(),
        }
    }
    pub fn step(mut self, services: Vec<USvc>, slices: Vec<USlice>, flows: Vec<Flow>) -> Scenario {
        self.steps.push(Step {
            services,
            slices,
            flows,
        });
        self
    }
}

/// What one case got.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub test: String,
    pub case: String,
    pub want: String,
    pub got: String,
    pub ok: bool,
    /// not run (SCTP: the probes speak TCP and UDP)
    pub skipped: bool,
}

/// An upstream pod address: its family and whether it is an endpoint on this node.
fn is_pod(a: &str) -> bool {
    a.starts_with("10.") || a.starts_with("fd00:10:") && !a.starts_with("fd00:10:96:")
}

/// Upstream's addresses on this cluster.
pub struct Map {
    /// (upstream IP, on this node) -> pod name
    pods: BTreeMap<(String, bool), String>,
    /// pods by name, with their node
    pub pod_list: Vec<(String, On)>,
}

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Map {
    /// Pods for every endpoint and pod source of the scenario.
    pub fn new(s: &Scenario) -> Map {
        let mut m = Map {
            pods: BTreeMap::new(),
            pod_list: Vec::new(),
        };
        for st in &s.steps {
            for sl in &st.slices {
                for e in &sl.eps {
                    m.add(e.ip, e.node == Some(TEST_NODE), "e");
                }
            }
        }
        for st in &s.steps {
            for f in &st.flows {
                for a in [f.src, f.dst] {
                    let endpoint = m.pods.keys().any(|(ip, _)| ip == a);
                    if is_pod(a) && !endpoint {
                        m.add(a, true, "c");
                    }
                }
            }
        }
        m
    }

    fn add(&mut self, ip: &str, local: bool, prefix: &str) {
        let key = (ip.to_string(), local);
        if self.pods.contains_key(&key) {
            return;
        }
        let name = format!("{prefix}{}", self.pod_list.len() + 1);
        self.pod_list
            .push((name.clone(), if local { On::A } else { On::B }));
        self.pods.insert(key, name);
    }

    /// The pod of an upstream pod address: the one on this node if there are two.
    pub fn pod(&self, ip: &str) -> Option<&str> {
        self.pods
            .get(&(ip.to_string(), true))
            .or_else(|| self.pods.get(&(ip.to_string(), false)))
            .map(String::as_str)
    }

    /// The pod of an endpoint listed in `step` (its locality as the step's slices say).
    fn endpoint_pod(&self, step: &Step, ip: &str) -> String {
        let mut found: Vec<&str> = step
            .slices
            .iter()
            .flat_map(|s| &s.eps)
            .filter(|e| e.ip == ip)
            .filter_map(|e| {
                self.pods
                    .get(&(ip.to_string(), e.node == Some(TEST_NODE)))
                    .map(String::as_str)
            })
            .collect();
        found.dedup();
        match found.as_slice() {
            [one] => one.to_string(),
            _ => self
                .pod(ip)
                .unwrap_or_else(|| panic!("no pod for endpoint {ip}"))
                .to_string(),
        }
    }

    /// A non-pod upstream address on this cluster.
    pub fn addr(&self, c: &Cluster, a: &str) -> IpAddr {
        if let Some(p) = self.pod(a) {
            let pod = c.pod(p);
            return if a.contains(':') { pod.v6 } else { pod.v4 };
        }
        let ip: IpAddr = a
            .parse()
            .unwrap_or_else(|_| panic!("bad upstream address {a}"));
        match ip {
            IpAddr::V4(x) => {
                let o = x.octets();
                match o {
                    [172, 30, a, b] => IpAddr::from([198, 18, 96 + a, b]),
                    [192, 168, 0, 2] => v4(NODE_A4),
                    [192, 168, 1, 2] => v4(NODE_A_LINK4),
                    [192, 168, 99, n] => IpAddr::from([198, 18, 251, n]),
                    [203, 0, 113, 2] => v4(CLIENT4),
                    [203, 0, 113, 130] => v4(CLIENT4_OTHER),
                    [127, ..] => ip,
                    [1, 2, 3, n] => IpAddr::from([198, 18, 250, n]),
                    [5, 6, 7, 8] => IpAddr::from([198, 18, 250, 8]),
                    [9, 10, 11, 12] => IpAddr::from([198, 18, 250, 12]),
                    _ => panic!("no mapping for upstream address {a}"),
                }
            }
            IpAddr::V6(x) => {
                let seg = x.segments();
                match seg {
                    [0xfd00, 0x172, 0x30, 0, 0, 0, 0, n] => {
                        format!("2001:db8:100::{n:x}").parse().unwrap()
                    }
                    [0x2001, 0xdb8, 0, 0, 0, 0, 0, 1] => NODE_A6.parse().unwrap(),
                    [0x2001, 0xdb8, 1, 0, 0, 0, 0, 2] => NODE_A_LINK6.parse().unwrap(),
                    [0x2600, 0x5200, 0, 0, 0, 0, 0, 1] => CLIENT6.parse().unwrap(),
                    _ if x.is_loopback() => ip,
                    _ => panic!("no mapping for upstream address {a}"),
                }
            }
        }
    }
}

/// An upstream CIDR of `nodePortAddresses` on this cluster.
pub fn node_port_cidr(c: &str) -> String {
    match c {
        "192.168.0.0/24" => "198.18.50.0/24".into(),
        "192.168.1.0/24" => "198.18.10.0/24".into(),
        "2001:db8::/64" => "2001:db8:50::/64".into(),
        "2001:db8:1::2/128" => "2001:db8:10::1/128".into(),
        "127.0.0.1/32" | "127.0.0.0/8" => c.into(),
        _ => panic!("no mapping for nodePortAddresses {c}"),
    }
}

/// An upstream loadBalancerSourceRanges entry on this cluster (surrounding blanks, which
/// upstream tests for, are kept): the external client's range holds the client and not
/// the blocked client; the node's range holds the node's address only.
pub fn source_range(r: &str) -> String {
    let t = r.trim();
    let m = match t {
        "203.0.113.0/25" => "198.18.50.2/32",
        "192.168.0.0/24" => "198.18.50.1/32",
        _ => panic!("no mapping for source range {r}"),
    };
    r.replace(t, m)
}

fn proto_k8s(p: &str) -> &'static str {
    match p {
        "TCP" | "tcp" => "TCP",
        "UDP" | "udp" => "UDP",
        "SCTP" | "sctp" => "SCTP",
        _ => panic!("protocol {p}"),
    }
}

/// The Service's JSON on this cluster.
fn service_json(m: &Map, c: &Cluster, s: &USvc) -> Value {
    let cip = m.addr(c, s.cluster_ip).to_string();
    let fam = if cip.contains(':') { "IPv6" } else { "IPv4" };
    let ports: Vec<Value> = s
        .ports
        .iter()
        .map(|p| {
            let mut v = json!({"name": p.name, "port": p.port, "protocol": proto_k8s(p.proto)});
            if let Some(np) = p.node_port {
                v["nodePort"] = json!(np);
            }
            v
        })
        .collect();
    let mut spec = json!({
        "type": s.type_,
        "clusterIP": cip,
        "clusterIPs": [cip],
        "ipFamilies": [fam],
        "ipFamilyPolicy": "SingleStack",
        "ports": ports,
    });
    if !s.external_ips.is_empty() {
        let v: Vec<String> = s
            .external_ips
            .iter()
            .map(|a| m.addr(c, a).to_string())
            .collect();
        spec["externalIPs"] = json!(v);
    }
    if !s.source_ranges.is_empty() {
        let v: Vec<String> = s.source_ranges.iter().map(|r| source_range(r)).collect();
        spec["loadBalancerSourceRanges"] = json!(v);
    }
    if s.type_ != "ClusterIP" {
        spec["externalTrafficPolicy"] = json!(if s.etp_local { "Local" } else { "Cluster" });
    }
    if s.itp_local {
        spec["internalTrafficPolicy"] = json!("Local");
    }
    if let Some(h) = s.hc_port {
        spec["healthCheckNodePort"] = json!(h);
    }
    if let Some(t) = s.affinity {
        spec["sessionAffinity"] = json!("ClientIP");
        spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": t}});
    }
    let mut v = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": s.name, "namespace": s.ns},
        "spec": spec,
    });
    if !s.lb_ips.is_empty() {
        let ingress: Vec<Value> = s
            .lb_ips
            .iter()
            .map(|a| json!({"ip": m.addr(c, a).to_string()}))
            .collect();
        v["status"] = json!({"loadBalancer": {"ingress": ingress}});
    }
    v
}

/// The EndpointSlice's JSON on this cluster (name `<svc>-1`, as upstream's).
fn slice_json(m: &Map, c: &Cluster, s: &USlice) -> Value {
    let v6 = s.eps.first().is_some_and(|e| e.ip.contains(':'));
    let eps: Vec<Value> = s
        .eps
        .iter()
        .map(|e| {
            let pod = m
                .pods
                .get(&(e.ip.to_string(), e.node == Some(TEST_NODE)))
                .expect("endpoint pod");
            let p = c.pod(pod);
            let mut v = json!({"addresses": [if v6 { p.v6 } else { p.v4 }.to_string()]});
            if let Some(n) = e.node {
                v["nodeName"] = json!(if n == TEST_NODE { NODE_A } else { NODE_B });
            }
            let mut cond = json!({});
            for (k, b) in [
                ("ready", e.ready),
                ("serving", e.serving),
                ("terminating", e.terminating),
            ] {
                if let Some(b) = b {
                    cond[k] = json!(b);
                }
            }
            v["conditions"] = cond;
            v
        })
        .collect();
    let ports: Vec<Value> = s
        .ports
        .iter()
        .map(|(n, p, proto)| json!({"name": n, "port": p, "protocol": proto_k8s(proto)}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{}-1", s.svc),
            "namespace": s.ns,
            "labels": {"kubernetes.io/service-name": s.svc},
        },
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "endpoints": eps,
        "ports": ports,
    })
}

/// What a probe got, as the comparison needs it.
fn class(o: &Outcome) -> String {
    match o {
        Outcome::Reply { pod, .. } => format!("reply from {pod}"),
        Outcome::Refused => "refused".into(),
        Outcome::Timeout => "dropped".into(),
        Outcome::Error(e) if e.starts_with("connected") => "accepted".into(),
        Outcome::Error(e) => format!("error ({e})"),
    }
}

/// Where a probe is sent from: namespace and bound source address.
fn source<'c>(m: &Map, c: &'c Cluster, src: &str) -> (&'c Netns, Option<IpAddr>) {
    if let Some(p) = m.pod(src) {
        return (&c.pod(p).ns, None);
    }
    let ip = m.addr(c, src);
    let client: [IpAddr; 3] = [v4(CLIENT4), v4(CLIENT4_OTHER), CLIENT6.parse().unwrap()];
    if client.contains(&ip) {
        (&c.client, Some(ip))
    } else {
        (&c.node_a, Some(ip))
    }
}

fn proto_of(p: &str) -> Option<Proto> {
    match p {
        "tcp" => Some(Proto::Tcp),
        "udp" => Some(Proto::Udp),
        _ => None,
    }
}

/// Node A's address facing a pod (what a masqueraded connection comes from).
fn masq_source(c: &Cluster, pod: &str, v6: bool) -> IpAddr {
    let on = c.pod(pod).on;
    let a = match (on, v6) {
        (On::A, false) => BRIDGE_A4,
        (On::A, true) => BRIDGE_A6,
        (On::B, false) => NODE_A_LINK4,
        (On::B, true) => NODE_A_LINK6,
    };
    a.parse().unwrap()
}

/// Probes per case that expects endpoints: enough that every one of up to three answers
/// (a miss has probability 3 x (2/3)^40 < 1e-6).
const REACH_PROBES: usize = 40;

/// Run one flow on the cluster; `baseline` is what it got before the proxy started.
fn check(
    m: &Map,
    c: &Cluster,
    step: &Step,
    f: &Flow,
    baseline: Option<&str>,
) -> (String, String, bool) {
    let proto = proto_of(f.proto).expect("tcp or udp");
    let (ns, bind) = source(m, c, f.src);
    let dst = std::net::SocketAddr::new(m.addr(c, f.dst), f.port);
    let v6 = dst.is_ipv6();
    match f.output.as_str() {
        "" => {
            let want = baseline.unwrap_or("?").to_string();
            let o = probe(ns, proto, dst, bind, REFUSE_TIMEOUT);
            let got = class(&o);
            let ok = got == want;
            (format!("not handled ({want})"), got, ok)
        }
        "REJECT" => {
            let o = probe(ns, proto, dst, bind, REFUSE_TIMEOUT);
            let got = class(&o);
            ("refused".into(), got.clone(), got == "refused")
        }
        "DROP" => {
            let o = probe(ns, proto, dst, bind, DROP_TIMEOUT);
            let got = class(&o);
            ("dropped".into(), got.clone(), got == "dropped")
        }
        "ACCEPT" => {
            let o = probe(ns, proto, dst, bind, REPLY_TIMEOUT);
            let got = class(&o);
            ("accepted".into(), got.clone(), got == "accepted")
        }
        out => {
            // endpoints `ip:port, ...` -> `pod:port`
            let want: BTreeSet<String> = out
                .split(", ")
                .map(|e| {
                    let (ip, port) = e.rsplit_once(':').expect("ip:port");
                    let ip = ip.trim_start_matches('[').trim_end_matches(']');
                    format!("{}:{port}", m.endpoint_pod(step, ip))
                })
                .collect();
            let own = bind.unwrap_or_else(|| {
                let p = m.pod(f.src).expect("source pod");
                let pod = c.pod(p);
                if v6 {
                    pod.v6
                } else {
                    pod.v4
                }
            });
            let n = if want.len() == 1 { 10 } else { REACH_PROBES };
            let mut got: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
            let mut failure = None;
            for _ in 0..n {
                let o = probe(ns, proto, dst, bind, REPLY_TIMEOUT);
                match o {
                    Outcome::Reply { pod, seen } => {
                        got.entry(pod).or_default().insert(seen);
                    }
                    other => {
                        failure = Some(class(&other));
                        break;
                    }
                }
                if want.len() > 1 && want.iter().all(|w| got.contains_key(w)) {
                    break;
                }
            }
            let mut ok = failure.is_none() && got.keys().cloned().collect::<BTreeSet<_>>() == want;
            for (pod, seen) in &got {
                let name = pod.split(':').next().unwrap_or(pod);
                let expect = if f.masq {
                    if c.pods.iter().any(|p| p.name == name) {
                        masq_source(c, name, v6)
                    } else {
                        own
                    }
                } else {
                    own
                };
                if seen.iter().any(|s| *s != expect) {
                    ok = false;
                }
            }
            let masq = if f.masq { ", masqueraded" } else { "" };
            let want_s = format!(
                "{}{masq}",
                want.iter().cloned().collect::<Vec<_>>().join(", ")
            );
            let got_s = match failure {
                Some(fl) => format!("{got:?} then {fl}"),
                None => format!("{got:?}"),
            };
            (want_s, got_s, ok)
        }
    }
}

/// Ports a scenario's flows and endpoints use: endpoint target ports, service ports and
/// node ports.
fn ports_of(s: &Scenario) -> (BTreeSet<u16>, BTreeSet<u16>) {
    let mut target = BTreeSet::new();
    let mut dest = BTreeSet::new();
    for st in &s.steps {
        for sl in &st.slices {
            target.extend(sl.ports.iter().map(|p| p.1));
        }
        for f in &st.flows {
            dest.insert(f.port);
        }
    }
    (target, dest)
}

/// Run a scenario: build the cluster, probe the not-handled cases before the proxy
/// starts, start the daemon in the scenario's mode, then each step's flows. `None`: the
/// daemon is not available (KUBE_NLPROXY_BIN unset outside CI).
pub fn run(bins: Bins, s: &Scenario) -> Option<Vec<CaseResult>> {
    if !matches!(ProxyKind::from_env(&bins), ProxyKind::Daemon(_)) {
        eprintln!(
            "SKIPPED {}: upstream flows need the daemon (set KUBE_NLPROXY_BIN)",
            s.test
        );
        return None;
    }
    let m = Map::new(s);
    let pods: Vec<(&str, On)> = m.pod_list.iter().map(|(n, o)| (n.as_str(), *o)).collect();
    let mut c = Cluster::new(bins, &pods);
    let (target, dest) = ports_of(s);
    let target: Vec<u16> = target.into_iter().filter(|p| *p != TARGET_PORT).collect();
    let names: Vec<String> = c.pods.iter().map(|p| p.name.clone()).collect();
    for name in &names {
        let mut ports = target.clone();
        ports.extend(
            dest.iter()
                .copied()
                .filter(|p| *p < 1000 && !target.contains(p)),
        );
        ports.sort();
        ports.dedup();
        ports.retain(|p| *p != TARGET_PORT);
        if !ports.is_empty() {
            c.serve(name, &format!("{name}:{{port}}"), &ports);
        }
    }
    // "not handled" is told apart from "rejected": node B answers every service port for
    // the service CIDR (it has the whole CIDR local), node A its node ports and service
    // ports (for its local external IP)
    let extra: Vec<u16> = dest
        .iter()
        .copied()
        .filter(|p| *p != SERVICE_PORT && *p != UNUSED_PORT && *p < 1000)
        .collect();
    if !extra.is_empty() {
        c.serve(NODE_B, "sink", &extra);
    }
    let host: Vec<u16> = dest.iter().copied().filter(|p| *p < 10000).collect();
    if !host.is_empty() {
        c.serve(NODE_A, "hostsink", &host);
    }
    // upstream's node IPs: 192.168.99.11 (testExternalIP) is one of them
    let local_ext = m.addr(&c, "192.168.99.11");
    c.node_a
        .ip(&["addr", "add", &format!("{local_ext}/32"), "dev", "ext0"]);
    for a in &s.local {
        let ip = m.addr(&c, a);
        c.node_a
            .ip(&["addr", "add", &format!("{ip}/32"), "dev", "lo"]);
    }

    // what the not-handled cases get without the proxy
    let mut baseline: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for (i, st) in s.steps.iter().enumerate() {
        for (j, f) in st.flows.iter().enumerate() {
            if f.output.is_empty() {
                if let Some(proto) = proto_of(f.proto) {
                    let (ns, bind) = source(&m, &c, f.src);
                    let dst = std::net::SocketAddr::new(m.addr(&c, f.dst), f.port);
                    baseline.insert((i, j), class(&probe(ns, proto, dst, bind, REFUSE_TIMEOUT)));
                }
            }
        }
    }

    let settings = ProxySettings {
        mode: s.mode.name(),
        node_port_addresses: match (&s.node_port_addresses, s.mode) {
            (Some(v), _) => Some(v.iter().map(|c| node_port_cidr(c)).collect()),
            (None, Mode::Iptables) => None,
            // the nftables fake proxier: the node's IPs
            (None, Mode::Nftables) => Some(vec![format!("{NODE_A4}/32"), format!("{NODE_A6}/128")]),
        },
        localhost_node_ports: (s.mode == Mode::Iptables).then_some(s.localhost_node_ports),
        cluster_cidrs: if s.detector {
            vec![CLUSTER_CIDR4.into(), CLUSTER_CIDR6.into()]
        } else {
            Vec::new()
        },
        masquerade_all: s.masquerade_all,
        feature_gates: Vec::new(),
    };
    let mut out = Vec::new();
    for (i, st) in s.steps.iter().enumerate() {
        let mut objs: Vec<Value> = st
            .services
            .iter()
            .map(|x| service_json(&m, &c, x))
            .collect();
        objs.extend(st.slices.iter().map(|x| slice_json(&m, &c, x)));
        if i == 0 {
            c.start_proxy_with(&objs, Duration::from_secs(60), settings.clone());
        } else {
            c.apply(&objs, Duration::from_secs(30));
        }
        for (j, f) in st.flows.iter().enumerate() {
            let case = format!("{} [{} {}:{}]", f.name, f.src, f.dst, f.port);
            if proto_of(f.proto).is_none() {
                out.push(CaseResult {
                    test: s.test.clone(),
                    case,
                    want: f.output.clone(),
                    got: "not run (SCTP)".into(),
                    ok: true,
                    skipped: true,
                });
                continue;
            }
            let (want, got, ok) = check(&m, &c, st, f, baseline.get(&(i, j)).map(String::as_str));
            out.push(CaseResult {
                test: s.test.clone(),
                case,
                want,
                got,
                ok,
                skipped: false,
            });
        }
    }
    Some(out)
}

/// A disagreement with upstream that is kept, with its reason (docs/migration.md).
pub struct Known {
    pub test: &'static str,
    pub case: &'static str,
    pub reason: &'static str,
}

/// Check a scenario's results: every case agrees with upstream except the known
/// disagreements, which must still disagree (so that the list stays true). Prints one
/// line per case and a summary `upstream-flows <mode> <test>: passed/total`.
pub fn assert_results(results: &[CaseResult], known: &[Known]) {
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut run = 0;
    for r in results {
        let k = known
            .iter()
            .find(|k| r.test.starts_with(k.test) && r.case.starts_with(k.case));
        let status = match (r.skipped, r.ok, k) {
            (true, _, _) => "SKIP",
            (false, true, None) => "ok",
            (false, false, Some(_)) => "KNOWN",
            (false, true, Some(_)) => "FIXED?",
            (false, false, None) => "FAIL",
        };
        if !r.skipped {
            run += 1;
            if r.ok {
                passed += 1;
            }
        }
        eprintln!(
            "upstream-flows {} | {} | want {} | got {} | {status}{}",
            r.test,
            r.case,
            r.want,
            r.got,
            k.map(|k| format!(" ({})", k.reason)).unwrap_or_default()
        );
        if status == "FAIL" || status == "FIXED?" {
            failures.push(format!(
                "{} | {}: want {}, got {} ({status})",
                r.test, r.case, r.want, r.got
            ));
        }
    }
    if let Some(t) = results.first() {
        eprintln!(
            "upstream-flows {}: {passed}/{run} agree ({} not run)",
            t.test,
            results.len() - run
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
