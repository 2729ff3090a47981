//! Incremental compilation: a change costs work proportional to what changed.
//!
//! [`Compiler`] keeps, per family, the fragment of every service port and the desired
//! table as their sum ([`crate::compile::mirror::Mirror`]). Given the updated cluster and
//! the keys of the services whose Service or EndpointSlices changed, it recompiles those
//! services' ports only and returns the batch turning the previous desired tables into
//! the new ones, built from the changed objects only. A node change recompiles the
//! ports that depend on the node (Local traffic policies, topology hints, source ranges)
//! and the skeleton; a configuration change that touches more than the host's addresses
//! or the service CIDRs recompiles everything. [`crate::compile`] is this compiler built
//! from scratch: full and incremental compilation cannot disagree on a fresh build, and
//! the property tests check that updates reach the same tables.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_model::{Cluster, EndpointSlice, IpFamily, Node, ServiceKey};
use nft_model::{Element, Family, Op, PackedTable, Table, TableElements, Value};

use crate::compile::fragment::{fragment, ClaimKey, Fragment};
use crate::compile::mirror::{Conflict, Mirror};
use crate::compile::skeleton::skeleton;
use crate::compile::Ctx;
use crate::config::{Config, ParsedConfig};
use crate::error::RulesetError;
use crate::names::PortId;

mod build;
mod udp;
pub use build::Build;
use udp::udp_released;
pub use udp::UdpDest;

/// What changed since the last compilation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Services whose Service object or EndpointSlices were added, changed or deleted
    /// (the key of the service a slice names, before and after the change).
    pub services: BTreeSet<ServiceKey>,
    /// The proxier's Node changed (name, zone, pod CIDRs or primary IPs). Pass it only
    /// when the model's [`Node`] differs: status heartbeats do not matter.
    pub node: bool,
}

/// A UDP destination the rules send to endpoints (conntrack cleanup: flows to it that
/// went nowhere before must be forgotten, see docs/sync.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Served {
    /// A ClusterIP, external IP or LoadBalancer IP with the service port.
    Dst { addr: IpAddr, port: u16 },
    /// A NodePort (any address of the family).
    NodePort { v6: bool, port: u16 },
}

impl Served {
    /// The served destination a UDP claim key stands for.
    pub fn of_key(key: &[Value], family: Family) -> Option<Served> {
        match key {
            [a, Value::Proto(17), Value::Port(port)] => Some(Served::Dst {
                addr: a.ip()?,
                port: *port,
            }),
            [Value::Proto(17), Value::Port(port)] => Some(Served::NodePort {
                v6: family == Family::Ip6,
                port: *port,
            }),
            _ => None,
        }
    }
}

/// What one service port changed for conntrack cleanup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortTargets {
    /// UDP destinations this port now serves that were not served before.
    pub became_served: BTreeSet<Served>,
    /// UDP endpoints (address, target port) that served this port and no longer do.
    pub stopped_serving: BTreeSet<(IpAddr, u16)>,
    /// UDP endpoints that serve this port now and did not before (so that a caller
    /// that did not apply the previous state can tell the net change since the state
    /// it applied).
    pub started_serving: BTreeSet<(IpAddr, u16)>,
}

/// The result of one incremental compilation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Update {
    /// The batch turning the desired tables as of the last [`Compiler::confirm`] (what
    /// the kernel holds once every batch is committed) into the new ones: after a
    /// batch that was not committed (refused, failed), the next update's batch still
    /// starts from what the kernel holds. (A full update, [`Update::full`], is the diff
    /// from the previous desired tables: valid only when they were confirmed.)
    pub ops: Vec<Op>,
    /// Conflicts on the destinations this change touched, each with both service ports.
    pub conflicts: Vec<Conflict>,
    /// Problems of the recompiled service ports.
    pub errors: Vec<RulesetError>,
    /// Per service port and family: conntrack cleanup inputs. A destination that became
    /// served is listed under the port that now owns it.
    pub targets: BTreeMap<(PortId, IpFamily), PortTargets>,
    /// Service ports recompiled (in all families).
    pub recompiled: usize,
    /// Everything was recompiled (configuration change).
    pub full: bool,
    /// The UDP destinations whose owner or owner's serving endpoints may have changed
    /// (every UDP destination of a recompiled port, before and after): the conntrack
    /// cleanup judges the flows sent to them again. (A full update names none: all.)
    pub udp_touched: BTreeSet<UdpDest>,
    /// Of those, the frontends their UDP service port no longer claims, each with that
    /// port. Those of ports deleted (the service, the port, or its UDP protocol gone; not
    /// a port renumbered or an address removed) are judged once with no serving endpoint,
    /// as kube-proxy does (kubernetes PR #141371); whether the port is gone is asked when
    /// the engine commits (a later update may bring it back, or delete it after all).
    pub udp_released: BTreeMap<UdpDest, PortId>,
}

