//! Scenario `fleet`: N nodes against one API double (issue 25 item 4). The double
//! listens on a bridge's address in a hub namespace; each node is a namespace of its own
//! on that bridge (`fleet_hosts`), running one daemon (`--master http://HUB:PORT
//! --hostname-override node-i`, a Node object per node in the double) that programs its
//! own namespace's kernel. Timed from outside:
//!
//! - the cold start of the whole fleet: from just before the first daemon's spawn until
//!   every node's kernel holds the daemon's table (`TableProbe`, polled);
//! - then `--changes` endpoint changes, each at least `SPACING` after every node's last
//!   sync: from the double's first write of the watch event (`ApiServer::sent_at`) to
//!   each node's kernel holding it (an `Observer` per node): the slowest node per change
//!   and the distribution over nodes;
//! - bytes and packets per node from the node veths' counters (`fleet_hosts`); requests
//!   per node from the double's request log (each request with its client's address);
//!   CPU of the daemons, of the whole bench process and of the double's threads
//!   (`ApiServer::cpu`: every connection thread's, also of those that ended).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use integration::scale::{scale_node, scale_service, scale_slice};
use integration::{ApiServer, ThreadsCpu};
use netns_tests::bench::{loadavg, median, stat_cpu, Daemon};
use netns_tests::bench_cluster::{api_on, replaced};
use serde_json::json;

use super::fleet_hosts::{build, read_counters, Counters, Host, HUB, MAX_NODES};
use super::{daemon_args, SPACING};
use crate::observer::{Expect, Observer, TableProbe};
use crate::options::Opts;
use crate::report::*;

/// How long the fleet's cold start may take before the bench gives up.
const COLD_LIMIT: Duration = Duration::from_secs(1800);
/// Pause between two rounds of table probes (one request per node still starting).
const POLL: Duration = Duration::from_millis(10);
/// How long a change may take to reach every node.
const CHANGE_LIMIT: Duration = Duration::from_secs(60);
/// Perf-tests' ClusterLoader2 default threshold for the network programming latency
/// SLI (kubernetes/perf-tests#2407; the SLO itself says `<= X`): docs/benchmarks.md.
const SLO_MS: f64 = 30_000.0;

/// The address of measured change `k` (unique per change, from 198.19.240.0/20).
fn change_addr(k: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(198, 19, 240, 1)) + k % 4000,
    ))
}

/// CPU of the whole bench process, and of the double's threads (every connection's,
/// ended or live, and its acceptor's: `ApiServer::cpu`).
fn bench_cpu(api: &ApiServer) -> (Duration, ThreadsCpu) {
    (stat_cpu("/proc/self/stat").unwrap_or_default(), api.cpu())
}

/// "X s (n connection threads, of which m ended)" of the double's threads between two
/// readings.
fn double_cpu(from: &ThreadsCpu, to: &ThreadsCpu) -> String {
    let started = (to.ended + to.live as u64).saturating_sub(from.ended + from.live as u64);
    format!(
        "{:.3} s ({started} connection threads started, {} ended; {} live now)",
        to.used.saturating_sub(from.used).as_secs_f64(),
        to.ended.saturating_sub(from.ended),
        to.live
    )
}

/// Raise this process's descriptor limit to its hard limit: the double holds two
/// descriptors per connection, several connections per node. The daemons inherit it.
fn raise_nofile() -> u64 {
    // SAFETY: a zeroed rlimit is a valid value for getrlimit to fill; setrlimit reads it.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        r.rlim_cur
    }
}

/// Wait until `SPACING` has passed since every daemon's last sync.
fn quiet(daemons: &[Daemon]) {
    std::thread::sleep(SPACING);
    for d in daemons {
        if let Some(rest) = d
            .last_sync_at()
            .and_then(|t| SPACING.checked_sub(t.elapsed()))
        {
            std::thread::sleep(rest);
        }
    }
}

