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
//!                 [--variants] [--walk ROUNDS] [--quiet-limit CPUS]
//!
//! Every run rotates the order of the strategies (no strategy is always first or last)
//! and first waits (up to 60 s) until the rest of the machine uses less than
//! `--quiet-limit` CPUs (default 0.3; 15 s at most, the load seen is printed). With
//! `--fifo` the bench runs as SCHED_FIFO, so the rest of the machine cannot preempt it
//! (a stand-in for a quiet machine when others compile). Each timing records wall time, this thread's CPU
//! time (the kernel's table walk runs in our sendmsg/recvmsg, so it is included) and
//! the CPU the rest of the machine used meanwhile ("background"), so a noisy run is
//! visible in the table. `--variants` adds flush/dump cases with the port in the filter;
//! `--walk ROUNDS` first times requests that match nothing (flush with CTA_FILTER, flush
//! with CTA_MARK only, filtered dump), i.e. the kernel's bare table walk.
//!
//! `--targets K` (with `--target-entries E`, default 10) times the cleanup the engine
//! asks for, the way it asks: one `delete` call with K filters (K service IPs with E
//! entries each, on top of N), the strategy chosen by the cost model; and one call with
//! one target against the bare walk of the same kernel request (matching nothing). It
//! also times a full dump matching nothing, from which it prints the cost model's
//! constants as measured on this machine. Medians, ratios and /proc/loadavg are printed.

use ct_netlink::testing::SyntheticFlow;
use ct_netlink::{Config, Conntrack, Filter, Strategy, IPPROTO_TCP, IPPROTO_UDP};
use std::ffi::CString;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MAX_PATH: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
const VIP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 10);

struct NsGuard(String);
impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// For the signal handler: the value to restore and the namespaces to remove, set
/// before the change they undo.
static OLD_MAX: OnceLock<CString> = OnceLock::new();
static NS_PATHS: OnceLock<Vec<CString>> = OnceLock::new();

/// SIGINT/SIGTERM/SIGHUP: restore nf_conntrack_max and remove our namespaces with
/// async-signal-safe calls only, then exit. (Panics unwind through the guards below.)
extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: only async-signal-safe calls on NUL-terminated strings set before the
    // handler could need them (OnceLock::get is a plain atomic load).
    unsafe {
        if let Some(old) = OLD_MAX.get() {
            let fd = libc::open(
                c"/proc/sys/net/netfilter/nf_conntrack_max".as_ptr(),
                libc::O_WRONLY,
            );
            if fd >= 0 {
                let b = old.as_bytes();
                libc::write(fd, b.as_ptr().cast(), b.len());
                libc::close(fd);
            }
        }
        if let Some(paths) = NS_PATHS.get() {
            for p in paths {
                libc::umount2(p.as_ptr(), libc::MNT_DETACH);
                libc::unlink(p.as_ptr());
            }
        }
        libc::_exit(128 + sig);
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

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy time of all CPUs (everything but idle and iowait) from /proc/stat.
fn system_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let busy: u64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, x)| *x)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(busy * 1_000_000 / hz)
}

/// Wait (up to `max_wait`) until the other processes of the machine use less than
/// `limit` CPUs, sampled over 500 ms. Returns the load seen last (in CPUs).
fn wait_quiet(limit: f64, max_wait: Duration) -> f64 {
    let t0 = Instant::now();
    loop {
        let (b0, c0, w0) = (system_busy(), thread_cpu(), Instant::now());
        std::thread::sleep(Duration::from_millis(500));
        let busy = system_busy().saturating_sub(b0) + thread_cpu().saturating_sub(c0);
        let load = busy.as_secs_f64() / w0.elapsed().as_secs_f64();
        if load < limit || t0.elapsed() > max_wait {
            return load;
        }
    }
}

