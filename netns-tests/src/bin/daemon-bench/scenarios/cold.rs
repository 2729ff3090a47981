//! Scenario `cold`: start until the first batch is committed, from a manifests file and from the API double.

use std::path::Path;
use std::time::Duration;

use netns_tests::bench::{loadavg, median, Daemon};
use netns_tests::bench_cluster::*;
use netns_tests::Netns;

use super::*;
use crate::options::Opts;
use crate::report::*;

pub fn cold(o: &Opts, dir: &Path) {
    let sizes = o.services.clone().unwrap_or(vec![10_000, 50_000]);
    for n in sizes {
        // uniform: issue 24's targets (before it: 1.5 s / 150 MiB at 10k, 6 s / 600 MiB
        // at 50k); production shape: issue 37's (no peak RSS target but at 50k)
        let (t_target, rss_target) = match (o.shape == "prod", n) {
            (false, ..=10_000) => (0.5, 100.0),
            (false, ..=50_000) => (2.5, 350.0),
            (false, _) => (5.0, 700.0),
            (true, ..=10_000) => (1.0, f64::INFINITY),
            (true, ..=50_000) => (5.0, 400.0),
            (true, _) => (10.0, f64::INFINITY),
        };
        if o.source != "api" {
            let file = manifest_for(o, dir, n);
            header(
                "cold/manifests",
                &format!("{}: --manifests FILE --hostname-override {NODE} --once, fresh namespace; start -> first commit (synced line) and -> exit; peak RSS (VmHWM read every 5 ms)", what(o, n)),
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
                let listeners = nftables_listeners();
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
                    "   run {r}: first commit {f:.3} s, exit {:.3} s, peak RSS {:.0} MiB, CPU {:.2} s, ops {}, the first sync's compile {:.0} ms + commit {:.0} ms  [load {}] [{}]",
                    e.wall.as_secs_f64(),
                    mib(e.maxrss_kib),
                    e.cpu.as_secs_f64(),
                    s.ops,
                    s.compile_ms,
                    s.commit_ms,
                    loadavg(),
                    listeners_text(listeners)
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
                &format!("{}: --master URL (the API double, in the namespace) -v=2 {}; start -> first synced line; peak RSS (VmHWM at the first sync)", what(o, n), o.daemon_args.join(" ")),
            );
            let (mut first, mut rss) = (vec![], vec![]);
            for r in 0..o.runs {
                let ns = Netns::new("bca");
                let api = api_for(o, &ns, n);
                let listeners = nftables_listeners();
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
                    "   run {r}: first commit {:.3} s, peak RSS {:.0} MiB (VmHWM at the first sync); lists complete at: {lists}  [load {}] [{}]",
                    f.as_secs_f64(),
                    mib(hwm),
                    loadavg(),
                    listeners_text(listeners)
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
    let rss_verdict = if rss_target.is_finite() {
        format!("target <= {rss_target} MiB: {}", verdict(r <= rss_target))
    } else {
        "no target".to_string()
    };
    println!(
        "   median at {n}: first commit {f:.3} s (target <= {t_target} s: {}), peak RSS {r:.0} MiB ({rss_verdict})",
        verdict(f <= t_target),
    );
    if let Some(e) = exit {
        println!("   median at {n}: start -> exit {:.3} s", median(e));
    }
}

/// Netlink sockets subscribed to `NFNLGRP_NFTABLES` (group 7) in any network namespace
/// of the machine, read from `/proc/PID/net/netlink` once per namespace (root reads every
/// process's). The kernel builds a notification per element of a commit whenever one
/// exists anywhere: `netlink_has_listeners` looks at the protocol's global listener
/// mask, not the namespace's, so another program's monitor (a daemon's watcher, `nft
/// monitor`) slows a cold start in an unrelated namespace (10k: commit 0.69 s -> 1.05 s,
/// docs/benchmarks.md). `None` when `/proc` cannot be read.
fn nftables_listeners() -> Option<usize> {
    let mut seen = std::collections::BTreeSet::new();
    let mut n = 0;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = e.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(ns) = std::fs::read_link(e.path().join("ns/net")) else {
            continue;
        };
        if !seen.insert(ns) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("net/netlink")) else {
            continue;
        };
        n += listeners_in(&text);
    }
    Some(n)
}

/// Of one `/proc/net/netlink` text: the NETLINK_NETFILTER (12) sockets whose groups
/// (the first 32 bits, in hex) include NFNLGRP_NFTABLES (bit 6).
fn listeners_in(text: &str) -> usize {
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[1] == "12"
                && u32::from_str_radix(f[3], 16).is_ok_and(|g| g & (1 << 6) != 0)
        })
        .count()
}

fn listeners_text(n: Option<usize>) -> String {
    match n {
        Some(0) => "no nftables listener on the machine".into(),
        Some(n) => format!(
            "{n} nftables listener(s) elsewhere: the commit builds a notification per element"
        ),
        None => "nftables listeners unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn listeners_are_netfilter_sockets_in_group_7() {
        let text = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n\
00000000e207010f 12  3456950510 00000000 0        0        0     2        0        2677981\n\
00000000526e76b7 12  0          00000040 0        0        0     2        0        2677635\n\
0000000047362dbe 0   29896      00000040 0        0        0     2        0        2677980\n\
0000000047362dbf 12  29897      000000c1 0        0        0     2        0        2677982\n";
        assert_eq!(super::listeners_in(text), 2);
    }
}
