//! Migration from kube-proxy's iptables mode (programmed through iptables-nft): our
//! netlink cleanup removes exactly kube-proxy's chains (upstream's names) and the jumps
//! to them, and leaves every other chain, rule and table byte-identical: kubelet's
//! chains, kube-router's policy chains (with their DROP rules), a user's `KUBE-` chains
//! and a foreign nft table. `iptables-restore` is test setup only.

use netns_tests::{require_root, Netns};
use nft_netlink::migrate::legacy_iptables_tables;
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
:KUBE-PROXY-CANARY - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-SVC-4N57TFCL4MD7ZTDA - [0:0]
:KUBE-SEP-WXWGHGKZOCNYRYI7 - [0:0]
:KUBE-SVC-mine - [0:0]
:DOCKER - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -d 198.18.44.0/24 -j KUBE-SVC-mine
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A POSTROUTING -s 198.18.9.0/24 ! -o docker0 -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-4N57TFCL4MD7ZTDA
-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-4N57TFCL4MD7ZTDA -m comment --comment \"default/web:http\" -j KUBE-SEP-WXWGHGKZOCNYRYI7
-A KUBE-SEP-WXWGHGKZOCNYRYI7 -s 198.19.0.5/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-WXWGHGKZOCNYRYI7 -p tcp -m tcp -j DNAT --to-destination 198.19.0.5:8080
-A KUBE-SVC-mine -j DNAT --to-destination 198.19.0.6
-A DOCKER -i docker0 -j RETURN
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-ROUTER-OUTPUT - [0:0]
:KUBE-NWPLCY-DEFAULT - [0:0]
:KUBE-NWPLCY-4N57TFCL4MD7ZTDA - [0:0]
:KUBE-POD-FW-4N57TFCL4MD7ZTDA - [0:0]
:KUBE-MY-ALLOWLIST - [0:0]
:ALLOW-SSH - [0:0]
-A INPUT -m comment --comment \"kube-router netpol\" -j KUBE-ROUTER-INPUT
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 22 -j ALLOW-SSH
-A INPUT -s 198.18.8.0/24 -j KUBE-MY-ALLOWLIST
-A FORWARD -m comment --comment \"kube-router netpol\" -j KUBE-ROUTER-FORWARD
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kube-router netpol\" -j KUBE-ROUTER-OUTPUT
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-ROUTER-FORWARD -d 198.19.0.5/32 -j KUBE-POD-FW-4N57TFCL4MD7ZTDA
-A KUBE-ROUTER-OUTPUT -s 198.19.0.5/32 -j KUBE-POD-FW-4N57TFCL4MD7ZTDA
-A KUBE-ROUTER-INPUT -s 198.19.0.5/32 -j KUBE-POD-FW-4N57TFCL4MD7ZTDA
-A KUBE-POD-FW-4N57TFCL4MD7ZTDA -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-POD-FW-4N57TFCL4MD7ZTDA -j KUBE-NWPLCY-DEFAULT
-A KUBE-POD-FW-4N57TFCL4MD7ZTDA -j KUBE-NWPLCY-4N57TFCL4MD7ZTDA
-A KUBE-POD-FW-4N57TFCL4MD7ZTDA -m comment --comment \"rule to drop traffic not allowed by network policy\" -m mark ! --mark 0x10000/0x10000 -j DROP
-A KUBE-NWPLCY-DEFAULT -j MARK --set-xmark 0x10000/0x10000
-A KUBE-NWPLCY-4N57TFCL4MD7ZTDA -s 198.19.0.7/32 -j MARK --set-xmark 0x10000/0x10000
-A KUBE-MY-ALLOWLIST -j ACCEPT
-A ALLOW-SSH -s 198.18.7.0/24 -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
";

const V6: &str = "*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-EDNDUDH2C75GIR6O - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A KUBE-SERVICES -d 2001:db8::10/128 -p udp -m udp --dport 53 -j KUBE-SVC-EDNDUDH2C75GIR6O
-A KUBE-SVC-EDNDUDH2C75GIR6O -p udp -m udp -j DNAT --to-destination [2001:db8:2::5]:5353
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -j KUBE-ROUTER-INPUT
-A INPUT -s 2001:db8:7::/64 -j ACCEPT
-A KUBE-ROUTER-INPUT -s 2001:db8:9::/64 -j DROP
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

