//! `process_*` metrics as client_golang's process collector writes them on Linux (the
//! collector component-base registers for every Kubernetes binary): CPU time, open and
//! maximum descriptors, virtual and resident memory, the address-space limit, start
//! time, and the network namespace's IP octets. Read from `/proc` at each scrape; the
//! parsing is pure and tested on captured files. A value that cannot be read is left
//! out (as client_golang does without `ReportErrors`).

use crate::expo::{Desc, Snapshot, Stability, Value};

/// What the process collector reads, in the units it reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub virtual_max_bytes: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub start_time: Option<f64>,
    pub net_receive_bytes: Option<f64>,
    pub net_transmit_bytes: Option<f64>,
}

/// The fields of `/proc/<pid>/stat` the collector uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub utime: u64,
    pub stime: u64,
    pub starttime: u64,
    pub vsize: u64,
    pub rss_pages: u64,
}

/// Parse `/proc/<pid>/stat` (the command name may hold spaces and parentheses: the
/// fields start after the last `)`).
pub fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    // fields after the name, numbered from 3 (state)
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        utime: n(14)?,
        stime: n(15)?,
        starttime: n(22)?,
        vsize: n(23)?,
        rss_pages: n(24)?,
    })
}

/// `btime` (boot time, seconds since the epoch) from `/proc/stat`.
pub fn parse_btime(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A soft limit from `/proc/<pid>/limits` (`unlimited`: u64::MAX, as Go's procfs
/// reads it).
pub fn parse_limit(s: &str, name: &str) -> Option<f64> {
    let line = s.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(u64::MAX as f64)
    } else {
        soft.parse::<u64>().ok().map(|v| v as f64)
    }
}

/// `InOctets` and `OutOctets` of the `IpExt` lines of `/proc/<pid>/net/netstat`.
pub fn parse_ip_octets(s: &str) -> Option<(f64, f64)> {
    let mut lines = s.lines().filter(|l| l.starts_with("IpExt:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |n: &str| {
        names
            .iter()
            .position(|x| *x == n)
            .and_then(|i| values.get(i))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v as f64)
    };
    Some((get("InOctets")?, get("OutOctets")?))
}

fn sysconf(name: libc::c_int) -> Option<f64> {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as f64)
}

/// Read this process's numbers from `/proc`.
pub fn read_self() -> ProcessStats {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut out = ProcessStats::default();
    let ticks = sysconf(libc::_SC_CLK_TCK).unwrap_or(100.0);
    let page = sysconf(libc::_SC_PAGESIZE).unwrap_or(4096.0);
    if let Some(st) = read("/proc/self/stat").as_deref().and_then(parse_stat) {
        out.cpu_seconds = Some((st.utime + st.stime) as f64 / ticks);
        out.virtual_bytes = Some(st.vsize as f64);
        out.resident_bytes = Some(st.rss_pages as f64 * page);
        if let Some(boot) = read("/proc/stat").as_deref().and_then(parse_btime) {
            out.start_time = Some(boot as f64 + st.starttime as f64 / ticks);
        }
    }
    // as Go's procfs: the directory's own descriptor is in the listing
    out.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    if let Some(l) = read("/proc/self/limits") {
        out.max_fds = parse_limit(&l, "Max open files");
        out.virtual_max_bytes = parse_limit(&l, "Max address space");
    }
    if let Some((rx, tx)) = read("/proc/self/net/netstat")
        .as_deref()
        .and_then(parse_ip_octets)
    {
        out.net_receive_bytes = Some(rx);
        out.net_transmit_bytes = Some(tx);
    }
    out
}

