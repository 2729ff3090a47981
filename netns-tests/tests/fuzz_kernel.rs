//! The fuzzer's kernel half (issue 21 item 6a, docs/fuzzing.md): every generated legal
//! cluster (`kube-reference`) is compiled and its batch committed to a real kernel in a
//! namespace of its own; then a random change sequence goes through the incremental
//! compiler and each step's batch is committed. The kernel must accept every batch.
//! Root only (`require_root`).
//!
//! `FUZZ_KERNEL_CASES` (default 100) cases from `FUZZ_SEED` (default: the clock; printed,
//! and named in every failure), `FUZZ_STEPS` (default 8) changes each.

#[path = "../../crates/ruleset/tests/reference/mod.rs"]
mod reference;

use kube_reference::{changes, generate, Rng};
use netns_tests::{require_root, Netns};
use nft_netlink::Nft;
use reference::{changes as step_changes, cluster, config, env_u64, start_seed};
use ruleset::{compile, diff, Compiler};

/// Commit `ops`; the refusal as a message naming the seed.
fn commit(nft: &mut Nft, ops: &[nft_model::Op], seed: u64, what: &str) -> Result<(), String> {
    nft.commit(ops, None)
        .map(|_| ())
        .map_err(|e| format!("FUZZ_SEED={seed} {what}: the kernel refused the batch: {e}"))
}

fn run_case(nft: &mut Nft, seed: u64, steps: usize) -> Result<(), String> {
    let case = generate(seed);
    let tables = compile(&cluster(&case), &config(&case))
        .expect("config is valid")
        .tables;
    commit(nft, &diff(&[], &tables), seed, "full compile")?;
    commit(nft, &diff(&tables, &[]), seed, "delete")?;
    // a change sequence, batch by batch as the engine sends them
    let cfg = config(&case).parse().expect("config is valid");
    let mut compiler = Compiler::new(cfg, &cluster(&case));
    let start = compiler.tables();
    commit(nft, &diff(&[], &start), seed, "sequence start")?;
    compiler.confirm();
    let mut rng = Rng::new(seed ^ 0xc4a9);
    for (n, step) in changes::sequence(&case, &mut rng, steps)
        .into_iter()
        .enumerate()
    {
        let up = compiler.update(&cluster(&step.case), &step_changes(&step));
        commit(nft, &up.ops, seed, &format!("step {n} ({})", step.what))?;
        compiler.confirm();
    }
    commit(nft, &diff(&compiler.tables(), &[]), seed, "sequence delete")
}

#[test]
fn generated_clusters_and_their_changes_commit() {
    require_root!();
    let seed = start_seed();
    let cases = env_u64("FUZZ_KERNEL_CASES").unwrap_or(100);
    let steps = env_u64("FUZZ_STEPS").unwrap_or(8) as usize;
    eprintln!("fuzz kernel: FUZZ_SEED={seed} FUZZ_KERNEL_CASES={cases}");
    let mut ns = Netns::new("fuzz");
    let started = std::time::Instant::now();
    let mut failures: Vec<String> = Vec::new();
    for i in 0..cases {
        let s = seed.wrapping_add(i);
        let r = ns.run(|| {
            let mut nft = Nft::open().expect("nftables socket");
            run_case(&mut nft, s, steps)
        });
        if let Err(e) = r {
            failures.push(e);
            // the next case starts from an empty namespace
            ns = Netns::new("fuzz");
        }
    }
    eprintln!("fuzz kernel: {cases} cases in {:?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {cases} cases refused (FUZZ_SEED={seed}):\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
