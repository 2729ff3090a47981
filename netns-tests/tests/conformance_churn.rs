//! Endpoint churn under UDP load on the two-node namespace cluster (root only). See
//! docs/conformance.md.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netns_tests::cluster::*;
use netns_tests::{bins, require_root};
use serde_json::Value;

const FLOWS: usize = 12;
const TICK: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Log {
    /// (family, flow, seq) -> send time
    sent: BTreeMap<(Fam, usize, u64), Instant>,
    /// (family, flow, seq) -> pod that answered
    replies: BTreeMap<(Fam, usize, u64), String>,
}

/// FLOWS UDP flows per family (one socket each, fixed source port) from the pod's
/// namespace to `dst[f]`, one datagram per flow every TICK, until `stop` (at most 120 s).
fn stream(
    c: &Cluster,
    pod: &str,
    dst: BTreeMap<Fam, SocketAddr>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
) -> std::thread::JoinHandle<()> {
    let path = format!("/run/netns/{}", c.pod(pod).ns.name());
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid namespace fd; setns affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        let mut socks = Vec::new();
        for (f, d) in &dst {
            for flow in 0..FLOWS {
                let bind = if *f == Fam::V4 { "0.0.0.0:0" } else { "[::]:0" };
                let s = UdpSocket::bind(bind).unwrap();
                s.connect(d).unwrap();
                s.set_nonblocking(true).unwrap();
                socks.push((*f, flow, s));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seq = 0u64;
        let mut next = Instant::now();
        let mut buf = [0u8; 600];
        while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
            {
                let mut l = log.lock().unwrap();
                for (f, flow, s) in &socks {
                    let now = Instant::now();
                    // an ICMP error (none expected) must not stop the stream
                    let _ = s.send(format!("{flow} {seq}").as_bytes());
                    l.sent.insert((*f, *flow, seq), now);
                }
            }
            seq += 1;
            next += TICK;
            while Instant::now() < next {
                let mut l = log.lock().unwrap();
                for (f, flow, s) in &socks {
                    while let Ok(n) = s.recv(&mut buf) {
                        let text = String::from_utf8_lossy(&buf[..n]).to_string();
                        let w: Vec<&str> = text.split_whitespace().collect();
                        // "POD IP PORT FLOW SEQ"
                        if w.len() == 5 {
                            if let Ok(q) = w[4].parse::<u64>() {
                                l.replies.insert((*f, *flow, q), w[0].to_string());
                            }
                        }
                    }
                }
                drop(l);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    })
}

fn objects(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let mut objs = vec![Svc::new("roll", &["198.18.100.10", "2001:db8:100::10"]).to_json()];
    for f in Fam::BOTH {
        let eps: Vec<Ep> = pods.iter().map(|p| Ep::ready(c.pod(p), f)).collect();
        objs.push(slice("roll", f, &eps));
    }
    objs
}

/// Behaviour 11: A rolling update under UDP load: 12 UDP flows per family stream from a pod on
/// node A to a dual-stack ClusterIP while its endpoints are replaced one by one
/// (surge one new, remove one old; the removed pods keep running and answering, so a
/// flow left on one would show). After each sync, every datagram sent gets an answer
/// from a current endpoint: flows pinned to a removed UDP endpoint had their conntrack
/// entries cleared and were balanced anew; at the end the flows are spread over both
/// new endpoints.
#[test]
fn rolling_update_under_udp_load_every_packet_reaches_a_live_endpoint() {
    require_root!();
    let mut c = Cluster::new(
        bins!(),
        &[
            ("a1", On::A),
            ("a2", On::A),
            ("a3", On::A),
            ("b1", On::B),
            ("b2", On::B),
        ],
    );
    let steps: [&[&str]; 5] = [
        &["a2", "b1"],
        &["a2", "b1", "a3"],
        &["b1", "a3"],
        &["b1", "a3", "b2"],
        &["a3", "b2"],
    ];
    c.start_proxy(&objects(&c, steps[0]), Duration::from_secs(60));
    let dst: BTreeMap<Fam, SocketAddr> = [
        (Fam::V4, sa("198.18.100.10", SERVICE_PORT)),
        (Fam::V6, sa("2001:db8:100::10", SERVICE_PORT)),
    ]
    .into();
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Log::default()));
    let h = stream(&c, "a1", dst, stop.clone(), log.clone());
    // every flow answered before the churn starts
    assert!(
        netns_tests::wait_until(Duration::from_secs(5), || {
            let l = log.lock().unwrap();
            let flows: BTreeSet<(Fam, usize)> =
                l.replies.keys().map(|(f, flow, _)| (*f, *flow)).collect();
            flows.len() == 2 * FLOWS
        }),
        "not every flow is answered before the churn"
    );
    let mut windows = Vec::new();
    for (i, pods) in steps.iter().enumerate().skip(1) {
        c.apply(&objects(&c, pods), Duration::from_secs(10));
        let from = Instant::now();
        std::thread::sleep(Duration::from_millis(800));
        windows.push((i, from, Instant::now(), *pods));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    h.join().unwrap();

    let l = log.lock().unwrap();
    for (i, from, to, pods) in &windows {
        let mut checked = 0;
        for (key, at) in &l.sent {
            if at < from || at >= to {
                continue;
            }
            checked += 1;
            match l.replies.get(key) {
                Some(pod) => assert!(
                    pods.contains(&pod.as_str()),
                    "step {i} (endpoints {pods:?}): {key:?} sent after the sync answered by {pod}"
                ),
                None => panic!(
                    "step {i} (endpoints {pods:?}): {key:?} sent after the sync got no answer"
                ),
            }
        }
        assert!(
            checked > 2 * FLOWS * 10,
            "step {i}: only {checked} datagrams checked"
        );
        eprintln!("step {i}: {checked} datagrams after the sync, all answered by {pods:?}");
    }
    // re-balanced: at the end the flows of each family use both new endpoints
    let (_, from, to, pods) = windows.last().unwrap();
    for f in Fam::BOTH {
        let mut used = BTreeSet::new();
        for (key, at) in &l.sent {
            if key.0 == f && at >= from && at < to {
                if let Some(p) = l.replies.get(key) {
                    used.insert(p.clone());
                }
            }
        }
        assert_eq!(
            used.len(),
            pods.len(),
            "{f:?}: flows not spread over {pods:?}: {used:?}"
        );
    }
}
