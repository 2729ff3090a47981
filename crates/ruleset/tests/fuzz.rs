//! The fuzzer's pure half (issue 21 item 6b, docs/fuzzing.md): random legal clusters from
//! `kube-reference`, converted by `kube-model`, compiled by `ruleset`; every generated
//! packet traced through the compiled tables (`ruleset::trace`) and its verdict compared
//! with `kube_reference::Model`, an independent reference of kube-proxy's semantics.
//! Change sequences: each step's batch from the incremental compiler played onto the
//! tables the previous ones left (`ruleset::apply`, as the kernel would), traced the same
//! way: a bug that the incremental compiler shares with a fresh compile, or element data
//! a batch gets wrong, shows as a verdict the reference does not give.
//!
//! `FUZZ_CASES` (default 60) cases from `FUZZ_SEED` (default: from the clock, printed);
//! every failure names its seed: `FUZZ_SEED=<seed> FUZZ_CASES=1` reproduces it.
//! `FUZZ_PROBES` bounds the packets per case (default 60, 0 = all).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use kube_model::Cluster;
use kube_reference::{changes, generate, Case, Model, Origin, Probe, Rng, Verdict};
use ruleset::trace::{Fate, Trace};
use ruleset::{compile, Config, Packet};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub fn config(case: &Case) -> Config {
    serde_json::from_str(&case.env.config_json()).expect("the environment's NlproxyConfig")
}

pub fn cluster(case: &Case) -> Cluster {
    let (c, mut errors) = Cluster::from_objects(&case.services, &case.slices, Some(&case.node));
    // slices of a headless service name a service the model leaves out: not an error
    errors.retain(|e| !matches!(e, kube_model::ObjectError::MissingService { .. }));
    assert!(
        errors.is_empty(),
        "seed {}: kube-model refused a legal object: {errors:?}",
        case.seed
    );
    c
}

fn packet(p: &Probe) -> Packet {
    Packet {
        src: p.src,
        dst: p.dst,
        proto: p.proto,
        sport: 40000,
        dport: p.dport,
        iif: match p.origin {
            Origin::Pod => Some("veth1".into()),
            Origin::External => Some("eth0".into()),
            Origin::Node => None,
        },
        local_origin: p.origin == Origin::Node,
        mark: 0,
    }
}

/// The tracer's outcomes as a verdict (an `Err` when they fit none).
fn observed(t: &Trace) -> Result<Verdict, String> {
    if t.outcomes.is_empty() {
        return Err("no outcome".into());
    }
    if t.outcomes.iter().any(|o| o.dnat.is_some()) {
        let mut m = BTreeMap::new();
        for o in &t.outcomes {
            let Some((a, port)) = o.dnat else {
                return Err("some paths DNAT, others not".into());
            };
            if o.fate != Fate::Out {
                return Err(format!("DNAT then {:?}", o.fate));
            }
            let k = SocketAddr::new(a, port);
            if m.insert(k, o.masquerade).is_some_and(|v| v != o.masquerade) {
                return Err(format!("{k} masqueraded on some paths only"));
            }
        }
        return Ok(Verdict::Dnat(m));
    }
    match t.fate() {
        Some(Fate::Reject) => Ok(Verdict::Reject),
        Some(Fate::Drop) => Ok(Verdict::Drop),
        Some(Fate::Local) | Some(Fate::Out) => Ok(Verdict::NoMatch),
        None => Err(format!("several fates {:?}", t.fates())),
    }
}

/// Deliberate differences between kube-nlproxy and upstream, by name, with the
/// predicate that recognises them (docs/fuzzing.md). None so far.
fn excluded(_case: &Case, _p: &Probe) -> Option<&'static str> {
    None
}

/// Compare every probe of `case` against `tables`; the disagreements as messages.
fn compare(
    case: &Case,
    tables: &[nft_model::Table],
    rng: &mut Rng,
    max: usize,
    what: &str,
) -> Vec<String> {
    let model = Model::new(case);
    let mut out = Vec::new();
    for p in kube_reference::packets::probes(case, rng, max) {
        if excluded(case, &p).is_some() {
            continue;
        }
        let want = model.verdict(&p);
        let t = ruleset::trace(tables, &case.env.local_addrs, &packet(&p));
        match observed(&t) {
            Ok(got) if got == want => {}
            got => {
                let objects = if out.is_empty() {
                    dump(case)
                } else {
                    String::new()
                };
                out.push(format!(
                    "seed {} {what}: {p}: model {want:?}, ruleset {got:?}\n{t}{objects}",
                    case.seed
                ))
            }
        }
    }
    out
}

