//! Scenario `change`: one change at a time with N services loaded, timed from outside
//! (the double's write of the watch event -> the kernel holding the change, seen on the
//! bench's own nftables monitor) and by the daemon's own `event_to_ack_ms` (printed,
//! not judged).

use std::time::{Duration, Instant};

use integration::scale::{scale_service, scale_slice};
use integration::ApiServer;
use netns_tests::bench::{loadavg, median, Daemon};
use netns_tests::bench_cluster::*;
use netns_tests::Netns;

use super::*;
use crate::observer::{Expect, Observer};
use crate::options::Opts;
use crate::report::*;

/// One measured change: (event -> kernel ms from outside, the engine's event -> ACK
/// ms, the double's apply -> synced line ms, full).
type Sample = (f64, f64, f64, bool);

/// Medians of a size and change: (event -> kernel, event -> ACK, apply -> line) ms.
type Medians = (f64, f64, f64);

/// Apply `f` (SPACING after the last sync; it returns the event's resourceVersion),
/// then wait for the kernel to hold `want` and for the sync that consumed it.
fn measure(
    d: &Daemon,
    obs: &Observer,
    api: &ApiServer,
    want: Expect,
    f: impl FnOnce() -> u64,
) -> Option<Sample> {
    d.wait_quiet(SPACING);
    obs.clear();
    let from = d.count();
    let t0 = Instant::now();
    let rv = f();
    let sent = api.sent_at(rv, Duration::from_secs(60))?;
    let seen = obs.wait(t0, &want, Duration::from_secs(60))?;
    let kernel = ms(seen.committed.saturating_duration_since(sent));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut at = from;
    while Instant::now() < deadline {
        let (i, t, s) = d.wait_sync(at, deadline - Instant::now())?;
        if let Some(ack) = s.event_to_ack_ms {
            return Some((kernel, ack, ms(t - t0), s.full));
        }
        at = i + 1;
    }
    None
}

fn ip(a: &str) -> std::net::IpAddr {
    a.parse().expect("an address")
}

const OPS: [&str; 4] = [
    "endpoint replaced",
    "endpoint added",
    "service added",
    "service deleted",
];

pub fn change(o: &Opts) {
    if o.shape == "prod" {
        return super::prod::change_prod(o);
    }
    let sizes = o.services.clone().unwrap_or(vec![100, 10_000, 50_000]);
    let m = o.endpoints;
    header(
        "change",
        &format!("API double with N x {m} loaded, daemon at default settings -v=2; each change at least {} ms after the previous sync; event->ACK from the engine's synced line (event_to_ack_ms), send->sync from the double's apply to the synced line reaching the bench", SPACING.as_millis()),
    );
    // medians per size and op: (kernel, ack, send)
    let mut table: Vec<(u32, Vec<Medians>)> = Vec::new();
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
        let obs = Observer::open(&ns).expect("open the nftables monitor");
        let mut samples: Vec<Vec<Sample>> = vec![vec![]; 4];
        for r in 0..o.runs {
            let i = (n / 2 + r as u32) % n;
            let new_addr = format!("198.19.253.{}", 1 + r % 250);
            let extra = format!("198.19.252.{}", 1 + r % 250);
            let j = n + r as u32; // the added service
            let base = scale_slice(i, m);
            let added = |a: &str| Expect {
                add: true,
                addr: ip(a),
            };
            let vip = integration::scale::cluster_ip(j);
            let got = [
                measure(&d, &obs, &api, added(&new_addr), || {
                    api.apply(replaced(base.clone(), &new_addr))
                }),
                measure(&d, &obs, &api, added(&extra), || {
                    api.apply(plus_one(replaced(base.clone(), &new_addr), &extra))
                }),
                {
                    api.apply(scale_slice(j, m));
                    measure(&d, &obs, &api, added(&vip), || api.apply(scale_service(j)))
                },
                measure(
                    &d,
                    &obs,
                    &api,
                    Expect {
                        add: false,
                        addr: ip(&vip),
                    },
                    || api.delete("Service", &format!("ns-{}", j % 100), &format!("svc-{j}")),
                ),
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
                    Some((kernel, ack, send, full)) => {
                        println!(
                            "   {n} run {r}: {:<18} event->kernel {kernel:8.3} ms (the daemon's event->ACK {ack:8.3} ms), apply->synced line {send:8.3} ms{}  [load {}]",
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
        let meds: Vec<Medians> = samples
            .iter()
            .map(|s| {
                (
                    median(&s.iter().map(|x| x.0).collect::<Vec<_>>()),
                    median(&s.iter().map(|x| x.1).collect::<Vec<_>>()),
                    median(&s.iter().map(|x| x.2).collect::<Vec<_>>()),
                )
            })
            .collect();
        table.push((n, meds));
        println!(
            "   {n}: daemon peak RSS {:.0} MiB (VmHWM)",
            mib(d.status_kib("VmHWM").unwrap_or(0))
        );
        d.kill();
        drop(obs);
        drop(api);
    }
    let base = table
        .iter()
        .find(|(n, _)| *n == 100)
        .map(|(_, m)| m.clone());
    println!("   medians (event->kernel ms, from outside / the daemon's event->ACK ms, not judged / apply->synced line ms; ratio of event->kernel to the 100-service case; targets at >= 10k: <= 5 ms (issue 24) and <= 3x):");
    for (n, meds) in &table {
        for (k, (kernel, ack, send)) in meds.iter().enumerate() {
            let ratio = base.as_ref().map(|b| kernel / b[k].0);
            let judged = if *n >= 10_000 {
                format!(
                    " (<= 5 ms: {}{})",
                    verdict(*kernel <= 5.0),
                    ratio.map_or(String::new(), |r| format!(", <= 3x: {}", verdict(r <= 3.0)))
                )
            } else {
                String::new()
            };
            println!(
                "   {n:>6} {:<18} {kernel:8.3} / {ack:8.3} / {send:8.3}{}{judged}",
                OPS[k],
                ratio.map_or(String::new(), |r| format!("  {r:5.2}x"))
            );
        }
    }
    footer();
}