/// One timed operation: wall time, CPU time of this thread (user + kernel: the
/// kernel's table walk runs in our sendmsg/recvmsg), and the CPU the rest of the
/// machine used meanwhile (in CPUs; /proc/stat has 10 ms resolution).
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
    background: f64,
}

fn timed<R>(f: impl FnOnce() -> R) -> (R, Sample) {
    let (b0, c0, t0) = (system_busy(), thread_cpu(), Instant::now());
    let r = f();
    let wall = t0.elapsed();
    let cpu = thread_cpu().saturating_sub(c0);
    let busy = system_busy().saturating_sub(b0);
    let background = busy.saturating_sub(cpu).as_secs_f64() / wall.as_secs_f64().max(1e-9);
    (
        r,
        Sample {
            wall,
            cpu,
            background,
        },
    )
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn spread(v: &[Duration]) -> (Duration, Duration) {
    (
        v.iter().min().copied().unwrap_or_default(),
        v.iter().max().copied().unwrap_or_default(),
    )
}

#[derive(Clone, Copy)]
enum Kind {
    Strategy(Strategy),
    Upstream,
}

struct Case {
    name: &'static str,
    kind: Kind,
    filter: Filter,
}

struct Row {
    name: String,
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
    background_max: f64,
}

struct Opts {
    runs: usize,
    vip_n: usize,
    variants: bool,
    walk: usize,
    quiet_limit: f64,
    targets: usize,
    target_entries: usize,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The k-th cleanup target (k < 1024): 198.19.250.0 + k, an address no background
/// entry uses.
fn target_ip(k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(198, 19, 250, 0)) + k as u32,
    ))
}

fn target_flows(k: usize, e: usize, round: usize) -> Vec<SyntheticFlow> {
    (0..k)
        .flat_map(|t| {
            (0..e).map(move |i| SyntheticFlow {
                src: IpAddr::V4(Ipv4Addr::new(198, 18, 254, (i % 250) as u8)),
                dst: target_ip(t),
                proto: IPPROTO_UDP,
                sport: 30000 + i as u16 + (round % 2) as u16 * 10000,
                dport: 53,
            })
        })
        .collect()
}

