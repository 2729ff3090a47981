//! Scenario `e2e`: event sent -> a new TCP connection reaches the new endpoint.

use std::time::{Duration, Instant};

use integration::scale::scale_slice;
use netns_tests::bench::{loadavg, median};
use netns_tests::bench_cluster::*;
use serde_json::json;

use super::*;
use crate::observer::{Expect, Observer};
use crate::options::Opts;
use crate::probe::{first_reaching, Probe};
use crate::report::*;

pub fn e2e(o: &Opts) {
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
        &format!("{n} x {m} via the API double, client -- node (daemon) -- server namespaces: the probed service's slice switched to the other server address; from the double's write of the watch event to the start of the first new TCP connection from the client to the ClusterIP answered by the new endpoint (a new connection every ~0.3 ms, probe.rs), and to the kernel holding it (nftables monitor)"),
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
    let obs = Observer::open(&line.router).expect("open the nftables monitor");
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
        obs.clear();
        let probe = Probe::tcp(&line.client, vip, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        let rv = api.apply(slice_to(new));
        let sent = api.sent_at(rv, Duration::from_secs(10));
        let seen = obs.wait(
            t0,
            &Expect {
                add: true,
                addr: new.parse().expect("an address"),
            },
            Duration::from_secs(10),
        );
        // attempts go on after the kernel holds it: the new endpoint answers one of them
        std::thread::sleep(Duration::from_millis(100));
        let shots = probe.finish();
        let ack = d
            .wait_sync(from, Duration::from_secs(5))
            .and_then(|(_, _, s)| s.event_to_ack_ms);
        let reached = sent.and_then(|s| first_reaching(&shots, s, new).map(|t| (s, t)));
        match (reached, seen) {
            (Some((s, t)), Some(k)) => {
                let e = ms(t.saturating_duration_since(s));
                println!(
                    "   run {r}: event sent -> new endpoint reached {e:.1} ms ({} connections; the kernel held it after {:.3} ms; the daemon's event->ACK {} ms)  [load {}]",
                    shots.len(),
                    ms(k.committed.saturating_duration_since(s)),
                    ack.map_or("?".into(), |a| format!("{a:.3}")),
                    loadavg()
                );
                e2e_ms.push(e);
            }
            _ => println!(
                "   run {r}: the new endpoint was not reached within 10 s (kernel seen: {})",
                seen.is_some()
            ),
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
