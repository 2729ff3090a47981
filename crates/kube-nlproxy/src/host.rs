//! What the daemon learns from the host, without running a program: its interface
//! addresses (an rtnetlink dump) and the conntrack sysctls (files under /proc/sys).

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use proxy_status::Backoff;
use sync_engine::Event;

use tracing::{info, warn};

use proxy_config::config::v1alpha1::Conntrack;

/// Every address configured on the host's interfaces (both families), via one
/// RTM_GETADDR dump (crate `rt-netlink`).
pub fn local_addresses() -> io::Result<Vec<IpAddr>> {
    rt_netlink::local_addresses().map_err(io::Error::other)
}

/// Follow the host's addresses on a thread of its own, from the rtnetlink monitor of
/// both address groups only: the thread sleeps on the monitor's socket until the kernel
/// reports a change (no period). On a change, or when notifications were lost
/// (`ENOBUFS`: the dump is the resync), the addresses are read again with a dump and,
/// when they differ from the last list sent, sent as [`Event::HostAddresses`]. A failing
/// monitor or dump is retried with a backoff (100 ms doubling to 30 s; the monitor
/// reopened, then a dump) and logged a bounded number of times (the 1st, 2nd, 4th, ...
/// failure of a run). Stops when the receiver is gone. Without a monitor socket the
/// addresses read at start stay (logged).
pub fn follow_addresses(tx: sync_engine::EventSender, mut last: Vec<IpAddr>) {
    let mut monitor = match rt_netlink::AddrMonitor::open() {
        Ok(m) => m,
        Err(e) => {
            warn!(err = %e, "Cannot follow the host's addresses; those read at start stay");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name(ADDRESS_THREAD.into())
        .spawn(move || {
            let mut failing = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
            // A dump is due: at a change, after lost notifications, after a failure.
            let mut resync = false;
            loop {
                if !resync {
                    resync = match monitor.wait(None) {
                        Ok(c) => c.overflow || !c.events.is_empty(),
                        Err(e) => {
                            wait_after_failure(&mut failing, &e);
                            if let Ok(m) = rt_netlink::AddrMonitor::open() {
                                monitor = m;
                            }
                            true
                        }
                    };
                    if !resync {
                        continue;
                    }
                }
                let now = match local_addresses() {
                    Ok(a) => a,
                    Err(e) => {
                        wait_after_failure(&mut failing, &e);
                        continue;
                    }
                };
                resync = false;
                failing.reset();
                if now != last {
                    last = now.clone();
                    if tx.send(Event::HostAddresses(now)).is_err() {
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        warn!(err = %e, "Cannot follow the host's addresses; those read at start stay");
    }
}

/// After a failure of the address follower: log it (a bounded number of times) and wait
/// the backoff.
fn wait_after_failure(failing: &mut Backoff, e: &dyn std::fmt::Display) {
    let delay = failing.fail();
    if failing.log_this_one() {
        warn!(err = %e, failures = failing.failures(), retry_ms = delay.as_millis() as u64,
            "Cannot follow the host's addresses; retrying");
    }
    std::thread::sleep(delay);
}

/// The name of the thread following the host's addresses.
pub const ADDRESS_THREAD: &str = "host-addresses";

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

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
}

/// Write `value` to `/proc/sys/<key>` when it differs, logging upstream's
/// `"Set sysctl" entry=... value=...`. Errors are warnings: a read-only sysctl (a
/// container, a non-initial namespace) must not stop the proxy.
fn write_sysctl(key: &str, value: u64) {
    let entry = key.replace('.', "/");
    let path = format!("/proc/sys/{entry}");
    if read_u64(&path) == Some(value) {
        return;
    }
    info!(entry = %entry, value, "Set sysctl");
    if let Err(e) = std::fs::write(&path, value.to_string()) {
        warn!(entry = %entry, value, error = %e, "cannot set sysctl");
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// The online CPUs the kernel lists (`/sys/devices/system/cpu/online`), as kube-proxy
/// counts them; the CPUs this process may use only when that file is unreadable.
fn online_cpus() -> u64 {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| proxy_config::conntrack::parse_cpu_list(&s))
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) as u64)
}

/// The conntrack sysctls kube-proxy sets (`--conntrack-*`), written through /proc/sys.
/// Zero or unset values are left alone, as upstream does; `nf_conntrack_max` is only
/// ever raised (proxy_config::conntrack).
pub fn apply_conntrack(ct: &Conntrack) {
    use proxy_config::conntrack::{conntrack_max, hashsize_for, ConntrackMax};
    const MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
    if ct.max_per_core.is_some_and(|p| p > 0) {
        if !in_init_netns() {
            info!("not in the host's network namespace: nf_conntrack_max (global) left alone");
        } else {
            match conntrack_max(ct.max_per_core, ct.min, online_cpus(), read_u64(MAX)) {
                ConntrackMax::Unset => {}
                ConntrackMax::Keep { current, computed } => info!(
                    current,
                    computed,
                    "nf_conntrack_max is already at least the computed value; not lowered"
                ),
                ConntrackMax::Set(max) => {
                    info!(nfConntrackMax = max, "Setting nf_conntrack_max");
                    write_sysctl("net.netfilter.nf_conntrack_max", max);
                    let hs_path = "/sys/module/nf_conntrack/parameters/hashsize";
                    if let Some(h) = read_u64(hs_path).and_then(|cur| hashsize_for(max, cur)) {
                        info!(conntrackHashsize = h, "Setting conntrack hashsize");
                        if let Err(e) = std::fs::write(hs_path, h.to_string()) {
                            warn!(error = %e, "cannot set conntrack hashsize");
                        }
                    }
                }
            }
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

/// Whether `net.ipv4.conf.all.route_localnet` is 1 although this mode does not serve
/// localhost NodePorts (another program set it, or iptables mode did before a move to
/// nftables mode): the kernel then routes packets to 127.0.0.0/8 from other hosts, so the
/// rules guard loopback as kube-proxy's `KUBE-FIREWALL` chain does
/// (`ruleset::ParsedConfig::route_localnet`, CVE-2020-8558). Upstream keeps that chain,
/// shared with kubelet, in every mode; the sysctl, which is not this mode's, is left
/// alone.
pub fn route_localnet_set() -> bool {
    let on = read_u64("/proc/sys/net/ipv4/conf/all/route_localnet") == Some(1);
    if on {
        info!("route_localnet=1 on this node; guarding 127.0.0.0/8 against other hosts as kube-proxy's KUBE-FIREWALL rule does");
    }
    on
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
    use super::*;

    #[test]
    fn lists_loopback() {
        let addrs = super::local_addresses().unwrap();
        assert!(addrs.iter().any(|a| a.is_loopback()), "{addrs:?}");
    }

    /// Voluntary context switches of this process's thread named `name` (each one a
    /// wakeup after sleeping).
    fn wakeups(name: &str) -> u64 {
        let mut found = None;
        for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                let status = std::fs::read_to_string(t.path().join("status")).unwrap();
                let n = status
                    .lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                    .and_then(|v| v.trim().parse().ok());
                assert!(found.is_none(), "two threads named {name}");
                found = n;
            }
        }
        found.unwrap_or_else(|| panic!("no thread named {name}"))
    }

    /// The follower sleeps on the monitor: no wakeup while nothing changes, and an
    /// address added in its namespace is sent at once.
    #[test]
    fn the_address_follower_sleeps_until_an_address_changes() {
        netns_tests::require_root!();
        let ns = netns_tests::Netns::new("hostaddr");
        ns.ip(&["link", "add", "h0", "type", "veth", "peer", "name", "h1"]);
        ns.ip(&["link", "set", "h0", "up"]);
        let (tx, rx) = sync_engine::channel(4);
        ns.run(move || follow_addresses(tx, local_addresses().unwrap()));
        std::thread::sleep(Duration::from_millis(200));
        let before = wakeups(ADDRESS_THREAD);
        std::thread::sleep(Duration::from_secs(2));
        let idle = wakeups(ADDRESS_THREAD) - before;
        assert!(idle == 0, "woke {idle} times in 2 s without a change");

        let added = std::time::Instant::now();
        ns.ip(&["addr", "add", "198.18.7.1/24", "dev", "h0"]);
        let want: IpAddr = "198.18.7.1".parse().unwrap();
        let got = loop {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Event::HostAddresses(a)) if a.contains(&want) => break added.elapsed(),
                Ok(_) => continue,
                Err(e) => panic!("no HostAddresses with {want}: {e}"),
            }
        };
        assert!(got < Duration::from_millis(300), "took {got:?}");
    }
}
