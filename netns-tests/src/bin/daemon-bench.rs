//! daemon-bench: the real `kube-nlproxy` daemon measured end to end, run the way users
//! run it, each run in fresh network namespaces (removed at the end), with the peers
//! (upstream kube-proxy's rulesets loaded by `nft -f` and `iptables-restore`) in the same
//! run. Root only; build with `cargo build --release -p kube-nlproxy -p netns-tests`.
//! What each figure measures: docs/benchmarks.md.
//!
//! Usage: daemon-bench [--bin PATH] [--runs N] [--services N,N..] [--endpoints M]
//!                     [--seconds S] [--source manifests|api|both]
//!                     [--daemon-arg ARG]... SCENARIO...
//!
//! Scenarios: `cold` (start until the first batch is committed, from a manifests file and
//! from the API-server double), `peers` (ours vs `nft -f` vs `iptables-restore` at 4k),
//! `change` (one change with N services loaded: the engine's event-to-ACK and the
//! double's send-to-sync), `e2e` (event sent -> a new TCP connection reaches the new
//! endpoint), `churn` (100 endpoint changes/s: latency, CPU, RSS), `idle` (no change:
//! wakeups per second and CPU of the daemon left alone), or `all`.
//!
//! The synthetic cluster is `integration::scale` (N services of one TCP port, each with
//! one EndpointSlice of M endpoints, shaped as the API server returns them); addresses
//! only from 198.18.0.0/15.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use integration::scale::{scale_service, scale_slice};
use integration::ApiServer;
use netns_tests::bench::{ctxt_switches, loadavg, median, time_program, Daemon, Exit};
use netns_tests::bench_cluster::*;
use netns_tests::upstream::{iptables_mode, nftables_mode};
use netns_tests::Netns;
use serde_json::json;

/// Spacing of measured changes: more than the default minSyncPeriod (1 s), so that no
/// measured change waits for the rate limit.
const SPACING: Duration = Duration::from_millis(1200);

struct Opts {
    bin: PathBuf,
    runs: usize,
    services: Option<Vec<u32>>,
    endpoints: u32,
    seconds: u64,
    source: String,
    /// Extra arguments for the daemon run from the API double (`--daemon-arg`).
    daemon_args: Vec<String>,
    scenarios: Vec<String>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        bin: PathBuf::from("target/release/kube-nlproxy"),
        runs: 3,
        services: None,
        endpoints: 10,
        seconds: 60,
        source: "both".into(),
        daemon_args: Vec::new(),
        scenarios: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        // `--flag=value` or `--flag value`
        let (a, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut inline = inline;
        let mut val = || {
            inline
                .take()
                .or_else(|| args.next())
                .ok_or(format!("{a} needs a value"))
        };
        match a.as_str() {
            "--bin" => o.bin = PathBuf::from(val()?),
            "--runs" => o.runs = val()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--endpoints" => {
                o.endpoints = val()?.parse().map_err(|e| format!("--endpoints: {e}"))?
            }
            "--seconds" => o.seconds = val()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--source" => o.source = val()?,
            "--daemon-arg" => o.daemon_args.push(val()?),
            "--services" => {
                o.services = Some(
                    val()?
                        .split(',')
                        .map(|s| s.parse().map_err(|e| format!("--services {s}: {e}")))
                        .collect::<Result<_, _>>()?,
                )
            }
            "-h" | "--help" => return Err(String::new()),
            s if !s.starts_with('-') => o.scenarios.push(s.to_string()),
            s => return Err(format!("unknown flag {s}")),
        }
    }
    if o.scenarios.is_empty() {
        return Err("no scenario".into());
    }
    o.runs = o.runs.max(1);
    Ok(o)
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\nusage: daemon-bench [--bin PATH] [--runs N] [--services N,N..] [--endpoints M] [--seconds S] [--source manifests|api|both] [--daemon-arg ARG]... cold|peers|change|e2e|churn|idle|all ...");
            std::process::exit(2);
        }
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("daemon-bench needs root (network namespaces)");
        std::process::exit(2);
    }
    if !o.bin.exists() {
        eprintln!("no daemon binary at {} (--bin)", o.bin.display());
        std::process::exit(2);
    }
    let dir = std::env::temp_dir().join(format!("nlp-daemon-bench-{}", std::process::id()));
    netns_tests::bench::cleanup_on_signal(dir.clone());
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let scratch = Scratch(dir);
    println!(
        "daemon-bench: {} ({}), {} runs, {} endpoints per service, kernel {}",
        o.bin.display(),
        version(&o.bin),
        o.runs,
        o.endpoints,
        netns_tests::kernel_release()
    );
    let all = o.scenarios.iter().any(|s| s == "all");
    let want = |s: &str| all || o.scenarios.iter().any(|x| x == s);
    if want("cold") {
        cold(&o, &scratch.0);
    }
    if want("peers") {
        peers(&o, &scratch.0);
    }
    if want("change") {
        change(&o);
    }
    if want("e2e") {
        e2e(&o);
    }
    if want("churn") {
        churn(&o);
    }
    if want("idle") {
        idle(&o, &scratch.0);
    }
}