/// The cleanup experiment (`--targets`): K targets in one call and one target, against
/// the bare walk of the same request and a full dump matching nothing.
fn cleanup_experiment(filler: &mut Conntrack, n: usize, o: &Opts) {
    let (k, e) = (o.targets, o.target_entries);
    let mut auto = Conntrack::open(Config::default()).expect("open (probed)");
    let kind = auto.strategy();
    let nothing = Filter::udp_orig_dst(IpAddr::V4(Ipv4Addr::new(198, 19, 255, 99)), None);
    let filters: Vec<Filter> = (0..k)
        .map(|t| Filter::udp_orig_dst(target_ip(t), None))
        .collect();
    let plan = auto.plan(&filters);
    let table = ct_netlink::TableSize::read();
    println!(
        "N={n}: cleanup: probed per-filter kind {kind}; plan for {k} targets {plan:?}; plan for 1 target {:?}; table {table:?}; loadavg {}",
        auto.plan(&filters[..1]),
        loadavg()
    );
    let names = [
        "K targets, one call (auto)",
        "1 target (auto)",
        "bare walk, same request",
        "bare walk, filtered dump",
        "full dump matching nothing",
    ];
    let mut res: Vec<Vec<Sample>> = vec![Vec::new(); names.len()];
    for r in 0..o.runs {
        let load = wait_quiet(o.quiet_limit, Duration::from_secs(15));
        println!(
            "N={n}: cleanup run {} (machine load before {load:.2} cpu, loadavg {})",
            r + 1,
            loadavg()
        );
        for j in 0..names.len() {
            let i = (r + j) % names.len();
            let s = match i {
                0 => {
                    let fl = filler
                        .insert(&target_flows(k, e, r), 3600, 2000)
                        .expect("fill");
                    assert_eq!(fl.failed(), 0, "{:?}", fl.errors);
                    let (rep, s) = timed(|| auto.delete(&filters));
                    let rep = rep.expect("delete");
                    assert!(rep.all_done(), "{:?}", rep.outcomes());
                    assert_eq!(rep.deleted as usize, k * e, "{:?}", rep.plans);
                    println!(
                        "N={n}:   {k} targets: {:.1?}, walks {}, plans {:?}",
                        s.wall, rep.walks, rep.plans
                    );
                    s
                }
                1 => {
                    let fl = filler
                        .insert(&target_flows(1, e, r), 3600, 2000)
                        .expect("fill");
                    assert_eq!(fl.failed(), 0, "{:?}", fl.errors);
                    let (rep, s) = timed(|| auto.delete(&filters[..1]));
                    let rep = rep.expect("delete");
                    assert!(rep.all_done() && rep.walks == 1, "{rep:?}");
                    s
                }
                2 => {
                    let (rep, s) = timed(|| auto.delete_with(kind, &[nothing]));
                    assert!(rep.expect("walk").all_done());
                    s
                }
                3 => {
                    let (c, s) = timed(|| auto.count_matching(&nothing));
                    assert_eq!(c.expect("dump"), 0);
                    s
                }
                _ => {
                    let (rep, s) = timed(|| auto.delete_with(Strategy::FullDump, &[nothing]));
                    assert!(rep.expect("full dump").all_done());
                    s
                }
            };
            res[i].push(s);
        }
    }
    let med = |i: usize| median(&res[i].iter().map(|s| s.wall).collect::<Vec<_>>());
    let cpu = |i: usize| median(&res[i].iter().map(|s| s.cpu).collect::<Vec<_>>());
    for (i, name) in names.iter().enumerate() {
        let bg = res[i].iter().map(|s| s.background).fold(0.0, f64::max);
        println!(
            "N={n}: cleanup {name:<30} median {:>10.1?}  cpu {:>10.1?}  runs {:.1?}  background max {bg:.2} cpu",
            med(i),
            cpu(i),
            res[i].iter().map(|s| s.wall).collect::<Vec<_>>()
        );
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!(
        "N={n}: RESULT {k} targets x {e} entries in one call: {:.1?} (goal <= 2 s: {}), thread CPU {:.1?}; per-filter requests would take ~{:.1?} ({k} bare walks)",
        med(0),
        if med(0) <= Duration::from_secs(2) { "met" } else { "NOT met" },
        cpu(0),
        med(2) * k as u32
    );
    println!(
        "N={n}: RESULT 1 target: {:.1?} = {:.2}x the bare walk of the same request ({:.1?}), {:.2}x the bare filtered-dump walk ({:.1?}) (goal <= 1.1x: {}); thread CPU {:.1?} = {:.2}x the same request's ({:.1?})",
        med(1),
        ratio(med(1), med(2)),
        med(2),
        ratio(med(1), med(3)),
        med(3),
        if ratio(med(1), med(2)) <= 1.1 { "met" } else { "NOT met" },
        cpu(1),
        ratio(cpu(1), cpu(2)),
        cpu(2)
    );
    if let Some(t) = table {
        // Cost model constants on this machine: a walk (bare filtered dump, the kind a
        // full dump also makes) and the full dump's extra per entry of our namespace.
        let buckets = t.buckets as f64;
        let entries = t.entries.max(1) as f64;
        // Thread CPU time: the kernel's walk runs in our sendmsg/recvmsg, and CPU time
        // does not count the other processes of a busy machine.
        let walk_ns = cpu(3).as_nanos() as f64;
        let full_ns = cpu(4).as_nanos() as f64;
        let m = ct_netlink::CostModel::default();
        println!(
            "N={n}: MODEL measured: walk {:.0} ns/entry (after {:.0} ns/bucket x {buckets}), full dump +{:.0} ns/entry; model default: walk {:.0} ns/entry, full dump +{:.0} ns/entry; predicted walk {:.1} ms, full {:.1} ms",
            ((walk_ns - buckets * m.walk_bucket_ns) / entries).max(0.0),
            m.walk_bucket_ns,
            (full_ns - walk_ns).max(0.0) / entries,
            m.walk_entry_ns,
            m.dump_entry_ns,
            m.walk_ns(t) / 1e6,
            m.full_dump_ns(t) / 1e6
        );
    }
}

/// The walk experiment: time requests that match nothing, so only the kernel's walk of
/// the whole hash table is measured (no deletion, no reply traffic), in rotating order.
fn walk_experiment(ct: &mut Conntrack, n: usize, k: usize) {
    let none = Ipv4Addr::new(198, 19, 255, 99); // no entry has this destination
    let f_addr = Filter::udp_orig_dst(IpAddr::V4(none), None);
    let f_port = Filter::udp_orig_dst(IpAddr::V4(none), Some(53));
    type Op<'a> = (&'a str, Box<dyn Fn(&mut Conntrack) + 'a>);
    let ops: Vec<Op> = vec![
        (
            "flush walk, CTA_FILTER addr+proto",
            Box::new(move |ct: &mut Conntrack| {
                ct.delete_with(Strategy::FilteredFlush, &[f_addr])
                    .expect("flush");
            }),
        ),
        (
            "flush walk, CTA_FILTER addr+proto+port",
            Box::new(move |ct: &mut Conntrack| {
                ct.delete_with(Strategy::FilteredFlush, &[f_port])
                    .expect("flush");
            }),
        ),
        (
            "flush walk, CTA_MARK only (no tuple)",
            Box::new(|ct: &mut Conntrack| {
                let errno = ct
                    .mark_flush(libc::AF_INET as u8, 0x5eed_0001, 0xffff_ffff)
                    .expect("mark flush");
                assert_eq!(errno, 0, "mark flush");
            }),
        ),
        (
            "dump walk, CTA_FILTER addr+proto",
            Box::new(move |ct: &mut Conntrack| {
                assert_eq!(ct.count_matching(&f_addr).expect("dump"), 0);
            }),
        ),
    ];
    let mut res: Vec<Vec<Sample>> = vec![Vec::new(); ops.len()];
    for r in 0..k {
        for j in 0..ops.len() {
            let i = (r + j) % ops.len();
            let ((), s) = timed(|| (ops[i].1)(ct));
            res[i].push(s);
        }
    }
    for (i, (name, _)) in ops.iter().enumerate() {
        let wall: Vec<Duration> = res[i].iter().map(|s| s.wall).collect();
        let cpu: Vec<Duration> = res[i].iter().map(|s| s.cpu).collect();
        let bg = res[i].iter().map(|s| s.background).fold(0.0, f64::max);
        let (lo, hi) = spread(&wall);
        println!(
            "N={n}: walk {name:<40} wall median {:>9.1?} (min {lo:.1?}, max {hi:.1?})  thread cpu median {:>9.1?}  background max {bg:.2} cpu",
            median(&wall),
            median(&cpu)
        );
    }
}

fn run_size(ns: &str, n: usize, o: &Opts) -> Vec<Row> {
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
        let bg = background(n.saturating_sub(o.vip_n));
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
        if o.walk > 0 {
            let load = wait_quiet(o.quiet_limit, Duration::from_secs(15));
            println!(
                "N={n}: walk experiment ({} rounds, machine load before {load:.2} cpu)",
                o.walk
            );
            walk_experiment(&mut filler, n, o.walk);
        }
        if o.targets > 0 {
            cleanup_experiment(&mut filler, n, o);
            return Vec::new();
        }
        let vip = IpAddr::V4(VIP);
        let mut cases = vec![
            Case {
                name: "filtered flush",
                kind: Kind::Strategy(Strategy::FilteredFlush),
                filter: Filter::udp_orig_dst(vip, None),
            },
            Case {
                name: "filtered dump + delete",
                kind: Kind::Strategy(Strategy::FilteredDump),
                filter: Filter::udp_orig_dst(vip, None),
            },
            Case {
                name: "full dump + match + delete",
                kind: Kind::Strategy(Strategy::FullDump),
                filter: Filter::udp_orig_dst(vip, None),
            },
            Case {
                name: "upstream (dump, match, dump, delete)",
                kind: Kind::Upstream,
                filter: Filter::udp_orig_dst(vip, None),
            },
        ];
        if o.variants {
            cases.push(Case {
                name: "filtered flush, with port",
                kind: Kind::Strategy(Strategy::FilteredFlush),
                filter: Filter::udp_orig_dst(vip, Some(53)),
            });
            cases.push(Case {
                name: "filtered dump + delete, with port",
                kind: Kind::Strategy(Strategy::FilteredDump),
                filter: Filter::udp_orig_dst(vip, Some(53)),
            });
        }
        let mut sockets: Vec<Conntrack> = cases
            .iter()
            .map(|c| match c.kind {
                Kind::Strategy(s) => open(s),
                Kind::Upstream => open(Strategy::FullDump),
            })
            .collect();
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); cases.len()];
        let mut round = 0;
        for r in 0..o.runs {
            let load = wait_quiet(o.quiet_limit, Duration::from_secs(15));
            // Rotate the order every run: no case is always first or last.
            let order: Vec<usize> = (0..cases.len()).map(|j| (r + j) % cases.len()).collect();
            println!(
                "N={n}: run {} (machine load before {load:.2} cpu), order {:?}",
                r + 1,
                order.iter().map(|&i| cases[i].name).collect::<Vec<_>>()
            );
            for &i in &order {
                let c = &cases[i];
                round += 1;
                let fl = filler
                    .insert(&vip_flows(o.vip_n, round), 3600, 2000)
                    .expect("insert vip entries");
                assert_eq!(fl.failed(), 0, "vip refill failed: {:?}", fl.errors);
                let before = filler.count_matching(&c.filter).expect("count");
                assert_eq!(before as usize, o.vip_n, "VIP entries before the run");
                let ct = &mut sockets[i];
                let filter = [c.filter];
                let (rep, s) = timed(|| match c.kind {
                    Kind::Strategy(_) => ct.delete(&filter),
                    Kind::Upstream => ct.delete_upstream_style(&filter),
                });
                let rep = rep.expect("delete");
                samples[i].push(s);
                let after = filler.count_matching(&c.filter).expect("count");
                assert_eq!(after, 0, "{}: entries left: {rep:?}", c.name);
                if rep.exact {
                    assert_eq!(rep.deleted as usize, o.vip_n, "{}: {rep:?}", c.name);
                }
            }
        }
        let mut rows = Vec::new();
        for (c, s) in cases.iter().zip(&samples) {
            if s.is_empty() {
                continue; // --runs 0: only the walk experiment
            }
            let wall: Vec<Duration> = s.iter().map(|x| x.wall).collect();
            let cpu: Vec<Duration> = s.iter().map(|x| x.cpu).collect();
            let bgmax = s.iter().map(|x| x.background).fold(0.0, f64::max);
            println!(
                "N={n}: {:<38} median {:>10.1?}  cpu {:>10.1?}  runs {wall:.1?}  background max {bgmax:.2} cpu",
                c.name,
                median(&wall),
                median(&cpu)
            );
            rows.push(Row {
                name: c.name.to_string(),
                wall,
                cpu,
                background_max: bgmax,
            });
        }
        rows
    })
}

