//! The reference: kube-proxy's verdict for the first packet of a connection in the
//! case's environment ([`Env`]: nftables or iptables mode, the local-traffic detector,
//! nodePortAddresses, masqueradeAll, the node's families), written from upstream's
//! sources (`pkg/proxy/nftables/proxier.go`, `pkg/proxy/iptables/proxier.go` where the
//! modes differ, `cmd/kube-proxy/app/server.go`/`server_linux.go`,
//! `pkg/proxy/util/nodeport_addresses.go`/`localdetector.go`,
//! `pkg/proxy/servicechangetracker.go`/`serviceport.go`, `pkg/proxy/endpointslicecache.go`,
//! `pkg/proxy/topology.go`, `pkg/apis/core/v1/helper`'s `ExternallyAccessible`). It
//! reads the Kubernetes objects itself and shares nothing with `kube-model`/`ruleset`.
//!
//! The order of the checks is the order of upstream's hooks for a new connection:
//! firewall (loadBalancerSourceRanges, before DNAT), the NAT dispatch (service IPs,
//! NodePorts on the NodePort addresses), then the filter checks after DNAT (no usable
//! endpoints: reject; a Local policy without a local endpoint: drop; nftables mode: a
//! ClusterIP on a port no service uses: reject, an unallocated address of a service
//! CIDR: drop; iptables mode: NodePorts without endpoints refused on every local
//! address, and none of the filter rules for the node's own packets that leave it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::gen::{family_of, Case, Env, Mode, LABEL_HEADLESS, LABEL_PROXY_NAME};
use crate::ip::{parse_cidr, parse_ip};
use crate::packets::{Origin, Probe};

/// What kube-proxy does with the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// DNAT to one of these endpoints; the value: whether the source is masqueraded.
    Dnat(BTreeMap<SocketAddr, bool>),
    Reject,
    Drop,
    /// No rule of the proxy applies: routed or delivered as usual.
    NoMatch,
}

/// An endpoint as upstream's endpoint slice cache keeps it (an entry of a family's
/// endpoints map: one per address and port, conditions' defaults applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ep {
    pub(crate) addr: SocketAddr,
    pub(crate) local: bool,
    pub(crate) ready: bool,
    pub(crate) serving: bool,
    pub(crate) terminating: bool,
    pub(crate) zone_hints: BTreeSet<String>,
    pub(crate) node_hints: BTreeSet<String>,
}

/// A service's addresses in one family's proxier (upstream's `serviceport.go`): its
/// ClusterIP of the family, its external IPs of the family and its LoadBalancer VIPs of
/// the family (ingress IPs without `ipMode: Proxy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frontends {
    pub(crate) cluster_ip: IpAddr,
    pub(crate) external: Vec<IpAddr>,
    pub(crate) lb_vips: Vec<IpAddr>,
}

/// Whether kube-proxy never sees the object: its informers list Services and
/// EndpointSlices with one label selector, "neither `service.kubernetes.io/service-proxy-name`
/// nor `service.kubernetes.io/headless`, whatever the value" (upstream
/// `cmd/kube-proxy/app/server.go`, the informer factory's list options).
pub(crate) fn filtered_out(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_PROXY_NAME) || l.contains_key(LABEL_HEADLESS))
}

/// The service's frontends in family `fam`; `None` when the service is not in that
/// family's service port map at all (ExternalName, headless, no ClusterIP of the family).
pub(crate) fn frontends(fam: usize, svc: &core::Service) -> Option<Frontends> {
    if filtered_out(&svc.metadata) {
        return None;
    }
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    // the service's ClusterIP of this family (headless: none); no ClusterIP of the
    // family, no service in this family's proxier at all
    let cluster_ip = cluster_ip_of(fam, spec)?;
    // external IPs and ingress IPs read leniently, each in the family it parses to
    // (`MapIPsByIPFamily`, `GetIPFamilyFromIP`): an IPv4-mapped IPv6 text is IPv4
    let external = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|s| parse_ip(s))
        .filter(|a| family_of(a) == fam)
        .collect();
    let mut lb_vips = Vec::new();
    if let Some(ing) = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
    {
        for i in ing {
            if i.ip_mode.as_deref() == Some("Proxy") {
                continue;
            }
            if let Some(a) = i.ip.as_deref().and_then(parse_ip) {
                if family_of(&a) == fam {
                    lb_vips.push(a);
                }
            }
        }
    }
    Some(Frontends {
        cluster_ip,
        external,
        lb_vips,
    })
}

