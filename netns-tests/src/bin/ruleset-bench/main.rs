//! Benchmark of the compiled ruleset: N services x M endpoints in kube-nlproxy's shape.
//!
//! For each N: the full compile (the incremental compiler built from scratch), the cold
//! kernel load through our transport vs `nft -f` of our rendering of the same tables (a
//! fresh namespace each), then, with N loaded, the changes a cluster makes all the time,
//! each as the incremental compiler plans it (change -> ops) and as the kernel commits it
//! (one open transport, as the daemon keeps it):
//! - one endpoint changes its address (the count stays),
//! - the endpoint count changes (the last endpoint goes, then comes back),
//! - a service with M endpoints is added, then deleted.
//!
//! Negative control: the previous shape (a chain per service, `legacy.rs`) loaded in
//! another namespace, where a count change rewrites the service's rule. Medians over
//! `--updates` rounds per run and `--runs` runs; a markdown table at the end.
//!
//! Usage: ruleset-bench [--services 100,10000,50000] [--endpoints 10] [--runs 3]
//!                      [--updates 5] [--nft-f-max 10000]
//!        ruleset-bench validation [--services 100,10000] [--endpoints 10] [--runs 15]
//!                      [--case NAME] [--shape current|previous|both]
//!                      (see validation.rs: which operations make the kernel re-validate
//!                      the whole table)
//!
//! Addresses: ClusterIPs 198.18.0.1 ... (198.18.0.0/16, up to 65,534 services),
//! endpoints cycle through 198.19.0.1 ... 198.19.255.254 (services share endpoint
//! addresses beyond 6,553 x 10: the maps are keyed by destination and slot, the hairpin
//! set by address).

mod legacy;
mod validation;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use kube_model::{
    Cluster, Endpoint, EndpointSlice, IpFamily, Protocol, Service, ServiceKey, ServicePort,
    SlicePort,
};
use netns_tests::Netns;
use nft_model::{render, Op, Table};
use nft_netlink::Nft;
use ruleset::{diff, Changes, Compiler, Config};

const SVC_BASE: u32 = 0xc612_0000; // 198.18.0.0
const EP_BASE: u32 = 0xc613_0000; // 198.19.0.0

fn config() -> Config {
    Config {
        node_name: "node-a".into(),
        families: vec!["IPv4".into()],
        cluster_cidrs: vec!["198.19.0.0/16".into()],
        service_cidrs: vec!["198.18.0.0/16".into()],
        ..Default::default()
    }
}

fn endpoint(k: u32) -> Endpoint {
    Endpoint::ready_on(
        IpAddr::V4(Ipv4Addr::from(EP_BASE + 1 + k % 65_534)),
        Some(if k.is_multiple_of(7) {
            "node-a"
        } else {
            "node-b"
        }),
    )
}

fn service_key(i: u32) -> ServiceKey {
    ServiceKey::new("bench", format!("svc-{i}"))
}

fn slice_key(i: u32) -> ServiceKey {
    ServiceKey::new("bench", format!("svc-{i}-abcde"))
}

/// Service `i` (one TCP port 80 -> 8080) with `endpoints` ready endpoints in one slice.
fn add_service(c: &mut Cluster, i: u32, endpoints: u32) {
    assert!(i < 65_534, "at most 65,534 services (198.18.0.0/16)");
    let key = service_key(i);
    c.services.insert(
        key.clone(),
        Service::new_cluster_ip(
            key.clone(),
            IpAddr::V4(Ipv4Addr::from(SVC_BASE + 1 + i)),
            ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: None,
            },
        ),
    );
    c.insert_slice(EndpointSlice {
        key: slice_key(i),
        service: key,
        family: IpFamily::V4,
        ports: vec![SlicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        }],
        endpoints: (0..endpoints)
            .map(|j| endpoint(i * endpoints + j))
            .collect(),
    });
}

fn cluster(services: u32, endpoints: u32) -> Cluster {
    let mut c = Cluster::new();
    for i in 0..services {
        add_service(&mut c, i, endpoints);
    }
    c
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn numbers(args: &[String], name: &str, default: &str) -> Vec<u32> {
    arg(args, name)
        .unwrap_or(default)
        .split(',')
        .map(|v| {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name} takes numbers separated by commas"))
        })
        .collect()
}

fn commit(nft: &mut Nft, ops: &[Op]) -> Duration {
    let start = Instant::now();
    nft.commit(ops, None)
        .unwrap_or_else(|e| panic!("commit refused: {e}\n{}", render::script(ops)));
    start.elapsed()
}

/// The changes measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// One endpoint changes its address.
    Readdress,
    /// The last endpoint goes away (the count changes).
    CountDown,
    /// ... and comes back.
    CountUp,
    /// A service with M endpoints appears.
    AddService,
    /// ... and goes away.
    DeleteService,
}

