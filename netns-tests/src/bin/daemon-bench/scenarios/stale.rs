//! Scenario `stale` (issue 36): a UDP Service losing 10 of its 20 endpoints with 500
//! flows to them, on a node whose conntrack table holds `--ct-entries` unrelated UDP
//! entries and on an empty one, in the same run, alternating, each timed the same way
//! from outside: the flows gone after the commit (the bench's conntrack event socket:
//! the last DESTROY of the 500, minus the NEWGEN of the transaction removing the
//! endpoints on the bench's nftables monitor), the daemon's CPU for the change (its
//! process CPU over the 2 s after the change, minus the same window idle before it),
//! and an unrelated Service changed right after it (the double's write of its watch
//! event -> the kernel holding it). The daemon's own `conntrack cleanup` lines are
//! printed beside, never judged.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ct_netlink::testing::SyntheticFlow;
use ct_netlink::{Config, Conntrack, EventConfig, EventSocket, FlowEvent, SyntheticEntry};
use netns_tests::bench::{loadavg, median};
use netns_tests::bench_cluster::api_with;
use netns_tests::Netns;
use serde_json::{json, Value};

use super::churn_prod::{ct_count, CtMax};
use super::prod::probe_service;
use super::running_daemon;
use crate::observer::{Expect, Observer};
use crate::options::Opts;
use crate::report::*;

const VIP: &str = "198.18.240.2";
const OTHER_VIP: &str = "198.18.240.3";
const WINDOW: Duration = Duration::from_secs(2);

fn ep(k: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 251, 2 + k as u8)
}

fn other_ep(k: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 252, 2 + k as u8)
}

fn slice(name: &str, svc: &str, proto: &str, port: u16, eps: &[Ipv4Addr]) -> Value {
    let e: Vec<Value> = eps
        .iter()
        .map(|a| json!({"addresses": [a.to_string()], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": "node-b"}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "bench", "generateName": format!("{svc}-"),
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "protocol": proto, "port": port}],
        "endpoints": e
    })
}

/// `n` unrelated UDP entries (to 198.18.244.0/22: no service), and 50 flows to the VIP
/// DNAT'ed to each of the 20 endpoints.
fn entries(n: u64) -> Vec<SyntheticEntry> {
    let bg = (0..n).map(|i| {
        SyntheticEntry::from(SyntheticFlow {
            src: IpAddr::V4(Ipv4Addr::from(0xC612_0000 + (i % 65_536) as u32)),
            dst: IpAddr::V4(Ipv4Addr::from(0xC612_F400 + ((i / 65_536) % 1000) as u32)),
            proto: ct_netlink::IPPROTO_UDP,
            sport: 1024 + (i % 50_000) as u16,
            dport: 5000 + ((i / 65_536) / 1000) as u16,
        })
    });
    let vip: IpAddr = VIP.parse().expect("an address");
    let to_vip = (0..1000u32).map(move |j| {
        SyntheticEntry::from(SyntheticFlow {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 250, 10 + (j % 200) as u8)),
            dst: vip,
            proto: ct_netlink::IPPROTO_UDP,
            sport: 40_000 + j as u16,
            dport: 53,
        })
        .dnat(IpAddr::V4(ep(j / 50)), 8053)
    });
    bg.chain(to_vip).collect()
}