impl Update {
    /// Every UDP destination that became served.
    pub fn became_served(&self) -> BTreeSet<Served> {
        self.targets
            .values()
            .flat_map(|t| t.became_served.iter().copied())
            .collect()
    }
    /// Every UDP endpoint that started serving a port.
    pub fn started_serving(&self) -> BTreeSet<(IpAddr, u16)> {
        self.targets
            .values()
            .flat_map(|t| t.started_serving.iter().copied())
            .collect()
    }
    /// Every UDP endpoint that stopped serving a port.
    pub fn stopped_serving(&self) -> BTreeSet<(IpAddr, u16)> {
        self.targets
            .values()
            .flat_map(|t| t.stopped_serving.iter().copied())
            .collect()
    }
}

/// One family's state.
#[derive(Debug)]
struct FamilyState {
    fam: IpFamily,
    mirror: Mirror,
    /// The fragments of each service's ports, in port order.
    fragments: BTreeMap<ServiceKey, Vec<Fragment>>,
    /// Services with a fragment that depends on the node.
    node_dependent: BTreeSet<ServiceKey>,
    /// Services with a fragment that has problems (errors are listed from these only).
    with_errors: BTreeSet<ServiceKey>,
}

/// The incremental compiler. See the module documentation.
#[derive(Debug)]
pub struct Compiler {
    cfg: ParsedConfig,
    node: Option<Node>,
    families: Vec<FamilyState>,
    /// Service ports left out (the engine skips ports whose rules the kernel refuses).
    excluded: BTreeSet<PortId>,
}

/// The fragments of a service's ports (in port order, without the `excluded` ones).
fn build_service(
    ctx: &Ctx,
    cluster: &Cluster,
    key: &ServiceKey,
    slices: &[&EndpointSlice],
    excluded: &BTreeSet<PortId>,
) -> Vec<Fragment> {
    let Some(svc) = cluster.services.get(key) else {
        return Vec::new();
    };
    // Allocated at its size: collecting a filtered iterator reserves room for four, and
    // the compiler keeps this vector for every service.
    let mut out = Vec::with_capacity(svc.ports.len());
    out.extend(
        svc.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| excluded.is_empty() || !excluded.contains(&PortId::new(key, p)))
            .map(|(i, p)| fragment(ctx, svc, i, p, slices)),
    );
    out
}

impl Compiler {
    /// Compile `cluster` from scratch.
    pub fn new(cfg: ParsedConfig, cluster: &Cluster) -> Compiler {
        Compiler::with_excluded(cfg, cluster, BTreeSet::new())
    }

    /// The batch of the last update was committed: the desired tables are what the
    /// kernel holds, and the next update's batch starts from them.
    pub fn confirm(&mut self) {
        for f in &mut self.families {
            f.mirror.confirm();
        }
    }

    /// Whether the desired tables are what was last confirmed (nothing uncommitted).
    pub fn confirmed(&self) -> bool {
        self.families.iter().all(|f| f.mirror.confirmed())
    }

    /// The service ports whose rules `op` (of a batch this compiler produced) is about:
    /// for elements, the ports owning their destinations (or, for the elements several
    /// ports share, every port adding them); for a per-port chain (session affinity: its
    /// rules, which look pins up and add them), its port. Empty for the skeleton's
    /// objects (sets, among them session affinity's pins). Used to tell which service
    /// ports a refused batch is to blame on.
    pub fn owners(&self, op: &Op) -> BTreeSet<PortId> {
        let mut out = BTreeSet::new();
        let Some(st) = self
            .families
            .iter()
            .find(|f| f.mirror.family() == op.table().family)
        else {
            return out;
        };
        let frags = || st.fragments.values().flatten();
        let mut of_element = |set: &str, e: &Element| match st.mirror.owner_of_element(&e.key) {
            Some(p) => {
                out.insert(p);
            }
            None => out.extend(
                frags()
                    .filter(|f| {
                        f.shared
                            .iter()
                            .any(|(s, x)| &**s == set && x.element().key == e.key)
                    })
                    .map(|f| f.id.clone()),
            ),
        };
        match op {
            Op::AddElements { set, elements, .. } | Op::DeleteElements { set, elements, .. } => {
                for e in elements {
                    of_element(set, e);
                }
            }
            Op::AddPackedElements { set, elements, .. } => {
                for e in elements {
                    of_element(set, &e.element());
                }
            }
            Op::AddChain { name: chain, .. }
            | Op::FlushChain { chain, .. }
            | Op::DeleteChain { chain, .. }
            | Op::DeleteRule { chain, .. }
            | Op::AddRule { chain, .. }
            | Op::InsertRule { chain, .. } => out.extend(
                frags()
                    .filter(|f| f.chains.iter().any(|c| &c.name == chain))
                    .map(|f| f.id.clone()),
            ),
            _ => {}
        }
        out
    }