fn main() {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut runs = 5usize;
    let mut vip_n = 100usize;
    let mut raise = true;
    let mut variants = false;
    let mut walk = 0usize;
    let mut quiet_limit = 0.3f64;
    let mut fifo = false;
    let mut targets = 0usize;
    let mut target_entries = 10usize;
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
            "--variants" => variants = true,
            "--fifo" => fifo = true,
            "--targets" => {
                targets = args
                    .next()
                    .expect("--targets value")
                    .parse()
                    .expect("targets")
            }
            "--target-entries" => {
                target_entries = args
                    .next()
                    .expect("--target-entries value")
                    .parse()
                    .expect("entries")
            }
            "--walk" => {
                walk = args
                    .next()
                    .expect("--walk value")
                    .parse()
                    .expect("walk rounds")
            }
            "--quiet-limit" => {
                quiet_limit = args
                    .next()
                    .expect("--quiet-limit value")
                    .parse()
                    .expect("cpus")
            }
            other => panic!("unknown argument {other}"),
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("ct-bench needs root");
        std::process::exit(2);
    }
    let ns_name = |n: usize| format!("ctbench-{}-{n}", std::process::id());
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only makes async-signal-safe calls.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    if fifo {
        // Emulates a quiet machine: other processes' CPU-bound work cannot preempt us
        // (the kernel's flush walk calls cond_resched() per bucket; the dump walk runs
        // with bottom halves disabled and is never preempted). Threads inherit it.
        let p = libc::sched_param { sched_priority: 10 };
        // SAFETY: valid pointer; affects this process only.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
        assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
        println!("running with SCHED_FIFO priority 10 (--fifo)");
    }
    let old_max = std::fs::read_to_string(MAX_PATH).expect("read nf_conntrack_max");
    let max: usize = old_max.trim().parse().expect("nf_conntrack_max");
    let buckets =
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_buckets").unwrap_or_default();
    let need = sizes.iter().max().copied().unwrap_or(0) + 1000 + targets * target_entries;
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
            let _ = OLD_MAX.set(CString::new(old_max.trim()).expect("value"));
            _max_guard = MaxGuard(Some(old_max.clone()));
            std::fs::write(MAX_PATH, need.to_string()).expect("raise nf_conntrack_max");
        } else {
            println!("--no-raise: sizes capped to {}", max - 1000);
            for s in &mut sizes {
                *s = (*s).min(max - 1000);
            }
        }
    }
    let _ = NS_PATHS.set(
        sizes
            .iter()
            .map(|&n| CString::new(format!("/run/netns/{}", ns_name(n))).expect("path"))
            .collect(),
    );
    assert!(targets <= 1024, "--targets: at most 1024");
    println!("loadavg at start: {}", loadavg());
    let opts = Opts {
        runs,
        vip_n,
        variants,
        walk,
        quiet_limit,
        targets,
        target_entries,
    };
    let mut table = Vec::new();
    for &n in &sizes {
        let ns = ns_name(n);
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
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_size(&ns, n, &opts)));
        match r {
            Ok(res) => table.push((n, res)),
            Err(_) => {
                eprintln!("N={n}: benchmark failed");
                break;
            }
        }
    }
    println!(
        "\n| N | strategy | median (min-max) | vs upstream | thread CPU median | vs upstream (CPU) | background CPU max |\n|---|---|---|---|---|---|---|"
    );
    for (n, rows) in &table {
        let up = rows.iter().find(|r| r.name.starts_with("upstream"));
        let up_cpu = up.map(|r| median(&r.cpu)).unwrap_or_default();
        let up = up.map(|r| median(&r.wall)).unwrap_or_default();
        for r in rows {
            let m = median(&r.wall);
            let (lo, hi) = spread(&r.wall);
            let ratio = up.as_secs_f64() / m.as_secs_f64().max(1e-9);
            let c = median(&r.cpu);
            let cpu_ratio = up_cpu.as_secs_f64() / c.as_secs_f64().max(1e-9);
            println!(
                "| {n} | {} | {m:.1?} ({lo:.1?}-{hi:.1?}) | {ratio:.1}x | {c:.1?} | {cpu_ratio:.1}x | {:.2} |",
                r.name, r.background_max
            );
        }
    }
}
