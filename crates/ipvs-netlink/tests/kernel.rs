//! ipset and IPVS requests against the kernel, in namespaces of the tests' own. `ipset`
//! and `ipvsadm` are test setup and oracles only.
//!
//! IPVS needs the `ip_vs` module: where the kernel lacks it (CONFIG_IP_VS unset, no
//! module to load), the IPVS part checks that its absence is reported as "no virtual
//! services" and prints what could not be tested.

use ipvs_netlink::genl::open_family;
use ipvs_netlink::ipset::{kube_proxy_sets, Ipset, SetRemoval};
use ipvs_netlink::ipvs::{Ipvs, Key};
use netns_tests::{require_root, Netns};
use std::io::Write;
use std::process::{Command, Stdio};

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ipset save NAME` (the set's definition and members, as ipset prints them).
fn saved(ns: &Netns, name: &str) -> String {
    ns.exec_ok("ipset", &["save", name])
}

#[test]
fn kube_proxys_ipsets_are_destroyed_others_stay_and_referenced_ones_are_busy() {
    require_root!();
    assert!(
        have("ipset"),
        "the ipset tool is needed as test setup (.ci/run installs it)"
    );
    let ns = Netns::new("ipset");
    let ours = [
        ("KUBE-CLUSTER-IP", "hash:ip,port"),
        ("KUBE-LOOP-BACK", "hash:ip,port,ip"),
        ("KUBE-NODE-PORT-TCP", "bitmap:port range 0-65535"),
        ("KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net"),
        ("KUBE-6-CLUSTER-IP", "hash:ip,port family inet6"),
        (
            "KUBE-6-LOAD-BALANCER-SOURCE-CID",
            "hash:ip,port,net family inet6",
        ),
    ];
    for (n, t) in ours {
        let mut args = vec!["create", n];
        args.extend(t.split(' '));
        ns.exec_ok("ipset", &args);
    }
    ns.exec_ok("ipset", &["add", "KUBE-CLUSTER-IP", "198.18.0.10,tcp:80"]);
    // kube-router's sets and a user's near-miss name
    let theirs = [
        ("kube-router-pod-subnets", "hash:net"),
        ("KUBE-SRC-4N57TFCL4MD7ZTDA", "hash:ip"),
        ("KUBE-DST-4N57TFCL4MD7ZTDA", "hash:ip,port"),
        ("KUBE-CLUSTER-IP-BACKUP", "hash:ip,port"),
    ];
    for (n, t) in theirs {
        let mut args = vec!["create", n];
        args.extend(t.split(' '));
        ns.exec_ok("ipset", &args);
    }
    ns.exec_ok("ipset", &["add", "KUBE-SRC-4N57TFCL4MD7ZTDA", "198.18.3.7"]);
    let before: Vec<String> = theirs.iter().map(|(n, _)| saved(&ns, n)).collect();
    // another program's rule uses a kube-proxy set: it must stay (busy)
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns.name(), "iptables-restore"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(
            b"*filter\n:INPUT ACCEPT [0:0]\n:OTHER - [0:0]\n-A INPUT -j OTHER\n\
              -A OTHER -m set --match-set KUBE-LOOP-BACK dst,dst,src -j ACCEPT\nCOMMIT\n",
        )
        .unwrap();
    assert!(c.wait().unwrap().success());

    let (found, removed) = ns.run(|| {
        let mut s = Ipset::open().unwrap();
        let mut found = Vec::new();
        let mut removed = Vec::new();
        for n in kube_proxy_sets() {
            if let Some(t) = s.find(&n).unwrap() {
                found.push((n.clone(), t));
            }
            removed.push((n.clone(), s.destroy(&n).unwrap()));
        }
        (found, removed)
    });
    assert_eq!(found.len(), ours.len(), "{found:?}");
    assert!(found.contains(&("KUBE-CLUSTER-IP".into(), "hash:ip,port".into())));
    let outcome = |n: &str| removed.iter().find(|(m, _)| m == n).unwrap().1.clone();
    assert_eq!(outcome("KUBE-CLUSTER-IP"), SetRemoval::Destroyed);
    assert_eq!(
        outcome("KUBE-6-LOAD-BALANCER-SOURCE-CID"),
        SetRemoval::Destroyed
    );
    assert_eq!(outcome("KUBE-LOOP-BACK"), SetRemoval::Busy);
    assert_eq!(outcome("KUBE-EXTERNAL-IP"), SetRemoval::Absent);
    let left = ns.exec_ok("ipset", &["list", "-n"]);
    let mut left: Vec<&str> = left.lines().collect();
    left.sort();
    assert_eq!(
        left,
        [
            "KUBE-CLUSTER-IP-BACKUP",
            "KUBE-DST-4N57TFCL4MD7ZTDA",
            "KUBE-LOOP-BACK",
            "KUBE-SRC-4N57TFCL4MD7ZTDA",
            "kube-router-pod-subnets"
        ]
    );
    let after: Vec<String> = theirs.iter().map(|(n, _)| saved(&ns, n)).collect();
    assert_eq!(after, before, "other programs' sets are untouched");
}

#[test]
fn generic_netlink_controller_and_ipvs() {
    require_root!();
    let ns = Netns::new("ipvs");
    // the controller itself (positive control for the lookup and the reply parsing)
    let ctrl = ns.run(|| open_family("nlctrl").unwrap().map(|(_, id)| id));
    assert_eq!(ctrl, Some(0x10));
    assert!(ns.run(|| open_family("no-such-family").unwrap().is_none()));

    let ipvs_present = std::path::Path::new("/proc/net/ip_vs").exists()
        || Command::new("modprobe")
            .arg("ip_vs")
            .status()
            .is_ok_and(|s| s.success());
    let opened = ns.run(|| Ipvs::open().unwrap().is_some());
    if !ipvs_present {
        assert!(!opened, "no IPVS in this kernel, yet the family resolved");
        eprintln!(
            "NOT TESTED: IPVS virtual service dump and delete against a kernel \
             (this kernel has no ip_vs: CONFIG_IP_VS unset, no module to load)"
        );
        return;
    }
    assert!(
        opened,
        "ip_vs is loaded but the IPVS family did not resolve"
    );
    if !have("ipvsadm") {
        eprintln!("NOT TESTED: IPVS dump and delete (ipvsadm, the test's setup tool, is missing)");
        return;
    }
    for a in [
        vec!["-A", "-t", "198.18.0.10:80", "-s", "rr"],
        vec!["-a", "-t", "198.18.0.10:80", "-r", "198.18.1.5:8080", "-m"],
        vec!["-A", "-u", "198.19.0.53:53"],
        vec!["-A", "-t", "[2001:db8::10]:443"],
        vec!["-A", "-f", "7"],
    ] {
        ns.exec_ok("ipvsadm", &a);
    }
    let services = ns.run(|| Ipvs::open().unwrap().unwrap().services().unwrap());
    let shown: Vec<String> = services.iter().map(|s| s.to_string()).collect();
    for want in [
        "TCP 198.18.0.10:80",
        "UDP 198.19.0.53:53",
        "TCP [2001:db8::10]:443",
        "fwmark 7 (IPv4)",
    ] {
        assert!(shown.iter().any(|s| s == want), "{want} in {shown:?}");
    }
    let deleted = ns.run(|| {
        let mut i = Ipvs::open().unwrap().unwrap();
        let addr_based: Vec<_> = services
            .iter()
            .filter(|s| matches!(s.key, Key::Addr { .. }))
            .cloned()
            .collect();
        let r: Vec<bool> = addr_based.iter().map(|s| i.delete(s).unwrap()).collect();
        // deleting again: already gone
        let again = i.delete(&addr_based[0]).unwrap();
        (r, again)
    });
    assert_eq!(deleted, (vec![true, true, true], false));
    let left = ns.exec_ok("ipvsadm", &["-Ln"]);
    assert!(left.contains("FWM  7"), "{left}");
    assert!(!left.contains("198.18.0.10"), "{left}");
}