/// The service's ClusterIP of family `fam` as upstream picks it (`ShouldSkipService`, then
/// `GetClusterIPByFamily`: the `clusterIPs` entry at the index of the family in
/// `ipFamilies`, or, without `ipFamilies`, `clusterIP` when its family is `fam`), read
/// leniently (`ParseIPSloppy`).
fn cluster_ip_of(fam: usize, spec: &core::ServiceSpec) -> Option<IpAddr> {
    let first = spec
        .cluster_ip
        .as_deref()
        .or_else(|| spec.cluster_ips.as_ref()?.first().map(String::as_str))
        .unwrap_or("");
    if first.is_empty() || first == "None" {
        return None;
    }
    let families = spec.ip_families.as_deref().unwrap_or(&[]);
    let text = if families.is_empty() {
        let v6 = parse_ip(first).is_some_and(|a| a.is_ipv6());
        (v6 == (fam == 1)).then_some(first)?
    } else {
        let idx = families.iter().position(|f| f == ["IPv4", "IPv6"][fam])?;
        spec.cluster_ips.as_ref()?.get(idx)?.as_str()
    };
    parse_ip(text)
}

/// One service port as one family's proxier sees it.
#[derive(Debug, Clone)]
struct SvcPort {
    proto: u8,
    port: u16,
    cluster_ip: IpAddr,
    /// External IPs and LoadBalancer VIPs of the family (reached as "external").
    external: Vec<IpAddr>,
    lb_vips: Vec<IpAddr>,
    source_ranges: Vec<(IpAddr, u8)>,
    node_port: Option<u16>,
    etp_local: bool,
    itp_local: bool,
    cluster_eps: Vec<Ep>,
    local_eps: Vec<Ep>,
    has_any: bool,
}

/// The reference model of one case.
#[derive(Debug, Clone)]
pub struct Model {
    env: Env,
    /// Per family (0 IPv4, 1 IPv6).
    ports: [Vec<SvcPort>; 2],
    cluster_ips: [BTreeSet<IpAddr>; 2],
}

pub fn cidr_contains(c: &(IpAddr, u8), a: &IpAddr) -> bool {
    match (c.0, a) {
        (IpAddr::V4(n), IpAddr::V4(x)) => {
            let m = if c.1 == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(c.1))
            };
            u32::from(n) & m == u32::from(*x) & m
        }
        (IpAddr::V6(n), IpAddr::V6(x)) => {
            let m = if c.1 == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(c.1))
            };
            u128::from(n) & m == u128::from(*x) & m
        }
        _ => false,
    }
}

/// An endpoint's topology hints: the zones and the nodes named.
pub(crate) fn hints_of(e: &discovery::Endpoint) -> (BTreeSet<String>, BTreeSet<String>) {
    let hints = e.hints.clone().unwrap_or_default();
    let zones = hints.for_zones.iter().flatten().map(|z| z.name.clone());
    let nodes = hints.for_nodes.iter().flatten().map(|n| n.name.clone());
    (zones.collect(), nodes.collect())
}

fn proto_number(p: Option<&str>) -> u8 {
    match p {
        Some("UDP") => 17,
        Some("SCTP") => 132,
        _ => 6,
    }
}

