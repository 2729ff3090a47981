//! Migration from kube-proxy's iptables mode (programmed through iptables-nft): our
//! netlink cleanup removes every kube-proxy chain and jump and leaves every other rule
//! (iptables and nft) unchanged. `iptables-restore` is test setup only.

use netns_tests::{require_root, Netns};
use nft_netlink::migrate::{is_kube_proxy_chain, legacy_iptables_tables};
use nft_netlink::Nft;
use std::io::Write;
use std::process::{Command, Stdio};

const V4: &str = "*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-ABCDEF - [0:0]
:KUBE-SEP-XYZ - [0:0]
:DOCKER - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A POSTROUTING -s 198.18.9.0/24 ! -o docker0 -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-ABCDEF
-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-ABCDEF -m comment --comment \"default/web:http\" -j KUBE-SEP-XYZ
-A KUBE-SEP-XYZ -s 198.19.0.5/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-XYZ -p tcp -m tcp -j DNAT --to-destination 198.19.0.5:8080
-A DOCKER -i docker0 -j RETURN
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:ALLOW-SSH - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 22 -j ALLOW-SSH
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A ALLOW-SSH -s 198.18.7.0/24 -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
";

const V6: &str = "*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-V6 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A KUBE-SERVICES -d 2001:db8::10/128 -p udp -m udp --dport 53 -j KUBE-SVC-V6
-A KUBE-SVC-V6 -p udp -m udp -j DNAT --to-destination [2001:db8:2::5]:5353
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -s 2001:db8:7::/64 -j ACCEPT
COMMIT
";

fn restore(ns: &Netns, program: &str, rules: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), program])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iptables-restore");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `iptables-save` without comments and counters.
fn saved(ns: &Netns, program: &str) -> Vec<String> {
    ns.exec_ok(program, &[])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(" [").next().unwrap_or(l).to_string())
        .collect()
}

fn mentions_kube_proxy(line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || c == ':')
        .any(is_kube_proxy_chain)
}

#[test]
fn kube_proxy_iptables_leftovers_are_removed_and_nothing_else_changes() {
    require_root!();
    let ns = Netns::new("migrate");
    restore(&ns, "iptables-restore", V4);
    restore(&ns, "ip6tables-restore", V6);
    ns.nft("table inet host-fw {\n\tchain input {\n\t\ttype filter hook input priority 5; policy accept;\n\t\tct state invalid counter drop\n\t}\n}\n");
    let (v4, v6) = (saved(&ns, "iptables-save"), saved(&ns, "ip6tables-save"));
    let host_fw = ns.exec_ok("nft", &["list", "table", "inet", "host-fw"]);
    assert!(
        v4.iter().any(|l| l.contains("KUBE-SVC-ABCDEF")),
        "setup: {v4:?}"
    );

    let report = ns.run(|| {
        Nft::open()
            .unwrap()
            .remove_kube_proxy_iptables()
            .expect("migration commits")
    });
    assert_eq!(report.chains_removed, 10 + 2, "{report:?}");
    assert_eq!(report.jumps_removed, 6 + 2, "{report:?}");

    let (after4, after6) = (saved(&ns, "iptables-save"), saved(&ns, "ip6tables-save"));
    for (before, after) in [(&v4, &after4), (&v6, &after6)] {
        assert!(
            !after.iter().any(|l| mentions_kube_proxy(l)),
            "kube-proxy leftovers remain: {after:#?}"
        );
        let expected: Vec<&String> = before.iter().filter(|l| !mentions_kube_proxy(l)).collect();
        let got: Vec<&String> = after.iter().collect();
        assert_eq!(
            got, expected,
            "every other iptables rule must stay as it was"
        );
    }
    assert!(
        after4.iter().any(|l| l == "-A INPUT -j KUBE-FIREWALL"),
        "kubelet's chain stays"
    );
    assert_eq!(
        ns.exec_ok("nft", &["list", "table", "inet", "host-fw"]),
        host_fw
    );

    // idempotent: a second run finds nothing to do
    let again = ns.run(|| Nft::open().unwrap().remove_kube_proxy_iptables().unwrap());
    assert_eq!(again, Default::default());
    assert!(ns
        .run(|| legacy_iptables_tables(std::path::Path::new("/proc")))
        .is_empty());
}
