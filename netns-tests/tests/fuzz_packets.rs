//! The fuzzer's packet sample (issue 21 item 6c, docs/fuzzing.md): for generated legal
//! clusters (`kube-reference`), the compiled batch is committed to a kernel in the node
//! namespace of a world built from the case (`netns_tests::fuzz_world`), and a sample of
//! the case's probes is sent for real. What the kernel did (an endpoint answered, seeing
//! the source masqueraded or not; refused; silence; the node or the route onwards
//! answered) must be the verdict of the reference model and of the tracer. Root only.
//!
//! Change sequences too: a case and `kube_reference::changes::sequence` of it, each
//! state committed by the sync engine (in process, on real nftables and conntrack
//! sockets in the node namespace: its batches, incremental ones after the first), then
//! a sample of that state's probes sent; what the kernel did must be the model's
//! verdict for the state and the tracer's through the tables the engine committed.
//!
//! `FUZZ_PACKET_CASES` (default 40) cases from `FUZZ_SEED` (default: the clock; printed
//! and named in every failure), `FUZZ_PACKET_PROBES` (default 8) probes sent per case
//! (or state of a sequence), chosen by the seed among those the world can send;
//! `FUZZ_PACKET_SEQUENCES` (default 6) sequences of `FUZZ_PACKET_STEPS` (default 4)
//! changes from the same seed.

#[path = "../../crates/sync-engine/tests/cleanup_reference/mod.rs"]
mod cleanup_reference;
#[path = "../../crates/ruleset/tests/reference/mod.rs"]
mod reference;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use kube_reference::{changes, generate, Case, Model, Origin, Probe, Rng};
use netns_tests::cluster::Outcome;
use netns_tests::fuzz_world::{raise_fd_limit, unrealisable, World, MAX_POD_SOURCES};
use netns_tests::{require_root, scaled};
use nft_model::{Op, Table, TableRef};
use nft_netlink::Nft;
use reference::{cluster, config, env_u64, start_seed, traced};
use ruleset::{compile, diff};
use sync_engine::{CommitStats, EngineError, Event, NftKernel, SystemClock};

/// Silence after this long is "dropped" (replies and refusals take milliseconds).
const TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Default)]
struct Tally {
    sent: usize,
    /// Probes sent by protocol name.
    by_proto: BTreeMap<&'static str, usize>,
    /// States of sequences judged (the first sync's included).
    states: usize,
    skipped: BTreeMap<&'static str, usize>,
    failures: Vec<String>,
}

fn proto_name(p: u8) -> &'static str {
    match p {
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        _ => "other",
    }
}

/// A uniform sample of at most `max` of `case`'s realisable probes (partial
/// Fisher-Yates; of protocol `only` if given), the others counted as skipped.
fn sample_of(
    case: &Case,
    rng: &mut Rng,
    max: usize,
    only: Option<u8>,
    tally: &mut Tally,
) -> Vec<Probe> {
    let mut sample: Vec<Probe> = Vec::new();
    for p in kube_reference::packets::probes(case, rng, 0) {
        match unrealisable(&p) {
            Some(why) => *tally.skipped.entry(why).or_default() += 1,
            None if only.is_some_and(|o| o != p.proto) => {
                *tally.skipped.entry("another protocol").or_default() += 1
            }
            None => sample.push(p),
        }
    }
    let n = max.min(sample.len());
    for i in 0..n {
        let j = i + rng.below((sample.len() - i) as u64) as usize;
        sample.swap(i, j);
    }
    *tally.skipped.entry("not sampled").or_default() += sample.len() - n;
    sample.truncate(n);
    sample
}

