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
//! `FUZZ_PROBES` bounds the packets per case (default 60, 0 = all, at most 20,000).
//! Large clusters (`generate_large`): `FUZZ_LARGE_CASES` (default 1) cases of
//! `FUZZ_LARGE_SERVICES` (default 2,000) services, 200 packets each, then 3 changes
//! through the incremental compiler.

mod reference;

use kube_reference::{changes, generate_large, generate_varied as generate, Rng};
use reference::{
    changes as step_changes, cluster, compare, config, env_u64, excluded_counts, report, start_seed,
};
use ruleset::compile;

#[test]
fn compiled_clusters_agree_with_the_reference() {
    let seed = start_seed();
    let cases = env_u64("FUZZ_CASES").unwrap_or(60);
    let max = env_u64("FUZZ_PROBES").unwrap_or(60) as usize;
    eprintln!("fuzz: FUZZ_SEED={seed} FUZZ_CASES={cases}");
    let mut failures = Vec::new();
    let mut envs = std::collections::BTreeMap::new();
    let started = std::time::Instant::now();
    for i in 0..cases {
        let case = generate(seed.wrapping_add(i));
        tally(&mut envs, &case.env);
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
    eprintln!(
        "fuzz: {cases} cases in {:?}; deliberate differences (excluded()): {}",
        started.elapsed(),
        excluded_counts()
    );
    let envs: Vec<String> = envs.iter().map(|(k, n)| format!("{k} {n}")).collect();
    eprintln!("fuzz: environments: {}", envs.join(", "));
    report(&failures, cases, seed);
}

/// Count the environment's settings (printed with the run).
fn tally(t: &mut std::collections::BTreeMap<String, u64>, env: &kube_reference::Env) {
    let detect = format!("{:?}", env.detect_local);
    let stack = match (
        env.node_ips.iter().any(|a| a.is_ipv4()),
        env.node_ips.iter().any(|a| a.is_ipv6()),
    ) {
        (true, true) => "dual-stack",
        (true, false) => "IPv4-only",
        _ => "IPv6-only",
    };
    let keys = [
        format!("{:?}", env.mode),
        detect.split('(').next().unwrap_or("").to_string(),
        stack.to_string(),
        format!("nodePortAddresses={:?}", env.node_port_addresses),
        format!("masqueradeAll={}", env.masquerade_all),
    ];
    for k in keys {
        *t.entry(k).or_default() += 1;
    }
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
        // the environment may change at one step (its own stream: the objects and
        // samples stay those of the seed): the host's addresses or all of it
        let mut env_rng = Rng::new(start.seed ^ 0xe4e4);
        let switch_at = env_rng.below(16);
        let mut env: Option<kube_reference::Env> = None;
        for (n, step) in changes::sequence(&start, &mut rng.fork(), 8)
            .into_iter()
            .enumerate()
        {
            let mut case = step.case.clone();
            let switch = n as u64 == switch_at;
            if switch {
                env = Some(changed_env(&start.env, &mut env_rng));
            }
            if let Some(e) = &env {
                case.env = e.clone();
                case.node = kube_reference::gen::node(e);
            }
            let mut ch = step_changes(&step);
            ch.node = switch && case.node != start.node;
            let what = format!("step {n} ({})", step.what);
            let c = cluster(&case);
            let mut ups = vec![compiler.update(&c, &ch)];
            compiler.confirm();
            if switch {
                // the new configuration, as the engine hands it over after the objects
                let cfg = config(&case).parse().expect("config is valid");
                ups.push(compiler.set_config(cfg, &c));
                compiler.confirm();
            }
            let what = if switch {
                format!("{what}, environment now {:?}", case.env)
            } else {
                what
            };
            let mut bad = false;
            for up in &ups {
                if let Err(e) = ruleset::apply(&mut kernel, &up.ops) {
                    failures.push(format!(
                        "seed {} {what}: the batch does not apply: {e}",
                        start.seed
                    ));
                    bad = true;
                }
            }
            if bad {
                break;
            }
            // the batch's element data, not only its op kinds: trace what it leaves
            failures.extend(compare(&case, &kernel, &mut rng, max, &what));
        }
        if failures.len() > 50 {
            break;
        }
    }
    report(&failures, cases, seed);
}

