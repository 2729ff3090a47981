//! `kube-nlproxy --cleanup` removes the leftovers of all three kube-proxy modes, over
//! netlink, and nothing else, in a network namespace of the test's own: kube-proxy's
//! iptables-mode and IPVS-mode chains (iptables-nft) and the jumps to them, its
//! nftables-mode tables, its ipsets (once no rule uses them), IPVS services where the
//! kernel has IPVS, and our own tables. kubelet's, kube-router's and a user's chains,
//! rules and ipsets, a foreign nft table and foreign links stay byte-identical; a
//! kube-proxy ipset another program's rule uses is kept; a `kube-ipvs0` that is not a
//! dummy is kept. `--dry-run` changes nothing. `iptables-restore`, `ipset`, `nft` and
//! `ip` are test setup and oracles only.

use std::io::Write;
use std::process::{Command, Stdio};

use netns_tests::{require_root, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nlproxy");

/// kube-proxy's ipsets (IPVS mode) and kube-router's, with their types.
const KUBE_PROXY_SETS: [(&str, &str); 9] = [
    ("KUBE-CLUSTER-IP", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER-FW", "hash:ip,port"),
    ("KUBE-LOOP-BACK", "hash:ip,port,ip"),
    ("KUBE-NODE-PORT-TCP", "bitmap:port range 0-65535"),
    ("KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port range 0-65535"),
    ("KUBE-IPVS-IPS", "hash:ip"),
    ("KUBE-6-CLUSTER-IP", "hash:ip,port family inet6"),
    // used by another program's rule below: must stay
    ("KUBE-EXTERNAL-IP", "hash:ip,port"),
];
const OTHER_SETS: [(&str, &str); 3] = [
    ("kube-router-pod-subnets", "hash:net"),
    ("KUBE-SRC-4N57TFCL4MD7ZTDA", "hash:ip"),
    ("KUBE-DST-4N57TFCL4MD7ZTDA", "hash:ip,port"),
];

/// iptables mode, IPVS mode (upstream's shapes), kubelet, kube-router and a user.
const V4: &str = "*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-4N57TFCL4MD7ZTDA - [0:0]
:KUBE-SEP-WXWGHGKZOCNYRYI7 - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-ROUTER-SERVICES - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A PREROUTING -j KUBE-ROUTER-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A POSTROUTING -s 198.18.9.0/24 -j MASQUERADE
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose\" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SERVICES -m comment --comment \"Kubernetes service lb portal\" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
-A KUBE-SERVICES ! -s 198.18.0.0/22 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-4N57TFCL4MD7ZTDA
-A KUBE-SVC-4N57TFCL4MD7ZTDA -j KUBE-SEP-WXWGHGKZOCNYRYI7
-A KUBE-SEP-WXWGHGKZOCNYRYI7 -p tcp -m tcp -j DNAT --to-destination 198.18.1.5:8080
-A KUBE-ROUTER-SERVICES -d 198.18.44.0/24 -j RETURN
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-NWPLCY-DEFAULT - [0:0]
:MY-FW - [0:0]
-A INPUT -m comment --comment \"kubernetes health check rules\" -j KUBE-NODE-PORT
-A INPUT -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment \"kube-router netpol\" -j KUBE-ROUTER-INPUT
-A INPUT -j MY-FW
-A FORWARD -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A OUTPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-OUT-FILTER
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable
-A KUBE-NODE-PORT -m comment --comment \"Kubernetes health check node port\" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-PROXY-FIREWALL -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
-A KUBE-ROUTER-INPUT -m set --match-set kube-router-pod-subnets src -j RETURN
-A KUBE-ROUTER-INPUT -m set --match-set KUBE-SRC-4N57TFCL4MD7ZTDA src -j KUBE-NWPLCY-DEFAULT
-A KUBE-NWPLCY-DEFAULT -j DROP
-A MY-FW -m set --match-set KUBE-EXTERNAL-IP dst,dst -j ACCEPT
COMMIT
";

/// kube-proxy's nftables mode (a small table in its shape) and a foreign table.
const NFT: &str = "table ip kube-proxy {
\tcomment \"rules for kube-proxy\"
\tmap service-ips {
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\tcomment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"
\t}
\tchain nat-prerouting {
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\tjump services
\t}
\tchain services {
\t\tip daddr . meta l4proto . th dport vmap @service-ips
\t}
}
table ip6 kube-proxy {
\tchain nat-prerouting {
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t}
}
table inet host-fw {
\tchain input {
\t\ttype filter hook input priority 5; policy accept;
\t\tct state invalid counter drop
\t}
}
table ip kube-nlproxy {
\tchain c {
\t}
}
";

fn setup(ns: &Netns) {
    for (n, t) in KUBE_PROXY_SETS.iter().chain(OTHER_SETS.iter()) {
        let mut args = vec!["create", n];
        args.extend(t.split(' '));
        ns.exec_ok("ipset", &args);
    }
    ns.exec_ok("ipset", &["add", "KUBE-SRC-4N57TFCL4MD7ZTDA", "198.18.3.7"]);
    ns.exec_ok("ipset", &["add", "KUBE-CLUSTER-IP", "198.18.0.10,tcp:80"]);
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), "iptables-restore"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iptables-restore");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(V4.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ns.nft(NFT);
    // not a dummy: not kube-proxy's (and this kernel may have no dummy driver at all)
    ns.ip(&["link", "add", "kube-ipvs0", "type", "bridge"]);
    ns.ip(&["link", "add", "kube-bridge", "type", "bridge"]);
}