/// Send `sample` at once through `world`; what the kernel did with each.
fn send_all(world: &World, sample: &[Probe]) -> Vec<Outcome> {
    let timeout = scaled(TIMEOUT);
    std::thread::scope(|s| {
        let hs: Vec<_> = sample
            .iter()
            .map(|p| s.spawn(|| world.send(p, timeout)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    })
}

/// Compare what the kernel did (`got`) with the model of `case` and the tracer through
/// `tables` (and, when given, through `read_back`: the tables as the kernel holds
/// them, dumped over netlink); a disagreement as a message starting with `what`.
#[allow(clippy::too_many_arguments)]
fn judge(
    what: &str,
    case: &Case,
    model: &Model,
    tables: &[Table],
    read_back: Option<&[Table]>,
    world: &World,
    sample: &[Probe],
    got: Vec<Outcome>,
    tally: &mut Tally,
) {
    for (p, got) in sample.iter().zip(got) {
        tally.sent += 1;
        *tally.by_proto.entry(proto_name(p.proto)).or_default() += 1;
        let want = model.verdict(p);
        let tr = traced(case, tables, p);
        let kernel_ok = world.agrees(&want, p, &got);
        let held = read_back.map(|t| traced(case, t, p));
        let held_ok = held.as_ref().is_none_or(|h| h.as_ref() == Ok(&want));
        if !kernel_ok || tr.as_ref() != Ok(&want) || !held_ok {
            let side = if !kernel_ok {
                "the kernel disagrees"
            } else if !held_ok {
                "the tracer through the tables read back disagrees"
            } else {
                "the tracer disagrees"
            };
            let held = held
                .map(|h| format!(", read back {h:?}"))
                .unwrap_or_default();
            tally.failures.push(format!(
                "{what}: {p}: model {want:?}, tracer {tr:?}{held}, kernel {got:?} ({side})"
            ));
        }
    }
}

/// `tables` as the kernel of the calling thread's namespace holds them (an absent one
/// as an empty table of that name).
fn read_back(nft: &mut Nft, tables: &[Table]) -> Result<Vec<Table>, String> {
    tables
        .iter()
        .map(|t| {
            nft.dump_table(&TableRef::new(t.family, t.name.clone()))
                .map(|d| d.unwrap_or_else(|| Table::new(t.family, t.name.clone())))
                .map_err(|e| format!("reading {} back: {e}", t.name))
        })
        .collect()
}

/// How the batch is broken for the negative control.
#[derive(Clone, Copy, PartialEq)]
enum Batch {
    AsCompiled,
    /// Every element of the `endpoints-*` maps left out.
    WithoutEndpoints,
}

fn run_case(seed: u64, max: usize, batch: Batch, only: Option<u8>, tally: &mut Tally) {
    let case = generate(seed);
    let mut tables = compile(&cluster(&case), &config(&case))
        .expect("config is valid")
        .tables;
    if batch == Batch::WithoutEndpoints {
        for t in &mut tables {
            for s in t
                .sets
                .iter_mut()
                .filter(|s| s.name.starts_with("endpoints-"))
            {
                s.elements.clear();
            }
        }
    }
    let model = Model::new(&case);
    let mut rng = Rng::new(seed ^ 0x9ac7);
    let sample = sample_of(&case, &mut rng, max, only, tally);
    if sample.is_empty() {
        return;
    }
    let world = World::build(&case, &sample);
    let ops = diff(&[], &tables);
    if let Err(e) = world
        .node
        .run(|| Nft::open().and_then(|mut nft| nft.commit(&ops, None).map(|_| ())))
    {
        tally.failures.push(format!(
            "FUZZ_SEED={seed}: the kernel refused the batch: {e}"
        ));
        return;
    }
    let got = send_all(&world, &sample);
    judge(
        &format!("FUZZ_SEED={seed} FUZZ_PACKET_CASES=1"),
        &case,
        &model,
        &tables,
        None,
        &world,
        &sample,
        got,
        tally,
    );
}

/// The engine's nftables kernel, optionally broken for the negative control: after the
/// first commit, every element of the `endpoints-*` maps left out of its batches.
struct Kernel {
    nft: Nft,
    strip: bool,
    commits: usize,
}

fn strip_endpoints(ops: &[Op]) -> Vec<Op> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::AddElements { set, .. } if set.starts_with("endpoints-") => {}
            Op::AddSet { set, .. } if set.name.starts_with("endpoints-") => {
                let mut op = op.clone();
                if let Op::AddSet { set, .. } = &mut op {
                    set.elements.clear();
                }
                out.push(op);
            }
            op => out.push(op.clone()),
        }
    }
    out
}