    /// The port owning a destination (`addr . proto . port`, or `proto . port` for a
    /// NodePort) in `family`'s table, if any.
    pub fn owner_of(&self, family: Family, key: &[Value]) -> Option<PortId> {
        self.families
            .iter()
            .find(|f| f.mirror.family() == family)?
            .mirror
            .owner(&key.to_vec())
    }

    /// Whether the desired tables send this UDP destination to endpoints.
    pub fn serves(&self, s: &Served) -> bool {
        let (family, key) = match *s {
            Served::Dst { addr, port } => (
                if addr.is_ipv4() {
                    Family::Ip
                } else {
                    Family::Ip6
                },
                vec![Value::from(addr), Value::Proto(17), Value::Port(port)],
            ),
            Served::NodePort { v6, port } => (
                if v6 { Family::Ip6 } else { Family::Ip },
                vec![Value::Proto(17), Value::Port(port)],
            ),
        };
        self.families
            .iter()
            .find(|f| f.mirror.family() == family)
            .is_some_and(|f| !f.mirror.served(&BTreeSet::from([key])).is_empty())
    }

    /// Take the set sizes our tables hold in the kernel (read back: after a restart,
    /// or to repair them) where they are still enough for the elements, so that the diff
    /// from them declares no set again for its size alone (`compile::mirror::sizing`).
    /// Call it before diffing the desired tables against `tables`.
    pub fn adopt_sizes<'a>(&mut self, tables: impl IntoIterator<Item = &'a Table>) {
        for t in tables {
            if let Some(st) = self
                .families
                .iter_mut()
                .find(|f| f.mirror.family() == t.family && t.name == crate::names::TABLE)
            {
                st.mirror.adopt_sizes(t);
            }
        }
    }

    /// The service ports left out.
    pub fn excluded(&self) -> &BTreeSet<PortId> {
        &self.excluded
    }

    /// Leave exactly these service ports out from now on. Returns the services whose
    /// ports are now in or out: pass them in the next [`Changes`] (nothing is
    /// recompiled here).
    pub fn set_excluded(&mut self, excluded: BTreeSet<PortId>) -> BTreeSet<ServiceKey> {
        let touched = self
            .excluded
            .symmetric_difference(&excluded)
            .map(|p| p.service.clone())
            .collect();
        self.excluded = excluded;
        touched
    }

    pub fn config(&self) -> &ParsedConfig {
        &self.cfg
    }

    /// The full desired tables (one per family, `ip` first), without recompiling.
    pub fn tables(&self) -> Vec<Table> {
        self.families.iter().map(|f| f.mirror.table()).collect()
    }

    /// [`Compiler::tables`] with the elements of the skeleton's sets (every endpoint,
    /// dispatch and hairpin element) packed, shared with the compiler: what a batch
    /// creating the tables is made of without unpacking them
    /// ([`nft_model::into_create_table_ops_packed`]).
    pub fn packed_tables(&self) -> Vec<PackedTable> {
        self.families
            .iter()
            .map(|f| f.mirror.packed_table())
            .collect()
    }

    /// Every problem of the current state: the compiled ports' and every conflict (in
    /// work proportional to the problems, not to the cluster).
    pub fn errors(&self) -> Vec<RulesetError> {
        let mut out = Vec::new();
        for f in &self.families {
            for key in &f.with_errors {
                for fr in f.fragments.get(key).into_iter().flatten() {
                    out.extend(fr.errors.iter().cloned());
                }
            }
            out.extend(f.mirror.conflicts(None).iter().map(Conflict::error));
        }
        out
    }

    /// Every conflict of the current state.
    pub fn conflicts(&self) -> Vec<Conflict> {
        self.families
            .iter()
            .flat_map(|f| f.mirror.conflicts(None))
            .collect()
    }

    /// Recompile what `changes` names, against the updated `cluster`.
    pub fn update(&mut self, cluster: &Cluster, changes: &Changes) -> Update {
        let node_changed = changes.node && cluster.node != self.node;
        if node_changed {
            self.node = cluster.node.clone();
        }
        let mut out = Update::default();
        for st in &mut self.families {
            let ctx = Ctx::new(st.fam, &self.cfg, self.node.as_ref());
            let mut services = changes.services.clone();
            if node_changed {
                services.extend(st.node_dependent.iter().cloned());
            }
            st.update(
                &ctx,
                cluster,
                &services,
                &self.excluded,
                node_changed,
                &mut out,
            );
        }
        out
    }

    /// Take a new configuration. Only the host's addresses or the service CIDRs
    /// changed: the skeleton and the ports depending on node addresses are recompiled;
    /// otherwise everything is (`Update::full`), and the batch is the diff of the tables.
    pub fn set_config(&mut self, cfg: ParsedConfig, cluster: &Cluster) -> Update {
        if self.cfg.same_but_addresses(&cfg) && cluster.node == self.node {
            self.cfg = cfg;
            let mut out = Update::default();
            for st in &mut self.families {
                let ctx = Ctx::new(st.fam, &self.cfg, self.node.as_ref());
                let services = st.node_dependent.clone();
                st.update(&ctx, cluster, &services, &self.excluded, true, &mut out);
            }
            return out;
        }
        let old = self.tables();
        let old_frags: Vec<BTreeMap<ServiceKey, Vec<Fragment>>> = self
            .families
            .iter_mut()
            .map(|f| std::mem::take(&mut f.fragments))
            .collect();
        let old_fams: Vec<IpFamily> = self.families.iter().map(|f| f.fam).collect();
        let excluded = std::mem::take(&mut self.excluded);
        *self = Compiler::with_excluded(cfg, cluster, excluded);
        self.adopt_sizes(&old);
        let mut out = Update {
            ops: crate::diff::diff(&old, &self.tables()),
            full: true,
            ..Update::default()
        };
        for f in &self.families {
            out.conflicts.extend(f.mirror.conflicts(None));
            let before = old_fams
                .iter()
                .position(|x| *x == f.fam)
                .map(|i| &old_frags[i]);
            let old_served = before.map(served_of).unwrap_or_default();
            let new_served = served_of(&f.fragments);
            for (key, (id, served)) in &new_served {
                if *served && !old_served.get(key).is_some_and(|(_, s)| *s) {
                    if let Some(s) = Served::of_key(key, f.mirror.family()) {
                        out.targets
                            .entry((id.clone(), f.fam))
                            .or_default()
                            .became_served
                            .insert(s);
                    }
                }
            }
            let mut services: BTreeSet<&ServiceKey> = f.fragments.keys().collect();
            services.extend(before.into_iter().flat_map(|b| b.keys()));
            for svc in services {
                let old = before
                    .and_then(|b| b.get(svc))
                    .map_or(&[][..], Vec::as_slice);
                let new = f.fragments.get(svc).map_or(&[][..], Vec::as_slice);
                serving_changes(old, new, f.fam, &mut out);
                udp_released(old, new, f.fam, &mut out);
            }
            out.recompiled += f.fragments.values().map(Vec::len).sum::<usize>();
        }
        out
    }
}