/// Probe every node's kernel for the daemon's table in rounds `POLL` apart (only the
/// nodes not seen yet) until all hold it or `COLD_LIMIT` passed: when each was first
/// seen holding it, the number of rounds and the longest round.
fn poll_tables(mut probes: Vec<TableProbe>) -> (Vec<Option<Instant>>, u32, Duration) {
    let t0 = Instant::now();
    let mut seen: Vec<Option<Instant>> = vec![None; probes.len()];
    let (mut rounds, mut longest) = (0u32, Duration::ZERO);
    while seen.iter().any(Option::is_none) && t0.elapsed() < COLD_LIMIT {
        let r0 = Instant::now();
        for (i, p) in probes.iter_mut().enumerate() {
            if seen[i].is_none() && p.holds(ruleset::names::TABLE) {
                seen[i] = Some(Instant::now());
            }
        }
        rounds += 1;
        longest = longest.max(r0.elapsed());
        std::thread::sleep(POLL);
    }
    (seen, rounds, longest)
}

/// "p50 / p99 / max" of `v` with `unit`.
fn dist(v: Vec<f64>, unit: &str) -> String {
    let (p50, p99, max, n) = stats(v);
    format!("{p50:.3} / {p99:.3} / {max:.3} {unit} (n={n})")
}

/// min / median / max of `v` as whole numbers.
fn spread(v: &[u64]) -> String {
    let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    let (min, max) = (
        v.iter().min().copied().unwrap_or(0),
        v.iter().max().copied().unwrap_or(0),
    );
    format!("{min} / {:.0} / {max}", median(&f))
}

/// How many of `requests` (the double's log: client address, request line) each node
/// (by its address, in `nodes`' order) sent, and how many came from no node.
fn per_node(nodes: &[Ipv4Addr], requests: &[(IpAddr, String)]) -> (Vec<u64>, usize) {
    let mut counts: BTreeMap<IpAddr, u64> = BTreeMap::new();
    for (ip, _) in requests {
        *counts.entry(*ip).or_insert(0) += 1;
    }
    let per: Vec<u64> = nodes
        .iter()
        .map(|ip| counts.get(&IpAddr::V4(*ip)).copied().unwrap_or(0))
        .collect();
    let others = requests.len() - per.iter().sum::<u64>() as usize;
    (per, others)
}

/// "N requests; per node min / median / max a / b / c" (and from elsewhere, if any).
fn requests_line(nodes: &[Ipv4Addr], requests: &[(IpAddr, String)]) -> String {
    let (per, others) = per_node(nodes, requests);
    format!(
        "{} requests; per node min / median / max {}{}",
        requests.len(),
        spread(&per),
        if others > 0 {
            format!("; {others} from no node's address")
        } else {
            String::new()
        }
    )
}

/// The double's request lines grouped by what they ask: path without the query, and
/// whether a watch.
fn request_kinds(requests: &[(IpAddr, String)]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (_, l) in requests {
        let target = l.split_whitespace().nth(1).unwrap_or("?");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let watch = query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let kind = format!(
            "{} {path}{}",
            l.split_whitespace().next().unwrap_or("?"),
            if watch { " (watch)" } else { "" }
        );
        *out.entry(kind).or_insert(0) += 1;
    }
    out
}