/// The endpoint slice cache: the endpoints map's entry for one service port name (slices
/// of the service and family, the port matched by name and protocol, each endpoint once by
/// address and port, a local copy preferred), every condition kept.
pub(crate) fn slice_endpoints(
    env: &Env,
    fam: usize,
    ns: &str,
    svc: &str,
    pname: &str,
    proto: &str,
    slices: &[discovery::EndpointSlice],
) -> Vec<Ep> {
    let mut set: BTreeMap<SocketAddr, Ep> = BTreeMap::new();
    let mut by_name: Vec<&discovery::EndpointSlice> = slices.iter().collect();
    by_name.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for sl in by_name {
        if sl.metadata.namespace.as_deref().unwrap_or("default") != ns {
            continue;
        }
        let owner = sl
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"));
        if owner.map(String::as_str) != Some(svc) || filtered_out(&sl.metadata) {
            continue;
        }
        // the proxier of a family takes the slices of its address type only: FQDN slices
        // go to neither (upstream's dual-stack meta proxier dispatches by address type,
        // and the endpoints change tracker drops any type but IPv4 and IPv6)
        if sl.address_type != ["IPv4", "IPv6"][fam] {
            continue;
        }
        // a port's name and protocol left out are "" and TCP (the API server's defaults,
        // pkg/apis/discovery/v1/defaults.go); a port without a number gives no endpoint
        // (endpointInfoByServicePort skips it); an endpoint is its first address
        for port in sl.ports.iter().flatten() {
            if port.name.as_deref().unwrap_or("") != pname
                || port.protocol.as_deref().unwrap_or("TCP") != proto
            {
                continue;
            }
            let Some(num) = port.port else { continue };
            for e in crate::gen::endpoints(sl) {
                // read leniently and printed back (`ParseIPSloppy(...).String()`), so
                // two spellings of one address are one endpoint
                let Some(a) = e.addresses.first().and_then(|s| parse_ip(s)) else {
                    continue;
                };
                if family_of(&a) != fam {
                    continue;
                }
                let c = e.conditions.clone().unwrap_or_default();
                let local = e.node_name.as_deref() == Some(env.node_name.as_str());
                let (zone_hints, node_hints) = hints_of(e);
                let ep = Ep {
                    addr: SocketAddr::new(a, num as u16),
                    local,
                    ready: c.ready.unwrap_or(true),
                    serving: c.serving.unwrap_or(true),
                    terminating: c.terminating.unwrap_or(false),
                    zone_hints,
                    node_hints,
                };
                // kube-proxy 1.36+ (endpointslicecache.go, addEndpoints): a copy that is
                // not terminating replaces an earlier one. Its slices come from a Go map,
                // so which of two alike copies wins is left open there; decision 0016
                // closes it: the copy on this node, then the first slice by name.
                let replace = match set.get(&ep.addr) {
                    None => true,
                    Some(have) if have.terminating != ep.terminating => !ep.terminating,
                    Some(have) => ep.local && !have.local,
                };
                if replace {
                    set.insert(ep.addr, ep);
                }
            }
        }
    }
    set.into_values().collect()
}

impl Model {
    pub fn new(case: &Case) -> Model {
        Model::of(&case.env, &case.services, &case.slices)
    }

    pub fn of(env: &Env, services: &[core::Service], slices: &[discovery::EndpointSlice]) -> Model {
        let mut m = Model {
            env: env.clone(),
            ports: [Vec::new(), Vec::new()],
            cluster_ips: [BTreeSet::new(), BTreeSet::new()],
        };
        // each service's slices once (by namespace and the service-name label), so that a
        // case of thousands of services is not a scan of every slice per service port
        let mut own: BTreeMap<(&str, &str), Vec<discovery::EndpointSlice>> = BTreeMap::new();
        for sl in slices {
            let ns = sl.metadata.namespace.as_deref().unwrap_or("default");
            let labels = sl.metadata.labels.as_ref();
            if let Some(svc) = labels.and_then(|l| l.get("kubernetes.io/service-name")) {
                own.entry((ns, svc)).or_default().push(sl.clone());
            }
        }
        for svc in services {
            let key = (
                svc.metadata.namespace.as_deref().unwrap_or("default"),
                svc.metadata.name.as_deref().unwrap_or(""),
            );
            let slices = own.get(&key).map_or(&[][..], Vec::as_slice);
            for fam in 0..2 {
                m.add_service(fam, svc, slices);
            }
        }
        m
    }

