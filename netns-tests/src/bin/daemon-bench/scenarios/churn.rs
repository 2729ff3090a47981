//! Scenario `churn`: 100 endpoint changes/s: latency, CPU, RSS.

use std::time::{Duration, Instant};

use integration::scale::scale_slice;
use netns_tests::bench_cluster::*;
use netns_tests::Netns;

use super::*;
use crate::options::Opts;
use crate::report::*;

pub fn churn(o: &Opts) {
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