/// DESTROY events of flows to the VIP DNAT'ed to a removed endpoint, with their times.
struct Destroys {
    seen: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Destroys {
    fn open(ns: &Netns) -> Option<Destroys> {
        let mut sock = ns
            .run(|| EventSocket::open(EventConfig::default()))
            .map_err(|e| println!("   conntrack event socket: {e}"))
            .ok()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let vip: IpAddr = VIP.parse().expect("an address");
        let removed: Vec<IpAddr> = (10..20).map(|k| IpAddr::V4(ep(k))).collect();
        let thread = std::thread::spawn(move || {
            let mut buf = Vec::new();
            while !st.load(Ordering::Relaxed) {
                buf.clear();
                if sock
                    .recv(&mut buf, Some(Duration::from_millis(100)))
                    .is_err()
                {
                    break;
                }
                let at = Instant::now();
                for e in &buf {
                    if let FlowEvent::Destroy(f) = e {
                        if f.dst == vip && removed.contains(&f.reply_src) {
                            s.lock().unwrap_or_else(|e| e.into_inner()).push(at);
                        }
                    }
                }
            }
        });
        Some(Destroys {
            seen,
            stop,
            thread: Some(thread),
        })
    }

    fn times(&self) -> Vec<Instant> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Destroys {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One run with `ct` unrelated entries: (gone after the commit ms, the change's CPU ms,
/// the unrelated change's event -> kernel ms, flows deleted of the 500).
type Sample = (f64, f64, f64, usize);

fn one(o: &Opts, ct: u64) -> Option<Sample> {
    let node = Netns::new("bst");
    node.enable_conntrack();
    let _max = (ct > 0).then(|| CtMax::at_least(ct + 100_000));
    let eps: Vec<Ipv4Addr> = (0..20).map(ep).collect();
    let others: Vec<Ipv4Addr> = (0..5).map(other_ep).collect();
    let (udp, other) = (eps.clone(), others.clone());
    let api = api_with(&node, move |api| {
        api.apply(probe_service("stale-udp", VIP, "UDP", 53));
        api.apply(slice("stale-udp-x", "stale-udp", "UDP", 8053, &udp));
        api.apply(probe_service("other", OTHER_VIP, "TCP", 80));
        api.apply(slice("other-x", "other", "TCP", 8080, &other));
    });
    let (d, _) = running_daemon(o, &node, &api)?;
    let t = Instant::now();
    let all = entries(ct);
    let filled = node.run(|| {
        let mut c = Conntrack::open(Config::default())?;
        c.insert(&all, 3600, 2000)
    });
    match filled {
        Ok(r) => println!(
            "     {} entries inserted in {:.1} s ({} refused); the table holds {}",
            r.sent,
            t.elapsed().as_secs_f64(),
            r.failed(),
            ct_count(&node)
        ),
        Err(e) => {
            println!("     FAILED to fill the table: {e}");
            return None;
        }
    }
    // until the daemon has taken in what it learned (events, or a seed after losing
    // them): no CPU for 1 s (at most 120 s)
    let mut last = d.cpu().unwrap_or_default();
    for _ in 0..240 {
        std::thread::sleep(Duration::from_millis(500));
        let now = d.cpu().unwrap_or_default();
        if now.saturating_sub(last) < Duration::from_millis(5) {
            break;
        }
        last = now;
    }
    let obs = Observer::open(&node).expect("the nftables monitor");
    let destroys = Destroys::open(&node)?;
    let from = d.count();
    let idle0 = d.cpu().unwrap_or_default();
    std::thread::sleep(WINDOW);
    let idle = d.cpu().unwrap_or_default().saturating_sub(idle0);
    obs.clear();
    let t0 = Instant::now();
    let c0 = d.cpu().unwrap_or_default();
    let rv = api.apply(slice("stale-udp-x", "stale-udp", "UDP", 8053, &eps[..10]));
    let mut more = others.clone();
    more.push(other_ep(5));
    let rv2 = api.apply(slice("other-x", "other", "TCP", 8080, &more));
    let sent2 = api.sent_at(rv2, Duration::from_secs(10));
    let _ = api.sent_at(rv, Duration::from_secs(10));
    let removed = obs.wait(
        t0,
        &Expect {
            add: false,
            addr: IpAddr::V4(ep(10)),
        },
        Duration::from_secs(10),
    );
    let added = obs.wait(
        t0,
        &Expect {
            add: true,
            addr: IpAddr::V4(other_ep(5)),
        },
        Duration::from_secs(10),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while destroys.times().len() < 500 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(w) = (t0 + WINDOW).checked_duration_since(Instant::now()) {
        std::thread::sleep(w);
    }
    let cpu = d.cpu().unwrap_or_default().saturating_sub(c0);
    let times = destroys.times();
    for l in d.tail(d.count().saturating_sub(from)).lines() {
        if l.contains("conntrack") || l.contains("synced") {
            println!("       daemon: {}", l.trim());
        }
    }
    let gone = match (removed, times.iter().max()) {
        (Some(s), Some(last)) if times.len() >= 500 => {
            ms(last.saturating_duration_since(s.committed))
        }
        _ => f64::NAN,
    };
    let other_ms = match (sent2, added) {
        (Some(s), Some(a)) => ms(a.committed.saturating_duration_since(s)),
        _ => f64::NAN,
    };
    Some((gone, ms(cpu) - ms(idle), other_ms, times.len()))
}

pub fn stale(o: &Opts) {
    let sizes = [0, o.ct_entries];
    header(
        "stale",
        &format!(
            "a UDP Service losing 10 of its 20 endpoints with 500 flows to them (and 500 to the endpoints that stay), and an unrelated TCP Service changed right after it; the node's table holds 0 or {} unrelated UDP entries (alternating, {} runs); gone = the last DESTROY of the 500 (the bench's conntrack event socket) after the NEWGEN removing the endpoints; CPU = the daemon's over {} s after the change minus the same window idle before it; other = event -> kernel of the unrelated change",
            o.ct_entries,
            o.runs,
            WINDOW.as_secs()
        ),
    );
    let mut by: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for r in 0..o.runs {
        let order: [usize; 2] = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            println!(
                "\n   -- run {} with {} unrelated entries  [load {}]",
                r + 1,
                sizes[k],
                loadavg()
            );
            match one(o, sizes[k]) {
                Some(s) => {
                    println!(
                        "     gone {:.1} ms after the commit ({} of 500), CPU {:.1} ms, other change {:.1} ms",
                        s.0, s.3, s.1, s.2
                    );
                    by[k].push(s);
                }
                None => println!("     FAILED"),
            }
        }
    }
    let med = |v: &[Sample], f: fn(&Sample) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let row = |k: usize| {
        (
            med(&by[k], |s| s.0),
            med(&by[k], |s| s.1),
            med(&by[k], |s| s.2),
        )
    };
    let (e, f) = (row(0), row(1));
    println!("\n   medians     | gone after commit | daemon CPU for it | unrelated change");
    println!(
        "   empty table | {:>14.1} ms | {:>14.1} ms | {:>13.1} ms",
        e.0, e.1, e.2
    );
    println!(
        "   {:>7} ent. | {:>14.1} ms | {:>14.1} ms | {:>13.1} ms",
        o.ct_entries, f.0, f.1, f.2
    );
    let worst = |k: usize| by[k].iter().map(|s| s.0).fold(f64::NAN, f64::max);
    println!(
        "   gone <= 100 ms at {} entries: median {:.1} ms, worst {:.1} ms: {}",
        o.ct_entries,
        f.0,
        worst(1),
        verdict(worst(1) <= 100.0)
    );
    println!(
        "   CPU within 2x of the empty table: {:.2}x: {}",
        f.1 / e.1,
        verdict(f.1 <= 2.0 * e.1)
    );
    println!(
        "   unrelated change no more than 100 ms later: +{:.1} ms: {}",
        f.2 - e.2,
        verdict(f.2 - e.2 <= 100.0)
    );
    footer();
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}
