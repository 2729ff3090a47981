//! Internal model + node/config -> one `nft_model::Table` per family.
//!
//! The shape (see docs/ruleset.md): fixed base and helper chains; dispatch through named
//! verdict maps with concatenated keys; per service port at most three small chains
//! (`svc-`, `local-`, `ext-`) of one to four rules; endpoints are elements of sharded
//! `numgen`-keyed maps, not chains (session affinity excepted).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_model::{
    categorize, resolve_endpoints, Cluster, IpFamily, ResolvedEndpoint, Service, ServicePort,
    TrafficPolicy,
};
use nft_model::build::{self, goto, jump, rule, verdict, KeyField};
use nft_model::*;

use crate::config::{Config, DetectLocalMode, NodePortAddrs, ParsedConfig};
use crate::names::*;
use crate::rules::*;
use crate::RulesetError;

/// Slots of one bucket of a shard's `numgen` key space: a list of up to this many
/// endpoints takes one bucket.
pub const BUCKET_SLOTS: u32 = 4096;
/// Buckets per shard (`2^32 / BUCKET_SLOTS`).
pub const BUCKETS: u32 = 1 << 20;
/// Buckets a list's hash may start at; the rest absorbs probing at the end.
const HASHED_BUCKETS: u32 = BUCKETS - 4096;
/// Offset of a list that got no range (its chain drops).
const FAILED: u32 = u32::MAX;

/// The compiled tables (one per configured family, `ip` first) and the per-object
/// problems met on the way (objects skipped or partly skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub tables: Vec<Table>,
    pub errors: Vec<RulesetError>,
}

impl Compiled {
    pub fn table(&self, family: Family) -> Option<&Table> {
        self.tables.iter().find(|t| t.family == family)
    }
}

pub fn nft_family(f: IpFamily) -> Family {
    match f {
        IpFamily::V4 => Family::Ip,
        IpFamily::V6 => Family::Ip6,
    }
}

/// Compile the cluster for this node. Fails only on a bad configuration; bad objects are
/// skipped and reported in [`Compiled::errors`].
pub fn compile(cluster: &Cluster, config: &Config) -> Result<Compiled, RulesetError> {
    let cfg = config.parse()?;
    Ok(compile_parsed(cluster, &cfg))
}

/// [`compile`] with an already parsed configuration.
pub fn compile_parsed(cluster: &Cluster, cfg: &ParsedConfig) -> Compiled {
    let mut errors: Vec<RulesetError> = cluster
        .orphan_slice_errors()
        .into_iter()
        .map(RulesetError::Model)
        .collect();
    let idx = cluster.endpoint_index();
    let mut tables = Vec::new();
    for fam in &cfg.families {
        let mut b = FamilyBuilder::new(*fam, cfg, cluster);
        for svc in cluster.services.values() {
            let slices = idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]);
            for port in &svc.ports {
                b.plan_port(svc, port, slices);
            }
        }
        tables.push(b.finish(&mut errors));
    }
    Compiled { tables, errors }
}

/// Which endpoint list of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ListKind {
    Cluster,
    Local,
}

/// One endpoint list needing a `numgen` range.
#[derive(Debug, Clone)]
struct ListPlan {
    id: PortId,
    kind: ListKind,
    chain: String,
    proto: u8,
    eps: Vec<ResolvedEndpoint>,
    affinity: Option<u32>,
    offset: u32,
}

/// Elements keyed so that duplicate keys (two services claiming one address and port)
/// are detected; the first claimant (in service order) wins.
#[derive(Default)]
struct Keyed {
    elems: BTreeMap<Vec<Value>, (ElemData, PortId)>,
}

impl Keyed {
    fn insert(
        &mut self,
        key: Vec<Value>,
        data: ElemData,
        owner: &PortId,
        errors: &mut Vec<RulesetError>,
    ) {
        if let Some((_, first)) = self.elems.get(&key) {
            if first != owner {
                errors.push(RulesetError::Conflict {
                    service: owner.service.to_string(),
                    port: owner.port_name.clone(),
                    other: first.service.to_string(),
                    what: key
                        .iter()
                        .map(nft_model::render::value)
                        .collect::<Vec<_>>()
                        .join(" . "),
                });
            }
            return;
        }
        self.elems.insert(key, (data, owner.clone()));
    }
    fn elements(self) -> Vec<Element> {
        self.elems
            .into_iter()
            .map(|(k, (d, _))| Element::map(k, d))
            .collect()
    }
}

