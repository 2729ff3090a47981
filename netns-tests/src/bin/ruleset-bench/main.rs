//! Benchmark of the compiled ruleset: N services x M endpoints in kube-nlproxy's shape.
//!
//! For each N: compile time, operation count and batch bytes of the cold load, cold kernel
//! load through our transport vs `nft -f` of our rendering of the same tables (a fresh
//! namespace per run and loader), and one-endpoint updates with N loaded: the time from
//! having the new cluster state to the commit acknowledged (compile + diff + commit), and
//! the kernel commit alone. Medians over the runs; a markdown table at the end with the
//! ratios the goals name.
//!
//! Usage: ruleset-bench [--services 100,1000,10000] [--endpoints 10] [--runs 3]
//!                      [--updates 5]
//!        ruleset-bench validation [--services 100,10000] [--endpoints 10] [--runs 15]
//!                      [--case NAME]   (see validation.rs: which operations make the
//!                                       kernel re-validate the whole table)
//!
//! Addresses: ClusterIPs from 198.18.0.0/16 (198.18.0.1 ...), endpoints from
//! 198.18.64.0 upwards into 198.19.0.0/16 (up to 114,688 distinct endpoint addresses).

mod legacy;
mod validation;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use kube_model::{
    Cluster, Endpoint, EndpointSlice, IpFamily, Protocol, Service, ServiceKey, ServicePort,
    SlicePort,
};
use netns_tests::Netns;
use nft_model::{render, Op, Table};
use nft_netlink::Nft;
use ruleset::{compile, diff, Config};

const SVC_BASE: u32 = 0xc612_0000; // 198.18.0.0
const EP_BASE: u32 = 0xc612_4000; // 198.18.64.0
const EP_LIMIT: u32 = 0xc614_0000; // 198.20.0.0 (exclusive)

fn config() -> Config {
    Config {
        node_name: "node-a".into(),
        families: vec!["IPv4".into()],
        cluster_cidrs: vec!["198.18.64.0/18".into()],
        service_cidrs: vec!["198.18.0.0/18".into()],
        ..Default::default()
    }
}

fn endpoint(k: u32) -> Endpoint {
    let a = EP_BASE + k;
    assert!(
        a < EP_LIMIT,
        "too many endpoints for 198.18.64.0 - 198.19.255.255"
    );
    Endpoint {
        addr: IpAddr::V4(Ipv4Addr::from(a)),
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(
            if k.is_multiple_of(7) {
                "node-a"
            } else {
                "node-b"
            }
            .into(),
        ),
        zone: None,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    }
}

fn slice_key(i: u32) -> ServiceKey {
    ServiceKey::new("bench", format!("svc-{i}-abcde"))
}