impl NftKernel for Kernel {
    fn generation(&mut self) -> Result<u32, EngineError> {
        NftKernel::generation(&mut self.nft)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        self.commits += 1;
        if self.strip && self.commits > 1 {
            return NftKernel::commit(&mut self.nft, &strip_endpoints(ops), genid);
        }
        NftKernel::commit(&mut self.nft, ops, genid)
    }
    fn dump_table(
        &mut self,
        t: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError> {
        NftKernel::dump_table(&mut self.nft, t, others_only)
    }
}

/// Every conntrack entry of the calling thread's namespace deleted (TCP, UDP, SCTP):
/// each state's probes are first packets, whatever an earlier state's probes left.
fn flush_conntrack(ct: &mut ct_netlink::Conntrack) {
    for fam in [ct_netlink::Family::V4, ct_netlink::Family::V6] {
        for proto in [6u8, 17, 132] {
            let mut flows = Vec::new();
            let _ = ct.list_proto(fam, proto, &mut flows);
            if !flows.is_empty() {
                ct.delete_flows(&flows);
            }
        }
    }
}

/// A change sequence of `steps` from the case of `seed`, each state (the first one
/// included) committed by the engine and `max` of its probes sent.
fn run_sequence(seed: u64, steps: usize, max: usize, strip: bool, tally: &mut Tally) {
    let start = generate(seed);
    let mut rng = Rng::new(seed ^ 0x5e9_c4a9);
    let seq = changes::sequence(&start, &mut rng, steps);
    let mut states: Vec<(String, &Case)> = vec![("first sync".into(), &start)];
    for (k, st) in seq.iter().enumerate() {
        states.push((format!("step {k} ({})", st.what), &st.case));
    }
    // each state's sample; a Pod source past the world's legs is left out
    let mut pod_srcs: BTreeSet<IpAddr> = BTreeSet::new();
    let mut samples: Vec<Vec<Probe>> = Vec::new();
    for (_, c) in &states {
        let mut s = sample_of(c, &mut rng, max, None, tally);
        s.retain(|p| {
            if p.origin != Origin::Pod
                || pod_srcs.contains(&p.src)
                || pod_srcs.len() < MAX_POD_SOURCES
            {
                if p.origin == Origin::Pod {
                    pod_srcs.insert(p.src);
                }
                true
            } else {
                *tally
                    .skipped
                    .entry("pod source past the world's legs")
                    .or_default() += 1;
                false
            }
        });
        samples.push(s);
    }
    let cases: Vec<&Case> = states.iter().map(|(_, c)| *c).collect();
    let all: Vec<Probe> = samples.iter().flatten().cloned().collect();
    let world = World::build_for(&cases, &all);
    let cfg = cleanup_reference::engine_config(&start);
    let name = format!("FUZZ_SEED={seed} FUZZ_PACKET_SEQUENCES=1 FUZZ_PACKET_STEPS={steps}");
    let world = &world;
    let t = world.node.run(|| {
        let mut t = Tally::default();
        let nft = Nft::open().expect("nftables socket");
        let ct = ct_netlink::Conntrack::open(ct_netlink::Config::default()).expect("ctnetlink");
        let mut reader = Nft::open().expect("nftables socket");
        let mut flusher =
            ct_netlink::Conntrack::open(ct_netlink::Config::default()).expect("ctnetlink");
        let mut e = sync_engine::Engine::new(
            cfg,
            Kernel {
                nft,
                strip,
                commits: 0,
            },
            ct,
            SystemClock,
        );
        let none = Case {
            services: vec![],
            slices: vec![],
            ..start.clone()
        };
        e.handle(Event::NodeApplied(start.node.clone()));
        let mut before = &none;
        for (((what, case), sample), first) in states
            .iter()
            .zip(&samples)
            .zip(std::iter::once(true).chain(std::iter::repeat(false)))
        {
            for ev in cleanup_reference::events(before, case) {
                e.handle(ev);
            }
            if first {
                e.handle(Event::ServicesListed);
                e.handle(Event::SlicesListed);
            }
            before = case;
            let what = format!("{name} {what}");
            if let Err(err) = e.sync() {
                t.failures
                    .push(format!("{what}: the engine's sync failed: {err}"));
                break;
            }
            e.drain_cleanup();
            t.states += 1;
            // a service port left out because the kernel refused its rules is a
            // failure of its own (every generated object is legal)
            let skipped = e.status().read(|st| st.skipped_service_ports.len());
            if skipped > 0 {
                t.failures.push(format!(
                    "{what}: the engine skipped {skipped} service ports the kernel refused"
                ));
            }
            let Some(tables) = e.committed() else {
                t.failures
                    .push(format!("{what}: the engine holds no committed tables"));
                break;
            };
            let held = match read_back(&mut reader, &tables) {
                Ok(h) => h,
                Err(err) => {
                    t.failures.push(format!("{what}: {err}"));
                    break;
                }
            };
            flush_conntrack(&mut flusher);
            let got = send_all(world, sample);
            judge(
                &what,
                case,
                &Model::new(case),
                &tables,
                Some(&held),
                world,
                sample,
                got,
                &mut t,
            );
        }
        t
    });
    tally.failures.extend(t.failures);
    tally.sent += t.sent;
    tally.states += t.states;
    for (k, v) in t.by_proto {
        *tally.by_proto.entry(k).or_default() += v;
    }
}

fn summary(t: &Tally) -> String {
    format!(
        "{} probes sent {:?}, {} disagreements, skipped {:?}",
        t.sent,
        t.by_proto,
        t.failures.len(),
        t.skipped
    )
}

/// `f`, a panic (building the world: a bind, an `ip` command) as a failure naming `what`.
fn guarded(what: String, tally: &mut Tally, f: impl FnOnce(&mut Tally)) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(tally)));
    if let Err(e) = r {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        tally.failures.push(format!("{what}: panicked: {msg}"));
    }
}

