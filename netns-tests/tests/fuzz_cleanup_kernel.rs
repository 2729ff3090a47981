//! The conntrack cleanup fuzzer's kernel sample (issue 36 item 4; docs/fuzzing.md): the
//! engine on real sockets in a namespace of its own (its nftables batches committed, its
//! cleanup listing and deleting real conntrack entries), each step's conntrack table
//! inserted as real entries (DNAT'ed ones with their reply tuple, over ctnetlink), and
//! what the kernel holds after the step's sync compared flow by flow with kube-proxy
//! 1.38's decisions (`kube_reference::cleanup::v138`), with the same rules as the fake
//! kernel's fuzzer (`crates/sync-engine/tests/fuzz_cleanup.rs`). Root only.
//!
//! `FUZZ_KERNEL_CASES` (default 12) cases of `FUZZ_STEPS` (default 4) steps from
//! `FUZZ_SEED` (default: the clock, printed and named in every failure).

#[path = "../../crates/sync-engine/tests/cleanup_reference/mod.rs"]
mod cleanup_reference;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use cleanup_reference::{compare, engine_config, env_u64, events, start_seed, Tally};
use ct_netlink::{Conntrack, Family, SyntheticEntry, SyntheticFlow, IPPROTO_UDP};
use kube_reference::cleanup::CtFlow;
use kube_reference::{changes, generate, Case, FlowOrigin, Rng};
use netns_tests::{require_root, Netns};
use sync_engine::{Engine, Event, SystemClock};

type Tuple = (SocketAddr, SocketAddr);

/// The UDP entries the kernel holds, by original tuple.
fn held(ct: &mut Conntrack) -> BTreeSet<Tuple> {
    let mut out = BTreeSet::new();
    for fam in [Family::V4, Family::V6] {
        let mut flows = Vec::new();
        ct.list_proto(fam, IPPROTO_UDP, &mut flows)
            .expect("listing the namespace's UDP entries");
        out.extend(flows.iter().map(|f| {
            (
                SocketAddr::new(f.src, f.sport),
                SocketAddr::new(f.dst, f.dport),
            )
        }));
    }
    out
}

fn entry(f: &CtFlow) -> SyntheticEntry {
    let e = SyntheticEntry::from(SyntheticFlow {
        src: f.src.ip(),
        dst: f.dst.ip(),
        proto: IPPROTO_UDP,
        sport: f.src.port(),
        dport: f.dst.port(),
    });
    if f.reply_src != f.dst {
        e.dnat(f.reply_src.ip(), f.reply_src.port())
    } else {
        e
    }
}

fn run_case(ns: &Netns, s: u64, steps_n: usize, t: &mut Tally) -> Vec<String> {
    let start = generate(s);
    let mut rng = Rng::new(s ^ 0xc1ea_0f10);
    let steps = changes::sequence(&start, &mut rng, steps_n);
    let cfg = engine_config(&start);
    ns.run(move || {
        let mut failures = Vec::new();
        let nft = nft_netlink::Nft::open().expect("nftables socket");
        let ct = Conntrack::open(ct_netlink::Config::default()).expect("ctnetlink");
        let mut filler = Conntrack::open(ct_netlink::Config::default()).expect("ctnetlink");
        let mut e = Engine::new(cfg, nft, ct, SystemClock);
        let none = Case {
            services: vec![],
            slices: vec![],
            ..start.clone()
        };
        for ev in events(&none, &start) {
            e.handle(ev);
        }
        e.handle(Event::NodeApplied(start.node.clone()));
        e.handle(Event::ServicesListed);
        e.handle(Event::SlicesListed);
        if let Err(err) = e.sync() {
            return vec![format!("seed {s}: first sync: {err}")];
        }
        let node_ips: BTreeSet<IpAddr> = start.env.node_ips.iter().copied().collect();
        let mut before = start.clone();
        for (k, st) in steps.iter().enumerate() {
            let after = &st.case;
            // this step's table: one entry per original tuple (the kernel's key)
            let mut seen = BTreeSet::new();
            let mut table: Vec<(CtFlow, FlowOrigin)> = Vec::new();
            for fam in 0..2 {
                for (f, o) in kube_reference::cleanup::flows(&before, after, fam, &mut rng, 120) {
                    if seen.insert((f.src, f.dst)) {
                        table.push((f, o));
                    }
                }
            }
            let entries: Vec<SyntheticEntry> = table.iter().map(|(f, _)| entry(f)).collect();
            let rep = filler
                .insert(&entries, 600, 500)
                .expect("inserting the table");
            if rep.failed() > 0 {
                failures.push(format!(
                    "seed {s} step {k}: {} inserts refused",
                    rep.failed()
                ));
            }
            let inserted = held(&mut filler);
            for ev in events(&before, after) {
                e.handle(ev);
            }
            if let Err(err) = e.sync() {
                failures.push(format!("seed {s} step {k}: sync failed: {err}"));
                break;
            }
            e.drain_cleanup();
            let left = held(&mut filler);
            let deleted: BTreeSet<usize> = table
                .iter()
                .enumerate()
                .filter(|(_, (f, _))| {
                    inserted.contains(&(f.src, f.dst)) && !left.contains(&(f.src, f.dst))
                })
                .map(|(i, _)| i)
                .collect();
            let what = format!("FUZZ_SEED={s} step {k} ({})", st.what);
            failures.extend(compare(
                &what, &before, after, &table, &deleted, &node_ips, t,
            ));
            // the next step starts from an empty table
            let all: Vec<ct_netlink::Flow> = {
                let mut v = Vec::new();
                for fam in [Family::V4, Family::V6] {
                    let _ = filler.list_proto(fam, IPPROTO_UDP, &mut v);
                }
                v
            };
            filler.delete_flows(&all);
            before = after.clone();
        }
        let _ = e.sync();
        failures
    })
}

#[test]
fn cleanup_decisions_on_a_kernel_agree_with_kube_proxy_1_38() {
    require_root!();
    let seed = start_seed();
    let cases = env_u64("FUZZ_KERNEL_CASES").unwrap_or(12);
    let steps = env_u64("FUZZ_STEPS").unwrap_or(4) as usize;
    eprintln!("fuzz cleanup kernel: FUZZ_SEED={seed} FUZZ_KERNEL_CASES={cases} FUZZ_STEPS={steps}");
    let mut t = Tally::default();
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    for i in 0..cases {
        // a namespace per case: its conntrack table and our tables start empty
        let ns = Netns::new("fzc");
        failures.extend(run_case(&ns, seed.wrapping_add(i), steps, &mut t));
        if failures.len() > 20 {
            break;
        }
    }
    let by_origin: BTreeMap<_, _> = t.by_origin.clone();
    eprintln!(
        "fuzz cleanup kernel: {cases} cases in {:?}: {} flows, {} deleted, {} by 1.38 ({} NodePort scope, {} ready not serving, {} stale before), {} earlier; {by_origin:?}",
        started.elapsed(),
        t.flows,
        t.deleted,
        t.upstream,
        t.nodeport_scope,
        t.ready_not_serving,
        t.stale_before,
        t.earlier
    );
    assert!(
        failures.is_empty(),
        "{} disagreements (FUZZ_SEED={seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(t.deleted > 0, "the sample saw deletions: {t:?}");
}