/// The UDP endpoints that stopped or started serving each port, from a service's
/// fragments before and after.
fn serving_changes(old: &[Fragment], new: &[Fragment], fam: IpFamily, out: &mut Update) {
    let none = BTreeSet::new();
    for f in old {
        let now = new
            .iter()
            .find(|n| n.id == f.id)
            .map_or(&none, |n| &n.udp_serving);
        let gone: BTreeSet<(IpAddr, u16)> = f.udp_serving.difference(now).copied().collect();
        if !gone.is_empty() {
            out.targets
                .entry((f.id.clone(), fam))
                .or_default()
                .stopped_serving
                .extend(gone);
        }
    }
    for f in new {
        let was = old
            .iter()
            .find(|o| o.id == f.id)
            .map_or(&none, |o| &o.udp_serving);
        let came: BTreeSet<(IpAddr, u16)> = f.udp_serving.difference(was).copied().collect();
        if !came.is_empty() {
            out.targets
                .entry((f.id.clone(), fam))
                .or_default()
                .started_serving
                .extend(came);
        }
    }
}

/// The winner of every claim of these fragments and whether it is served (a full
/// recompile compares all of them).
fn served_of(frags: &BTreeMap<ServiceKey, Vec<Fragment>>) -> BTreeMap<ClaimKey, (PortId, bool)> {
    let mut best: BTreeMap<ClaimKey, (&crate::compile::fragment::PortOrder, PortId, bool)> =
        BTreeMap::new();
    for f in frags.values().flatten() {
        for c in &f.claims {
            let e = best
                .entry(c.key.clone())
                .or_insert((&f.order, f.id.clone(), c.served));
            if f.order < *e.0 {
                *e = (&f.order, f.id.clone(), c.served);
            }
        }
    }
    best.into_iter()
        .map(|(k, (_, id, s))| (k, (id, s)))
        .collect()
}