pub fn fleet(o: &Opts) {
    let n = o.nodes.clamp(1, MAX_NODES);
    let s = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(100);
    let m = o.endpoints;
    let k_changes = o.changes.max(1);
    header(
        "fleet",
        &format!(
            "{n} nodes x one API double, {s} x {m} services; the daemons' arguments: {}; cold start = first spawn -> every node's kernel holding the table; then {k_changes} endpoint changes, each >= {} ms after every node's last sync: the double's first write of the event -> each node's kernel (bench's nftables monitor per node)",
            daemon_args(o, "URL", "node-i").join(" "),
            SPACING.as_millis()
        ),
    );
    let nofile = raise_nofile();
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let avail = mem
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .unwrap_or("MemAvailable: ?");
    println!("   descriptor limit {nofile}; {avail}");
    let t_build = Instant::now();
    let (hub, hosts) = build(n);
    let api = api_on(&hub, IpAddr::V4(HUB), |api| {
        for h in &hosts {
            let mut node = scale_node(&h.name);
            node["status"]["addresses"] =
                json!([{"type": "InternalIP", "address": h.ip.to_string()}]);
            api.apply(node);
        }
        for i in 0..s {
            api.apply(scale_service(i));
            api.apply(scale_slice(i, m));
        }
    });
    // as the API server's watch cache: a bookmark about every minute
    api.set_bookmark_every(Some(Duration::from_secs(60)));
    println!(
        "   {n} node namespaces and the double ({}) ready after {:.1} s  [load {}]",
        api.url(),
        t_build.elapsed().as_secs_f64(),
        loadavg()
    );
    let probes: Vec<TableProbe> = hosts
        .iter()
        .map(|h| TableProbe::open(&h.ns).expect("open a table probe"))
        .collect();

    // ---- cold start
    let c0 = read_counters(&hosts);
    let cpu0 = bench_cpu(&api);
    let t0 = Instant::now();
    // the probes run on a thread of their own from before the first spawn, so that a
    // node started early is seen when its table appears, not after the last spawn
    let poller = std::thread::spawn(move || poll_tables(probes));
    let daemons: Vec<Daemon> = hosts
        .iter()
        .map(|h| {
            Daemon::start(&h.ns, &o.bin, &daemon_args(o, &api.url(), &h.name))
                .expect("start a daemon")
        })
        .collect();
    let spawned = t0.elapsed();
    let (seen, rounds, longest_round) = poller.join().expect("the table probes");
    let missing: Vec<&str> = hosts
        .iter()
        .zip(&seen)
        .filter(|(_, s)| s.is_none())
        .map(|(h, _)| h.name.as_str())
        .collect();
    if !missing.is_empty() {
        println!(
            "   FAILED: {} of {n} nodes hold no table after {} s: {}",
            missing.len(),
            COLD_LIMIT.as_secs(),
            missing.join(" ")
        );
        if let Some((d, _)) = daemons.iter().zip(&seen).find(|(_, s)| s.is_none()) {
            println!("{}", d.tail(20));
        }
        return;
    }
    let seen: Vec<Instant> = seen.into_iter().flatten().collect();
    let all = seen.iter().max().copied().unwrap_or(t0) - t0;
    // the daemons' own first `synced` lines (printed beside, not judged)
    let own: Vec<f64> = daemons
        .iter()
        .map(|d| {
            d.wait_sync(0, Duration::from_secs(60))
                .map_or(f64::NAN, |(_, t, _)| (t - d.started).as_secs_f64())
        })
        .collect();
    let cpu1 = bench_cpu(&api);
    let c1 = read_counters(&hosts);
    let cold_bytes: Vec<Counters> = c1.iter().zip(&c0).map(|(a, b)| *a - *b).collect();
    let from_spawn: Vec<f64> = seen
        .iter()
        .zip(&daemons)
        .map(|(t, d)| (*t - d.started).as_secs_f64())
        .collect();
    let daemon_cpu: Vec<f64> = daemons
        .iter()
        .map(|d| d.cpu().unwrap_or_default().as_secs_f64())
        .collect();
    let rss: Vec<u64> = daemons
        .iter()
        .map(|d| d.status_kib("VmRSS").unwrap_or(0) / 1024)
        .collect();
    println!(
        "   cold start of the fleet: every node's kernel holds the table {:.3} s after the first spawn (spawning all {n} took {:.3} s; table probes: {rounds} rounds, the longest {:.1} ms, {} ms apart)  [load {}]",
        all.as_secs_f64(),
        spawned.as_secs_f64(),
        ms(longest_round),
        POLL.as_millis(),
        loadavg()
    );
    println!(
        "   per node, its spawn -> its kernel holding the table: p50 / p99 / max {}; the daemons' own first synced line (not judged): {}",
        dist(from_spawn.clone(), "s"),
        dist(own.clone(), "s")
    );
    println!(
        "   CPU of the cold start: the daemons {:.2} s in all (per daemon min / median / max {}) ms; the bench process {:.2} s (the double, the probes, the log readers), of which the double's threads {}",
        daemon_cpu.iter().sum::<f64>(),
        spread(&daemon_cpu.iter().map(|c| (c * 1e3) as u64).collect::<Vec<_>>()),
        cpu1.0.saturating_sub(cpu0.0).as_secs_f64(),
        double_cpu(&cpu0.1, &cpu1.1)
    );
    println!(
        "   the daemons' RSS after the cold start (VmRSS, MiB): min / median / max {}",
        spread(&rss)
    );
    println!(
        "   bytes per node over the cold start (the node veth's counters, read in its namespace): received min / median / max {} ({} packets), sent {} ({} packets)",
        spread(&cold_bytes.iter().map(|c| c.rx_bytes).collect::<Vec<_>>()),
        spread(&cold_bytes.iter().map(|c| c.rx_packets).collect::<Vec<_>>()),
        spread(&cold_bytes.iter().map(|c| c.tx_bytes).collect::<Vec<_>>()),
        spread(&cold_bytes.iter().map(|c| c.tx_packets).collect::<Vec<_>>()),
    );
    let cold_requests = api.requests_by_peer();
    let node_ips: Vec<Ipv4Addr> = hosts.iter().map(|h| h.ip).collect();
    let (cold_per_node, _) = per_node(&node_ips, &cold_requests);
    if n <= 20 {
        for (i, h) in hosts.iter().enumerate() {
            println!(
                "     {:<9} {:<13} table after {:.3} s (its own synced line {:.3} s), received {} B, sent {} B, {} requests, RSS {} MiB",
                h.name,
                h.ip.to_string(),
                from_spawn[i],
                own[i],
                cold_bytes[i].rx_bytes,
                cold_bytes[i].tx_bytes,
                cold_per_node[i],
                rss[i]
            );
        }
    }
    println!(
        "   requests to the double over the cold start (its log, by client address): {}:",
        requests_line(&node_ips, &cold_requests)
    );
    for (kind, count) in request_kinds(&cold_requests) {
        println!("     {count:>6}  {kind}");
    }

    // ---- changes
    let observers: Vec<Observer> = hosts
        .iter()
        .map(|h| Observer::open(&h.ns).expect("open an nftables monitor"))
        .collect();
    quiet(&daemons);
    // the idle baseline: what a node receives and sends in a quiet interval
    let i0 = (read_counters(&hosts), Instant::now());
    quiet(&daemons);
    let i1 = (read_counters(&hosts), Instant::now());
    let idle: Vec<Counters> = i1.0.iter().zip(&i0.0).map(|(a, b)| *a - *b).collect();
    println!(
        "   idle baseline over {:.2} s: bytes received per node min / median / max {}, sent {}",
        (i1.1 - i0.1).as_secs_f64(),
        spread(&idle.iter().map(|c| c.rx_bytes).collect::<Vec<_>>()),
        spread(&idle.iter().map(|c| c.tx_bytes).collect::<Vec<_>>()),
    );
    let requests_before = api.requests_by_peer().len();
    let cpu_c0 = bench_cpu(&api);
    let daemon_cpu0: Vec<Duration> = daemons
        .iter()
        .map(|d| d.cpu().unwrap_or_default())
        .collect();
    let mut prev = i1.0;
    // lat[k][i]: change k, node i (ms; NaN where not seen)
    let mut lat: Vec<Vec<f64>> = Vec::new();
    let mut acks: Vec<f64> = Vec::new();
    let mut bytes: Vec<Counters> = Vec::new();
    let mut intervals: Vec<f64> = Vec::new();
    for k in 0..k_changes {
        let svc = (s / 2 + k) % s;
        let a = change_addr(k);
        for obs in &observers {
            obs.clear();
        }
        let lines: Vec<usize> = daemons.iter().map(Daemon::count).collect();
        let t_start = Instant::now();
        let rv = api.apply(replaced(scale_slice(svc, m), &a.to_string()));
        let Some(sent) = api.sent_at(rv, CHANGE_LIMIT) else {
            println!("   change {k}: the double never wrote the event");
            continue;
        };
        let deadline = t_start + CHANGE_LIMIT;
        let want = Expect { add: true, addr: a };
        let row: Vec<f64> = observers
            .iter()
            .map(|obs| {
                obs.wait(
                    t_start,
                    &want,
                    deadline.saturating_duration_since(Instant::now()),
                )
                .map_or(f64::NAN, |seen| {
                    ms(seen.committed.saturating_duration_since(sent))
                })
            })
            .collect();
        quiet(&daemons);
        let now = read_counters(&hosts);
        let t_end = Instant::now();
        intervals.push((t_end - t_start).as_secs_f64());
        bytes.extend(now.iter().zip(&prev).map(|(a, b)| *a - *b));
        prev = now;
        for (d, from) in daemons.iter().zip(&lines) {
            if let Some(ack) = d
                .syncs_since(*from)
                .iter()
                .find_map(|(_, s)| s.event_to_ack_ms)
            {
                acks.push(ack);
            }
        }
        let got: Vec<f64> = row.iter().copied().filter(|x| !x.is_nan()).collect();
        let slowest = row
            .iter()
            .enumerate()
            .filter(|(_, x)| !x.is_nan())
            .max_by(|a, b| a.1.total_cmp(b.1));
        let fastest = got.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "   change {k:>3} (svc-{svc} -> {a}): {}/{n} nodes; slowest {} ms ({}), median node {:.3} ms, first node {fastest:.3} ms  [load {}]",
            got.len(),
            slowest.map_or("-".into(), |(_, x)| format!("{x:.3}")),
            slowest.map_or("-", |(i, _)| hosts[i].name.as_str()),
            median(&got),
            loadavg()
        );
        lat.push(row);
    }
    let cpu_c1 = bench_cpu(&api);
    let changes_cpu: f64 = daemons
        .iter()
        .zip(&daemon_cpu0)
        .map(|(d, c0)| {
            d.cpu()
                .unwrap_or_default()
                .saturating_sub(*c0)
                .as_secs_f64()
        })
        .sum();
    let change_requests = api.requests_by_peer().split_off(requests_before);
    summary(&hosts, &lat, &acks);
    let per_s = |c: u64| c as f64 / (i1.1 - i0.1).as_secs_f64();
    let idle_rx = median(&idle.iter().map(|c| per_s(c.rx_bytes)).collect::<Vec<_>>());
    let idle_tx = median(&idle.iter().map(|c| per_s(c.tx_bytes)).collect::<Vec<_>>());
    let span = median(&intervals);
    println!(
        "   bytes per node per change (veth counters from just before the change to the quiet point after it, {span:.2} s median; the idle baseline is {idle_rx:.0} B/s received, {idle_tx:.0} B/s sent): received min / median / max {} ({} packets), sent {} ({} packets)",
        spread(&bytes.iter().map(|c| c.rx_bytes).collect::<Vec<_>>()),
        spread(&bytes.iter().map(|c| c.rx_packets).collect::<Vec<_>>()),
        spread(&bytes.iter().map(|c| c.tx_bytes).collect::<Vec<_>>()),
        spread(&bytes.iter().map(|c| c.tx_packets).collect::<Vec<_>>()),
    );
    println!(
        "   requests to the double during the changes: {}; CPU over the changes: the daemons {changes_cpu:.3} s in all ({:.2} ms per node per change, idle included), the bench process {:.3} s, of which the double's threads {}",
        requests_line(&node_ips, &change_requests),
        changes_cpu * 1e3 / (n as f64 * lat.len().max(1) as f64),
        cpu_c1.0.saturating_sub(cpu_c0.0).as_secs_f64(),
        double_cpu(&cpu_c0.1, &cpu_c1.1)
    );
    for (kind, count) in request_kinds(&change_requests) {
        println!("     {count:>6}  {kind}");
    }
    drop(observers);
    drop(daemons);
    drop(api);
    drop(hosts);
    drop(hub);
    footer();
}

