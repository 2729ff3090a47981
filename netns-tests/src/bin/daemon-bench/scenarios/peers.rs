//! Scenario `peers`: ours vs `nft -f` vs `iptables-restore` of upstream's rulesets.

use std::path::Path;

use netns_tests::bench::{loadavg, median, time_program, Exit};
use netns_tests::bench_cluster::*;
use netns_tests::upstream::{iptables_mode, nftables_mode};
use netns_tests::Netns;

use crate::options::Opts;
use crate::report::*;

/// A peer, run to its exit in the namespace given.
type Tool<'a> = Box<dyn Fn(&Netns) -> std::io::Result<Exit> + 'a>;

pub fn peers(o: &Opts, dir: &Path) {
    let n = o
        .services
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(4_000);
    let m = o.endpoints;
    let (file, ports, what) = if o.shape == "prod" {
        let ports = crate::shape::upstream_ports(&crate::shape::cluster(n, o.seed));
        let what = format!(
            "{n} services of the production shape (seed {}; upstream's rulesets of its {} IPv4 service ports with a ready endpoint, their ClusterIP, NodePort and ready endpoints only: no LoadBalancer IPs, source ranges, ETP Local, affinity or IPv6, a lower bound of upstream's work)",
            o.seed,
            ports.len()
        );
        (super::manifest_for(o, dir, n), ports, what)
    } else {
        (
            write_manifest(dir, n, m),
            upstream_ports(n, m),
            format!("{n} x {m}"),
        )
    };
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
        &format!("{what}, each tool from process start to exit in a fresh namespace: ours (--manifests FILE --once), nft -f of upstream's nftables mode, iptables-restore ({ipt_version}) of upstream's iptables mode"),
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
        "   ours vs nft -f: {rn:.1}x faster (target >= 40x: {}); vs iptables-restore: {ri:.1}x faster (target >= 20x: {})",
        verdict(rn >= 40.0),
        verdict(ri >= 20.0)
    );
    footer();
}