#[test]
fn large_clusters_agree_with_the_reference() {
    let seed = start_seed().wrapping_add(2 << 32);
    let cases = env_u64("FUZZ_LARGE_CASES").unwrap_or(1);
    let services = env_u64("FUZZ_LARGE_SERVICES").unwrap_or(2000) as usize;
    eprintln!(
        "fuzz (large): FUZZ_SEED={seed} FUZZ_LARGE_CASES={cases} FUZZ_LARGE_SERVICES={services}"
    );
    let mut failures = Vec::new();
    for i in 0..cases {
        let started = std::time::Instant::now();
        let case = generate_large(seed.wrapping_add(i), services);
        let cfg = config(&case).parse().expect("config is valid");
        let mut compiler = ruleset::Compiler::new(cfg, &cluster(&case));
        let mut kernel = compiler.tables();
        let mut rng = Rng::new(case.seed ^ 0x5eed);
        failures.extend(compare(&case, &kernel, &mut rng, 200, "full"));
        for (n, step) in changes::sequence(&case, &mut rng.fork(), 3)
            .into_iter()
            .enumerate()
        {
            let up = compiler.update(&cluster(&step.case), &step_changes(&step));
            compiler.confirm();
            let what = format!("step {n} ({})", step.what);
            if let Err(e) = ruleset::apply(&mut kernel, &up.ops) {
                failures.push(format!(
                    "seed {} {what}: the batch does not apply: {e}",
                    case.seed
                ));
                break;
            }
            failures.extend(compare(&step.case, &kernel, &mut rng, 100, &what));
        }
        eprintln!(
            "fuzz (large): seed {}: {} services, {} slices in {:?}",
            case.seed,
            case.services.len(),
            case.slices.len(),
            started.elapsed()
        );
    }
    report(&failures, cases, seed);
}

/// `kube-model`'s lenient parsers against the model's own (written apart from
/// upstream's rules) on random texts over the address alphabet: they must agree on every
/// text the API server could store (no surrounding whitespace; a range with its `/`).
#[test]
fn address_parsers_agree_with_the_reference() {
    let seed = start_seed().wrapping_add(3 << 32);
    let cases = env_u64("FUZZ_CASES").unwrap_or(60) * 1000;
    let mut rng = Rng::new(seed);
    let pieces = [
        "0", "1", "9", "00", "198", "255", "256", "018", "0000", "ffff", "FFFF", "db8", "2001",
        "10000", "a", ".", ".", ".", ":", ":", "::", "/", "24", "96", "120", "0024", "129",
    ];
    let mut failures = Vec::new();
    for _ in 0..cases {
        let text: String = (0..rng.range(1, 12)).map(|_| *rng.pick(&pieces)).collect();
        let product = kube_model::parse_ip_sloppy(&text);
        let model = kube_reference::ip::parse_ip(&text);
        if product != model {
            failures.push(format!(
                "ip {text:?}: kube-model {product:?}, model {model:?}"
            ));
        }
        if text.contains('/') {
            let product = kube_model::parse_cidr_sloppy(&text).map(|c| (c.addr, c.prefix));
            let model = kube_reference::ip::parse_cidr(&text);
            if product != model {
                failures.push(format!(
                    "cidr {text:?}: kube-model {product:?}, model {model:?}"
                ));
            }
        }
        if failures.len() > 20 {
            break;
        }
    }
    assert!(
        failures.is_empty(),
        "FUZZ_SEED={seed}: {}",
        failures.join("\n")
    );
}

/// The environment a sequence changes to: a quarter of the time the service CIDRs
/// (created or widened), then half the time the host's addresses only (an address of
/// each family appears, or the non-primary ones go), else another
/// environment altogether ([`kube_reference::Env::random`], the node's name, zone and
/// NodePort range kept).
fn changed_env(env: &kube_reference::Env, rng: &mut Rng) -> kube_reference::Env {
    if rng.chance(25) {
        // the service CIDRs (ServiceCIDR objects created or widened): 198.18.150.0/24
        // holds the probes' address "outside the service CIDRs", which becomes an
        // unallocated one; the IPv4 range may also grow to a /23
        let mut e = env.clone();
        let v4 = e.service_cidrs.iter().position(|(a, _)| a.is_ipv4());
        if let (Some(i), true) = (v4, rng.chance(50)) {
            e.service_cidrs[i].1 = e.service_cidrs[i].1.saturating_sub(1);
        }
        e.service_cidrs.push(("198.18.150.0".parse().unwrap(), 24));
        if rng.chance(50) && e.service_cidrs.iter().any(|(a, _)| a.is_ipv6()) {
            e.service_cidrs
                .push(("2001:db8:150::".parse().unwrap(), 112));
        }
        return e;
    }
    if rng.chance(50) {
        let mut e = env.clone();
        if rng.chance(50) {
            e.local_addrs.extend(
                ["198.18.202.1", "2001:db8:202::1"].map(|a| a.parse::<std::net::IpAddr>().unwrap()),
            );
        } else {
            let primary = e.node_ips.clone();
            e.local_addrs.retain(|a| primary.contains(a));
        }
        return e;
    }
    kube_reference::Env {
        node_name: env.node_name.clone(),
        zone: env.zone.clone(),
        node_port_range: env.node_port_range,
        ..kube_reference::Env::random(rng)
    }
}
