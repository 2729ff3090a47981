//! The conntrack cleanup's comparison with kube-proxy 1.38 (`kube_reference::cleanup`),
//! shared by the fuzzer on the fake kernel (`fuzz_cleanup.rs`) and its sample on a real
//! kernel (`netns-tests/tests/fuzz_cleanup_kernel.rs`, by `#[path]`): a case's events,
//! its flows as the engine's, and the flow-by-flow comparison with its named
//! differences (docs/decisions/0013).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ct_netlink::Flow;
use kube_reference::cleanup::{v138, CleanupModel, CtFlow, Rule};
use kube_reference::{Case, FlowOrigin};
use sync_engine::{EngineConfig, Event};

#[allow(unused_imports)]
pub use kube_reference::rng::{env_u64, start_seed};

pub fn engine_config(case: &Case) -> EngineConfig {
    let cfg: ruleset::Config =
        serde_json::from_str(&case.env.config_json()).expect("the environment's config");
    EngineConfig {
        ruleset: cfg.parse().expect("the environment's config parses"),
        watch_tamper: false,
        ..EngineConfig::default()
    }
}

fn key<
    M: sync_engine::k8s_openapi::Metadata<
        Ty = sync_engine::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    >,
>(
    o: &M,
) -> (String, String) {
    let m = o.metadata();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// The events that turn `before`'s objects into `after`'s.
pub fn events(before: &Case, after: &Case) -> Vec<Event> {
    let mut out = Vec::new();
    let b: BTreeMap<_, _> = before.services.iter().map(|s| (key(s), s)).collect();
    let a: BTreeMap<_, _> = after.services.iter().map(|s| (key(s), s)).collect();
    for (k, s) in &b {
        if !a.contains_key(k) {
            out.push(Event::ServiceDeleted((*s).clone()));
        }
    }
    for (k, s) in &a {
        if b.get(k) != Some(s) {
            out.push(Event::ServiceApplied((*s).clone()));
        }
    }
    let b: BTreeMap<_, _> = before.slices.iter().map(|s| (key(s), s)).collect();
    let a: BTreeMap<_, _> = after.slices.iter().map(|s| (key(s), s)).collect();
    for (k, s) in &b {
        if !a.contains_key(k) {
            out.push(Event::SliceDeleted((*s).clone()));
        }
    }
    for (k, s) in &a {
        if b.get(k) != Some(s) {
            out.push(Event::SliceApplied((*s).clone()));
        }
    }
    if before.node != after.node {
        out.push(Event::NodeApplied(after.node.clone()));
    }
    out
}

pub fn to_flow(i: usize, f: &CtFlow) -> Flow {
    Flow {
        proto: 17,
        src: f.src.ip(),
        dst: f.dst.ip(),
        sport: f.src.port(),
        dport: f.dst.port(),
        reply_src: f.reply_src.ip(),
        reply_sport: f.reply_src.port(),
        zone: 0,
        id: Some(i as u32 + 1),
    }
}

/// Tallies of the comparison.
#[derive(Default, Debug)]
pub struct Tally {
    pub flows: usize,
    pub deleted: usize,
    pub upstream: usize,
    /// 1.38 deletes, ours not: NodePort on an address we do not serve NodePorts on.
    pub nodeport_scope: usize,
    /// 1.38 deletes, ours not: DNAT'ed to an endpoint ready but not serving.
    pub ready_not_serving: usize,
    /// 1.38 deletes, ours not: stale already before the step.
    pub stale_before: usize,
    /// ours deletes, 1.38 (gated) not at this step: its judgement, earlier.
    pub earlier: usize,
    pub by_origin: BTreeMap<String, (usize, usize)>,
}

/// Compare, for the step from `before` to `after`, what the engine deleted (`deleted`,
/// by index in `table`) with kube-proxy 1.38: the disagreements, as messages. `node_ips`:
/// the addresses our rules serve NodePorts on.
pub fn compare(
    what: &str,
    before: &Case,
    after: &Case,
    table: &[(CtFlow, FlowOrigin)],
    deleted: &BTreeSet<usize>,
    node_ips: &BTreeSet<IpAddr>,
    t: &mut Tally,
) -> Vec<String> {
    let mut failures = Vec::new();
    let cts: Vec<CtFlow> = table.iter().map(|(f, _)| *f).collect();
    let mut upstream = BTreeMap::new();
    for fam in 0..2 {
        upstream.extend(v138::upstream_deletes(before, after, fam, &cts));
    }
    let prev = CleanupModel::new(before);
    let now = CleanupModel::new(after);
    // the endpoint of `port` the flow went to is ready but not serving
    let ready_not_serving = |f: &CtFlow, port: &kube_reference::cleanup::PortRef| {
        now.ports(f.family())
            .iter()
            .filter(|p| &p.port_ref == port)
            .flat_map(|p| p.endpoints.iter())
            .any(|ep| ep.addr == f.reply_src && ep.ready && !ep.serving)
    };
    for (i, (f, origin)) in table.iter().enumerate() {
        let gone = deleted.contains(&i);
        let ungated = v138::stale(before, after, f);
        let entry = t.by_origin.entry(format!("{origin:?}")).or_default();
        entry.0 += 1;
        entry.1 += usize::from(gone);
        t.flows += 1;
        t.deleted += usize::from(gone);
        if gone && ungated.is_none() {
            failures.push(format!("{what}: deleted a live flow {f} ({origin:?})"));
        }
        match (upstream.get(&i), gone) {
            (Some(_), true) => t.upstream += 1,
            (Some(r), false) => {
                t.upstream += 1;
                let nodeport = matches!(
                    r.rule,
                    Rule::NodePort { .. }
                        | Rule::NoEndpointsNodePort { .. }
                        | Rule::DeletedNodePort { .. }
                );
                if nodeport && !node_ips.contains(&f.dst.ip()) {
                    t.nodeport_scope += 1;
                } else if ready_not_serving(f, &r.port) {
                    t.ready_not_serving += 1;
                } else if prev.stale_1_38(f).is_some() {
                    t.stale_before += 1;
                } else {
                    failures.push(format!(
                        "{what}: kept {f} ({origin:?}), 1.38 deletes it: {r}"
                    ));
                }
            }
            (None, true) => t.earlier += 1,
            (None, false) => {}
        }
    }
    failures
}