    fn add_service(
        &mut self,
        fam: usize,
        svc: &core::Service,
        slices: &[discovery::EndpointSlice],
    ) {
        let Some(spec) = &svc.spec else { return };
        let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
        let Some(Frontends {
            cluster_ip,
            external: external_ips,
            lb_vips,
        }) = frontends(fam, svc)
        else {
            return;
        };
        // upstream fills its cluster-ips set from the service ports (`svcPortMap`): a
        // service without ports (illegal, but what excluding every port of one leaves,
        // see the property tests) has none
        if spec.ports.as_ref().is_some_and(|p| !p.is_empty()) {
            self.cluster_ips[fam].insert(cluster_ip);
        }
        let source_ranges: Vec<(IpAddr, u8)> = spec
            .load_balancer_source_ranges
            .iter()
            .flatten()
            .filter_map(|s| parse_cidr(s))
            // a range the lenient parser reads as the other family goes there
            // (`::ffff:198.19.0.0/120` is 198.19.0.0/24)
            .filter(|c| family_of(&c.0) == fam)
            .collect();
        let externally_accessible = type_ == "LoadBalancer"
            || type_ == "NodePort"
            || (type_ == "ClusterIP" && !spec.external_ips.as_deref().unwrap_or(&[]).is_empty());
        let etp_local =
            externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
        let itp_local = spec.internal_traffic_policy.as_deref() == Some("Local");
        let name = svc.metadata.name.as_deref().unwrap_or("");
        let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
        for p in spec.ports.iter().flatten() {
            let proto = proto_number(p.protocol.as_deref());
            let pname = p.name.clone().unwrap_or_default();
            let eps = slice_endpoints(
                &self.env,
                fam,
                ns,
                name,
                &pname,
                p.protocol.as_deref().unwrap_or("TCP"),
                slices,
            );
            let node_port = p.node_port.filter(|n| *n > 0).map(|n| n as u16);
            let mut sp = SvcPort {
                proto,
                port: p.port as u16,
                cluster_ip,
                external: external_ips.clone(),
                lb_vips: lb_vips.clone(),
                source_ranges: source_ranges.clone(),
                node_port,
                etp_local,
                itp_local,
                cluster_eps: Vec::new(),
                local_eps: Vec::new(),
                has_any: false,
            };
            let externally =
                node_port.is_some() || !sp.lb_vips.is_empty() || !sp.external.is_empty();
            self.categorize(
                &mut sp,
                &eps,
                externally,
                spec.traffic_distribution.is_some(),
            );
            self.ports[fam].push(sp);
        }
    }