fn version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn header(name: &str, what: &str) {
    println!("\n== {name}: {what}");
    println!("   load at start: {}", loadavg());
}

fn footer() {
    println!("   load at end:   {}", loadavg());
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn api_args(o: &Opts, api: &ApiServer) -> Vec<String> {
    ["--master", &api.url(), "--hostname-override", NODE, "-v=2"]
        .iter()
        .map(|s| s.to_string())
        .chain(o.daemon_args.iter().cloned())
        .collect()
}

/// Start the daemon against `api` in `ns` and wait for its first sync.
fn running_daemon(o: &Opts, ns: &Netns, api: &ApiServer) -> Option<(Daemon, Duration)> {
    let d = Daemon::start(ns, &o.bin, &api_args(o, api)).expect("start the daemon");
    match d.wait_sync(0, Duration::from_secs(600)) {
        Some((_, t, _)) => {
            let first = t - d.started;
            Some((d, first))
        }
        None => {
            eprintln!("   no first sync:\n{}", d.tail(20));
            None
        }
    }
}

// ---------------------------------------------------------------- cold

fn cold(o: &Opts, dir: &Path) {
    let sizes = o.services.clone().unwrap_or(vec![10_000, 50_000]);
    let m = o.endpoints;
    for n in sizes {
        let (t_target, rss_target) = if n <= 10_000 {
            (1.5, 150.0)
        } else {
            (6.0, 600.0)
        };
        if o.source != "api" {
            let file = write_manifest(dir, n, m);
            header(
                "cold/manifests",
                &format!("{n} x {m}: --manifests FILE --hostname-override {NODE} --once, fresh namespace; start -> first commit (synced line) and -> exit; peak RSS (VmHWM read every 5 ms)"),
            );
            let (mut first, mut exit, mut rss) = (vec![], vec![], vec![]);
            for r in 0..o.runs {
                let ns = Netns::new("bcm");
                let args: Vec<String> = [
                    "--manifests",
                    &file.to_string_lossy(),
                    "--hostname-override",
                    NODE,
                    "--once",
                    "-v=2",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let d = Daemon::start(&ns, &o.bin, &args).expect("start the daemon");
                let synced = d.wait_sync(0, Duration::from_secs(600));
                let started = d.started;
                let tail = d.tail(10);
                let e = d.wait();
                let Some((_, t, s)) = synced.filter(|_| e.success) else {
                    println!("   run {r}: FAILED (exit ok={}):\n{tail}", e.success);
                    continue;
                };
                let f = (t - started).as_secs_f64();
                println!(
                    "   run {r}: first commit {f:.3} s, exit {:.3} s, peak RSS {:.0} MiB, CPU {:.2} s, ops {}  [load {}]",
                    e.wall.as_secs_f64(),
                    mib(e.maxrss_kib),
                    e.cpu.as_secs_f64(),
                    s.ops,
                    loadavg()
                );
                first.push(f);
                exit.push(e.wall.as_secs_f64());
                rss.push(mib(e.maxrss_kib));
            }
            print_cold_medians(n, &first, Some(&exit), &rss, t_target, rss_target);
            footer();
        }
        if o.source != "manifests" {
            header(
                "cold/api",
                &format!("{n} x {m}: --master URL (API double listing {n} Services + {n} EndpointSlices, in the namespace) -v=2 {}; start -> first synced line; peak RSS (VmHWM at the first sync)", o.daemon_args.join(" ")),
            );
            let (mut first, mut rss) = (vec![], vec![]);
            for r in 0..o.runs {
                let ns = Netns::new("bca");
                let api = api_in(&ns, n, m);
                let Some((d, f)) = running_daemon(o, &ns, &api) else {
                    println!("   run {r}: FAILED");
                    continue;
                };
                let hwm = d.status_kib("VmHWM").unwrap_or(0);
                let lists = d
                    .listed()
                    .iter()
                    .map(|(k, t)| format!("{k} {:.2} s", (*t - d.started).as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(", ");
                d.kill();
                println!(
                    "   run {r}: first commit {:.3} s, peak RSS {:.0} MiB (VmHWM at the first sync); lists complete at: {lists}  [load {}]",
                    f.as_secs_f64(),
                    mib(hwm),
                    loadavg()
                );
                first.push(f.as_secs_f64());
                rss.push(mib(hwm));
                drop(api);
            }
            print_cold_medians(n, &first, None, &rss, t_target, rss_target);
            footer();
        }
    }
}

fn print_cold_medians(
    n: u32,
    first: &[f64],
    exit: Option<&[f64]>,
    rss: &[f64],
    t_target: f64,
    rss_target: f64,
) {
    let (f, r) = (median(first), median(rss));
    println!(
        "   median at {n}: first commit {f:.3} s (target <= {t_target} s: {}), peak RSS {r:.0} MiB (target <= {rss_target} MiB: {})",
        verdict(f <= t_target),
        verdict(r <= rss_target)
    );
    if let Some(e) = exit {
        println!("   median at {n}: start -> exit {:.3} s", median(e));
    }
}

// ---------------------------------------------------------------- peers

/// A peer, run to its exit in the namespace given.
type Tool<'a> = Box<dyn Fn(&Netns) -> std::io::Result<Exit> + 'a>;

fn peers(o: &Opts, dir: &Path) {
    let n = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(4_000);
    let m = o.endpoints;
    let file = write_manifest(dir, n, m);
    let ports = upstream_ports(n, m);
    let nft_file = dir.join(format!("kube-proxy-nftables-{n}.nft"));
    let ipt_file = dir.join(format!("kube-proxy-iptables-{n}.rules"));
    write_synced(&nft_file, nftables_mode(&ports).as_bytes());
    write_synced(&ipt_file, iptables_mode(&ports).as_bytes());
    drop(ports);
    let ipt_version = std::process::Command::new("iptables-restore")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    header(
        "peers",
        &format!("{n} x {m}, each tool from process start to exit in a fresh namespace: ours (--manifests FILE --once), nft -f of upstream's nftables mode, iptables-restore ({ipt_version}) of upstream's iptables mode"),
    );
    let errlog = dir.join("peer.err");
    let f = file.to_string_lossy().to_string();
    let nf = nft_file.to_string_lossy().to_string();
    let tools: [(&str, Tool); 3] = [
        (
            "ours",
            Box::new(|ns: &Netns| {
                let bin = o.bin.to_string_lossy();
                time_program(
                    ns,
                    &bin,
                    &["--manifests", &f, "--hostname-override", NODE, "--once"],
                    None,
                    &errlog,
                )
            }),
        ),
        (
            "nft -f",
            Box::new(|ns: &Netns| time_program(ns, "nft", &["-f", &nf], None, &errlog)),
        ),
        (
            "iptables-restore",
            Box::new(|ns: &Netns| {
                time_program(ns, "iptables-restore", &[], Some(&ipt_file), &errlog)
            }),
        ),
    ];
    let mut times: Vec<Vec<f64>> = vec![vec![]; 3];
    for r in 0..o.runs {
        // rotate the order: no tool is always first
        for k in 0..3 {
            let t = (r + k) % 3;
            let ns = Netns::new("bp");
            let e = (tools[t].1)(&ns).expect("run the tool");
            if !e.success {
                let err = std::fs::read_to_string(&errlog).unwrap_or_default();
                println!(
                    "   run {r}: {} FAILED: {}",
                    tools[t].0,
                    err.lines().take(5).collect::<Vec<_>>().join(" | ")
                );
                continue;
            }
            println!(
                "   run {r}: {:<16} {:.3} s, peak RSS {:.0} MiB, CPU {:.2} s  [load {}]",
                tools[t].0,
                e.wall.as_secs_f64(),
                mib(e.maxrss_kib),
                e.cpu.as_secs_f64(),
                loadavg()
            );
            times[t].push(e.wall.as_secs_f64());
        }
    }
    let med: Vec<f64> = times.iter().map(|v| median(v)).collect();
    for (t, (name, _)) in tools.iter().enumerate() {
        println!("   median {name:<16} {:.3} s", med[t]);
    }
    let (rn, ri) = (med[1] / med[0], med[2] / med[0]);
    println!(
        "   ours vs nft -f: {rn:.1}x faster (target >= 20x: {}); vs iptables-restore: {ri:.1}x faster (target >= 10x: {})",
        verdict(rn >= 20.0),
        verdict(ri >= 10.0)
    );
    footer();
}

// ---------------------------------------------------------------- change

/// One measured change: (engine event -> ACK ms, double's send -> synced line ms, full).
type Sample = (f64, f64, bool);

/// Apply `f` (SPACING after the last sync), then wait for the sync that consumed it.
fn measure(d: &Daemon, f: impl FnOnce()) -> Option<Sample> {
    d.wait_quiet(SPACING);
    let from = d.count();
    let t0 = Instant::now();
    f();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut at = from;
    while Instant::now() < deadline {
        let (i, t, s) = d.wait_sync(at, deadline - Instant::now())?;
        if let Some(ack) = s.event_to_ack_ms {
            return Some((ack, ms(t - t0), s.full));
        }
        at = i + 1;
    }
    None
}

const OPS: [&str; 4] = [
    "endpoint replaced",
    "endpoint added",
    "service added",
    "service deleted",
];

fn change(o: &Opts) {
    let sizes = o.services.clone().unwrap_or(vec![100, 10_000, 50_000]);
    let m = o.endpoints;
    header(
        "change",
        &format!("API double with N x {m} loaded, daemon at default settings -v=2; each change at least {} ms after the previous sync; event->ACK from the engine's synced line (event_to_ack_ms), send->sync from the double's apply to the synced line reaching the bench", SPACING.as_millis()),
    );
    // medians per size and op: (ack, send)
    let mut table: Vec<(u32, Vec<(f64, f64)>)> = Vec::new();
    for &n in &sizes {
        let ns = Netns::new("bch");
        let api = api_in(&ns, n, m);
        let Some((d, first)) = running_daemon(o, &ns, &api) else {
            println!("   {n}: FAILED to start");
            continue;
        };
        println!(
            "   {n} services: first sync after {:.2} s  [load {}]",
            first.as_secs_f64(),
            loadavg()
        );
        let mut samples: Vec<Vec<Sample>> = vec![vec![]; 4];
        for r in 0..o.runs {
            let i = (n / 2 + r as u32) % n;
            let new_addr = format!("198.19.253.{}", 1 + r % 250);
            let extra = format!("198.19.252.{}", 1 + r % 250);
            let j = n + r as u32; // the added service
            let base = scale_slice(i, m);
            let got = [
                measure(&d, || {
                    api.apply(replaced(base.clone(), &new_addr));
                }),
                measure(&d, || {
                    api.apply(plus_one(replaced(base.clone(), &new_addr), &extra));
                }),
                {
                    api.apply(scale_slice(j, m));
                    measure(&d, || {
                        api.apply(scale_service(j));
                    })
                },
                measure(&d, || {
                    api.delete("Service", &format!("ns-{}", j % 100), &format!("svc-{j}"));
                }),
            ];
            // back to the loaded state (not measured)
            api.delete(
                "EndpointSlice",
                &format!("ns-{}", j % 100),
                &format!("svc-{j}-abcde"),
            );
            api.apply(base);
            for (k, g) in got.iter().enumerate() {
                match g {
                    Some((ack, send, full)) => {
                        println!(
                            "   {n} run {r}: {:<18} event->ACK {ack:8.3} ms, send->sync {send:8.3} ms{}  [load {}]",
                            OPS[k],
                            if *full { " (a full sync)" } else { "" },
                            loadavg()
                        );
                        samples[k].push(*g.as_ref().expect("some"));
                    }
                    None => println!("   {n} run {r}: {:<18} no sync seen", OPS[k]),
                }
            }
        }
        let meds: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| {
                (
                    median(&s.iter().map(|x| x.0).collect::<Vec<_>>()),
                    median(&s.iter().map(|x| x.1).collect::<Vec<_>>()),
                )
            })
            .collect();
        table.push((n, meds));
        println!(
            "   {n}: daemon peak RSS {:.0} MiB (VmHWM)",
            mib(d.status_kib("VmHWM").unwrap_or(0))
        );
        d.kill();
        drop(api);
    }
    let base = table
        .iter()
        .find(|(n, _)| *n == 100)
        .map(|(_, m)| m.clone());
    println!("   medians (event->ACK ms / send->sync ms; ratio of event->ACK to the 100-service case; targets at >= 10k: <= 10 ms and <= 3x):");
    for (n, meds) in &table {
        for (k, (ack, send)) in meds.iter().enumerate() {
            let ratio = base.as_ref().map(|b| ack / b[k].0);
            let judged = if *n >= 10_000 {
                format!(
                    " (<= 10 ms: {}{})",
                    verdict(*ack <= 10.0),
                    ratio.map_or(String::new(), |r| format!(", <= 3x: {}", verdict(r <= 3.0)))
                )
            } else {
                String::new()
            };
            println!(
                "   {n:>6} {:<18} {ack:8.3} / {send:8.3}{}{judged}",
                OPS[k],
                ratio.map_or(String::new(), |r| format!("  {r:5.2}x"))
            );
        }
    }
    footer();
}

// ---------------------------------------------------------------- e2e

fn e2e(o: &Opts) {
    let n = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(10_000);
    let m = o.endpoints;
    if n > 25_000 {
        println!("\n== e2e: at most 25,000 services (the topology's subnets are clear of the cluster IPs below that)");
        return;
    }
    header(
        "e2e",
        &format!("{n} x {m} via the API double, client -- node (daemon) -- server namespaces: the probed service's slice switched to the other server address; from the double's apply to a new TCP connection from the client to the ClusterIP answered by the new endpoint (new connection every ~1 ms)"),
    );
    let line = topology();
    identity_server(&line.server);
    let api = api_in(&line.router, n, m);
    let i = 1000.min(n - 1);
    let vip: std::net::SocketAddr = format!(
        "{}:{}",
        integration::scale::cluster_ip(i),
        integration::scale::service_port(i)
    )
    .parse()
    .expect("vip");
    let slice_to = |a: &str| {
        let mut s = scale_slice(i, 1);
        s["endpoints"][0]["addresses"] = json!([a]);
        s["endpoints"][0]["nodeName"] = json!("node-b");
        s
    };
    api.apply(slice_to(SERVER_A));
    let Some((d, _)) = running_daemon(o, &line.router, &api) else {
        return;
    };
    let ok = line.client.run(move || {
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end {
            if who(vip).as_deref() == Some(SERVER_A) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    if !ok {
        let rules = line.router.exec_ok("nft", &["list", "ruleset"]);
        let vip_rules: Vec<&str> = rules
            .lines()
            .filter(|l| l.contains(&vip.ip().to_string()) || l.contains(SERVER_A))
            .take(10)
            .collect();
        println!(
            "   the service does not answer through the daemon's rules (answer: {:?}); rules naming it:\n{}\n{}",
            line.client.run(move || who(vip)),
            vip_rules.join("\n"),
            d.tail(10)
        );
        return;
    }
    let mut e2e_ms = vec![];
    for r in 0..o.runs {
        let new = if r % 2 == 0 { SERVER_B } else { SERVER_A };
        d.wait_quiet(SPACING);
        let from = d.count();
        let want = new.to_string();
        let probe = line.client.spawn(move || {
            let end = Instant::now() + Duration::from_secs(10);
            let mut tries = 0u32;
            while Instant::now() < end {
                tries += 1;
                if who(vip).as_deref() == Some(want.as_str()) {
                    return Some((Instant::now(), tries));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        let t0 = Instant::now();
        api.apply(slice_to(new));
        let seen = probe.join().expect("probe");
        let ack = d
            .wait_sync(from, Duration::from_secs(5))
            .and_then(|(_, _, s)| s.event_to_ack_ms);
        match seen {
            Some((t, tries)) => {
                let e = ms(t - t0);
                println!(
                    "   run {r}: event sent -> new endpoint reached {e:.1} ms ({tries} connections; the engine's event->ACK {} ms)  [load {}]",
                    ack.map_or("?".into(), |a| format!("{a:.3}")),
                    loadavg()
                );
                e2e_ms.push(e);
            }
            None => println!("   run {r}: the new endpoint was not reached within 10 s"),
        }
    }
    let med = median(&e2e_ms);
    println!(
        "   median at {n}: {med:.1} ms (target <= 50 ms: {})",
        verdict(med <= 50.0)
    );
    drop(d);
    footer();
}

// ---------------------------------------------------------------- churn

fn churn(o: &Opts) {
    let n = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(10_000);
    let m = o.endpoints;
    let secs = o.seconds;
    header(
        "churn",
        &format!("{n} x {m} via the API double, 100 endpoint changes/s for {secs} s (an endpoint address replaced, services in turn), default minSyncPeriod 1 s; latency: a change's apply to the synced line of the first sync that started after it (start = line - compile_ms - commit_ms); CPU from /proc/PID/stat over the window; RSS every second"),
    );
    let ns = Netns::new("bcu");
    let api = api_in(&ns, n, m);
    let Some((d, _)) = running_daemon(o, &ns, &api) else {
        return;
    };
    std::thread::sleep(Duration::from_secs(3));
    let from = d.count();
    let cpu0 = d.cpu().unwrap_or_default();
    let t_start = Instant::now();
    let mut applied: Vec<Instant> = Vec::new();
    let mut rss: Vec<f64> = Vec::new();
    let total = secs * 100;
    for k in 0..total {
        let due = t_start + Duration::from_millis(10 * k);
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        let i = ((k * 7919) % u64::from(n)) as u32;
        let a = format!("198.19.{}.{}", 240 + (k / 250) % 10, 1 + k % 250);
        applied.push(Instant::now());
        api.apply(replaced(scale_slice(i, m), &a));
        if k % 100 == 99 {
            rss.push(mib(d.status_kib("VmRSS").unwrap_or(0)));
        }
    }
    let window = t_start.elapsed();
    let cpu1 = d.cpu().unwrap_or_default();
    std::thread::sleep(Duration::from_secs(3));
    let syncs = d.syncs_since(from);
    let starts: Vec<(Instant, Instant)> = syncs
        .iter()
        .map(|(t, s)| {
            let took = Duration::from_secs_f64((s.compile_ms + s.commit_ms).max(0.0) / 1e3);
            (t.checked_sub(took).unwrap_or(*t), *t)
        })
        .collect();
    let mut lat: Vec<f64> = Vec::new();
    let mut unseen = 0;
    // changes over the target, and of those, committed by a periodic full resync
    let (mut over, mut over_full) = (0, 0);
    for t in &applied {
        match starts.iter().position(|(s, _)| s > t) {
            Some(k) => {
                let l = ms(starts[k].1 - *t);
                if l > 1050.0 {
                    over += 1;
                    over_full += usize::from(syncs[k].1.full);
                }
                lat.push(l);
            }
            None => unseen += 1,
        }
    }
    let full_ms: Vec<String> = syncs
        .iter()
        .filter(|(_, s)| s.full)
        .map(|(_, s)| format!("{:.0}", s.compile_ms + s.commit_ms))
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let cores = (cpu1.saturating_sub(cpu0)).as_secs_f64() / window.as_secs_f64();
    let max = pct(1.0);
    println!(
        "   {} changes, {} syncs ({} full); latency median {:.0} ms, p99 {:.0} ms, max {max:.0} ms (target <= 1050 ms: {}); {unseen} changes without a later sync",
        applied.len(),
        syncs.len(),
        syncs.iter().filter(|(_, s)| s.full).count(),
        pct(0.5),
        pct(0.99),
        verdict(max <= 1050.0 && unseen == 0)
    );
    println!(
        "   {over} changes over 1050 ms, {over_full} of them committed by a periodic full resync; full resyncs took (compile + commit) {} ms",
        full_ms.join(", ")
    );
    println!(
        "   daemon CPU {cores:.3} cores over {:.1} s (target <= 0.5: {})",
        window.as_secs_f64(),
        verdict(cores <= 0.5)
    );
    let (lo, hi) = rss
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    println!(
        "   RSS each second (MiB): {}",
        rss.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "   RSS min {lo:.0} MiB, max {hi:.0} MiB, first {:.0}, last {:.0}",
        rss.first().copied().unwrap_or(0.0),
        rss.last().copied().unwrap_or(0.0)
    );
    drop(d);
    footer();
}

// ---------------------------------------------------------------- idle

/// An idle daemon: started on N services (manifests file, then the API double), left
/// alone 5 s after its first sync, then watched for `--seconds`: wakeups (voluntary
/// context switches of all its threads, `/proc/PID/task/*/status`) per second and CPU
/// (`/proc/PID/stat`). Nothing changes meanwhile, so every wakeup is the daemon's own
/// (the API double sends a watch bookmark every 60 s, as the API server's watch cache).
fn idle(o: &Opts, dir: &Path) {
    let sizes = o.services.clone().unwrap_or(vec![10_000]);
    let m = o.endpoints;
    let secs = o.seconds;
    for n in sizes {
        for source in ["manifests", "api"] {
            if o.source != "both" && o.source != source {
                continue;
            }
            header(
                &format!("idle/{source}"),
                &format!("{n} x {m}, no change: wakeups/s (voluntary context switches, all threads) and CPU over {secs} s, from 5 s after the first sync (goal <= 1 wakeup/s)"),
            );
            let (mut wake, mut cpu) = (vec![], vec![]);
            for r in 0..o.runs {
                let ns = Netns::new("bid");
                let file;
                let api;
                let args: Vec<String> = if source == "manifests" {
                    file = write_manifest(dir, n, m);
                    [
                        "--manifests",
                        &file.to_string_lossy(),
                        "--hostname-override",
                        NODE,
                        "-v=2",
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(o.daemon_args.iter().cloned())
                    .collect()
                } else {
                    api = api_in(&ns, n, m);
                    // as the API server's watch cache: a bookmark about every minute
                    api.set_bookmark_every(Some(Duration::from_secs(60)));
                    api_args(o, &api)
                };
                let d = Daemon::start(&ns, &o.bin, &args).expect("start the daemon");
                if d.wait_sync(0, Duration::from_secs(600)).is_none() {
                    println!("   run {r}: FAILED: no first sync\n{}", d.tail(20));
                    continue;
                }
                d.wait_quiet(Duration::from_secs(5));
                let before = ctxt_switches(d.pid());
                let c0 = d.cpu().unwrap_or_default();
                let syncs0 = d.count();
                let t0 = Instant::now();
                std::thread::sleep(Duration::from_secs(secs));
                let el = t0.elapsed().as_secs_f64();
                let after = ctxt_switches(d.pid());
                let c1 = d.cpu().unwrap_or_default();
                let syncs = d.count() - syncs0;
                let threads = after.len();
                d.kill();
                // per thread: switches since the first reading (a thread born meanwhile
                // counts from zero)
                let mut per: Vec<(u64, u64, String)> = after
                    .iter()
                    .map(|(k, (v, i))| {
                        let (v0, i0) = before.get(k).copied().unwrap_or((0, 0));
                        (v.saturating_sub(v0), i.saturating_sub(i0), k.1.clone())
                    })
                    .collect();
                per.sort_by_key(|p| std::cmp::Reverse(p.0));
                let vol: u64 = per.iter().map(|p| p.0).sum();
                let invol: u64 = per.iter().map(|p| p.1).sum();
                let w = vol as f64 / el;
                let c = (c1.saturating_sub(c0)).as_secs_f64() / el * 100.0;
                println!(
                    "   run {r}: {w:.2} wakeups/s ({vol} voluntary, {invol} involuntary switches in {el:.1} s, {threads} threads), CPU {c:.3} % of a core, {syncs} syncs meanwhile  [load {}]",
                    loadavg()
                );
                let busy: Vec<String> = per
                    .iter()
                    .filter(|p| p.0 > 0)
                    .map(|p| format!("{} {}", p.2, p.0))
                    .collect();
                println!("          wakeups by thread: {}", busy.join(", "));
                wake.push(w);
                cpu.push(c);
            }
            let w = median(&wake);
            println!(
                "   median at {n}: {w:.2} wakeups/s (goal <= 1: {}), CPU {:.3} % of a core",
                verdict(w <= 1.0),
                median(&cpu)
            );
            footer();
        }
    }
}
