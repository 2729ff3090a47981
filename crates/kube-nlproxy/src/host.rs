//! What the daemon learns from the host, without running a program: its interface
//! addresses (an rtnetlink dump) and the conntrack sysctls (files under /proc/sys).

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use sync_engine::Event;

use tracing::{info, warn};

use crate::config::v1alpha1::Conntrack;

/// Every address configured on the host's interfaces (both families), via one
/// RTM_GETADDR dump (crate `rt-netlink`).
pub fn local_addresses() -> io::Result<Vec<IpAddr>> {
    rt_netlink::local_addresses().map_err(io::Error::other)
}

/// Follow the host's addresses on a thread of its own: an rtnetlink monitor of both
/// address groups, polled every `every`; on any notification (or lost ones) the
/// addresses are read again with a dump and, when they differ from the last list sent,
/// sent as [`Event::HostAddresses`]. Stops when the receiver is gone. Without a monitor
/// socket the addresses read at start stay (logged).
pub fn follow_addresses(tx: sync_engine::EventSender, mut last: Vec<IpAddr>, every: Duration) {
    let mut monitor = match rt_netlink::AddrMonitor::open() {
        Ok(m) => m,
        Err(e) => {
            warn!(err = %e, "Cannot follow the host's addresses; those read at start stay");
            return;
        }
    };
    std::thread::spawn(move || loop {
        std::thread::sleep(every);
        let changed = match monitor.poll() {
            Ok(c) => c.overflow || !c.events.is_empty(),
            Err(e) => {
                warn!(err = %e, "Reading the host's address changes");
                true
            }
        };
        if !changed {
            continue;
        }
        let now: Vec<IpAddr> = match local_addresses() {
            Ok(a) => a,
            Err(e) => {
                warn!(err = %e, "Cannot list the host's addresses");
                continue;
            }
        };
        if now != last {
            last = now.clone();
            if tx.send(Event::HostAddresses(now)).is_err() {
                return;
            }
        }
    });
}

/// Whether this process is in the host's (the initial) network namespace, where the
/// global conntrack settings live. The kernel says so itself: it makes
/// `nf_conntrack_max` read-only (0444) in every other network namespace and 0644 in the
/// initial one. (Comparing with pid 1's namespace is wrong in a container with a PID
/// namespace of its own, where pid 1 is the daemon itself.) Without nf_conntrack loaded
/// the file is missing: true, and the write's warning says why it failed.
fn in_init_netns() -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata("/proc/sys/net/netfilter/nf_conntrack_max")
        .map_or(true, |m| m.permissions().mode() & 0o200 != 0)
}

/// Write `value` to `/proc/sys/<key>` when it differs. Errors are warnings: a read-only
/// sysctl (a container, a non-initial namespace) must not stop the proxy.
fn write_sysctl(key: &str, value: u64) {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let current = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if current == Some(value) {
        return;
    }
    match std::fs::write(&path, value.to_string()) {
        Ok(()) => match current {
            Some(from) => info!(sysctl = key, from, to = value, "set sysctl"),
            None => info!(sysctl = key, to = value, "set sysctl"),
        },
        Err(e) => warn!(sysctl = key, to = value, error = %e, "cannot set sysctl"),
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// The conntrack sysctls kube-proxy sets (`--conntrack-*`), written through /proc/sys.
/// Zero or unset values are left alone, as upstream does.
pub fn apply_conntrack(ct: &Conntrack) {
    let per_core = ct.max_per_core.unwrap_or(0).max(0) as u64;
    let min = ct.min.unwrap_or(0).max(0) as u64;
    if per_core > 0 {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let max = (per_core * cpus).max(min);
        if in_init_netns() {
            // The hash table holds max/4 buckets; only ever grown.
            let hs_path = "/sys/module/nf_conntrack/parameters/hashsize";
            let hashsize = std::fs::read_to_string(hs_path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if let Some(h) = hashsize {
                if h < max / 4 {
                    match std::fs::write(hs_path, (max / 4).to_string()) {
                        Ok(()) => info!(from = h, to = max / 4, "set conntrack hashsize"),
                        Err(e) => warn!(error = %e, "cannot set conntrack hashsize"),
                    }
                }
            }
            write_sysctl("net.netfilter.nf_conntrack_max", max);
        } else {
            info!("not in the host's network namespace: nf_conntrack_max (global) left alone");
        }
    }
    if let Some(d) = ct.tcp_established_timeout.filter(|d| d.0 > 0) {
        write_sysctl(
            "net.netfilter.nf_conntrack_tcp_timeout_established",
            secs(d.std()),
        );
    }
    if let Some(d) = ct.tcp_close_wait_timeout.filter(|d| d.0 > 0) {
        write_sysctl(
            "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
            secs(d.std()),
        );
    }
    if ct.tcp_be_liberal {
        write_sysctl("net.netfilter.nf_conntrack_tcp_be_liberal", 1);
    }
    if ct.udp_timeout.0 > 0 {
        write_sysctl(
            "net.netfilter.nf_conntrack_udp_timeout",
            secs(ct.udp_timeout.std()),
        );
    }
    if ct.udp_stream_timeout.0 > 0 {
        write_sysctl(
            "net.netfilter.nf_conntrack_udp_timeout_stream",
            secs(ct.udp_stream_timeout.std()),
        );
    }
}

/// `net.ipv4.conf.all.route_localnet=1`, which localhost NodePorts need (iptables mode,
/// as kube-proxy's iptables proxier sets it; the table drops what it lets in from
/// elsewhere, see `ruleset::ParsedConfig::localhost_node_ports_v4`).
pub fn apply_route_localnet() {
    info!("Setting route_localnet=1 to allow node-ports on localhost; to change this either disable iptables.localhostNodePorts (--iptables-localhost-nodeports) or set nodePortAddresses (--nodeport-addresses) to filter loopback addresses");
    write_sysctl("net.ipv4.conf.all.route_localnet", 1);
}

/// Whether `net.netfilter.nf_conntrack_tcp_be_liberal` is set (read as kube-proxy's
/// iptables proxier reads it, after the conntrack sysctls are applied).
pub fn tcp_be_liberal() -> bool {
    std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|v| v != 0)
}

/// `oom_score_adj` of this process (kube-proxy's `--oom-score-adj`).
pub fn apply_oom_score_adj(v: i32) {
    let path = "/proc/self/oom_score_adj";
    if std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        == Some(v.to_string())
    {
        return;
    }
    if let Err(e) = std::fs::write(path, v.to_string()) {
        warn!(value = v, error = %e, "cannot set oom_score_adj");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_loopback() {
        let addrs = super::local_addresses().unwrap();
        assert!(addrs.iter().any(|a| a.is_loopback()), "{addrs:?}");
    }
}
