//! The `go_*` families kube-proxy's registry serves (client_golang's Go collector,
//! registered raw by component-base), for dashboards and alerts that read them
//! (kubernetes-mixin's "Proxy" dashboard plots `go_goroutines`). kube-nlproxy is no Go
//! program, so only the families with an honest counterpart are served, from the
//! kernel's view of the process (`/proc/self/status`):
//!
//! - `go_goroutines`: the process's threads (a Rust process has no goroutines; its
//!   concurrency is its threads, tokio's workers among them);
//! - `go_threads`: the process's threads;
//! - `go_info{version}`: `version="n/a (kube-nlproxy is written in Rust)"`, a constant;
//! - `go_memstats_alloc_bytes`, `go_memstats_heap_alloc_bytes`: anonymous resident
//!   memory (`RssAnon`: the heap and stacks the process touched), the closest the
//!   kernel gives to "heap bytes in use" without allocator statistics;
//! - `go_memstats_sys_bytes`: resident memory (`VmRSS`).
//!
//! Not served (no counterpart; a constant would mislead): the garbage collector's
//! (`go_gc_*`, `go_memstats_last_gc_time_seconds`, `go_memstats_next_gc_bytes`), the Go
//! allocator's internals (`go_memstats_mcache_*`, `mspan_*`, `buck_hash_*`,
//! `mallocs_total`, `frees_total`, ...), scheduler and runtime/metrics families
//! (`go_sched_*`, `go_cpu_classes_*`, `go_godebug_*`, ...).

use crate::expo::{Desc, Snapshot, Stability, Value};

/// What the families are read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeStats {
    pub threads: Option<f64>,
    pub rss_anon_bytes: Option<f64>,
    pub rss_bytes: Option<f64>,
}

/// `/proc/self/status`'s `Threads`, `RssAnon` and `VmRSS` (kB) read from its text.
pub fn parse_status(status: &str) -> RuntimeStats {
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
    };
    RuntimeStats {
        threads: field("Threads"),
        rss_anon_bytes: field("RssAnon").map(|kb| kb * 1024.0),
        rss_bytes: field("VmRSS").map(|kb| kb * 1024.0),
    }
}

/// This process's.
pub fn read_self() -> RuntimeStats {
    parse_status(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
}

/// The `go_*` families (no stability prefix: client_golang's own, registered raw).
pub fn snapshots(r: &RuntimeStats) -> Vec<Snapshot> {
    let gauge = |name: &'static str, help: &'static str, v: Option<f64>| Snapshot {
        desc: Desc::gauge(name, help, &[]).stability(Stability::Raw),
        series: v
            .map(|v| vec![(Vec::new(), Value::Gauge(v))])
            .unwrap_or_default(),
    };
    vec![
        gauge(
            "go_goroutines",
            "Number of goroutines that currently exist.",
            r.threads,
        ),
        gauge("go_threads", "Number of OS threads created.", r.threads),
        Snapshot {
            desc: Desc::gauge(
                "go_info",
                "Information about the Go environment.",
                &["version"],
            )
            .stability(Stability::Raw),
            series: vec![(
                vec!["n/a (kube-nlproxy is written in Rust)".to_string()],
                Value::Gauge(1.0),
            )],
        },
        gauge(
            "go_memstats_alloc_bytes",
            "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.",
            r.rss_anon_bytes,
        ),
        gauge(
            "go_memstats_heap_alloc_bytes",
            "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.",
            r.rss_anon_bytes,
        ),
        gauge(
            "go_memstats_sys_bytes",
            "Number of bytes obtained from system. Equals to /memory/classes/total:byte.",
            r.rss_bytes,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read() {
        let s = "Name:\tkube-nlproxy\nVmRSS:\t   2048 kB\nRssAnon:\t    1024 kB\nThreads:\t7\n";
        assert_eq!(
            parse_status(s),
            RuntimeStats {
                threads: Some(7.0),
                rss_anon_bytes: Some(1_048_576.0),
                rss_bytes: Some(2_097_152.0),
            }
        );
        let snaps = snapshots(&parse_status(s));
        let names: Vec<&str> = snaps.iter().map(|s| s.desc.name).collect();
        assert!(names.contains(&"go_goroutines") && names.contains(&"go_info"));
    }
}
