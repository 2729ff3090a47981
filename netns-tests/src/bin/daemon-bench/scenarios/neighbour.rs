//! Another nftables writer on the node (`--neighbour RATE`, with `--shape prod
//! change`; issue 37): a real `nft -i` in the node's namespace adding one element to a
//! table of its own RATE times a second (`netns_tests::neighbour`). Side by side, with
//! the same daemon: its idle CPU over `--seconds` without the neighbour, then with it;
//! the change runs alternate without and with it (even runs without), and their
//! first packets are compared kind by kind; every `sync failed` line of the daemon
//! while the neighbour ran is counted.

use std::time::Duration;

use netns_tests::bench::{loadavg, Daemon};
use netns_tests::neighbour::Neighbour;
use netns_tests::Netns;

use super::prod_sample::{Sample, KINDS};
use crate::report::*;

/// The daemon's CPU in cores over `window` (after 2 s of settling), with a neighbour
/// committing `rate` times a second when `rate` is set, and its failed syncs then.
fn idle_window(d: &Daemon, node: &Netns, rate: Option<u32>, window: Duration) -> (f64, usize, u64) {
    let nb = rate.map(|r| Neighbour::start(node, r));
    std::thread::sleep(Duration::from_secs(2));
    let from = d.count();
    let c0 = d.cpu().unwrap_or_default();
    std::thread::sleep(window);
    let cpu = d.cpu().unwrap_or_default().saturating_sub(c0);
    let failed = d.count_matching(from, "sync failed");
    let sent = nb.as_ref().map_or(0, Neighbour::sent);
    (cpu.as_secs_f64() / window.as_secs_f64(), failed, sent)
}

/// Idle CPU without, then with the neighbour (target with it: <= 0.05 core, no failed
/// sync).
pub fn idle(d: &Daemon, node: &Netns, n: u32, rate: u32, seconds: u64) {
    let window = Duration::from_secs(seconds.clamp(5, 120));
    let (alone, f0, _) = idle_window(d, node, None, window);
    let (with, f1, sent) = idle_window(d, node, Some(rate), window);
    println!(
        "   {n}: idle CPU over {} s: {alone:.4} cores alone, {with:.4} cores with a neighbour committing {rate}/s ({sent} commits) (<= 0.05: {}); failed syncs {f0} alone, {f1} with it (none: {})  [load {}]",
        window.as_secs(),
        verdict(with <= 0.05),
        verdict(f1 == 0),
        loadavg()
    );
}

/// Start the neighbour for run `r` when it is one of the runs with it (odd runs).
pub fn for_run(node: &Netns, rate: Option<u32>, r: usize) -> Option<Neighbour> {
    rate.filter(|_| r % 2 == 1)
        .map(|x| Neighbour::start(node, x))
}

/// First packets with the neighbour against without it, per kind: medians and worst
/// (target: within 100 ms of the same change without it), and failed syncs.
pub fn compare(n: u32, without: &[Vec<Sample>], with: &[Vec<Sample>], failed: usize) {
    println!("   {n}: first packet without / with the neighbour (the same daemon, runs alternating), p50 and max in ms; target: with it within 100 ms of without");
    for (k, kind) in KINDS.iter().enumerate() {
        let fp = |s: &[Sample]| -> Vec<f64> { s.iter().filter_map(|x| x.first_packet).collect() };
        let (a, b) = (fp(&without[k]), fp(&with[k]));
        let missing = with[k].len() - b.len();
        let (a50, _, amax, na) = stats(a);
        let (b50, _, bmax, nb) = stats(b);
        println!(
            "   {n:>6} {kind:<21} without n={na:<2} {a50:8.2} / {amax:8.2}   with n={nb:<2} {b50:8.2} / {bmax:8.2}{}   difference p50 {:+.2} max {:+.2} ({})",
            if missing > 0 { format!(" ({missing} without a first packet)") } else { String::new() },
            b50 - a50,
            bmax - amax,
            verdict(nb > 0 && missing == 0 && b50 - a50 <= 100.0 && bmax - amax <= 100.0)
        );
    }
    println!(
        "   {n}: failed syncs while the neighbour ran: {failed} (none: {})",
        verdict(failed == 0)
    );
}