const CHANGES: [Change; 5] = [
    Change::Readdress,
    Change::CountDown,
    Change::CountUp,
    Change::AddService,
    Change::DeleteService,
];

#[derive(Default, Clone)]
struct Times {
    plan: Vec<Duration>,
    commit: Vec<Duration>,
    ops: Vec<usize>,
    elements_only: bool,
}

struct Row {
    n: u32,
    m: u32,
    compile: Duration,
    cold_ops: usize,
    cold_ours: Duration,
    cold_nft: Option<Duration>,
    changes: Vec<(Change, Times)>,
    legacy_count: Duration,
}

fn only_elements(ops: &[Op]) -> bool {
    ops.iter()
        .all(|o| matches!(o, Op::AddElements { .. } | Op::DeleteElements { .. }))
}

fn bench(n: u32, m: u32, runs: u32, updates: u32, nft_f_max: u32) -> Row {
    let parsed = config().parse().expect("config");
    let base = cluster(n, m);
    let mut compile_times = Vec::new();
    let mut tables: Vec<Table> = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let c = Compiler::new(parsed.clone(), &base);
        let t = c.tables();
        compile_times.push(t0.elapsed());
        assert!(c.errors().is_empty(), "{:?}", c.errors());
        tables = t;
    }
    let create = diff(&[], &tables);
    println!(
        "N={n} M={m}: full compile median {:.1} ms; cold load {} ops",
        ms(median(compile_times.clone())),
        create.len(),
    );
    let text_file = (n <= nft_f_max).then(|| {
        let text: String = tables.iter().map(render::table).collect();
        let file =
            std::env::temp_dir().join(format!("ruleset-bench-{}-{n}.nft", std::process::id()));
        std::fs::write(&file, &text).expect("write nft file");
        file
    });

    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    let mut times: Vec<(Change, Times)> = CHANGES
        .iter()
        .map(|c| {
            (
                *c,
                Times {
                    elements_only: true,
                    ..Times::default()
                },
            )
        })
        .collect();
    let mut legacy_times = Vec::new();
    for run in 0..runs {
        let ns = Netns::new("rsbench");
        ns.run(|| {
            let mut nft = Nft::open().expect("open netlink");
            ours.push(commit(&mut nft, &create));
            let mut comp = Compiler::new(parsed.clone(), &base);
            let mut cur = base.clone();
            for u in 0..updates {
                let svc = (run * 7919 + u * 104_729 + 4242) % n;
                let new = n + u; // a service that does not exist yet
                for (kind, t) in times.iter_mut() {
                    let touched = match kind {
                        Change::Readdress => {
                            let mut s = cur.slice(&slice_key(svc)).expect("slice").clone();
                            // an address no endpoint uses: the top of 198.19.0.0/16, down
                            s.endpoints[0].addr = IpAddr::V4(Ipv4Addr::from(
                                EP_BASE + 0xfffe - (run * updates + u) % 1000,
                            ));
                            cur.insert_slice(s);
                            svc
                        }
                        Change::CountDown => {
                            let mut s = cur.slice(&slice_key(svc)).expect("slice").clone();
                            s.endpoints.pop();
                            cur.insert_slice(s);
                            svc
                        }
                        Change::CountUp => {
                            let mut s = cur.slice(&slice_key(svc)).expect("slice").clone();
                            s.endpoints.push(endpoint(svc * m + m - 1));
                            cur.insert_slice(s);
                            svc
                        }
                        Change::AddService => {
                            add_service(&mut cur, new, m);
                            new
                        }
                        Change::DeleteService => {
                            cur.services.remove(&service_key(new));
                            cur.remove_slice(&slice_key(new));
                            new
                        }
                    };
                    let changes = Changes {
                        services: BTreeSet::from([service_key(touched)]),
                        node: false,
                    };
                    // from having the new state to the batch
                    let t0 = Instant::now();
                    let upd = comp.update(&cur, &changes);
                    t.plan.push(t0.elapsed());
                    t.commit.push(commit(&mut nft, &upd.ops));
                    t.ops.push(upd.ops.len());
                    t.elements_only &= only_elements(&upd.ops);
                }
                // the readdressed endpoint back (not timed)
                let mut s = cur.slice(&slice_key(svc)).expect("slice").clone();
                s.endpoints[0] = endpoint(svc * m);
                cur.insert_slice(s);
                let upd = comp.update(
                    &cur,
                    &Changes {
                        services: BTreeSet::from([service_key(svc)]),
                        node: false,
                    },
                );
                commit(&mut nft, &upd.ops);
            }
            // the kernel holds exactly what the compiler says
            let dumped = nft
                .dump_table(&nft_model::TableRef::new(
                    nft_model::Family::Ip,
                    "kube-nlproxy",
                ))
                .expect("dump")
                .expect("table");
            assert!(
                diff(&[dumped], &comp.tables()).is_empty(),
                "kernel and compiler disagree after the updates"
            );
        });
        drop(ns);

        // negative control: the previous shape, where the count change rewrites a rule
        let old = vec![legacy::table(&base)];
        let ns = Netns::new("rsbench-legacy");
        ns.run(|| {
            let mut nft = Nft::open().expect("open netlink");
            commit(&mut nft, &diff(&[], &old));
            for u in 0..updates {
                let svc = (run * 7919 + u * 104_729 + 4242) % n;
                let mut c = base.clone();
                let mut s = c.slice(&slice_key(svc)).expect("slice").clone();
                s.endpoints.pop();
                c.insert_slice(s);
                let ops = diff(&old, &[legacy::table(&c)]);
                legacy_times.push(commit(&mut nft, &ops));
                commit(&mut nft, &diff(&[legacy::table(&c)], &old));
            }
        });
        drop(ns);

        if let Some(file) = &text_file {
            let ns = Netns::new("rsbench-nft");
            let start = Instant::now();
            let out = ns.exec("nft", &["-f", file.to_str().expect("utf-8 path")]);
            peer.push(start.elapsed());
            assert!(
                out.status.success(),
                "nft -f failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        println!(
            "  run {run}: cold load ours {:.1} ms{}",
            ms(*ours.last().expect("one")),
            peer.last()
                .map(|p| format!(", nft -f {:.1} ms", ms(*p)))
                .unwrap_or_default()
        );
    }
    if let Some(file) = &text_file {
        let _ = std::fs::remove_file(file);
    }
    for (kind, t) in &times {
        println!(
            "  {kind:?}: plan median {:.3} ms, commit median {:.2} ms, ops {:?}, element ops only: {}",
            ms(median(t.plan.clone())),
            ms(median(t.commit.clone())),
            t.ops.iter().min().zip(t.ops.iter().max()),
            t.elements_only
        );
    }
    println!(
        "  previous shape, count change commit median {:.2} ms",
        ms(median(legacy_times.clone()))
    );
    Row {
        n,
        m,
        compile: median(compile_times),
        cold_ops: create.len(),
        cold_ours: median(ours),
        cold_nft: (!peer.is_empty()).then(|| median(peer)),
        changes: times,
        legacy_count: median(legacy_times),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("validation") {
        let m = numbers(&args, "--endpoints", "10")[0];
        let runs = numbers(&args, "--runs", "15")[0].max(1);
        let only = arg(&args, "--case");
        let shape = arg(&args, "--shape").unwrap_or("both");
        for n in numbers(&args, "--services", "100,10000") {
            let c = cluster(n, m);
            if shape != "previous" {
                let tables = Compiler::new(config().parse().expect("config"), &c).tables();
                validation::probe(
                    &format!("{n} services x {m} endpoints, element-only shape"),
                    &diff(&[], &tables),
                    &tables[0],
                    runs,
                    only,
                );
            }
            if shape == "current" {
                continue;
            }
            let old = vec![legacy::table(&c)];
            validation::probe(
                &format!("{n} services x {m} endpoints, previous shape (a chain per service)"),
                &diff(&[], &old),
                &old[0],
                runs,
                only,
            );
        }
        return;
    }
    let services = numbers(&args, "--services", "100,10000,50000");
    let m = numbers(&args, "--endpoints", "10")[0];
    let runs = numbers(&args, "--runs", "3")[0].max(1);
    let updates = numbers(&args, "--updates", "5")[0].max(1);
    let nft_f_max = numbers(&args, "--nft-f-max", "10000")[0];
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    let rows: Vec<Row> = services
        .iter()
        .map(|&n| bench(n, m, runs, updates, nft_f_max))
        .collect();

    println!();
    println!(
        "medians over {runs} runs x {updates} rounds; plan = incremental compile of the change \
         to ops; commit = the kernel's acknowledgement; load average now: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!();
    println!("| N x M | full compile | cold ops | cold load ours | cold load `nft -f` | change | plan | commit | ops | elements only | count change, previous shape |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        for (i, (kind, t)) in r.changes.iter().enumerate() {
            let head = if i == 0 {
                format!(
                    "| {} x {} | {:.0} ms | {} | {:.0} ms | {} |",
                    r.n,
                    r.m,
                    ms(r.compile),
                    r.cold_ops,
                    ms(r.cold_ours),
                    r.cold_nft
                        .map(|d| format!("{:.0} ms", ms(d)))
                        .unwrap_or_else(|| "-".into())
                )
            } else {
                "| | | | | |".to_string()
            };
            let tail = if i == 0 {
                format!(" {:.2} ms |", ms(r.legacy_count))
            } else {
                " |".to_string()
            };
            println!(
                "{head} {kind:?} | {:.3} ms | {:.2} ms | {} | {} |{tail}",
                ms(median(t.plan.clone())),
                ms(median(t.commit.clone())),
                t.ops.iter().max().copied().unwrap_or_default(),
                if t.elements_only { "yes" } else { "no" },
            );
        }
    }
}
