//! What `daemon-bench` needs to run programs the way users run them and to read what
//! they report: a program started inside a namespace (no `ip netns exec` in the timed
//! path), its exit with wall time, peak RSS and CPU from `wait4`, the daemon's log read
//! as it comes with the time each line arrived, its `synced` lines parsed, medians and
//! the machine's load.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::Netns;

/// `/proc/loadavg`'s three load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The machine's CPU time counters: `/proc/stat`'s first (`cpu`) line, in its order
/// (user, nice, system, idle, iowait, irq, softirq, steal, ...); None when unreadable.
pub fn cpu_times() -> Option<Vec<u64>> {
    parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_cpu_line(stat: &str) -> Option<Vec<u64>> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let v: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    (v.len() >= 8).then_some(v)
}

/// The share of the CPU time between two readings of [`cpu_times`] that the hypervisor
/// gave to others (`steal`, in percent): on a shared host it moves figures as much as
/// the load does. None without two readings or without time between them.
pub fn steal_percent(before: &[u64], after: &[u64]) -> Option<f64> {
    // user .. steal; guest and guest_nice (9, 10) are already in user and nice
    let d: Vec<u64> = after
        .iter()
        .zip(before)
        .take(8)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = d.iter().sum();
    (total > 0 && d.len() == 8).then(|| d[7] as f64 * 100.0 / total as f64)
}

/// The median of `v` (the mean of the two middle values for an even count; NaN when
/// empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Start `cmd` inside `ns`: spawned from a thread that entered the namespace (the child
/// inherits it), so that std can use `posix_spawn` (no copy of this process's page
/// tables in the timed path, however much memory the bench holds). The heap is trimmed
/// first. A child so spawned shares this process's memory until its exec, so its
/// `ru_maxrss` counts ours: peak RSS is read from `VmHWM` ([`peak_rss`]).
pub fn spawn_in(ns: &Netns, cmd: Command) -> std::io::Result<Child> {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    let mut cmd = cmd;
    ns.run(move || cmd.spawn())
}

/// Context switches of every thread of `pid` so far (`/proc/PID/task/*/status`):
/// (voluntary, involuntary) per thread, keyed by thread id and name (`comm`). A
/// voluntary switch is a thread going to sleep, so the voluntary count's growth is the
/// process's wakeups; threads that exited meanwhile are not counted.
pub fn ctxt_switches(pid: u32) -> std::collections::BTreeMap<(u32, String), (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let (mut vol, mut invol) = (0, 0);
        for line in text.lines() {
            let num = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            };
            if line.starts_with("voluntary_ctxt_switches:") {
                vol = num(line).unwrap_or(0);
            } else if line.starts_with("nonvoluntary_ctxt_switches:") {
                invol = num(line).unwrap_or(0);
            }
        }
        out.insert((tid, comm.trim().to_string()), (vol, invol));
    }
    out
}

