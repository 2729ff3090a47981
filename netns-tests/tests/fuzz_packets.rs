//! The fuzzer's packet sample (issue 21 item 6c, docs/fuzzing.md): for generated legal
//! clusters (`kube-reference`), the compiled batch is committed to a kernel in the node
//! namespace of a world built from the case (`netns_tests::fuzz_world`), and a sample of
//! the case's probes is sent for real. What the kernel did (an endpoint answered, seeing
//! the source masqueraded or not; refused; silence; the node or the route onwards
//! answered) must be the verdict of the reference model and of the tracer. Root only.
//!
//! `FUZZ_PACKET_CASES` (default 40) cases from `FUZZ_SEED` (default: the clock; printed
//! and named in every failure), `FUZZ_PACKET_PROBES` (default 8) probes sent per case,
//! chosen by the seed among those the world can send.

#[path = "../../crates/ruleset/tests/reference/mod.rs"]
mod reference;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_reference::{generate, Model, Probe, Rng};
use netns_tests::fuzz_world::{raise_fd_limit, unrealisable, World};
use netns_tests::{require_root, scaled};
use nft_netlink::Nft;
use reference::{cluster, config, env_u64, start_seed, traced};
use ruleset::{compile, diff};

/// Silence after this long is "dropped" (replies and refusals take milliseconds).
const TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Default)]
struct Tally {
    sent: usize,
    skipped: BTreeMap<&'static str, usize>,
    failures: Vec<String>,
}

/// How the batch is broken for the negative control.
#[derive(Clone, Copy, PartialEq)]
enum Batch {
    AsCompiled,
    /// Every element of the `endpoints-*` maps left out.
    WithoutEndpoints,
}

fn run_case(seed: u64, max: usize, batch: Batch, tally: &mut Tally) {
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
    let mut sample: Vec<Probe> = Vec::new();
    for p in kube_reference::packets::probes(&case, &mut rng, 0) {
        match unrealisable(&p) {
            Some(why) => *tally.skipped.entry(why).or_default() += 1,
            None => sample.push(p),
        }
    }
    // a uniform sample of the realisable ones (partial Fisher-Yates)
    let n = max.min(sample.len());
    for i in 0..n {
        let j = i + rng.below((sample.len() - i) as u64) as usize;
        sample.swap(i, j);
    }
    *tally.skipped.entry("not sampled").or_default() += sample.len() - n;
    sample.truncate(n);
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
    let timeout = scaled(TIMEOUT);
    let got: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = sample
            .iter()
            .map(|p| s.spawn(|| world.send(p, timeout)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("probe thread"))
            .collect()
    });
    for (p, got) in sample.iter().zip(got) {
        tally.sent += 1;
        let want = model.verdict(p);
        let tr = traced(&case, &tables, p);
        let kernel_ok = world.agrees(&want, p, &got);
        if !kernel_ok || tr.as_ref() != Ok(&want) {
            tally.failures.push(format!(
                "FUZZ_SEED={seed} FUZZ_PACKET_CASES=1: {p}: model {want:?}, tracer {tr:?}, kernel {got:?} ({})",
                if kernel_ok { "the tracer disagrees" } else { "the kernel disagrees" }
            ));
        }
    }
}

fn summary(t: &Tally) -> String {
    format!(
        "{} probes sent, {} disagreements, skipped {:?}",
        t.sent,
        t.failures.len(),
        t.skipped
    )
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
        // a panic building the world (a bind, an `ip` command) names the seed too
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_case(s, max, Batch::AsCompiled, &mut tally)
        }));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            tally.failures.push(format!(
                "FUZZ_SEED={s} FUZZ_PACKET_CASES=1: panicked: {msg}"
            ));
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
    assert!(
        tally.failures.is_empty(),
        "{} of {} probes disagree in {cases} cases from FUZZ_SEED={seed}; first ones:\n{}",
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

/// The negative control: the same comparison on a batch whose endpoint maps are empty
/// fails, naming the seed and the probe.
#[test]
fn a_batch_without_its_endpoints_is_caught() {
    require_root!();
    raise_fd_limit();
    for seed in 1..=40u64 {
        let mut tally = Tally::default();
        run_case(seed, 8, Batch::WithoutEndpoints, &mut tally);
        if let Some(f) = tally.failures.first() {
            eprintln!("negative control, seed {seed}: {f}");
            assert!(f.contains(&format!("FUZZ_SEED={seed} ")), "{f}");
            assert!(
                f.contains("model Dnat(") && f.contains("the kernel disagrees"),
                "{f}"
            );
            return;
        }
    }
    panic!("no case from seeds 1..=40 noticed a batch without endpoints");
}
