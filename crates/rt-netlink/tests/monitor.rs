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

/// `wait` sleeps until the kernel has something to say: it times out empty when nothing
/// changes, and returns as soon as an address is added (another thread adds it while
/// this one waits without a timeout).
#[test]
fn wait_blocks_until_a_change() {
    require_root!();
    let ns = Netns::new("addrwait");
    ns.ip(&["link", "add", "w0", "type", "veth", "peer", "name", "w1"]);
    ns.ip(&["link", "set", "w0", "up"]);
    let mut mon = ns.run(|| AddrMonitor::open().expect("open monitor"));
    let t = std::time::Instant::now();
    let quiet = mon.wait(Some(Duration::from_millis(300))).unwrap();
    assert!(quiet.events.is_empty() && !quiet.overflow, "{quiet:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );

    let name = ns.name().to_string();
    let adder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let added = std::time::Instant::now();
        let ok = std::process::Command::new("ip")
            .args(["-n", &name, "addr", "add", "198.18.6.1/24", "dev", "w0"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip addr add");
        added
    });
    let changes = mon.wait(None).unwrap();
    let woke = std::time::Instant::now();
    let added = adder.join().unwrap();
    assert!(
        changes
            .events
            .iter()
            .any(|e| matches!(e, AddrEvent::Added(a) if a.addr == ip("198.18.6.1"))),
        "{changes:?}"
    );
    // woken by the change itself (within the time `ip` takes), not by a period
    assert!(woke >= added, "woke before the address was added");
}