/// The chains of the setup that are kube-proxy's, written out here rather than taken
/// from the product's predicate, so that the test can catch a predicate that takes more.
const KUBE_PROXY: [(&str, &str); 16] = [
    ("nat", "KUBE-SERVICES"),
    ("nat", "KUBE-POSTROUTING"),
    ("nat", "KUBE-MARK-MASQ"),
    ("nat", "KUBE-NODEPORTS"),
    ("nat", "KUBE-PROXY-CANARY"),
    ("nat", "KUBE-SVC-4N57TFCL4MD7ZTDA"),
    ("nat", "KUBE-SEP-WXWGHGKZOCNYRYI7"),
    ("nat", "KUBE-SVC-EDNDUDH2C75GIR6O"),
    ("filter", "KUBE-FORWARD"),
    ("filter", "KUBE-SERVICES"),
    ("filter", "KUBE-EXTERNAL-SERVICES"),
    ("filter", "KUBE-NODEPORTS"),
    ("filter", "KUBE-PROXY-FIREWALL"),
    ("filter", "KUBE-PROXY-CANARY"),
    ("mangle", "KUBE-PROXY-CANARY"),
    ("mangle", "KUBE-PROXY-CANARY"),
];

fn is_kube_proxy_chain(table: &str, name: &str) -> bool {
    KUBE_PROXY.contains(&(table, name))
}

/// Whether an `iptables-save` line of `table` declares, fills or jumps to a chain of
/// kube-proxy's.
fn mentions_kube_proxy(table: &str, line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || c == ':')
        .any(|w| is_kube_proxy_chain(table, w))
}

/// `iptables-save` output as (table, line) pairs.
fn by_table(lines: &[String]) -> Vec<(String, String)> {
    let mut table = String::new();
    lines
        .iter()
        .map(|l| {
            if let Some(t) = l.strip_prefix('*') {
                table = t.to_string();
            }
            (table.clone(), l.clone())
        })
        .collect()
}

/// Every chain of the iptables-nft tables as nft lists it with handles: (family, table,
/// chain header, the chain's lines).
type Listing = Vec<(String, String, String, Vec<String>)>;

fn nft_tables(ns: &Netns) -> Listing {
    let mut out = Listing::new();
    for (fam, t) in [
        ("ip", "nat"),
        ("ip", "filter"),
        ("ip", "mangle"),
        ("ip6", "nat"),
        ("ip6", "filter"),
    ] {
        for l in ns.exec_ok("nft", &["-a", "list", "table", fam, t]).lines() {
            let l = l.trim();
            if l.starts_with("chain ") {
                out.push((fam.into(), t.into(), l.to_string(), Vec::new()));
            } else if let Some(last) = out.last_mut().filter(|c| c.0 == fam && c.1 == t) {
                if !l.is_empty() && l != "}" {
                    last.3.push(l.to_string());
                }
            }
        }
    }
    out
}

/// `before` without kube-proxy's chains and without the rules that jump to them.
fn without_kube_proxy(before: &Listing) -> Listing {
    let jumps_to_ours = |table: &str, line: &str| {
        line.split_whitespace()
            .any(|w| is_kube_proxy_chain(table, w))
    };
    before
        .iter()
        .filter(|(_, t, head, _)| !jumps_to_ours(t, head))
        .map(|(f, t, head, lines)| {
            let kept = lines
                .iter()
                .filter(|l| !jumps_to_ours(t, l))
                .cloned()
                .collect();
            (f.clone(), t.clone(), head.clone(), kept)
        })
        .collect()
}