fn verdict(tally: &Tally, what: &str) {
    assert!(
        tally.failures.is_empty(),
        "{} of {} probes disagree in {what}; first ones:\n{}",
        tally.failures.len(),
        tally.sent,
        tally
            .failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_sample_of_packets_sent_for_real_agrees_with_model_and_tracer() {
    require_root!();
    raise_fd_limit();
    let seed = start_seed();
    let cases = env_u64("FUZZ_PACKET_CASES").unwrap_or(40);
    let max = env_u64("FUZZ_PACKET_PROBES").unwrap_or(8) as usize;
    eprintln!("fuzz packets: FUZZ_SEED={seed} FUZZ_PACKET_CASES={cases} FUZZ_PACKET_PROBES={max}");
    let started = Instant::now();
    let mut tally = Tally::default();
    for i in 0..cases {
        let s = seed.wrapping_add(i);
        let seen = tally.failures.len();
        guarded(
            format!("FUZZ_SEED={s} FUZZ_PACKET_CASES=1"),
            &mut tally,
            |t| run_case(s, max, Batch::AsCompiled, None, t),
        );
        for f in &tally.failures[seen..] {
            eprintln!("fuzz packets: disagreement: {f}");
        }
        if (i + 1) % 50 == 0 {
            eprintln!(
                "fuzz packets: {} cases, {:?}: {}",
                i + 1,
                started.elapsed(),
                summary(&tally)
            );
        }
    }
    eprintln!(
        "fuzz packets: {cases} cases in {:?}: {}",
        started.elapsed(),
        summary(&tally)
    );
    verdict(&tally, &format!("{cases} cases from FUZZ_SEED={seed}"));
}

#[test]
fn change_sequences_committed_by_the_engine_agree_with_model_and_tracer() {
    require_root!();
    raise_fd_limit();
    let seed = start_seed();
    let seqs = env_u64("FUZZ_PACKET_SEQUENCES").unwrap_or(6);
    let steps = env_u64("FUZZ_PACKET_STEPS").unwrap_or(4) as usize;
    let max = env_u64("FUZZ_PACKET_PROBES").unwrap_or(8) as usize;
    eprintln!(
        "fuzz packets (sequences): FUZZ_SEED={seed} FUZZ_PACKET_SEQUENCES={seqs} FUZZ_PACKET_STEPS={steps} FUZZ_PACKET_PROBES={max}"
    );
    let started = Instant::now();
    let mut tally = Tally::default();
    for i in 0..seqs {
        let s = seed.wrapping_add(i);
        let seen = tally.failures.len();
        guarded(
            format!("FUZZ_SEED={s} FUZZ_PACKET_SEQUENCES=1 FUZZ_PACKET_STEPS={steps}"),
            &mut tally,
            |t| run_sequence(s, steps, max, false, t),
        );
        for f in &tally.failures[seen..] {
            eprintln!("fuzz packets (sequences): disagreement: {f}");
        }
        if (i + 1) % 10 == 0 {
            eprintln!(
                "fuzz packets (sequences): {} sequences, {} states, {:?}: {}",
                i + 1,
                tally.states,
                started.elapsed(),
                summary(&tally)
            );
        }
    }
    eprintln!(
        "fuzz packets (sequences): {seqs} sequences of {steps} steps ({} states judged) in {:?}: {}",
        tally.states,
        started.elapsed(),
        summary(&tally)
    );
    verdict(
        &tally,
        &format!("{seqs} sequences of {steps} steps from FUZZ_SEED={seed}"),
    );
}

/// The same for SCTP probes alone: a raw INIT that the kernel does not DNAT where the
/// model says is caught (the SCTP path can fail).
#[test]
fn an_sctp_probe_without_its_endpoints_is_caught() {
    require_root!();
    raise_fd_limit();
    caught(
        "SCTP probes without endpoints",
        &[": sctp "],
        |seed, tally| run_case(seed, 8, Batch::WithoutEndpoints, Some(132), tally),
    );
}

/// The sequences' negative control: the engine's step batches (every commit after the
/// first) without the elements of the `endpoints-*` maps must be caught, naming the
/// seed, the step and a probe the model DNATs.
#[test]
fn a_step_batch_without_its_endpoints_is_caught() {
    require_root!();
    raise_fd_limit();
    caught(
        "step batches without endpoints",
        &[" step "],
        |seed, tally| run_sequence(seed, 4, 8, true, tally),
    );
}

/// The negative control: the same comparison on a batch whose endpoint maps are empty
/// fails, naming the seed and the probe.
#[test]
fn a_batch_without_its_endpoints_is_caught() {
    require_root!();
    raise_fd_limit();
    caught("a batch without endpoints", &[], |seed, tally| {
        run_case(seed, 8, Batch::WithoutEndpoints, None, tally)
    });
}

/// A negative control's loop: `run` with seeds 1 to 40 until one fails; that failure
/// names its seed, a probe the model DNATs and the kernel's disagreement, and holds
/// every one of `words`.
fn caught(what: &str, words: &[&str], mut run: impl FnMut(u64, &mut Tally)) {
    for seed in 1..=40u64 {
        let mut tally = Tally::default();
        run(seed, &mut tally);
        if let Some(f) = tally.failures.first() {
            eprintln!("negative control ({what}), seed {seed}: {f}");
            assert!(f.contains(&format!("FUZZ_SEED={seed} ")), "{f}");
            let model = ["model Dnat(", "the kernel disagrees"];
            for w in model.iter().chain(words) {
                assert!(f.contains(w), "{w:?} not in: {f}");
            }
            return;
        }
    }
    panic!("no case from seeds 1..=40 noticed {what}");
}