/// `FUZZ_DUMP=1`: print the case's objects (JSON) with its first disagreement.
fn dump(case: &Case) -> String {
    if std::env::var_os("FUZZ_DUMP").is_none() {
        return String::new();
    }
    let mut s = String::new();
    for o in &case.services {
        s.push_str(&serde_json::to_string(o).unwrap_or_default());
        s.push('\n');
    }
    for o in &case.slices {
        s.push_str(&serde_json::to_string(o).unwrap_or_default());
        s.push('\n');
    }
    s
}

fn report(failures: &[String], cases: u64, seed: u64) {
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(5).collect();
        panic!(
            "{} disagreements in {cases} cases from FUZZ_SEED={seed}; first ones:\n{}",
            failures.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

fn start_seed() -> u64 {
    env_u64("FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    })
}

#[test]
fn compiled_clusters_agree_with_the_reference() {
    let seed = start_seed();
    let cases = env_u64("FUZZ_CASES").unwrap_or(60);
    let max = env_u64("FUZZ_PROBES").unwrap_or(60) as usize;
    eprintln!("fuzz: FUZZ_SEED={seed} FUZZ_CASES={cases}");
    let mut failures = Vec::new();
    let started = std::time::Instant::now();
    for i in 0..cases {
        let case = generate(seed.wrapping_add(i));
        let compiled = compile(&cluster(&case), &config(&case)).expect("config is valid");
        let mut rng = Rng::new(case.seed ^ 0x5eed);
        failures.extend(compare(&case, &compiled.tables, &mut rng, max, "full"));
        if (i + 1) % 10_000 == 0 {
            eprintln!(
                "fuzz: {} cases, {:?}, {} disagreements",
                i + 1,
                started.elapsed(),
                failures.len()
            );
        }
        if failures.len() > 50 {
            break;
        }
    }
    eprintln!("fuzz: {cases} cases in {:?}", started.elapsed());
    report(&failures, cases, seed);
}

#[test]
fn incremental_change_sequences_agree_with_the_reference() {
    let seed = start_seed().wrapping_add(1 << 32);
    let cases = env_u64("FUZZ_CASES").unwrap_or(60) / 5;
    let max = env_u64("FUZZ_PROBES").unwrap_or(60) as usize / 2;
    eprintln!("fuzz (changes): FUZZ_SEED={seed} FUZZ_CASES={cases}");
    let mut failures = Vec::new();
    for i in 0..cases {
        let start = generate(seed.wrapping_add(i));
        let cfg = config(&start).parse().expect("config is valid");
        let mut compiler = ruleset::Compiler::new(cfg, &cluster(&start));
        // what the kernel holds: the batches played onto the first tables
        let mut kernel = compiler.tables();
        let mut rng = Rng::new(start.seed ^ 0xc4a9);
        for (n, step) in changes::sequence(&start, &mut rng.fork(), 8)
            .into_iter()
            .enumerate()
        {
            let mut ch = ruleset::Changes::default();
            for (ns, name) in &step.services {
                ch.services
                    .insert(kube_model::ServiceKey::new(ns.clone(), name.clone()));
            }
            let up = compiler.update(&cluster(&step.case), &ch);
            compiler.confirm();
            let what = format!("step {n} ({})", step.what);
            if let Err(e) = ruleset::apply(&mut kernel, &up.ops) {
                failures.push(format!(
                    "seed {} {what}: the batch does not apply: {e}",
                    start.seed
                ));
                break;
            }
            // the batch's element data, not only its op kinds: trace what it leaves
            failures.extend(compare(&step.case, &kernel, &mut rng, max, &what));
        }
        if failures.len() > 50 {
            break;
        }
    }
    report(&failures, cases, seed);
}