/// User + system CPU of a process or thread so far, from its `stat` file
/// (`/proc/PID/stat`, `/proc/PID/task/TID/stat`).
pub fn stat_cpu(path: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(path).ok()?;
    // the fields after the command name (which may hold spaces) in parentheses
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// Name the calling thread (`comm`, at most 15 bytes; threads it starts inherit it).
pub fn name_thread(name: &str) {
    let mut b: Vec<u8> = name.bytes().take(15).filter(|&c| c != 0).collect();
    b.push(0);
    // SAFETY: a NUL-terminated buffer that outlives the call; PR_SET_NAME copies it.
    unsafe { libc::prctl(libc::PR_SET_NAME, b.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Read `VmHWM` (KiB) of `pid` every 5 ms until it exits (a zombie has none): its
/// peak RSS, less whatever it grew in its last 5 ms.
pub fn peak_rss(pid: u32) -> u64 {
    let mut hwm = 0;
    while let Some(v) = status_kib(pid, "VmHWM") {
        hwm = v;
        std::thread::sleep(Duration::from_millis(5));
    }
    hwm
}

/// A `/proc/PID/status` value in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(&format!("{key}:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// On SIGINT, SIGTERM or SIGHUP: kill this process's children, remove its namespaces
/// (the harness names them `nlp-<role>-<pid>-<n>`) and `scratch`, and exit. Call first in `main`,
/// before any thread starts: the signals are blocked in every thread and taken by one
/// waiting thread (children get an empty mask from std's spawn).
pub fn cleanup_on_signal(scratch: std::path::PathBuf) {
    // SAFETY: plain signal-set manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: a valid set and out pointer.
        unsafe { libc::sigwait(&set, &mut sig) };
        let me = std::process::id();
        eprintln!("daemon-bench: signal {sig}: killing children, removing namespaces");
        for pid in children_of(me) {
            // SAFETY: our own children.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let tag = format!("-{me}-");
        if let Ok(dir) = std::fs::read_dir("/run/netns") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with("nlp-") && name.contains(&tag) {
                    let _ = Command::new("ip").args(["netns", "del", &name]).output();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&scratch);
        std::process::exit(128 + sig);
    });
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|t| {
                    let rest = &t[t.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// How a child ended.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub success: bool,
    /// From just before the spawn to the reaping.
    pub wall: Duration,
    /// Peak resident set size (KiB), from `VmHWM` ([`peak_rss`]; 0 where not read).
    pub maxrss_kib: u64,
    /// User + system CPU.
    pub cpu: Duration,
}

/// Reap `child` with `wait4` (its CPU from the rusage; `maxrss_kib` left 0).
pub fn reap(child: Child, started: Instant) -> Exit {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value for wait4 to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child, valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = started.elapsed();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Exit {
        success: rc == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        wall,
        maxrss_kib: 0,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
    }
}

/// Run `program args` inside `ns`, stdin from `input` (if any), timed from just before
/// the spawn to its exit. Stderr goes to `errlog` (printed by the caller on failure).
pub fn time_program(
    ns: &Netns,
    program: &str,
    args: &[&str],
    input: Option<&Path>,
    errlog: &Path,
) -> std::io::Result<Exit> {
    let mut c = Command::new(program);
    c.args(args)
        .stdout(Stdio::null())
        .stderr(File::create(errlog)?)
        .stdin(match input {
            Some(p) => Stdio::from(File::open(p)?),
            None => Stdio::null(),
        });
    let started = Instant::now();
    let child = spawn_in(ns, c)?;
    let hwm = peak_rss(child.id());
    Ok(Exit {
        maxrss_kib: hwm,
        ..reap(child, started)
    })
}

/// One `synced` line of the engine (DEBUG, `-v=2`).
#[derive(Debug, Clone, PartialEq)]
pub struct SyncLine {
    pub full: bool,
    pub services: u64,
    pub ops: u64,
    pub compile_ms: f64,
    pub commit_ms: f64,
    /// From the oldest change this sync consumed reaching the engine to the kernel's
    /// ACK; `None` for a sync no change asked for.
    pub event_to_ack_ms: Option<f64>,
}

impl SyncLine {
    /// Parse the engine's line (`... "synced" kind="full" ... event_to_ack_ms="2.099"`);
    /// `None` for any other line.
    pub fn parse(line: &str) -> Option<SyncLine> {
        if !line.contains("\"synced\"") {
            return None;
        }
        let ack = field(line, "event_to_ack_ms")?;
        Some(SyncLine {
            full: field(line, "kind")? == "full",
            services: field(line, "services")?.parse().ok()?,
            ops: field(line, "ops")?.parse().ok()?,
            compile_ms: field(line, "compile_ms")?.parse().ok()?,
            commit_ms: field(line, "commit_ms")?.parse().ok()?,
            event_to_ack_ms: ack.parse().ok(),
        })
    }
}

/// The value of ` key=value` or ` key="value"` in a klog line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!(" {key}=");
    let at = line.find(&pat)? + pat.len();
    let rest = &line[at..];
    match rest.strip_prefix('"') {
        Some(q) => q.split('"').next(),
        None => rest.split_whitespace().next(),
    }
}

type Lines = Arc<(Mutex<Vec<(Instant, String)>>, Condvar)>;

/// The daemon, started inside a namespace, its stderr read line by line as it comes
/// (each line with the time it arrived). Killed and reaped on drop if still running.
pub struct Daemon {
    child: Option<Child>,
    pub started: Instant,
    lines: Lines,
}

impl Daemon {
    /// Start `bin args` in `ns`.
    pub fn start(ns: &Netns, bin: &Path, args: &[String]) -> std::io::Result<Daemon> {
        let mut c = Command::new(bin);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = spawn_in(ns, c)?;
        let err = child.stderr.take().expect("piped stderr");
        let lines: Lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let (m, cv) = &*l;
                m.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), line));
                cv.notify_all();
            }
        });
        Ok(Daemon {
            child: Some(child),
            started,
            lines,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Lines received so far.
    pub fn count(&self) -> usize {
        self.lines.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The first engine `synced` line at index `from` or later (waiting up to
    /// `timeout`): its index, arrival time and fields.
    pub fn wait_sync(&self, from: usize, timeout: Duration) -> Option<(usize, Instant, SyncLine)> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.lines;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = from;
        loop {
            while next < g.len() {
                if let Some(s) = SyncLine::parse(&g[next].1) {
                    return Some((next, g[next].0, s));
                }
                next += 1;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Every engine `synced` line from index `from` on, with its arrival time.
    pub fn syncs_since(&self, from: usize) -> Vec<(Instant, SyncLine)> {
        let g = self.lines.0.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .skip(from)
            .filter_map(|(t, l)| SyncLine::parse(l).map(|s| (*t, s)))
            .collect()
    }

    /// When the last engine `synced` line arrived.
    pub fn last_sync_at(&self) -> Option<Instant> {
        let g = self.lines.0.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .rev()
            .find(|(_, l)| SyncLine::parse(l).is_some())
            .map(|(t, _)| *t)
    }

    /// Wait until `quiet` has passed since the last sync, after waiting `quiet` first
    /// (so that a sync queued before the call, held at most by minSyncPeriod, has run
    /// when `quiet` is longer than minSyncPeriod).
    pub fn wait_quiet(&self, quiet: Duration) {
        std::thread::sleep(quiet);
        if let Some(t) = self.last_sync_at() {
            if let Some(rest) = quiet.checked_sub(t.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }

    /// How many lines from index `from` on contain `pat`.
    pub fn count_matching(&self, from: usize, pat: &str) -> usize {
        let g = self.lines.0.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().skip(from).filter(|(_, l)| l.contains(pat)).count()
    }

    /// The last `n` lines (for a failure message).
    pub fn tail(&self, n: usize) -> String {
        let g = self.lines.0.lock().unwrap_or_else(|e| e.into_inner());
        let skip = g.len().saturating_sub(n);
        g.iter()
            .skip(skip)
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A `/proc/PID/status` value in KiB (`VmRSS`, `VmHWM`).
    pub fn status_kib(&self, key: &str) -> Option<u64> {
        status_kib(self.pid(), key)
    }

    /// User + system CPU used so far (`/proc/PID/stat`).
    pub fn cpu(&self) -> Option<Duration> {
        stat_cpu(&format!("/proc/{}/stat", self.pid()))
    }

    /// Kill (SIGKILL) and reap: peak RSS and CPU of the whole run.
    pub fn kill(mut self) -> Exit {
        let child = self.child.take().expect("running");
        // SAFETY: our own child, not reaped yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        reap(child, self.started)
    }

    /// Wait for the daemon to exit by itself (`--once`) and reap it, with its peak RSS
    /// ([`peak_rss`]).
    pub fn wait(mut self) -> Exit {
        let hwm = peak_rss(self.pid());
        let child = self.child.take().expect("running");
        Exit {
            maxrss_kib: hwm,
            ..reap(child, self.started)
        }
    }

    /// When each initial list arrived (the daemon's `listed` lines: kind and time).
    pub fn listed(&self) -> Vec<(String, Instant)> {
        let g = self.lines.0.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .filter(|(_, l)| l.contains("\"listed\""))
            .filter_map(|(t, l)| field(l, "kind").map(|k| (k.to_string(), *t)))
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            // SAFETY: our own child, not reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
            reap(child, self.started);
        }
    }
}

/// CPU so far per thread name (`comm`) of a process: threads of one name summed; threads
/// that exited are not counted.
pub fn thread_cpu(pid: u32) -> std::collections::BTreeMap<String, Duration> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if let Some(c) = stat_cpu(&t.path().join("stat").to_string_lossy()) {
            *out.entry(comm.trim().to_string()).or_insert(Duration::ZERO) += c;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_sync_line_is_parsed() {
        let engine = "I1130 20:53:23.423969   12695 engine.rs:603] \"synced\" kind=\"full\" services=10 endpoints=20 ops=156 bytes=30416 compile_ms=0.229821 commit_ms=1.5648909999999998 conntrack_ms=0 targets=0 deleted=0 pending=0 invalid=0 event_to_ack_ms=\"2.099\"";
        assert_eq!(
            SyncLine::parse(engine),
            Some(SyncLine {
                full: true,
                services: 10,
                ops: 156,
                compile_ms: 0.229821,
                commit_ms: 1.5648909999999998,
                event_to_ack_ms: Some(2.099),
            })
        );
        let none = engine.replace("\"2.099\"", "\"none\"");
        assert_eq!(SyncLine::parse(&none).unwrap().event_to_ack_ms, None);
        let partial = engine.replace("kind=\"full\"", "kind=\"partial\"");
        assert!(!SyncLine::parse(&partial).unwrap().full);
        assert_eq!(
            SyncLine::parse("I1130 x.rs:1] \"reading\" file=\"a\""),
            None
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    /// Guest time (columns 9 and 10) is counted in user and nice already: the share is
    /// of the first eight columns only.
    #[test]
    fn steal_is_its_share_of_the_time_between_two_readings() {
        let a = parse_cpu_line("cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 1 2 3").unwrap();
        let b = parse_cpu_line("cpu  200 0 70 860 0 0 0 70 90 0\n").unwrap();
        assert_eq!(steal_percent(&a, &b), Some(10.0));
        assert_eq!(steal_percent(&a, &a), None);
        assert_eq!(parse_cpu_line("intr 1 2 3 4 5 6 7 8"), None);
        assert_eq!(parse_cpu_line("cpu 1 2 3"), None);
    }
}
