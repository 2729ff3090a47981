//! The conntrack cleanup's decisions against an oracle that shares no code with them
//! (issue 36 item 4; docs/fuzzing.md "Conntrack cleanup decisions"): random legal
//! clusters and change sequences from `kube-reference`, a conntrack table per step made
//! by the rules of the step before (flows DNAT'ed to current, past and never endpoints,
//! flows not DNAT'ed, to every UDP frontend and NodePort on every node address), the
//! engine syncing each step on the fake kernel (the cleanup listing from it), and what
//! it deletes compared flow by flow with `kube_reference::cleanup::v138`, a model of
//! kube-proxy 1.38's decisions written from upstream's code.
//!
//! Checked at every step, per family:
//! 1. nothing the engine deletes is live: 1.38 judges every deleted flow stale against
//!    the state after the step (ungated: upstream would delete it whenever it runs);
//! 2. everything 1.38 deletes at the step is deleted, but for the named differences
//!    (docs/decisions/0013): a NodePort on an address our rules do not serve NodePorts on
//!    (upstream: any address); a flow DNAT'ed to an endpoint that is ready but not
//!    serving (a slice the controller never writes: our rules send to it, so it counts
//!    as serving); and a flow that was stale already under the state before the step
//!    (ours judges what a commit changes; such flows go on arrival with events, at start
//!    and by the audit).
//!
//! `FUZZ_CASES` (default 40) cases of `FUZZ_STEPS` (default 6) steps from `FUZZ_SEED`
//! (default: the clock, printed); a failure names its seed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use common::*;
use ct_netlink::Flow;
use kube_reference::cleanup::{v138, CleanupModel, CtFlow, Rule};
use kube_reference::FlowOrigin;
use kube_reference::{changes, generate, Case, Rng};
use sync_engine::*;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn engine_config(case: &Case) -> EngineConfig {
    let cfg: ruleset::Config =
        serde_json::from_str(&case.env.config_json()).expect("the environment's config");
    EngineConfig {
        ruleset: cfg.parse().expect("the environment's config parses"),
        watch_tamper: false,
        ..EngineConfig::default()
    }
}

fn key<
    M: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
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
fn events(before: &Case, after: &Case) -> Vec<Event> {
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

fn to_flow(i: usize, f: &CtFlow) -> Flow {
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
struct Tally {
    flows: usize,
    deleted: usize,
    upstream: usize,
    /// 1.38 deletes, ours not: NodePort on an address we do not serve NodePorts on.
    nodeport_scope: usize,
    /// 1.38 deletes, ours not: DNAT'ed to an endpoint ready but not serving.
    ready_not_serving: usize,
    /// 1.38 deletes, ours not: stale already before the step.
    stale_before: usize,
    /// ours deletes, 1.38 (gated) not at this step: its judgement, earlier.
    earlier: usize,
    by_origin: BTreeMap<String, (usize, usize)>,
}

#[test]
fn cleanup_decisions_agree_with_kube_proxy_1_38() {
    let seed = env_u64("FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let cases = env_u64("FUZZ_CASES").unwrap_or(40);
    let steps_n = env_u64("FUZZ_STEPS").unwrap_or(6) as usize;
    eprintln!("fuzz cleanup: FUZZ_SEED={seed} FUZZ_CASES={cases} FUZZ_STEPS={steps_n}");
    let mut failures: Vec<String> = Vec::new();
    let mut t = Tally::default();
    for i in 0..cases {
        let s = seed.wrapping_add(i);
        let start = generate(s);
        let mut rng = Rng::new(s ^ 0xc1ea_0f10);
        let steps = changes::sequence(&start, &mut rng, steps_n);
        let w = World::new();
        let mut e = w.engine_with(engine_config(&start));
        let none = Case {
            services: vec![],
            slices: vec![],
            ..start.clone()
        };
        for ev in events(&none, &start) {
            e.handle(ev);
        }
        e.handle(Event::NodeApplied(start.node.clone()));
        listed(&mut e);
        e.sync().expect("first sync");
        w.take();
        let node_ips: BTreeSet<IpAddr> = start.env.node_ips.iter().copied().collect();
        let mut before = start;
        for (k, st) in steps.iter().enumerate() {
            let after = &st.case;
            let mut table: Vec<(CtFlow, FlowOrigin)> = Vec::new();
            for fam in 0..2 {
                table.extend(kube_reference::cleanup::flows(
                    &before, after, fam, &mut rng, 300,
                ));
            }
            let flows: Vec<Flow> = table
                .iter()
                .enumerate()
                .map(|(i, (f, _))| to_flow(i, f))
                .collect();
            w.ct_table.lock().unwrap().clear();
            w.flows(&flows);
            for ev in events(&before, after) {
                e.handle(ev);
            }
            w.clock.advance(Duration::from_secs(2));
            if let Err(err) = e.sync() {
                failures.push(format!("seed {s} step {k}: sync failed: {err}"));
                break;
            }
            e.drain_cleanup();
            let ours: BTreeSet<u32> = deletes(&w.take()).iter().filter_map(|f| f.id).collect();
            let cts: Vec<CtFlow> = table.iter().map(|(f, _)| *f).collect();
            let mut upstream = BTreeMap::new();
            for fam in 0..2 {
                upstream.extend(v138::upstream_deletes(&before, after, fam, &cts));
            }
            let prev = CleanupModel::new(&before);
            let now = CleanupModel::new(after);
            // the endpoint of `r`'s port the flow went to is ready but not serving
            let ready_not_serving = |f: &CtFlow, port: &kube_reference::cleanup::PortRef| {
                now.ports(f.family())
                    .iter()
                    .filter(|p| &p.port_ref == port)
                    .flat_map(|p| p.endpoints.iter())
                    .any(|ep| ep.addr == f.reply_src && ep.ready && !ep.serving)
            };
            for (i, (f, origin)) in table.iter().enumerate() {
                let id = i as u32 + 1;
                let deleted = ours.contains(&id);
                let ungated = v138::stale(&before, after, f);
                let entry = t.by_origin.entry(format!("{origin:?}")).or_default();
                entry.0 += 1;
                entry.1 += usize::from(deleted);
                t.flows += 1;
                t.deleted += usize::from(deleted);
                if deleted && ungated.is_none() {
                    failures.push(format!(
                        "seed {s} step {k} ({}): deleted a live flow {f} ({origin:?})",
                        st.what
                    ));
                }
                match (upstream.get(&i), deleted) {
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
                                "seed {s} step {k} ({}): kept {f} ({origin:?}), 1.38 deletes it: {r}",
                                st.what
                            ));
                        }
                    }
                    (None, true) => t.earlier += 1,
                    (None, false) => {}
                }
            }
            before = after.clone();
            if failures.len() > 20 {
                break;
            }
        }
        if failures.len() > 20 {
            break;
        }
    }
    eprintln!("fuzz cleanup: {t:#?}");
    assert!(
        failures.is_empty(),
        "{} disagreements (FUZZ_SEED={seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        t.deleted > 0 && t.upstream > 0,
        "the comparison saw deletions: {t:?}"
    );
}
