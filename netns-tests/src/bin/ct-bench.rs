//! ct-bench: time the deletion of one service VIP's conntrack entries (about 100) among
//! N entries, with each strategy and with the upstream kube-proxy approach (full dump,
//! match in user space, full dump again, delete).
//!
//! Runs as root. Creates its own network namespace (`ip netns add`, removed at the end
//! even on error), fills it through ctnetlink (IPCTNL_MSG_CT_NEW, many per sendmsg),
//! and never touches the root namespace except, when N exceeds it, the global
//! `net.netfilter.nf_conntrack_max` (a per-netns limit the kernel does not let a child
//! namespace raise); the old value is restored on exit. `--no-raise` keeps it and
//! caps N instead.
//!
//! Usage: ct-bench [--sizes 100000,1000000] [--runs 5] [--vip-entries 100] [--no-raise]

use ct_netlink::testing::SyntheticFlow;
use ct_netlink::{Config, Conntrack, Filter, Strategy, IPPROTO_TCP, IPPROTO_UDP};
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

const MAX_PATH: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 10);

struct NsGuard(String);
impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

struct MaxGuard(Option<String>);
impl Drop for MaxGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            match std::fs::write(MAX_PATH, &old) {
                Ok(()) => eprintln!("restored nf_conntrack_max to {}", old.trim()),
                Err(e) => eprintln!("FAILED to restore nf_conntrack_max to {}: {e}", old.trim()),
            }
        }
    }
}

fn in_ns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: a valid namespace fd; setns affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn background(n: usize) -> Vec<SyntheticFlow> {
    (0..n)
        .map(|i| {
            let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (i % 65536) as u32);
            let svc = (i % 250) as u8;
            SyntheticFlow {
                src: IpAddr::V4(src),
                dst: IpAddr::V4(Ipv4Addr::new(198, 19, svc, 1)),
                proto: if i % 4 == 0 { IPPROTO_TCP } else { IPPROTO_UDP },
                sport: 1024 + (i / 65536) as u16,
                dport: 53 + (i % 7) as u16,
            }
        })
        .collect()
}

fn vip_flows(n: usize, round: usize) -> Vec<SyntheticFlow> {
    (0..n)
        .map(|i| SyntheticFlow {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 255, (i % 250) as u8)),
            dst: IpAddr::V4(VIP),
            proto: IPPROTO_UDP,
            sport: 20000 + (i as u16) + (round % 2) as u16 * 5000,
            dport: 53,
        })
        .collect()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run_size(ns: &str, n: usize, runs: usize, vip_n: usize) -> Vec<(String, Duration)> {
    in_ns(ns, || {
        let open = |s: Strategy| {
            Conntrack::open(Config {
                strategy: Some(s),
                ..Config::default()
            })
            .expect("open ctnetlink socket")
        };
        let mut filler = open(Strategy::FullDump);
        let t = Instant::now();
        let bg = background(n.saturating_sub(vip_n));
        let rep = filler
            .insert(&bg, 3600, 2000)
            .expect("insert background entries");
        println!(
            "N={n}: inserted {} background entries in {:.2?} (errors {:?}, lost batches {})",
            rep.sent as usize - rep.failed() as usize,
            t.elapsed(),
            rep.errors,
            rep.lost_batches
        );
        let filter = [Filter::udp_orig_dst(IpAddr::V4(VIP), None)];
        let mut results = Vec::new();
        let cases: [(&str, Option<Strategy>); 5] = [
            ("filtered flush", Some(Strategy::FilteredFlush)),
            ("filtered dump + delete", Some(Strategy::FilteredDump)),
            ("full dump + match + delete", Some(Strategy::FullDump)),
            ("upstream (dump, match, dump, delete)", None),
            // Again last: shows whether the order (a table just filled) matters.
            (
                "filtered flush (repeated last)",
                Some(Strategy::FilteredFlush),
            ),
        ];
        let mut round = 0;
        for (name, strat) in cases {
            let mut ct = open(strat.unwrap_or(Strategy::FullDump));
            let mut times = Vec::new();
            for _ in 0..runs {
                round += 1;
                let r = filler
                    .insert(&vip_flows(vip_n, round), 3600, 2000)
                    .expect("insert vip entries");
                assert_eq!(r.failed(), 0, "vip refill failed: {:?}", r.errors);
                let before = filler.count_matching(&filter[0]).expect("count");
                assert_eq!(before as usize, vip_n, "VIP entries before the run");
                let t = Instant::now();
                let rep = match strat {
                    Some(_) => ct.delete(&filter),
                    None => ct.delete_upstream_style(&filter),
                }
                .expect("delete");
                times.push(t.elapsed());
                let after = filler.count_matching(&filter[0]).expect("count");
                assert_eq!(after, 0, "{name}: entries left: {rep:?}");
                if rep.exact {
                    assert_eq!(rep.deleted as usize, vip_n, "{name}: {rep:?}");
                }
            }
            let m = median(&mut times);
            println!("N={n}: {name:<38} median {m:>10.2?}  runs {times:.2?}");
            results.push((name.to_string(), m));
        }
        results
    })
}