struct FamilyBuilder<'a> {
    fam: IpFamily,
    family: Family,
    cfg: &'a ParsedConfig,
    cluster: &'a Cluster,
    node_name: String,
    zone: Option<String>,
    np_addrs: NodePortAddrs,
    pending_errors: Vec<RulesetError>,
    cluster_ips: BTreeSet<IpAddr>,
    service_ips: Keyed,
    service_nodeports: Keyed,
    no_ep_services: Keyed,
    no_ep_nodeports: Keyed,
    firewall_ips: BTreeSet<Vec<Value>>,
    firewall_allow: BTreeSet<(Vec<Value>, Vec<Value>)>,
    hairpin: BTreeSet<IpAddr>,
    /// Per-port chains other than the list chains (`ext-`), by name.
    chains: BTreeMap<String, Chain>,
    lists: Vec<ListPlan>,
}

impl<'a> FamilyBuilder<'a> {
    fn new(fam: IpFamily, cfg: &'a ParsedConfig, cluster: &'a Cluster) -> FamilyBuilder<'a> {
        let node = cluster.node.as_ref();
        let node_name = if cfg.node_name.is_empty() {
            node.map(|n| n.name.clone()).unwrap_or_default()
        } else {
            cfg.node_name.clone()
        };
        let primary: Vec<IpAddr> = node.map(|n| n.primary_ips.clone()).unwrap_or_default();
        FamilyBuilder {
            fam,
            family: nft_family(fam),
            cfg,
            cluster,
            node_name,
            zone: node.and_then(|n| n.zone.clone()),
            np_addrs: cfg.node_port_addrs(fam, &primary),
            pending_errors: Vec::new(),
            cluster_ips: BTreeSet::new(),
            service_ips: Keyed::default(),
            service_nodeports: Keyed::default(),
            no_ep_services: Keyed::default(),
            no_ep_nodeports: Keyed::default(),
            firewall_ips: BTreeSet::new(),
            firewall_allow: BTreeSet::new(),
            hairpin: BTreeSet::new(),
            chains: BTreeMap::new(),
            lists: Vec::new(),
        }
    }

    fn addr_key(&self, ip: &IpAddr, proto: u8, port: u16) -> Vec<Value> {
        vec![fam_value(ip), Value::Proto(proto), Value::Port(port)]
    }

    /// The rule fragment matching traffic from local pods (`local`) or from elsewhere
    /// (`!local`), when a detector is configured for this family.
    fn detector(&self, local: bool) -> Option<Vec<Expr>> {
        match self.cfg.detect_local_mode {
            DetectLocalMode::None => None,
            DetectLocalMode::ClusterCIDR => {
                let c = self
                    .cfg
                    .cluster_cidrs
                    .iter()
                    .find(|c| c.family() == self.fam)?;
                (!c.is_all()).then(|| cidr_match(self.family, true, c, !local))
            }
            DetectLocalMode::NodeCIDR => {
                let c = self.cluster.node.as_ref()?.pod_cidr(self.fam)?;
                (!c.is_all()).then(|| cidr_match(self.family, true, &c, !local))
            }
            DetectLocalMode::BridgeInterface => {
                let n = &self.cfg.pod_bridge_interface;
                (!n.is_empty()).then(|| build::iifname_cmp(n, false, !local))
            }
            DetectLocalMode::InterfaceNamePrefix => {
                let n = &self.cfg.pod_interface_name_prefix;
                (!n.is_empty()).then(|| build::iifname_cmp(n, true, !local))
            }
        }
    }

    fn plan_port(
        &mut self,
        svc: &Service,
        port: &ServicePort,
        slices: &[&kube_model::EndpointSlice],
    ) {
        let id = PortId::new(&svc.key, port);
        let proto = port.protocol.number();
        let eps = resolve_endpoints(slices, port, self.fam);
        let cat = categorize(&eps, &self.node_name, self.zone.as_deref());
        let no_ep_verdict = |any: bool| {
            if any {
                ElemData::Verdict(Verdict::Drop)
            } else {
                ElemData::Verdict(Verdict::Goto(REJECT_CHAIN.into()))
            }
        };
        let mut errors = std::mem::take(&mut self.pending_errors);

        let mut need_cluster = false;
        let mut need_local = false;

        // ClusterIP
        if let Some(cip) = svc.cluster_ip(self.fam) {
            self.cluster_ips.insert(cip);
            let (list, kind) = if svc.internal_traffic_policy == TrafficPolicy::Local {
                (&cat.local, ListKind::Local)
            } else {
                (&cat.cluster, ListKind::Cluster)
            };
            let key = self.addr_key(&cip, proto, port.port);
            if list.is_empty() {
                self.no_ep_services
                    .insert(key, no_ep_verdict(cat.any_usable), &id, &mut errors);
            } else {
                let chain = if kind == ListKind::Local {
                    id.local_chain()
                } else {
                    id.cluster_chain()
                };
                need_local |= kind == ListKind::Local;
                need_cluster |= kind == ListKind::Cluster;
                self.service_ips.insert(
                    key,
                    ElemData::Verdict(Verdict::Goto(chain)),
                    &id,
                    &mut errors,
                );
            }
        }

        // External destinations.
        let ext_ips: Vec<IpAddr> = svc
            .external_ips
            .iter()
            .chain(svc.load_balancer_ips.iter())
            .filter(|ip| IpFamily::of(ip) == self.fam)
            .copied()
            .collect();
        let has_external = !ext_ips.is_empty() || port.node_port.is_some();
        if has_external {
            let local_policy = svc.external_traffic_policy == TrafficPolicy::Local;
            let list = if local_policy {
                &cat.local
            } else {
                &cat.cluster
            };
            if list.is_empty() {
                let v = no_ep_verdict(cat.any_usable);
                for ip in &ext_ips {
                    self.no_ep_services.insert(
                        self.addr_key(ip, proto, port.port),
                        v.clone(),
                        &id,
                        &mut errors,
                    );
                }
                if let Some(np) = port.node_port {
                    self.no_ep_nodeports.insert(
                        vec![Value::Proto(proto), Value::Port(np)],
                        v,
                        &id,
                        &mut errors,
                    );
                }
            } else {
                let ext = id.external_chain();
                let mark = self.cfg.masquerade_mark;
                let mut rules = Vec::new();
                if local_policy {
                    need_local = true;
                    // pod-originated traffic short-circuits to the cluster-wide endpoints
                    if let Some(d) = self.detector(true) {
                        rules.push(rule(vec![d, vec![goto(&id.cluster_chain())]]));
                    }
                    // host-originated traffic too, masqueraded
                    rules.push(rule(vec![build::fib_saddr_local(), build::mark_or(mark)]));
                    rules.push(rule(vec![
                        build::fib_saddr_local(),
                        vec![goto(&id.cluster_chain())],
                    ]));
                    rules.push(rule(vec![vec![goto(&id.local_chain())]]));
                    need_cluster = true;
                } else {
                    need_cluster = true;
                    rules.push(rule(vec![build::mark_or(mark)]));
                    rules.push(rule(vec![vec![goto(&id.cluster_chain())]]));
                }
                self.chains
                    .insert(ext.clone(), Chain::regular(ext.clone()).with_rules(rules));
                for ip in &ext_ips {
                    let key = self.addr_key(ip, proto, port.port);
                    self.service_ips.insert(
                        key,
                        ElemData::Verdict(Verdict::Goto(ext.clone())),
                        &id,
                        &mut errors,
                    );
                }
                if let Some(np) = port.node_port {
                    let key = vec![Value::Proto(proto), Value::Port(np)];
                    self.service_nodeports.insert(
                        key,
                        ElemData::Verdict(Verdict::Goto(ext.clone())),
                        &id,
                        &mut errors,
                    );
                }
            }
            // loadBalancerSourceRanges: LB IPs only (not NodePorts, not external IPs)
            let ranges: Vec<_> = svc
                .source_ranges
                .iter()
                .filter(|c| c.family() == self.fam)
                .collect();
            let lb_ips: Vec<&IpAddr> = svc
                .load_balancer_ips
                .iter()
                .filter(|ip| IpFamily::of(ip) == self.fam)
                .collect();
            if !ranges.is_empty() && !lb_ips.is_empty() {
                let node_ips: Vec<IpAddr> = self
                    .cluster
                    .node
                    .as_ref()
                    .map(|n| n.primary_ips.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .chain(self.cfg.local_addresses.iter().copied())
                    .collect();
                let allow_from_node = ranges
                    .iter()
                    .any(|r| node_ips.iter().any(|ip| r.contains(ip)));
                for lb in &lb_ips {
                    let key = self.addr_key(lb, proto, port.port);
                    self.firewall_ips.insert(key.clone());
                    let mut srcs: Vec<(IpAddr, IpAddr)> =
                        ranges.iter().map(|r| (r.addr, r.last())).collect();
                    if allow_from_node {
                        // a VIP configured locally makes node-originated requests to the LB IP
                        // come from the LB IP itself
                        srcs.extend(lb_ips.iter().map(|ip| (**ip, **ip)));
                    }
                    for (a, z) in srcs {
                        let mut k = key.clone();
                        k.push(fam_value(&a));
                        let mut e = key.clone();
                        e.push(fam_value(&z));
                        self.firewall_allow.insert((k, e));
                    }
                }
            }
        }

        for (need, kind, list, chain) in [
            (
                need_cluster,
                ListKind::Cluster,
                &cat.cluster,
                id.cluster_chain(),
            ),
            (need_local, ListKind::Local, &cat.local, id.local_chain()),
        ] {
            if need && !list.is_empty() {
                self.hairpin.extend(list.iter().map(|e| e.addr));
                self.lists.push(ListPlan {
                    id: id.clone(),
                    kind,
                    chain,
                    proto,
                    eps: list.clone(),
                    affinity: svc.affinity_timeout,
                    offset: 0,
                });
            }
        }
        self.pending_errors = errors;
    }

    /// Give every list a `numgen` range in its shard: the list's hash picks a bucket; lists
    /// are placed in (bucket, identity) order, each at its bucket or after the previous
    /// one. Deterministic for a given set of lists; a list moves only when another list
    /// of the same shard collides with it.
    fn allocate(&mut self, errors: &mut Vec<RulesetError>) {
        let mut order: Vec<(u32, u32, usize)> = self
            .lists
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let h = fnv1a(&[&l.id.hash().to_be_bytes(), &[l.kind as u8]]);
                (l.id.shard(), (h % u64::from(HASHED_BUCKETS)) as u32, i)
            })
            .collect();
        order.sort_by(|a, b| {
            (a.0, a.1, &self.lists[a.2].id, self.lists[a.2].kind).cmp(&(
                b.0,
                b.1,
                &self.lists[b.2].id,
                self.lists[b.2].kind,
            ))
        });
        let mut failed = BTreeSet::new();
        let mut shard = u32::MAX;
        let mut next_free = 0u32;
        for (s, bucket, i) in order {
            if s != shard {
                shard = s;
                next_free = 0;
            }
            let n = self.lists[i].eps.len() as u32;
            let span = n.div_ceil(BUCKET_SLOTS).max(1);
            let start = bucket.max(next_free);
            if u64::from(start) + u64::from(span) > u64::from(BUCKETS) {
                failed.insert(i);
                let l = &self.lists[i];
                errors.push(RulesetError::Capacity {
                    service: l.id.service.to_string(),
                    port: l.id.port_name.clone(),
                });
                continue;
            }
            next_free = start + span;
            self.lists[i].offset = start * BUCKET_SLOTS;
        }
        for i in failed {
            self.lists[i].offset = FAILED;
        }
    }

    fn finish(mut self, errors: &mut Vec<RulesetError>) -> Table {
        errors.append(&mut self.pending_errors);
        self.allocate(errors);
        let family = self.family;
        let at = addr_type(family);
        let mark = self.cfg.masquerade_mark;
        let mut t = Table::new(family, TABLE);

        // Endpoint lists: chains and map elements.
        let mut endpoint_maps: BTreeMap<u32, Vec<Element>> = BTreeMap::new();
        let mut chain_maps: BTreeMap<u32, Vec<Element>> = BTreeMap::new();
        let mut affinity_sets: BTreeMap<String, Set> = BTreeMap::new();
        let mut list_chains: BTreeMap<String, Chain> = BTreeMap::new();
        for l in &self.lists {
            let shard = l.id.shard();
            let n = l.eps.len() as u32;
            let mut rules = Vec::new();
            if l.offset == FAILED {
                // (reject is not allowed in nat chains)
                rules.push(rule(vec![vec![verdict(Verdict::Drop)]]));
                list_chains.insert(
                    l.chain.clone(),
                    Chain::regular(l.chain.clone()).with_rules(rules),
                );
                continue;
            }
            match l.affinity {
                None => {
                    let m = endpoints_map(shard);
                    let els = endpoint_maps.entry(shard).or_default();
                    for (i, e) in l.eps.iter().enumerate() {
                        els.push(Element::map(
                            vec![Value::Int(l.offset + i as u32)],
                            ElemData::Values(vec![fam_value(&e.addr), Value::Port(e.port)]),
                        ));
                    }
                    rules.push(Rule::new(build::dnat_numgen_map(
                        family, l.proto, n, l.offset, &m,
                    )));
                }
                Some(timeout) => {
                    let m = endpoint_chains_map(shard);
                    let els = chain_maps.entry(shard).or_default();
                    for (i, e) in l.eps.iter().enumerate() {
                        let ep_chain = l.id.endpoint_chain(&e.addr, e.port);
                        let aff = l.id.affinity_set(&e.addr, e.port);
                        rules.push(rule(vec![
                            build::addr_in_set(family, true, &aff, false),
                            vec![goto(&ep_chain)],
                        ]));
                        els.push(Element::map(
                            vec![Value::Int(l.offset + i as u32)],
                            ElemData::Verdict(Verdict::Goto(ep_chain.clone())),
                        ));
                        let mut set = Set::set(aff.clone(), vec![at]);
                        set.flags = SetFlags {
                            dynamic: true,
                            timeout: true,
                            ..SetFlags::default()
                        };
                        set.timeout_ms = Some(u64::from(timeout) * 1000);
                        affinity_sets.insert(aff.clone(), set);
                        let ep = Chain::regular(ep_chain.clone()).with_rules(vec![
                            Rule::new(build::set_update(family, &[KeyField::Saddr], &aff)),
                            Rule::new(build::dnat_to_proto(
                                family,
                                l.proto,
                                &fam_value(&e.addr),
                                e.port,
                            )),
                        ]);
                        list_chains.insert(ep_chain, ep);
                    }
                    rules.push(Rule::new(build::numgen_vmap(n, l.offset, &m)));
                }
            }
            list_chains.insert(
                l.chain.clone(),
                Chain::regular(l.chain.clone()).with_rules(rules),
            );
        }

        // Sets and maps.
        let dst_key = vec![at, DataType::InetProto, DataType::InetService];
        let port_key = vec![DataType::InetProto, DataType::InetService];
        let mut s = Set::set(CLUSTER_IPS, vec![at]);
        s.elements = self
            .cluster_ips
            .iter()
            .map(|ip| Element::key(vec![fam_value(ip)]))
            .collect();
        t.sets.push(s);
        let mut s = Set::map(SERVICE_IPS, dst_key.clone(), SetData::Verdict);
        s.elements = std::mem::take(&mut self.service_ips).elements();
        t.sets.push(s);
        let mut s = Set::map(SERVICE_NODEPORTS, port_key.clone(), SetData::Verdict);
        s.elements = std::mem::take(&mut self.service_nodeports).elements();
        t.sets.push(s);
        if let NodePortAddrs::Addrs(a) = &self.np_addrs {
            let mut s = Set::set(NODEPORT_IPS, vec![at]);
            s.elements = a
                .iter()
                .map(|ip| Element::key(vec![fam_value(ip)]))
                .collect();
            t.sets.push(s);
        }
        let mut s = Set::map(NO_ENDPOINT_SERVICES, dst_key.clone(), SetData::Verdict);
        s.elements = std::mem::take(&mut self.no_ep_services).elements();
        t.sets.push(s);
        let mut s = Set::map(NO_ENDPOINT_NODEPORTS, port_key, SetData::Verdict);
        s.elements = std::mem::take(&mut self.no_ep_nodeports).elements();
        t.sets.push(s);
        let mut s = Set::set(FIREWALL_IPS, dst_key.clone());
        s.elements = self
            .firewall_ips
            .iter()
            .map(|k| Element::key(k.clone()))
            .collect();
        t.sets.push(s);
        let mut fw_key = dst_key;
        fw_key.push(at);
        let mut s = Set::set(FIREWALL_ALLOW, fw_key);
        s.flags.interval = true;
        s.elements = self
            .firewall_allow
            .iter()
            .map(|(k, e)| Element {
                key_end: Some(e.clone()),
                ..Element::key(k.clone())
            })
            .collect();
        t.sets.push(s);
        let mut s = Set::set(HAIRPIN, vec![at, at]);
        s.elements = self
            .hairpin
            .iter()
            .map(|ip| Element::key(vec![fam_value(ip), fam_value(ip)]))
            .collect();
        t.sets.push(s);
        for (shard, mut els) in endpoint_maps {
            els.sort();
            let mut s = Set::map(
                endpoints_map(shard),
                vec![DataType::HostInt32],
                SetData::Values(vec![at, DataType::InetService]),
            );
            s.elements = els;
            t.sets.push(s);
        }
        for (shard, mut els) in chain_maps {
            els.sort();
            let mut s = Set::map(
                endpoint_chains_map(shard),
                vec![DataType::HostInt32],
                SetData::Verdict,
            );
            s.elements = els;
            t.sets.push(s);
        }
        t.sets.extend(affinity_sets.into_values());

        // Base chains.
        let base =
            |name: &str, chain_type: ChainType, hook: Hook, priority: i32, rules: Vec<Rule>| {
                Chain::base(
                    name,
                    BaseHook {
                        chain_type,
                        hook,
                        priority,
                        policy: Policy::Accept,
                    },
                )
                .with_rules(rules)
            };
        let ct_jump = |c: &str| rule(vec![build::ct_new(), vec![jump(c)]]);
        t.chains.push(base(
            FIREWALL_PREROUTING,
            ChainType::Filter,
            Hook::Prerouting,
            -110,
            vec![ct_jump(FIREWALL_CHECK)],
        ));
        t.chains.push(base(
            FIREWALL_OUTPUT,
            ChainType::Filter,
            Hook::Output,
            -110,
            vec![ct_jump(FIREWALL_CHECK)],
        ));
        t.chains.push(base(
            NAT_PREROUTING,
            ChainType::Nat,
            Hook::Prerouting,
            -100,
            vec![rule(vec![vec![jump(SERVICES)]])],
        ));
        t.chains.push(base(
            NAT_OUTPUT,
            ChainType::Nat,
            Hook::Output,
            -100,
            vec![rule(vec![vec![jump(SERVICES)]])],
        ));
        t.chains.push(base(
            FILTER_INPUT,
            ChainType::Filter,
            Hook::Input,
            0,
            vec![ct_jump(ENDPOINTS_CHECK)],
        ));
        t.chains.push(base(
            FILTER_FORWARD,
            ChainType::Filter,
            Hook::Forward,
            0,
            vec![ct_jump(ENDPOINTS_CHECK), ct_jump(CLUSTER_IPS_CHECK)],
        ));
        t.chains.push(base(
            FILTER_OUTPUT,
            ChainType::Filter,
            Hook::Output,
            0,
            vec![ct_jump(ENDPOINTS_CHECK), ct_jump(CLUSTER_IPS_CHECK)],
        ));
        t.chains.push(base(
            NAT_POSTROUTING,
            ChainType::Nat,
            Hook::Postrouting,
            100,
            vec![rule(vec![vec![jump(MASQUERADING)]])],
        ));

        // Fixed regular chains.
        let np_match: Vec<Expr> = match &self.np_addrs {
            NodePortAddrs::Addrs(_) => build::addr_in_set(family, false, NODEPORT_IPS, false),
            NodePortAddrs::AllLocal => {
                let mut e = build::fib_daddr_local();
                if family == Family::Ip6 {
                    e.extend(build::addr_cmp(
                        family,
                        false,
                        CmpOp::Neq,
                        &Value::Ipv6(std::net::Ipv6Addr::LOCALHOST),
                    ));
                } else {
                    let lo = kube_model::Cidr::new("127.0.0.0".parse().expect("literal"), 8)
                        .expect("literal");
                    e.extend(cidr_match(family, false, &lo, true));
                }
                e
            }
        };
        let mut services = Vec::new();
        let cluster_masq = if self.cfg.masquerade_all {
            Some(Vec::new())
        } else {
            self.detector(false)
        };
        if let Some(d) = cluster_masq {
            // ClusterIP traffic not from a local pod is masqueraded (all of it with
            // masqueradeAll); traffic that is not DNATed is rejected or dropped anyway.
            services.push(rule(vec![
                build::addr_in_set(family, false, CLUSTER_IPS, false),
                d,
                build::mark_or(mark),
            ]));
        }
        services.push(Rule::new(build::vmap_lookup(family, &DST_KEY, SERVICE_IPS)));
        services.push(rule(vec![
            np_match.clone(),
            build::vmap_lookup(family, &PORT_KEY, SERVICE_NODEPORTS),
        ]));
        t.chains.push(Chain::regular(SERVICES).with_rules(services));

        t.chains.push(Chain::regular(MASQUERADING).with_rules(vec![
            rule(vec![
                build::set_lookup(family, &[KeyField::Saddr, KeyField::Daddr], HAIRPIN, false),
                build::mark_or(mark),
            ]),
            rule(vec![
                build::mark_test(mark, false),
                vec![verdict(Verdict::Return)],
            ]),
            rule(vec![build::mark_xor(mark)]),
            rule(vec![vec![build::masquerade_fully_random()]]),
        ]));

        t.chains
            .push(Chain::regular(FIREWALL_CHECK).with_rules(vec![rule(vec![
                build::set_lookup(family, &DST_KEY, FIREWALL_IPS, false),
                build::set_lookup(
                    family,
                    &[
                        KeyField::Daddr,
                        KeyField::L4proto,
                        KeyField::Dport,
                        KeyField::Saddr,
                    ],
                    FIREWALL_ALLOW,
                    true,
                ),
                vec![verdict(Verdict::Drop)],
            ])]));

        t.chains
            .push(Chain::regular(ENDPOINTS_CHECK).with_rules(vec![
                Rule::new(build::vmap_lookup(family, &DST_KEY, NO_ENDPOINT_SERVICES)),
                rule(vec![
                    np_match,
                    build::vmap_lookup(family, &PORT_KEY, NO_ENDPOINT_NODEPORTS),
                ]),
            ]));

        let mut cip_rules = vec![rule(vec![
            build::addr_in_set(family, false, CLUSTER_IPS, false),
            vec![build::reject(family)],
        ])];
        for c in self
            .cfg
            .service_cidrs
            .iter()
            .filter(|c| c.family() == self.fam)
        {
            cip_rules.push(rule(vec![
                cidr_match(family, false, c, false),
                vec![verdict(Verdict::Drop)],
            ]));
        }
        t.chains
            .push(Chain::regular(CLUSTER_IPS_CHECK).with_rules(cip_rules));
        t.chains.push(
            Chain::regular(REJECT_CHAIN).with_rules(vec![rule(vec![vec![build::reject(family)]])]),
        );

        // Per-service chains, by name.
        let mut per: BTreeMap<String, Chain> = std::mem::take(&mut self.chains);
        per.extend(list_chains);
        t.chains.extend(per.into_values());
        t
    }
}