fn cleanup(ns: &Netns, dry_run: bool) -> (bool, String, String) {
    let mut args = vec!["netns", "exec", ns.name(), BIN, "--cleanup"];
    if dry_run {
        args.push("--dry-run");
    }
    let out = Command::new("ip").args(&args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The chains of the setup that are kube-proxy's, written out here (not taken from the
/// product) so that the test catches a product that takes more or less.
const KUBE_PROXY_CHAINS: [(&str, &str); 14] = [
    ("nat", "KUBE-SERVICES"),
    ("nat", "KUBE-POSTROUTING"),
    ("nat", "KUBE-MARK-MASQ"),
    ("nat", "KUBE-NODE-PORT"),
    ("nat", "KUBE-LOAD-BALANCER"),
    ("nat", "KUBE-NODEPORTS"),
    ("nat", "KUBE-SVC-4N57TFCL4MD7ZTDA"),
    ("nat", "KUBE-SEP-WXWGHGKZOCNYRYI7"),
    ("filter", "KUBE-FORWARD"),
    ("filter", "KUBE-NODE-PORT"),
    ("filter", "KUBE-PROXY-FIREWALL"),
    ("filter", "KUBE-SOURCE-RANGES-FIREWALL"),
    ("filter", "KUBE-IPVS-FILTER"),
    ("filter", "KUBE-IPVS-OUT-FILTER"),
];

/// `iptables-save` as (table, line), without comments and counters.
fn saved(ns: &Netns) -> Vec<(String, String)> {
    let mut table = String::new();
    ns.exec_ok("iptables-save", &[])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            if let Some(t) = l.strip_prefix('*') {
                table = t.to_string();
            }
            (table.clone(), l.split(" [").next().unwrap_or(l).to_string())
        })
        .collect()
}

fn mentions_kube_proxy(table: &str, line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || c == ':')
        .any(|w| KUBE_PROXY_CHAINS.contains(&(table, w)))
}

