//! Judging compiled tables by `kube_reference::Model` (docs/fuzzing.md): a generated
//! case as `kube-model` converts it, a probe as the tracer's packet, the tracer's
//! outcomes as a verdict, and the comparison of every sampled probe. Shared by the
//! fuzzer (`fuzz.rs`), the property tests (`incremental.rs`, `prop.rs`) and, by
//! `#[path]`, `netns-tests`' kernel acceptance (`fuzz_kernel.rs`) and packet sample
//! (`fuzz_packets.rs`), so that one mapping of cases, probes and verdicts serves them all.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use kube_model::Cluster;
use kube_reference::{Case, Env, Mode, Model, Origin, Probe, Rng, Verdict};
use ruleset::trace::{Fate, Trace};
use ruleset::{Config, Packet};

#[allow(unused_imports)]
pub use kube_reference::rng::{env_u64, start_seed};

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

/// The changed services of a step as the incremental compiler's input.
pub fn changes(step: &kube_reference::changes::Step) -> ruleset::Changes {
    let mut ch = ruleset::Changes::default();
    for (ns, name) in &step.services {
        ch.services
            .insert(kube_model::ServiceKey::new(ns.clone(), name.clone()));
    }
    ch
}

/// The probe as the tracer's packet, arriving on the interface the environment gives it
/// (`Env::iif`: a pod of this node on its pod interface, others on `eth0`, the node's
/// own on none).
pub fn packet(env: &Env, p: &Probe) -> Packet {
    Packet {
        src: p.src,
        dst: p.dst,
        proto: p.proto,
        sport: 40000,
        dport: p.dport,
        iif: env.iif(p),
        local_origin: p.origin == Origin::Node,
        mark: 0,
    }
}

/// The tracer's outcomes as a verdict (an `Err` when they fit none).
pub fn observed(t: &Trace) -> Result<Verdict, String> {
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

/// The tracer's verdict for `p` through `tables`.
pub fn traced(case: &Case, tables: &[nft_model::Table], p: &Probe) -> Result<Verdict, String> {
    observed(&ruleset::trace(
        tables,
        &case.env.local_addrs,
        &packet(&case.env, p),
    ))
}

/// Deliberate differences between kube-nlproxy and upstream, by name, with the
/// predicate that recognises them (docs/fuzzing.md): the model states upstream's
/// verdict, `got` is ours. Only differences recorded as kept on purpose are named
/// (docs/migration.md, "Upstream's packet-flow tests we differ from (kept on purpose)",
/// and docs/ruleset.md's localhost NodePorts): all are the iptables proxier's, whose
/// mode we emulate with the nftables proxier's behaviour there.
pub fn excluded(model: &Model, p: &Probe, want: &Verdict, got: &Verdict) -> Option<&'static str> {
    if model.env().mode != Mode::Iptables {
        return None;
    }
    // docs/ruleset.md, "Localhost NodePorts": served "when nodePortAddresses' IPv4 part
    // holds loopback ... never `primary`" (`ParsedConfig::localhost_node_ports_v4`: "a
    // node without an IPv4 address is the one case where upstream would differ": there
    // `primary` leaves IPv4 without a CIDR, every local address, 127.0.0.1 included)
    if p.dst == std::net::IpAddr::from([127, 0, 0, 1])
        && matches!(want, Verdict::Dnat(_))
        && matches!(got, Verdict::NoMatch | Verdict::Drop)
        && model.env().node_port_addresses == ["primary"]
        && !model.env().node_ips.iter().any(|a| a.is_ipv4())
    {
        return Some("localhost-nodeports-never-from-primary");
    }
    if *want != Verdict::NoMatch {
        return None;
    }
    match got {
        // "A ClusterIP on a port no service uses is rejected in both modes."
        Verdict::Reject if model.is_cluster_ip(&p.dst) => Some("cluster-ip-unused-port-rejected"),
        // "An unallocated address in a service CIDR is dropped in both modes."
        Verdict::Drop
            if !model.is_cluster_ip(&p.dst)
                && model
                    .env()
                    .service_cidrs
                    .iter()
                    .any(|c| kube_reference::model::cidr_contains(c, &p.dst)) =>
        {
            Some("unallocated-service-ip-dropped")
        }
        // "Traffic from the node itself to an external IP or LoadBalancer IP of a
        // service without endpoints is rejected in both modes."
        Verdict::Reject if p.origin == Origin::Node && model.is_external_ip(&p.dst) => {
            Some("node-to-external-ip-without-endpoints-rejected")
        }
        _ => None,
    }
}

/// How many probes [`excluded`] named, by name, over the process (the fuzzer prints it).
pub static EXCLUDED: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// [`EXCLUDED`]'s counts, as `name: count, ...`.
pub fn excluded_counts() -> String {
    let m = EXCLUDED.lock().unwrap_or_else(|e| e.into_inner());
    let v: Vec<String> = m.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    v.join(", ")
}

/// Compare `max` sampled probes of `case` (all when 0) traced through `tables` with
/// the model of `case`; the disagreements as messages naming the seed.
pub fn compare(
    case: &Case,
    tables: &[nft_model::Table],
    rng: &mut Rng,
    max: usize,
    what: &str,
) -> Vec<String> {
    compare_with(case, &Model::new(case), tables, rng, max, what)
}

/// [`compare`] against a given model (of `case`'s objects or of a variant of them).
pub fn compare_with(
    case: &Case,
    model: &Model,
    tables: &[nft_model::Table],
    rng: &mut Rng,
    max: usize,
    what: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for p in kube_reference::packets::probes(case, rng, max) {
        let want = model.verdict(&p);
        let t = ruleset::trace(tables, &case.env.local_addrs, &packet(&case.env, &p));
        match observed(&t) {
            Ok(got) if got == want => {}
            Ok(got) if excluded(model, &p, &want, &got).is_some() => {
                let name = excluded(model, &p, &want, &got).unwrap_or_default();
                let mut m = EXCLUDED.lock().unwrap_or_else(|e| e.into_inner());
                *m.entry(name).or_default() += 1;
            }
            got => {
                let objects = if out.is_empty() {
                    dump(case)
                } else {
                    String::new()
                };
                out.push(format!(
                    "seed {} {what}: {p}: model {want:?}, ruleset {got:?}\nenvironment {:?}\n{t}{objects}",
                    case.seed, case.env
                ))
            }
        }
    }
    out
}

/// `FUZZ_DUMP=1`: the case's objects (JSON), printed with its first disagreement.
pub fn dump(case: &Case) -> String {
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

/// Panic with the first disagreements, naming the seed.
pub fn report(failures: &[String], cases: u64, seed: u64) {
    if !failures.is_empty() {
        let shown: Vec<&str> = failures.iter().take(5).map(String::as_str).collect();
        panic!(
            "{} disagreements in {cases} cases from FUZZ_SEED={seed}; first ones:\n{}",
            failures.len(),
            shown.join("\n")
        );
    }
}