    /// Upstream's CategorizeEndpoints: the cluster-wide and node-local endpoint lists.
    fn categorize(&self, sp: &mut SvcPort, eps: &[Ep], externally: bool, _dist: bool) {
        let uses_cluster = !sp.itp_local || externally;
        let uses_local = sp.itp_local || (sp.etp_local && externally);
        if uses_cluster {
            let mode = self.topology_mode(eps);
            let mut c: Vec<Ep> = eps
                .iter()
                .filter(|e| e.ready)
                .filter(|e| match mode {
                    Topology::None => true,
                    Topology::Node => e.node_hints.contains(&self.env.node_name),
                    Topology::Zone => e.zone_hints.contains(&self.env.zone),
                })
                .cloned()
                .collect();
            if c.is_empty() {
                c = eps
                    .iter()
                    .filter(|e| e.serving && e.terminating)
                    .cloned()
                    .collect();
            }
            sp.has_any = !c.is_empty();
            sp.cluster_eps = c;
        }
        if !uses_local {
            return;
        }
        let mut local_ready = false;
        let mut local_st = false;
        for e in eps {
            if e.ready {
                sp.has_any = true;
                local_ready |= e.local;
            } else if e.serving && e.terminating {
                sp.has_any = true;
                local_st |= e.local;
            }
        }
        sp.local_eps = if local_ready {
            eps.iter().filter(|e| e.local && e.ready).cloned().collect()
        } else if local_st {
            eps.iter()
                .filter(|e| e.local && e.serving && e.terminating)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
    }

    fn topology_mode(&self, eps: &[Ep]) -> Topology {
        let mut for_node = false;
        let mut all_node = true;
        let mut for_zone = false;
        let mut all_zone = true;
        for e in eps.iter().filter(|e| e.ready) {
            if e.node_hints.is_empty() {
                all_node = false;
            } else if e.node_hints.contains(&self.env.node_name) {
                for_node = true;
            }
            if e.zone_hints.is_empty() {
                all_zone = false;
            } else if e.zone_hints.contains(&self.env.zone) {
                for_zone = true;
            }
        }
        if all_node && for_node {
            Topology::Node
        } else if all_zone && for_zone {
            Topology::Zone
        } else {
            Topology::None
        }
    }

    /// Whether the probe's family has a local-traffic detector and it takes the probe
    /// as from a local pod (`localdetector.go`; the detector chosen as
    /// `server_linux.go`'s `getLocalDetectors` does, see [`Env::is_local`]).
    fn is_local_pod(&self, p: &Probe) -> bool {
        self.env.is_local(p)
    }

    /// Whether a ClusterIP's traffic from `p` is masqueraded: with masqueradeAll all of
    /// it; else what a detector of the family finds not local (no detector: none).
    fn masquerades_internal(&self, p: &Probe) -> bool {
        self.env.masquerade_all
            || (self.env.detects_local(family_of(&p.src)) && !self.is_local_pod(p))
    }

    /// The iptables proxier rejects (or drops) traffic to external IPs and LoadBalancer
    /// IPs without usable endpoints in `KUBE-EXTERNAL-SERVICES`, which only `INPUT` and
    /// `FORWARD` jump to: the node's own packets to a destination that is not one of
    /// its addresses never meet those rules and leave the node un-NATed.
    fn iptables_node_escapes(&self, p: &Probe) -> bool {
        self.env.mode == Mode::Iptables
            && p.origin == Origin::Node
            && !p.dst.is_loopback()
            && !self.env.local_addrs.contains(&p.dst)
    }

    /// The environment the model judges in.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// Whether `a` is a ClusterIP of a service port of the model.
    pub fn is_cluster_ip(&self, a: &IpAddr) -> bool {
        self.cluster_ips[family_of(a)].contains(a)
    }

    /// Whether `a` is an external IP or a LoadBalancer VIP of a service port of the model.
    pub fn is_external_ip(&self, a: &IpAddr) -> bool {
        self.ports[family_of(a)]
            .iter()
            .any(|sp| sp.external.contains(a) || sp.lb_vips.contains(a))
    }

    /// The verdict for `p`.
    pub fn verdict(&self, p: &Probe) -> Verdict {
        let fam = family_of(&p.dst);
        let ports = &self.ports[fam];
        let matches = |sp: &&SvcPort| sp.proto == p.proto && sp.port == p.dport;
        // 1. firewall (prerouting/output, before DNAT): LB VIPs with source ranges
        if let Some(sp) = ports
            .iter()
            .filter(matches)
            .find(|sp| sp.lb_vips.contains(&p.dst) && !sp.source_ranges.is_empty())
        {
            // the node IP of the family (loopback when the node has none, as
            // `detectNodeIPs` leaves it)
            let node_ip = self.env.node_ip(fam);
            let allow_from_node = sp.source_ranges.iter().any(|c| cidr_contains(c, &node_ip));
            let allowed = sp.source_ranges.iter().any(|c| cidr_contains(c, &p.src))
                || (allow_from_node && sp.lb_vips.contains(&p.src));
            if !allowed {
                return Verdict::Drop;
            }
        }
        // 2. dispatch
        if let Some(sp) = ports
            .iter()
            .filter(matches)
            .find(|sp| sp.cluster_ip == p.dst)
        {
            return self.internal(sp, p);
        }
        if let Some(sp) = ports
            .iter()
            .filter(matches)
            .find(|sp| sp.external.contains(&p.dst) || sp.lb_vips.contains(&p.dst))
        {
            return self.external(sp, p);
        }
        // NodePorts on the addresses nodePortAddresses selects (`nodeport_addresses.go`)
        if self.env.node_port_ips(fam).contains(&p.dst) {
            if let Some(sp) = ports
                .iter()
                .find(|sp| sp.proto == p.proto && sp.node_port == Some(p.dport))
            {
                return self.external(sp, p);
            }
        }
        // the iptables proxier's `KUBE-EXTERNAL-SERVICES` (from `INPUT`) rejects a
        // NodePort without endpoints, and drops one without endpoints for external
        // traffic, on every local address (`-m addrtype --dst-type LOCAL`, loopback
        // included), not only on those nodePortAddresses selects
        if self.env.mode == Mode::Iptables
            && (p.dst.is_loopback() || self.env.local_addrs.contains(&p.dst))
        {
            if let Some(sp) = ports
                .iter()
                .find(|sp| sp.proto == p.proto && sp.node_port == Some(p.dport))
            {
                let external_eps = if sp.etp_local {
                    &sp.local_eps
                } else {
                    &sp.cluster_eps
                };
                if !sp.has_any {
                    return Verdict::Reject;
                }
                if external_eps.is_empty() {
                    return Verdict::Drop;
                }
            }
        }
        // 3. cluster IPs on ports no service uses, unallocated service addresses: the
        // nftables proxier's `cluster-ips-check` rejects and drops; the iptables proxier
        // has no such rules (docs/migration.md names these as kept on purpose)
        if self.env.mode == Mode::Iptables {
            return Verdict::NoMatch;
        }
        if self.cluster_ips[fam].contains(&p.dst) {
            return Verdict::Reject;
        }
        if self
            .env
            .service_cidrs
            .iter()
            .any(|c| cidr_contains(c, &p.dst))
        {
            return Verdict::Drop;
        }
        Verdict::NoMatch
    }

    fn dnat(&self, eps: &[Ep], p: &Probe, masq: bool) -> Verdict {
        Verdict::Dnat(
            eps.iter()
                .map(|e| (e.addr, masq || e.addr.ip() == p.src))
                .collect(),
        )
    }

    fn internal(&self, sp: &SvcPort, p: &Probe) -> Verdict {
        let eps = if sp.itp_local {
            &sp.local_eps
        } else {
            &sp.cluster_eps
        };
        if eps.is_empty() {
            return if sp.has_any {
                Verdict::Drop
            } else {
                Verdict::Reject
            };
        }
        self.dnat(eps, p, self.masquerades_internal(p))
    }

    fn external(&self, sp: &SvcPort, p: &Probe) -> Verdict {
        let reject = if self.iptables_node_escapes(p) {
            Verdict::NoMatch
        } else {
            Verdict::Reject
        };
        if !sp.has_any {
            return reject;
        }
        if !sp.etp_local {
            return if sp.cluster_eps.is_empty() {
                reject
            } else {
                self.dnat(&sp.cluster_eps, p, true)
            };
        }
        // Local: pods (when the family has a detector) and the node itself
        // short-circuit to the cluster-wide endpoints
        if self.is_local_pod(p) {
            return self.dnat(&sp.cluster_eps, p, false);
        }
        if p.origin == Origin::Node || self.env.local_addrs.contains(&p.src) {
            return self.dnat(&sp.cluster_eps, p, true);
        }
        if sp.local_eps.is_empty() {
            return Verdict::Drop;
        }
        self.dnat(&sp.local_eps, p, false)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    None,
    Zone,
    Node,
}