/// The change latencies: per change the slowest node, all samples pooled (upstream's
/// SLI pools every programmer's samples), per node; against the SLO threshold.
fn summary(hosts: &[Host], lat: &[Vec<f64>], acks: &[f64]) {
    let ok = |v: &[f64]| -> Vec<f64> { v.iter().copied().filter(|x| !x.is_nan()).collect() };
    let slowest: Vec<f64> = lat
        .iter()
        .map(|row| {
            if row.iter().any(|x| x.is_nan()) {
                f64::INFINITY
            } else {
                ok(row).into_iter().fold(0.0, f64::max)
            }
        })
        .collect();
    let pooled: Vec<f64> = lat.iter().flat_map(|row| ok(row)).collect();
    let lost = lat.iter().map(|row| row.len()).sum::<usize>() - pooled.len();
    let (_, p99, max, _) = stats(pooled.clone());
    println!(
        "   event -> kernel, the slowest node of each change: p50 / p99 / max {}",
        dist(slowest.clone(), "ms")
    );
    println!(
        "   event -> kernel, every node and change pooled: p50 / p99 / max {}{}",
        dist(pooled, "ms"),
        if lost > 0 {
            format!("; {lost} never seen")
        } else {
            String::new()
        }
    );
    let per_node: Vec<(f64, f64)> = (0..hosts.len())
        .map(|i| {
            let v: Vec<f64> = lat.iter().filter_map(|row| row.get(i).copied()).collect();
            let (p50, _, max, _) = stats(ok(&v));
            (p50, max)
        })
        .collect();
    let (m50, _, mmax, _) = stats(per_node.iter().map(|x| x.0).collect());
    let (x50, _, xmax, _) = stats(per_node.iter().map(|x| x.1).collect());
    let best50 = per_node.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    println!(
        "   per node over the changes: its median, across nodes min / median / max {best50:.3} / {m50:.3} / {mmax:.3} ms; its max, across nodes median / max {x50:.3} / {xmax:.3} ms"
    );
    let mut worst: Vec<(usize, f64)> = per_node.iter().map(|x| x.1).enumerate().collect();
    worst.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "   the slowest nodes (their max): {}",
        worst
            .iter()
            .take(5)
            .map(|(i, x)| format!("{} {x:.3} ms", hosts[*i].name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if hosts.len() <= 20 {
        for (h, (p50, max)) in hosts.iter().zip(&per_node) {
            println!(
                "     {:<9} {}  median {p50:8.3} ms, max {max:8.3} ms",
                h.name, h.ip
            );
        }
    }
    println!(
        "   the daemons' own event_to_ack_ms (not judged): {}",
        dist(acks.to_vec(), "ms")
    );
    println!(
        "   upstream's network programming latency SLI (p99 of every programmer's samples pooled) against perf-tests' 30 s threshold (the SLO says <= X): p99 {p99:.3} ms, max {max:.3} ms: {}",
        verdict(p99 <= SLO_MS && lost == 0)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_per_node_address() {
        let nodes = [
            Ipv4Addr::new(198, 19, 160, 2),
            Ipv4Addr::new(198, 19, 160, 3),
        ];
        let log: Vec<(IpAddr, String)> = [
            (nodes[1], "GET /api/v1/services?watch=true"),
            (nodes[1], "GET /api/v1/nodes"),
            (Ipv4Addr::new(198, 19, 160, 9), "GET /api/v1/nodes"),
        ]
        .into_iter()
        .map(|(ip, l)| (IpAddr::V4(ip), l.to_string()))
        .collect();
        assert_eq!(per_node(&nodes, &log), (vec![0, 2], 1));
        assert_eq!(
            requests_line(&nodes, &log),
            "3 requests; per node min / median / max 0 / 1 / 2; 1 from no node's address"
        );
    }
}
