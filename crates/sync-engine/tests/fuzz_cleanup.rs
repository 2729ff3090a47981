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

mod cleanup_reference;
mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use cleanup_reference::{compare, engine_config, env_u64, events, start_seed, to_flow, Tally};
use common::*;
use ct_netlink::Flow;
use kube_reference::cleanup::CtFlow;
use kube_reference::{changes, generate, Case, FlowOrigin, Rng};
use sync_engine::*;

#[test]
fn cleanup_decisions_agree_with_kube_proxy_1_38() {
    let seed = start_seed();
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
            let ours: BTreeSet<usize> = deletes(&w.take())
                .iter()
                .filter_map(|f| f.id.map(|id| id as usize - 1))
                .collect();
            let what = format!("seed {s} step {k} ({})", st.what);
            failures.extend(compare(
                &what, &before, after, &table, &ours, &node_ips, &mut t,
            ));
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
