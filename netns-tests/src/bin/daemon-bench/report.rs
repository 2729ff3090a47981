//! How figures are printed: headers with the load, units, verdicts.

use std::time::Duration;

use std::sync::Mutex;

use netns_tests::bench::{cpu_times, loadavg, steal_percent};

/// The CPU time counters at the last header, for the footer's steal share.
static AT_HEADER: Mutex<Option<Vec<u64>>> = Mutex::new(None);

pub fn header(name: &str, what: &str) {
    println!("\n== {name}: {what}");
    println!("   load at start: {}", loadavg());
    *AT_HEADER.lock().unwrap_or_else(|e| e.into_inner()) = cpu_times();
}

pub fn footer() {
    let before = AT_HEADER.lock().unwrap_or_else(|e| e.into_inner()).take();
    let steal = before
        .zip(cpu_times())
        .and_then(|(a, b)| steal_percent(&a, &b))
        .map_or("unknown".to_string(), |p| format!("{p:.1} %"));
    println!(
        "   load at end:   {}; CPU stolen by the host since the start: {steal}",
        loadavg()
    );
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// The `p` quantile of `sorted` (ascending) by nearest rank; NaN when empty.
pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

/// p50, p99 and max (nearest rank) of `v`, and how many values it holds.
pub fn stats(mut v: Vec<f64>) -> (f64, f64, f64, usize) {
    v.sort_by(|a, b| a.total_cmp(b));
    (pct(&v, 0.5), pct(&v, 0.99), pct(&v, 1.0), v.len())
}
