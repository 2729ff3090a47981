//! The hosts of the `fleet` scenario: a hub namespace holding a bridge (and the API
//! double, on the bridge's address) and N node namespaces, each joined to the bridge by
//! a veth; the node veths' byte and packet counters, read inside each node's namespace
//! (`/proc/thread-self/net/dev`: the calling thread's namespace), so that what a node
//! received is measured by the kernel, not by the daemon or the double.

use std::net::Ipv4Addr;

use netns_tests::{addr, veth, Netns};

/// The hub's address on its bridge; the nodes follow it in 198.19.160.0/20, clear of
/// the uniform cluster's cluster IPs (198.18.0.0/17) and of its endpoints below 73,728
/// of them (the endpoints fill 198.18.128.0/17 + 198.19.0.0/16 in order).
pub const HUB: Ipv4Addr = Ipv4Addr::new(198, 19, 160, 1);
const PREFIX: u8 = 20;
/// A Linux bridge takes at most 1,024 ports.
pub const MAX_NODES: u32 = 1_000;

/// One node: its namespace, its name (`node-i`) and address.
pub struct Host {
    pub ns: Netns,
    pub name: String,
    pub ip: Ipv4Addr,
}

/// The address of node `i`.
pub fn node_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(HUB) + 1 + i)
}

/// The hub (bridge `br0` with [`HUB`]) and `n` nodes (`eth0` with [`node_ip`], the hub's
/// end `p<i>` enslaved to the bridge). Every link is created inside the namespaces.
pub fn build(n: u32) -> (Netns, Vec<Host>) {
    let hub = Netns::new("fhub");
    hub.ip(&["link", "add", "br0", "type", "bridge"]);
    hub.ip(&["link", "set", "br0", "up"]);
    addr(&hub, "br0", &format!("{HUB}/{PREFIX}"));
    let hosts = (0..n)
        .map(|i| {
            let ns = Netns::new("fnode");
            let port = format!("p{i}");
            veth(&ns, "eth0", &hub, &port);
            hub.ip(&["link", "set", &port, "master", "br0"]);
            let ip = node_ip(i);
            addr(&ns, "eth0", &format!("{ip}/{PREFIX}"));
            Host {
                ns,
                name: format!("node-{i}"),
                ip,
            }
        })
        .collect();
    (hub, hosts)
}

/// An interface's counters (bytes and packets as the kernel counts them: whole frames).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, b: Counters) -> Counters {
        Counters {
            rx_bytes: self.rx_bytes.saturating_sub(b.rx_bytes),
            rx_packets: self.rx_packets.saturating_sub(b.rx_packets),
            tx_bytes: self.tx_bytes.saturating_sub(b.tx_bytes),
            tx_packets: self.tx_packets.saturating_sub(b.tx_packets),
        }
    }
}

/// `ifname`'s counters in a `/proc/net/dev` text (pure): after `name:` come the receive
/// bytes, packets and six more receive fields, then the transmit bytes and packets.
pub fn dev_counters(text: &str, ifname: &str) -> Option<Counters> {
    let line = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{ifname}:")))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    Some(Counters {
        rx_bytes: *f.first()?,
        rx_packets: *f.get(1)?,
        tx_bytes: *f.get(8)?,
        tx_packets: *f.get(9)?,
    })
}

/// Every node's `eth0` counters, read inside its namespace (zeros where unreadable).
pub fn read_counters(hosts: &[Host]) -> Vec<Counters> {
    hosts
        .iter()
        .map(|h| {
            h.ns.run(|| {
                std::fs::read_to_string("/proc/thread-self/net/dev")
                    .ok()
                    .and_then(|t| dev_counters(&t, "eth0"))
                    .unwrap_or_default()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_devices_counters_are_read_from_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  \
            eth0: 1048576     812    0    0    0     0          0         3    40960     500    0    0    0     0       0          0\n";
        assert_eq!(
            dev_counters(text, "eth0"),
            Some(Counters {
                rx_bytes: 1_048_576,
                rx_packets: 812,
                tx_bytes: 40_960,
                tx_packets: 500
            })
        );
        assert_eq!(dev_counters(text, "eth1"), None);
        assert_eq!(dev_counters("  eth0: 1 2 3\n", "eth0"), None);
        assert_eq!(node_ip(0), Ipv4Addr::new(198, 19, 160, 2));
        assert_eq!(node_ip(299), Ipv4Addr::new(198, 19, 161, 45));
    }
}