fn ipset_names(ns: &Netns) -> Vec<String> {
    let mut v: Vec<String> = ns
        .exec_ok("ipset", &["list", "-n"])
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// Everything the cleanup may touch, as the tools print it.
fn state(ns: &Netns) -> (String, String, String) {
    (
        ns.exec_ok("nft", &["list", "ruleset"]),
        ns.exec_ok("ipset", &["save"]),
        ns.ip(&["-d", "link", "show"]),
    )
}

#[test]
fn cleanup_removes_all_three_modes_leftovers_and_nothing_else() {
    require_root!();
    let ns = Netns::new("cleanup-all");
    setup(&ns);
    let before = state(&ns);
    let ipt_before = saved(&ns);
    let foreign_sets: Vec<String> = OTHER_SETS
        .iter()
        .map(|(n, _)| ns.exec_ok("ipset", &["save", n]))
        .collect();
    let host_fw = ns.exec_ok("nft", &["list", "table", "inet", "host-fw"]);
    let links = |ns: &Netns| {
        ["kube-ipvs0", "kube-bridge"].map(|l| ns.ip(&["-d", "link", "show", "dev", l]))
    };
    let links_before = links(&ns);

    // dry run: reports everything, changes nothing
    let (ok, script, log) = cleanup(&ns, true);
    assert!(ok, "{log}");
    for want in [
        "delete table ip kube-nlproxy",
        "delete table ip kube-proxy",
        "delete table ip6 kube-proxy",
        "delete chain ip nat KUBE-LOAD-BALANCER",
        "delete chain ip filter KUBE-IPVS-FILTER",
        "delete chain ip filter KUBE-SOURCE-RANGES-FIREWALL",
        "delete chain ip nat KUBE-SVC-4N57TFCL4MD7ZTDA",
        "# ipset: destroy KUBE-CLUSTER-IP (hash:ip,port)",
        "# ipset: destroy KUBE-6-CLUSTER-IP (hash:ip,port)",
        "# link: keep kube-ipvs0 (kind bridge, not kube-proxy's dummy)",
    ] {
        assert!(script.contains(want), "dry run lacks {want:?}:\n{script}");
    }
    for never in [
        "kube-router",
        "KUBE-SRC-",
        "host-fw",
        "KUBE-FIREWALL",
        "MY-FW",
    ] {
        assert!(
            !script.contains(never),
            "dry run mentions {never}:\n{script}"
        );
    }
    assert_eq!(state(&ns), before, "the dry run changed something");

    // the cleanup
    let (ok, _, log) = cleanup(&ns, false);
    assert!(ok, "{log}");
    assert!(
        log.contains("removed kube-proxy's nftables leftovers"),
        "{log}"
    );
    assert!(
        log.contains("removed kube-proxy's IPVS-mode leftovers"),
        "{log}"
    );
    assert!(
        log.contains("kept a kube-proxy ipset that another program's rule uses")
            && log.contains("KUBE-EXTERNAL-IP"),
        "{log}"
    );

    let tables = ns.exec_ok("nft", &["list", "tables"]);
    let mut tables: Vec<&str> = tables.lines().collect();
    tables.sort();
    assert_eq!(
        tables,
        ["table inet host-fw", "table ip filter", "table ip nat"],
        "kube-proxy's and our tables are gone, the others stay"
    );
    assert_eq!(
        ns.exec_ok("nft", &["list", "table", "inet", "host-fw"]),
        host_fw
    );
    // iptables: exactly kube-proxy's chains and the rules jumping to them are gone
    let after = saved(&ns);
    let expected: Vec<(String, String)> = ipt_before
        .iter()
        .filter(|(t, l)| !mentions_kube_proxy(t, l))
        .cloned()
        .collect();
    assert_eq!(after, expected, "every other iptables line stays as it was");
    for kept in [
        "-A INPUT -j KUBE-FIREWALL",
        "-A KUBE-ROUTER-INPUT -m set --match-set KUBE-SRC-4N57TFCL4MD7ZTDA src -j KUBE-NWPLCY-DEFAULT",
        "-A MY-FW -m set --match-set KUBE-EXTERNAL-IP dst,dst -j ACCEPT",
        "-A PREROUTING -j KUBE-ROUTER-SERVICES",
    ] {
        assert!(after.iter().any(|(_, l)| l == kept), "{kept} must stay");
    }
    // ipsets: kube-proxy's gone except the one another rule uses; others byte-identical
    assert_eq!(
        ipset_names(&ns),
        [
            "KUBE-DST-4N57TFCL4MD7ZTDA",
            "KUBE-EXTERNAL-IP",
            "KUBE-SRC-4N57TFCL4MD7ZTDA",
            "kube-router-pod-subnets"
        ]
    );
    let foreign_after: Vec<String> = OTHER_SETS
        .iter()
        .map(|(n, _)| ns.exec_ok("ipset", &["save", n]))
        .collect();
    assert_eq!(foreign_after, foreign_sets);
    assert_eq!(
        links(&ns),
        links_before,
        "links that are not kube-proxy's dummy stay"
    );

    // again: nothing left to do, nothing changes
    let settled = state(&ns);
    let (ok, _, log) = cleanup(&ns, false);
    assert!(ok, "{log}");
    assert!(!log.contains("removed kube-proxy"), "{log}");
    assert_eq!(state(&ns), settled);
}

fn have_ipvs_and_dummy(ns: &Netns) -> bool {
    let ipvs = std::path::Path::new("/proc/net/ip_vs").exists()
        || Command::new("modprobe")
            .arg("ip_vs")
            .status()
            .is_ok_and(|s| s.success());
    let ipvsadm = Command::new("sh")
        .args(["-c", "command -v ipvsadm"])
        .output()
        .is_ok_and(|o| o.status.success());
    let dummy = ns
        .exec("ip", &["link", "add", "probe0", "type", "dummy"])
        .status
        .success();
    if dummy {
        ns.ip(&["link", "del", "probe0"]);
    }
    ipvs && ipvsadm && dummy
}

/// IPVS services and the `kube-ipvs0` dummy link, where the kernel has IPVS and the
/// dummy driver (this machine's kernel has neither; the test was run in a Debian 6.12
/// guest, see the report): kube-proxy's services go, those inside `ipvs.excludeCIDRs`
/// and firewall-mark services stay; the dummy goes, a foreign dummy stays; on a node
/// with no sign of kube-proxy's IPVS mode, no IPVS service is touched.
#[test]
fn cleanup_removes_kube_proxys_ipvs_services_and_dummy_link() {
    require_root!();
    let ns = Netns::new("cleanup-ipvs");
    if !have_ipvs_and_dummy(&ns) {
        eprintln!(
            "NOT TESTED: IPVS services and the kube-ipvs0 dummy link (the kernel lacks ip_vs \
             or the dummy driver, or ipvsadm is missing)"
        );
        return;
    }
    let adm = |ns: &Netns, a: &[&str]| {
        ns.exec_ok("ipvsadm", a);
    };
    let services = |ns: &Netns| ns.exec_ok("ipvsadm", &["-Ln"]);

    // a node without any sign of kube-proxy's IPVS mode: IPVS belongs to someone else
    let other = Netns::new("cleanup-ipvs-other");
    adm(&other, &["-A", "-t", "198.18.7.1:80"]);
    let before = services(&other);
    let (ok, script, log) = cleanup(&other, true);
    assert!(ok, "{log}");
    assert!(
        script.contains("# ipvs: keep virtual service TCP 198.18.7.1:80 (no sign of kube-proxy's IPVS mode on this node)"),
        "{script}"
    );
    let (ok, _, log) = cleanup(&other, false);
    assert!(ok, "{log}");
    assert_eq!(services(&other), before);

    // kube-proxy's IPVS mode: the dummy with the service addresses, its services
    ns.ip(&["link", "add", "kube-ipvs0", "type", "dummy"]);
    ns.ip(&["addr", "add", "198.18.0.10/32", "dev", "kube-ipvs0"]);
    ns.ip(&["link", "add", "foreign0", "type", "dummy"]);
    for a in [
        &["-A", "-t", "198.18.0.10:80", "-s", "rr"][..],
        &["-a", "-t", "198.18.0.10:80", "-r", "198.18.1.5:8080", "-m"],
        &["-A", "-u", "198.18.0.10:53"],
        &["-A", "-t", "[2001:db8::10]:443"],
        // inside ipvs.excludeCIDRs (another IPVS user's), and a firewall-mark service
        &["-A", "-t", "198.19.200.1:80"],
        &["-A", "-f", "7"],
    ] {
        adm(&ns, a);
    }
    let cfg = std::env::temp_dir().join(format!("nlp-ipvs-{}.yaml", std::process::id()));
    std::fs::write(
        &cfg,
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  excludeCIDRs: [\"198.19.200.0/24\"]\n",
    )
    .unwrap();
    let run = |dry: bool| {
        let mut args = vec!["netns", "exec", ns.name(), BIN, "--config"];
        let c = cfg.to_string_lossy().to_string();
        args.push(&c);
        args.push("--cleanup");
        if dry {
            args.push("--dry-run");
        }
        let out = Command::new("ip").args(&args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, script, log) = run(true);
    assert!(ok, "{log}");
    for want in [
        "# ipvs: delete virtual service TCP 198.18.0.10:80",
        "# ipvs: delete virtual service UDP 198.18.0.10:53",
        "# ipvs: delete virtual service TCP [2001:db8::10]:443",
        "# ipvs: keep virtual service TCP 198.19.200.1:80 (inside ipvs.excludeCIDRs)",
        "# ipvs: keep virtual service fwmark 7 (IPv4) (firewall-mark service)",
        "# link: delete kube-ipvs0 (dummy)",
    ] {
        assert!(script.contains(want), "dry run lacks {want:?}:\n{script}");
    }
    let (ok, _, log) = run(false);
    let _ = std::fs::remove_file(&cfg);
    assert!(ok, "{log}");
    let left = services(&ns);
    assert!(
        !left.contains("198.18.0.10") && !left.contains("2001:db8::10"),
        "{left}"
    );
    assert!(
        left.contains("198.19.200.1:80") && left.contains("FWM  7"),
        "{left}"
    );
    assert!(!ns
        .exec("ip", &["link", "show", "kube-ipvs0"])
        .status
        .success());
    assert!(ns
        .exec("ip", &["link", "show", "foreign0"])
        .status
        .success());
}

/// On a Docker host: `--cleanup` removes the `KUBE-FORWARD` chain and jump the daemon
/// writes in iptables mode (both families) and leaves Docker's rules and its `FORWARD`
/// policy DROP exactly as they were.
#[test]
fn cleanup_removes_our_kube_forward_and_leaves_dockers_rules() {
    use netns_tests::host_firewalls::{load_docker, rules_s};
    require_root!();
    let ns = Netns::new("cleanup-docker");
    load_docker(&ns);
    let before4 = rules_s(&ns, "iptables-nft");
    let before6 = rules_s(&ns, "ip6tables-nft");
    let cfg = nft_netlink::forward::ForwardConfig {
        mark: 0x4000,
        drop_invalid: true,
    };
    ns.run(move || {
        nft_netlink::Nft::open()
            .unwrap()
            .ensure_kube_forward(&[nft_model::Family::Ip, nft_model::Family::Ip6], cfg)
            .unwrap()
    });
    assert!(rules_s(&ns, "iptables-nft")
        .iter()
        .any(|l| l.contains("-j KUBE-FORWARD")));
    let (ok, _, err) = cleanup(&ns, false);
    assert!(ok, "{err}");
    assert_eq!(rules_s(&ns, "iptables-nft"), before4, "{err}");
    assert_eq!(rules_s(&ns, "ip6tables-nft"), before6, "{err}");
}
