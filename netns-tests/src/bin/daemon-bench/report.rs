//! How figures are printed: headers with the load, units, verdicts.

use std::time::Duration;

use netns_tests::bench::loadavg;

pub fn header(name: &str, what: &str) {
    println!("\n== {name}: {what}");
    println!("   load at start: {}", loadavg());
}

pub fn footer() {
    println!("   load at end:   {}", loadavg());
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
