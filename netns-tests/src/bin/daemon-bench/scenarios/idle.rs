//! Scenario `idle`: no change: wakeups per second and CPU of the daemon left alone.

use std::path::Path;
use std::time::{Duration, Instant};

use netns_tests::bench::{ctxt_switches, loadavg, median, Daemon};
use netns_tests::bench_cluster::*;
use netns_tests::Netns;

use super::*;
use crate::options::Opts;
use crate::report::*;

/// An idle daemon: started on N services (manifests file, then the API double), left
/// alone 5 s after its first sync, then watched for `--seconds`: wakeups (voluntary
/// context switches of all its threads, `/proc/PID/task/*/status`) per second and CPU
/// (`/proc/PID/stat`). Nothing changes meanwhile, so every wakeup is the daemon's own
/// (the API double sends a watch bookmark every 60 s, as the API server's watch cache).
pub fn idle(o: &Opts, dir: &Path) {
    let sizes = o.services.clone().unwrap_or(vec![10_000]);
    let secs = o.seconds;
    for n in sizes {
        for source in ["manifests", "api"] {
            if o.source != "both" && o.source != source {
                continue;
            }
            header(
                &format!("idle/{source}"),
                &format!("{}, no change: wakeups/s (voluntary context switches, all threads) and CPU over {secs} s, from 5 s after the first sync (goal <= 1 wakeup/s)", what(o, n)),
            );
            let (mut wake, mut cpu) = (vec![], vec![]);
            for r in 0..o.runs {
                let ns = Netns::new("bid");
                let file;
                let api;
                let args: Vec<String> = if source == "manifests" {
                    file = manifest_for(o, dir, n);
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
                    api = api_for(o, &ns, n);
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