/// The families of one reading (raw: client_golang's collector has no stability level).
pub fn snapshots(p: &ProcessStats) -> Vec<Snapshot> {
    let one = |desc: Desc, v: Option<f64>, counter: bool| Snapshot {
        desc: desc.stability(Stability::Raw),
        series: v
            .map(|v| {
                vec![(
                    Vec::new(),
                    if counter {
                        Value::Counter(v)
                    } else {
                        Value::Gauge(v)
                    },
                )]
            })
            .unwrap_or_default(),
    };
    vec![
        one(
            Desc::counter(
                "process_cpu_seconds_total",
                "Total user and system CPU time spent in seconds.",
                &[],
            ),
            p.cpu_seconds,
            true,
        ),
        one(
            Desc::gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                &[],
            ),
            p.max_fds,
            false,
        ),
        one(
            Desc::counter(
                "process_network_receive_bytes_total",
                "Number of bytes received by the process over the network.",
                &[],
            ),
            p.net_receive_bytes,
            true,
        ),
        one(
            Desc::counter(
                "process_network_transmit_bytes_total",
                "Number of bytes sent by the process over the network.",
                &[],
            ),
            p.net_transmit_bytes,
            true,
        ),
        one(
            Desc::gauge("process_open_fds", "Number of open file descriptors.", &[]),
            p.open_fds,
            false,
        ),
        one(
            Desc::gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                &[],
            ),
            p.resident_bytes,
            false,
        ),
        one(
            Desc::gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                &[],
            ),
            p.start_time,
            false,
        ),
        one(
            Desc::gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                &[],
            ),
            p.virtual_bytes,
            false,
        ),
        one(
            Desc::gauge(
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                &[],
            ),
            p.virtual_max_bytes,
            false,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::{encode, Format};

    const STAT: &str = "4242 (kube nl(proxy)) S 1 4242 4242 0 -1 4194560 1830 0 0 0 150 37 0 0 20 0 3 0 98765 127700992 2048 18446744073709551615 1 1 0 0 0 0 0 4096 1260 0 0 0 17 1 0 0 0 0 0";
    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max address space         unlimited            unlimited            bytes
Max open files            1048576              1048576              files
";
    const NETSTAT: &str = "\
TcpExt: SyncookiesSent SyncookiesRecv
TcpExt: 0 0
IpExt: InNoRoutes InTruncatedPkts InMcastPkts OutMcastPkts InBcastPkts OutBcastPkts InOctets OutOctets InMcastOctets
IpExt: 0 0 0 0 0 0 123456 7890 0
";

    #[test]
    fn proc_files_parse_as_procfs_reads_them() {
        let st = parse_stat(STAT).unwrap();
        assert_eq!(
            st,
            Stat {
                utime: 150,
                stime: 37,
                starttime: 98765,
                vsize: 127700992,
                rss_pages: 2048
            }
        );
        assert_eq!(
            parse_btime("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1700000000)
        );
        assert_eq!(parse_limit(LIMITS, "Max open files"), Some(1048576.0));
        assert_eq!(
            parse_limit(LIMITS, "Max address space"),
            Some(u64::MAX as f64)
        );
        assert_eq!(parse_ip_octets(NETSTAT), Some((123456.0, 7890.0)));
        // malformed input is no value, never a panic
        assert_eq!(parse_stat("1 (x"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        assert_eq!(parse_limit("Max open files", "Max open files"), None);
        assert_eq!(parse_ip_octets("IpExt: InOctets\n"), None);
    }

    #[test]
    fn exposition_matches_client_golang() {
        let p = ProcessStats {
            cpu_seconds: Some(1.87),
            open_fds: Some(12.0),
            max_fds: Some(1048576.0),
            virtual_bytes: Some(127700992.0),
            virtual_max_bytes: Some(u64::MAX as f64),
            resident_bytes: Some(8388608.0),
            start_time: Some(1700000987.65),
            net_receive_bytes: Some(123456.0),
            net_transmit_bytes: None,
        };
        let text = encode(
            &snapshots(&p)
                .into_iter()
                .filter(|s| !s.series.is_empty())
                .collect::<Vec<_>>(),
            Format::Text,
        );
        let want = "\
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.87
# HELP process_max_fds Maximum number of open file descriptors.
# TYPE process_max_fds gauge
process_max_fds 1.048576e+06
# HELP process_network_receive_bytes_total Number of bytes received by the process over the network.
# TYPE process_network_receive_bytes_total counter
process_network_receive_bytes_total 123456
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 12
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 8.388608e+06
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.70000098765e+09
# HELP process_virtual_memory_bytes Virtual memory size in bytes.
# TYPE process_virtual_memory_bytes gauge
process_virtual_memory_bytes 1.27700992e+08
# HELP process_virtual_memory_max_bytes Maximum amount of virtual memory available in bytes.
# TYPE process_virtual_memory_max_bytes gauge
process_virtual_memory_max_bytes 1.8446744073709552e+19
";
        assert_eq!(text, want);
    }

    #[test]
    fn this_process_is_read() {
        let p = read_self();
        assert!(p.cpu_seconds.is_some() && p.resident_bytes.unwrap() > 0.0);
        assert!(p.open_fds.unwrap() >= 3.0 && p.max_fds.unwrap() >= p.open_fds.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 86400.0 * 365.0,
            "{start}"
        );
    }
}