fn main() {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut runs = 5usize;
    let mut vip_n = 100usize;
    let mut raise = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sizes" => {
                sizes = args
                    .next()
                    .expect("--sizes value")
                    .split(',')
                    .map(|s| s.parse().expect("size"))
                    .collect()
            }
            "--runs" => runs = args.next().expect("--runs value").parse().expect("runs"),
            "--vip-entries" => vip_n = args.next().expect("value").parse().expect("vip entries"),
            "--no-raise" => raise = false,
            other => panic!("unknown argument {other}"),
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("ct-bench needs root");
        std::process::exit(2);
    }
    let old_max = std::fs::read_to_string(MAX_PATH).expect("read nf_conntrack_max");
    let max: usize = old_max.trim().parse().expect("nf_conntrack_max");
    let buckets =
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_buckets").unwrap_or_default();
    let need = sizes.iter().max().copied().unwrap_or(0) + 1000;
    println!(
        "nf_conntrack_max = {max}, nf_conntrack_buckets = {}",
        buckets.trim()
    );
    let mut _max_guard = MaxGuard(None);
    if need > max {
        if raise {
            println!(
                "raising the global nf_conntrack_max {max} -> {need} for the run (the limit is per-namespace \
                 counted but set only in the root namespace); restored at exit"
            );
            std::fs::write(MAX_PATH, need.to_string()).expect("raise nf_conntrack_max");
            _max_guard = MaxGuard(Some(old_max.clone()));
        } else {
            println!("--no-raise: sizes capped to {}", max - 1000);
            for s in &mut sizes {
                *s = (*s).min(max - 1000);
            }
        }
    }
    let mut table = Vec::new();
    for &n in &sizes {
        let ns = format!("ctbench-{}-{n}", std::process::id());
        let out = Command::new("ip")
            .args(["netns", "add", &ns])
            .output()
            .expect("ip netns add");
        assert!(
            out.status.success(),
            "ip netns add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _g = NsGuard(ns.clone());
        // Conntrack refuses ctnetlink inserts (EBUSY) in a namespace where nothing
        // uses it yet: load a rule that does, as a node's firewall would.
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "add table inet ctbench; add chain inet ctbench in { type filter hook input priority 0; }; add rule inet ctbench in ct state invalid counter"])
            .output()
            .expect("nft");
        assert!(
            out.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_size(&ns, n, runs, vip_n)
        }));
        match r {
            Ok(res) => table.push((n, res)),
            Err(_) => {
                eprintln!("N={n}: benchmark failed");
                break;
            }
        }
    }
    println!("\n| N | strategy | median | speed-up vs upstream |\n|---|---|---|---|");
    for (n, res) in &table {
        let up = res
            .iter()
            .find(|(name, _)| name.starts_with("upstream"))
            .map(|(_, d)| *d)
            .unwrap_or_default();
        for (name, d) in res {
            let ratio = up.as_secs_f64() / d.as_secs_f64().max(1e-9);
            println!("| {n} | {name} | {d:.1?} | {ratio:.1}x |");
        }
    }
}