#[test]
fn kube_proxy_iptables_leftovers_are_removed_and_nothing_else_changes() {
    require_root!();
    let ns = Netns::new("migrate");
    restore(&ns, "iptables-restore", V4);
    restore(&ns, "ip6tables-restore", V6);
    ns.nft("table inet host-fw {\n\tchain input {\n\t\ttype filter hook input priority 5; policy accept;\n\t\tct state invalid counter drop\n\t}\n}\n");
    let (v4, v6) = (saved(&ns, "iptables-save"), saved(&ns, "ip6tables-save"));
    let host_fw = ns.exec_ok("nft", &["-a", "list", "table", "inet", "host-fw"]);
    let nft_before = nft_tables(&ns);
    assert!(
        v4.iter().any(|l| l.contains("KUBE-SVC-4N57TFCL4MD7ZTDA")),
        "setup: {v4:?}"
    );

    let report = ns.run(|| {
        Nft::open()
            .unwrap()
            .remove_kube_proxy_leftovers(&[], &[])
            .expect("migration commits")
    });
    // nat: SERVICES POSTROUTING MARK-MASQ NODEPORTS PROXY-CANARY SVC SEP; filter: FORWARD
    // SERVICES EXTERNAL-SERVICES NODEPORTS PROXY-FIREWALL PROXY-CANARY; mangle: PROXY-CANARY;
    // ip6 nat: SERVICES SVC.
    assert_eq!(report.chains_removed, 7 + 6 + 1 + 2, "{report:?}");
    // nat: PREROUTING, OUTPUT, POSTROUTING; filter: INPUT x3, FORWARD x2; ip6: 2.
    assert_eq!(report.jumps_removed, 3 + 5 + 2, "{report:?}");
    assert!(report.kept.is_empty(), "{report:?}");

    let (after4, after6) = (saved(&ns, "iptables-save"), saved(&ns, "ip6tables-save"));
    for (before, after) in [(&v4, &after4), (&v6, &after6)] {
        assert!(
            !by_table(after)
                .iter()
                .any(|(t, l)| mentions_kube_proxy(t, l)),
            "kube-proxy leftovers remain: {after:#?}"
        );
        let expected: Vec<String> = by_table(before)
            .into_iter()
            .filter(|(t, l)| !mentions_kube_proxy(t, l))
            .map(|(_, l)| l)
            .collect();
        assert_eq!(
            after, &expected,
            "every other iptables rule must stay as it was"
        );
    }
    for kept in [
        "-A INPUT -j KUBE-FIREWALL",
        "-A INPUT -m comment --comment \"kube-router netpol\" -j KUBE-ROUTER-INPUT",
        "-A KUBE-POD-FW-4N57TFCL4MD7ZTDA -m comment --comment \"rule to drop traffic not allowed by network policy\" -m mark ! --mark 0x10000/0x10000 -j DROP",
        "-A INPUT -s 198.18.8.0/24 -j KUBE-MY-ALLOWLIST",
        "-A OUTPUT -d 198.18.44.0/24 -j KUBE-SVC-mine",
        "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000",
    ] {
        assert!(
            after4.iter().any(|l| l == kept),
            "{kept} must stay: {after4:#?}"
        );
    }
    assert!(after6
        .iter()
        .any(|l| l == "-A KUBE-ROUTER-INPUT -s 2001:db8:9::/64 -j DROP"));
    // Byte-identical as nft lists them, handles included: only kube-proxy's chains and
    // the rules jumping to them are gone.
    let nft_after = nft_tables(&ns);
    assert_eq!(
        nft_after,
        without_kube_proxy(&nft_before),
        "nft listing of the iptables-nft tables"
    );
    assert!(nft_after.len() > 20, "{nft_after:#?}");
    assert_eq!(
        ns.exec_ok("nft", &["-a", "list", "table", "inet", "host-fw"]),
        host_fw
    );

    // idempotent: a second run finds nothing to do
    let again = ns.run(|| {
        Nft::open()
            .unwrap()
            .remove_kube_proxy_leftovers(&[], &[])
            .unwrap()
    });
    assert_eq!(again, Default::default());
    assert_eq!(nft_tables(&ns), nft_after);
    assert!(ns
        .run(|| legacy_iptables_tables(std::path::Path::new("/proc")))
        .is_empty());
}

/// A kube-proxy chain that another program's chain jumps to is kept (with what it
/// reaches), so that program's rules stay byte-identical; the rest is removed.
#[test]
fn a_kube_proxy_chain_used_by_another_program_is_kept() {
    require_root!();
    let ns = Netns::new("migrate-kept");
    restore(
        &ns,
        "iptables-restore",
        "*nat
:POSTROUTING ACCEPT [0:0]
:PREROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
:CNI-NAT - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A POSTROUTING -j CNI-NAT
-A CNI-NAT -s 198.18.3.0/24 -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -j KUBE-MARK-MASQ
COMMIT
",
    );
    let report = ns.run(|| {
        Nft::open()
            .unwrap()
            .remove_kube_proxy_leftovers(&[], &[])
            .unwrap()
    });
    assert_eq!(report.chains_removed, 1, "{report:?}");
    assert_eq!(report.jumps_removed, 1, "{report:?}");
    assert_eq!(report.kept.len(), 2, "{report:?}");
    let after = saved(&ns, "iptables-save");
    for l in [
        "-A CNI-NAT -s 198.18.3.0/24 -j KUBE-POSTROUTING",
        "-A POSTROUTING -j KUBE-POSTROUTING",
        "-A KUBE-POSTROUTING -j KUBE-MARK-MASQ",
    ] {
        assert!(after.iter().any(|x| x == l), "{l} must stay: {after:#?}");
    }
    assert!(
        !after.iter().any(|x| x.contains("KUBE-SERVICES")),
        "{after:#?}"
    );
}