/// `services` ClusterIP services (one TCP port 80 -> 8080 each) with `endpoints` ready
/// endpoints each, in one EndpointSlice per service.
fn cluster(services: u32, endpoints: u32) -> Cluster {
    assert!(services < 0x3fff, "at most 16,382 services (198.18.0.0/18)");
    let mut c = Cluster::new();
    for i in 0..services {
        let key = ServiceKey::new("bench", format!("svc-{i}"));
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
        let sk = slice_key(i);
        c.insert_slice(EndpointSlice {
            key: sk,
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
    c
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
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

fn commit(ns: &Netns, ops: &[Op]) -> Duration {
    ns.run(|| {
        let mut nft = Nft::open().expect("open netlink");
        let start = Instant::now();
        nft.commit(ops, None)
            .unwrap_or_else(|e| panic!("commit refused: {e}"));
        start.elapsed()
    })
}

/// The kinds of one-endpoint update measured.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// The last endpoint of a service goes away (the endpoint count changes).
    Remove,
    /// ... and comes back.
    Readd,
    /// One endpoint's address changes (the count stays).
    Readdress,
}

/// One-endpoint update timings of one kind: (compile + diff + commit, commit alone, ops).
#[derive(Default)]
struct UpdateTimes {
    e2e: Vec<Duration>,
    compile: Vec<Duration>,
    diff: Vec<Duration>,
    commit: Vec<Duration>,
    ops: Vec<usize>,
}

struct Row {
    n: u32,
    m: u32,
    compile: Duration,
    ops: usize,
    messages: usize,
    bytes: usize,
    nft_text: usize,
    cold_ours: Duration,
    cold_nft: Duration,
    update_e2e: Duration,
    update_commit: Duration,
    update_ops: String,
}

fn bench(n: u32, m: u32, runs: u32, updates: u32) -> Row {
    let cfg = config();
    let c = cluster(n, m);
    let mut compile_times = Vec::new();
    let mut tables: Vec<Table> = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let compiled = compile(&c, &cfg).expect("compile");
        compile_times.push(t0.elapsed());
        assert!(compiled.errors.is_empty(), "{:?}", compiled.errors);
        tables = compiled.tables;
    }
    let create = diff(&[], &tables);
    let batch = nft_wire::encode_batch(&create, 1, None).expect("encodes");
    let text: String = tables.iter().map(render::table).collect();
    let file = std::env::temp_dir().join(format!("ruleset-bench-{}-{n}.nft", std::process::id()));
    std::fs::write(&file, &text).expect("write nft file");
    println!(
        "N={n} M={m}: compile median {:.1} ms; cold load {} ops, {} netlink messages, {} batch bytes; nft text {} bytes",
        ms(median(compile_times.clone())),
        create.len(),
        batch.seqs.len(),
        batch.bytes.len(),
        text.len()
    );

    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    let mut kinds: Vec<(Change, UpdateTimes)> = [Change::Remove, Change::Readd, Change::Readdress]
        .into_iter()
        .map(|k| (k, UpdateTimes::default()))
        .collect();
    for run in 0..runs {
        // ours: cold load, then one-endpoint updates on the loaded ruleset
        let ns = Netns::new("rsbench");
        let d = commit(&ns, &create);
        ours.push(d);
        // One thread in the namespace with one open transport, as the daemon keeps it:
        // the timings hold no thread, setns or socket set-up.
        ns.run(|| {
            let mut nft = Nft::open().expect("open netlink");
            let mut commit = |ops: &[Op]| {
                let start = Instant::now();
                nft.commit(ops, None)
                    .unwrap_or_else(|e| panic!("commit refused: {e}"));
                start.elapsed()
            };
            let mut cur_cluster = c.clone();
            let mut cur_tables = tables.clone();
            for u in 0..updates {
                let svc = (run * 7919 + u * 104_729 + 4242) % n;
                let sk = slice_key(svc);
                for (kind, times) in kinds.iter_mut() {
                    let mut next = cur_cluster.clone();
                    let mut slice = next.slice(&sk).expect("slice").clone();
                    let eps = &mut slice.endpoints;
                    match kind {
                        Change::Remove => {
                            eps.pop();
                        }
                        Change::Readd => eps.push(endpoint(svc * m + m - 1)),
                        Change::Readdress => {
                            // an address no other endpoint uses: the top of 198.19.0.0/16
                            let a = EP_LIMIT - 1 - (run * updates + u);
                            eps[0].addr = IpAddr::V4(Ipv4Addr::from(a));
                        }
                    }
                    next.insert_slice(slice);
                    // from having the new state to the acknowledged commit
                    let t0 = Instant::now();
                    let new_tables = compile(&next, &cfg).expect("compile").tables;
                    let t1 = Instant::now();
                    let ops = diff(&cur_tables, &new_tables);
                    let t2 = Instant::now();
                    let k = commit(&ops);
                    let e2e = t0.elapsed();
                    times.e2e.push(e2e);
                    times.compile.push(t1 - t0);
                    times.diff.push(t2 - t1);
                    times.commit.push(k);
                    times.ops.push(ops.len());
                    cur_cluster = next;
                    cur_tables = new_tables;
                }
                // back to the original state for the next round (not timed)
                let back = compile(&c, &cfg).expect("compile").tables;
                commit(&diff(&cur_tables, &back));
                cur_cluster = c.clone();
                cur_tables = back;
            }
        });
        drop(ns);

        // the peer: nft -f of our rendering, fresh namespace
        let ns = Netns::new("rsbench-nft");
        let start = Instant::now();
        let out = ns.exec("nft", &["-f", file.to_str().expect("utf-8 path")]);
        let p = start.elapsed();
        assert!(
            out.status.success(),
            "nft -f failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(ns);
        peer.push(p);
        println!(
            "  run {run}: cold load ours {:.1} ms, nft -f {:.1} ms",
            ms(d),
            ms(p)
        );
    }
    let _ = std::fs::remove_file(&file);

    let mut all_e2e = Vec::new();
    let mut all_commit = Vec::new();
    let mut op_counts = Vec::new();
    for (kind, t) in &kinds {
        println!(
            "  update {kind:?}: compile+diff+commit median {:.2} ms (compile {:.2} ms, diff {:.2} ms), commit median {:.2} ms, ops {:?}",
            ms(median(t.e2e.clone())),
            ms(median(t.compile.clone())),
            ms(median(t.diff.clone())),
            ms(median(t.commit.clone())),
            t.ops.iter().min().zip(t.ops.iter().max())
        );
        all_e2e.extend(t.e2e.iter().copied());
        all_commit.extend(t.commit.iter().copied());
        op_counts.push(format!(
            "{}",
            t.ops.iter().max().copied().unwrap_or_default()
        ));
    }
    Row {
        n,
        m,
        compile: median(compile_times),
        ops: create.len(),
        messages: batch.seqs.len(),
        bytes: batch.bytes.len(),
        nft_text: text.len(),
        cold_ours: median(ours),
        cold_nft: median(peer),
        update_e2e: median(all_e2e),
        update_commit: median(all_commit),
        update_ops: op_counts.join("/"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("validation") {
        let m = numbers(&args, "--endpoints", "10")[0];
        let runs = numbers(&args, "--runs", "15")[0].max(1);
        let only = arg(&args, "--case");
        for n in numbers(&args, "--services", "100,10000") {
            let c = cluster(n, m);
            let tables = compile(&c, &config()).expect("compile").tables;
            validation::probe(
                &format!("{n} services x {m} endpoints, element-only shape"),
                &diff(&[], &tables),
                &tables[0],
                runs,
                only,
            );
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
    let services = numbers(&args, "--services", "100,1000,10000");
    let m = numbers(&args, "--endpoints", "10")[0];
    let runs = numbers(&args, "--runs", "3")[0].max(1);
    let updates = numbers(&args, "--updates", "5")[0].max(1);
    let rows: Vec<Row> = services
        .iter()
        .map(|&n| bench(n, m, runs, updates))
        .collect();

    println!();
    println!("medians over {runs} runs; updates: {updates} rounds per run of remove / re-add / re-address one endpoint");
    println!();
    println!("| N x M | compile | cold ops | cold msgs | batch bytes | nft text | cold load ours | cold load `nft -f` | update (new state -> ack) | update commit | update ops (rm/add/readdr) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} x {} | {:.1} ms | {} | {} | {} | {} | {:.1} ms | {:.1} ms | {:.2} ms | {:.2} ms | {} |",
            r.n,
            r.m,
            ms(r.compile),
            r.ops,
            r.messages,
            r.bytes,
            r.nft_text,
            ms(r.cold_ours),
            ms(r.cold_nft),
            ms(r.update_e2e),
            ms(r.update_commit),
            r.update_ops
        );
    }
    let find = |n: u32| rows.iter().find(|r| r.n == n);
    println!();
    if let Some(big) = find(10_000) {
        println!(
            "goal cold load 10,000 x {m} <= 1 s: {:.3} s (ours), {}",
            big.cold_ours.as_secs_f64(),
            if big.cold_ours <= Duration::from_secs(1) {
                "met"
            } else {
                "NOT met"
            }
        );
        println!(
            "goal one-endpoint update at 10,000 <= 10 ms: new state -> ack {:.2} ms ({}), commit alone {:.2} ms ({})",
            ms(big.update_e2e),
            if big.update_e2e <= Duration::from_millis(10) { "met" } else { "NOT met" },
            ms(big.update_commit),
            if big.update_commit <= Duration::from_millis(10) { "met" } else { "NOT met" }
        );
        if let Some(k) = find(1_000) {
            let r = big.cold_ours.as_secs_f64() / k.cold_ours.as_secs_f64();
            println!(
                "goal cold(10,000) / cold(1,000) <= 12: {r:.2} ({}); nft -f: {:.2}",
                if r <= 12.0 { "met" } else { "NOT met" },
                big.cold_nft.as_secs_f64() / k.cold_nft.as_secs_f64()
            );
        }
        if let Some(h) = find(100) {
            let e = big.update_e2e.as_secs_f64() / h.update_e2e.as_secs_f64();
            let c = big.update_commit.as_secs_f64() / h.update_commit.as_secs_f64();
            println!(
                "goal update(10,000) / update(100) <= 3: new state -> ack {e:.2} ({}), commit alone {c:.2} ({})",
                if e <= 3.0 { "met" } else { "NOT met" },
                if c <= 3.0 { "met" } else { "NOT met" }
            );
        }
    }
}
