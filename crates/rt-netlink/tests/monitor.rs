//! The address dump and monitor against a real kernel, in a namespace of their own.

use netns_tests::{require_root, wait_until, Netns};
use rt_netlink::{local_addresses, AddrEvent, AddrMonitor};
use std::net::IpAddr;
use std::time::Duration;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn monitor_reports_addresses_added_and_removed_in_both_families() {
    require_root!();
    let ns = Netns::new("addrmon");
    // A veth pair inside the namespace (no dummy module on every kernel).
    ns.ip(&[
        "link", "add", "dummy0", "type", "veth", "peer", "name", "dummy1",
    ]);
    ns.ip(&["link", "set", "dummy0", "up"]);
    let mut mon = ns.run(|| AddrMonitor::open().expect("open monitor"));
    assert!(
        mon.poll().unwrap().events.is_empty(),
        "nothing before a change"
    );

    let v4 = ip("198.18.5.1");
    let v6 = ip("2001:db8:5::1");
    ns.ip(&["addr", "add", "198.18.5.1/24", "dev", "dummy0"]);
    ns.ip(&["addr", "add", "2001:db8:5::1/64", "dev", "dummy0", "nodad"]);
    let mut events = Vec::new();
    let seen = |events: &[AddrEvent], want: IpAddr, added: bool| {
        events.iter().any(|e| match e {
            AddrEvent::Added(a) => added && a.addr == want,
            AddrEvent::Removed(a) => !added && a.addr == want,
        })
    };
    assert!(
        wait_until(Duration::from_secs(5), || {
            events.extend(mon.poll().unwrap().events);
            seen(&events, v4, true) && seen(&events, v6, true)
        }),
        "{events:?}"
    );
    let mut listed = ns.run(|| local_addresses().expect("dump"));
    listed.sort();
    assert!(listed.contains(&v4) && listed.contains(&v6), "{listed:?}");

    ns.ip(&["addr", "del", "198.18.5.1/24", "dev", "dummy0"]);
    ns.ip(&["addr", "del", "2001:db8:5::1/64", "dev", "dummy0"]);
    events.clear();
    assert!(
        wait_until(Duration::from_secs(5), || {
            events.extend(mon.poll().unwrap().events);
            seen(&events, v4, false) && seen(&events, v6, false)
        }),
        "{events:?}"
    );
    let listed = ns.run(|| local_addresses().expect("dump"));
    assert!(!listed.contains(&v4) && !listed.contains(&v6), "{listed:?}");
    // Every event carried the dummy interface's index.
    let index = ns.run(|| {
        std::fs::read_to_string("/sys/class/net/dummy0/ifindex")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
    });
    if let Some(index) = index {
        assert!(events.iter().all(|e| match e {
            AddrEvent::Added(a) | AddrEvent::Removed(a) => a.index == index,
        }));
    }
}

#[test]
fn dump_lists_loopback() {
    require_root!();
    let ns = Netns::new("addrdump");
    ns.ip(&["link", "set", "lo", "up"]);
    let listed = ns.run(|| local_addresses().expect("dump"));
    assert!(listed.contains(&ip("127.0.0.1")), "{listed:?}");
}