impl FamilyState {
    fn insert(&mut self, key: ServiceKey, mut frags: Vec<Fragment>) {
        if frags.iter().any(|f| f.node_dependent) {
            self.node_dependent.insert(key.clone());
        } else {
            self.node_dependent.remove(&key);
        }
        if frags.iter().any(|f| !f.errors.is_empty()) {
            self.with_errors.insert(key.clone());
        } else {
            self.with_errors.remove(&key);
        }
        for f in &frags {
            self.mirror.add(f);
        }
        // A port with nothing in this family (a single-stack service's other family) is
        // not kept: rebuilding it later finds nothing to take out either.
        frags.retain(|f| !f.is_empty());
        if frags.is_empty() {
            self.fragments.remove(&key);
        } else {
            self.fragments.insert(key, frags);
        }
    }

    fn update(
        &mut self,
        ctx: &Ctx,
        cluster: &Cluster,
        services: &BTreeSet<ServiceKey>,
        excluded: &BTreeSet<PortId>,
        skeleton_changed: bool,
        out: &mut Update,
    ) {
        let family = self.mirror.family();
        let new: Vec<(ServiceKey, Vec<Fragment>)> = services
            .iter()
            .map(|k| {
                let slices: Vec<&EndpointSlice> = cluster.slices_of(k).collect();
                (k.clone(), build_service(ctx, cluster, k, &slices, excluded))
            })
            .collect();
        // every destination whose owner may change, and who served it before
        let mut keys: BTreeSet<ClaimKey> = BTreeSet::new();
        for (k, frags) in &new {
            for f in frags
                .iter()
                .chain(self.fragments.get(k).into_iter().flatten())
            {
                keys.extend(f.claims.iter().map(|c| c.key.clone()));
            }
        }
        let served_before = self.mirror.served(&keys);
        let classes_before = self.mirror.classes();
        let affinity_before = self.mirror.affinity();
        for (k, frags) in new {
            let old = self.fragments.remove(&k).unwrap_or_default();
            for f in &old {
                self.mirror.remove(f);
            }
            serving_changes(&old, &frags, self.fam, out);
            udp_released(&old, &frags, self.fam, out);
            out.recompiled += frags.len();
            for f in &frags {
                out.errors.extend(f.errors.iter().cloned());
            }
            self.insert(k, frags);
        }
        if skeleton_changed
            || self.mirror.classes() != classes_before
            || self.mirror.affinity() != affinity_before
        {
            self.mirror.set_skeleton(skeleton(
                ctx,
                &self.mirror.classes(),
                self.mirror.affinity(),
            ));
        }
        self.mirror.resize();
        out.udp_touched
            .extend(keys.iter().filter_map(|k| UdpDest::of_key(k, self.fam)));
        let (ops, touched) = self.mirror.ops();
        out.ops.extend(ops);
        out.conflicts.extend(self.mirror.conflicts(Some(&touched)));
        for key in self.mirror.served(&keys).difference(&served_before) {
            let (Some(s), Some(owner)) = (Served::of_key(key, family), self.mirror.owner(key))
            else {
                continue;
            };
            out.targets
                .entry((owner, self.fam))
                .or_default()
                .became_served
                .insert(s);
        }
    }
}

/// The UDP destinations `tables` send to endpoints: the keys of the dispatch sets and of
/// session affinity's dispatch maps, `service-ips` and `service-nodeports`
/// (`names::SERVED_SETS`). Used against tables dumped from the
/// kernel (after a restart), where no compiler state exists.
pub fn served_destinations<'a, T: TableElements + 'a>(
    tables: impl IntoIterator<Item = &'a T>,
) -> BTreeSet<Served> {
    let mut out = BTreeSet::new();
    for t in tables {
        let family = t.table().family;
        for s in t
            .table()
            .sets
            .iter()
            .filter(|s| crate::names::SERVED_SETS.contains(&s.name.as_str()))
        {
            t.each_element(&s.name, |e| out.extend(Served::of_key(&e.key, family)));
        }
    }
    out
}

/// Every UDP `address . port` DNAT target of `tables`: the endpoints of UDP
/// destinations in the endpoint maps (a key is `destination . slot`, and a destination
/// names its protocol) and the `dnat` of the session-affinity list chains' rules that
/// match UDP (and of the endpoint chains, `ep-…`, a version before decision 0014's
/// amendment wrote). Read from tables dumped from the kernel (after a restart, when no
/// compiler state exists), so that the conntrack cleanup targets of endpoints that
/// vanished meanwhile are UDP endpoints only (TCP and SCTP flows need none).
pub fn table_endpoints<'a, T: TableElements + 'a>(
    tables: impl IntoIterator<Item = &'a T>,
) -> BTreeSet<(IpAddr, u16)> {
    let mut out = BTreeSet::new();
    for t in tables {
        for s in t
            .table()
            .sets
            .iter()
            .filter(|s| s.name.starts_with("endpoints-"))
        {
            t.each_element(&s.name, |e| {
                if !e.key.contains(&Value::Proto(17)) {
                    return;
                }
                if let Some(nft_model::ElemData::Values(v)) = &e.data {
                    if let [a, Value::Port(port)] = v.as_slice() {
                        out.extend(a.ip().map(|addr| (addr, *port)));
                    }
                }
            });
        }
        for c in t.table().chains.iter().filter(|c| {
            ["svc-", "local-", "ep-"]
                .iter()
                .any(|p| c.name.starts_with(p))
        }) {
            out.extend(c.rules.iter().filter_map(|r| udp_dnat(&r.exprs)));
        }
    }
    out
}

/// The target of a rule `… meta l4proto udp … dnat to <addr>:<port>` (a session-affinity
/// list chain's rule for one endpoint, `compile::affinity`).
fn udp_dnat(exprs: &[nft_model::Expr]) -> Option<(IpAddr, u16)> {
    use nft_model::{CmpOp, Expr, MetaKey, NatKind};
    let udp = exprs.windows(2).any(|w| {
        matches!(
            w,
            [Expr::Meta { key: MetaKey::L4proto, dreg }, Expr::Cmp { sreg, op: CmpOp::Eq, data }]
                if dreg == sreg && data.as_slice() == [17]
        )
    });
    let (
        Some(Expr::Nat {
            kind: NatKind::Dnat,
            addr: Some(ar),
            port: Some(pr),
            ..
        }),
        true,
    ) = (exprs.iter().find(|e| matches!(e, Expr::Nat { .. })), udp)
    else {
        return None;
    };
    let imm = |reg| {
        exprs.iter().find_map(|e| match e {
            Expr::Immediate { dreg, data } if dreg == reg => Some(data.as_slice()),
            _ => None,
        })
    };
    let addr = match imm(ar)? {
        b if b.len() == 4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
        b if b.len() == 16 => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
        _ => return None,
    };
    let port = u16::from_be_bytes(imm(pr)?.try_into().ok()?);
    Some((addr, port))
}

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

/// Compile the cluster for this node. Fails only on a bad configuration; bad objects are
/// skipped and reported in [`Compiled::errors`].
pub fn compile(cluster: &Cluster, config: &Config) -> Result<Compiled, RulesetError> {
    let cfg = config.parse()?;
    Ok(compile_parsed(cluster, &cfg))
}

/// [`compile`] with an already parsed configuration: the incremental compiler built
/// from scratch, so that both always agree.
pub fn compile_parsed(cluster: &Cluster, cfg: &ParsedConfig) -> Compiled {
    let c = Compiler::new(cfg.clone(), cluster);
    let mut errors: Vec<RulesetError> = cluster
        .orphan_slice_errors()
        .into_iter()
        .map(RulesetError::Model)
        .collect();
    errors.extend(c.errors());
    Compiled {
        tables: c.tables(),
        errors,
    }
}
