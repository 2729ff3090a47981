//! Rulesets other programs write on nodes, loaded into a test's namespace with their own
//! tools (`iptables-nft-restore`, `nft -f`), for the tests of what we write outside our
//! tables (`KUBE-FORWARD`, `nft_netlink::forward`): upstream kube-proxy's forwarding
//! chain, Docker's filter table with its `FORWARD` policy DROP, firewalld's nftables
//! table. Each is written down from its program's own source or generated docs (named
//! at each constant); none of the programs runs.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::Netns;

/// The iptables proxier's `KUBE-FORWARD` chain and its jump, as it writes them
/// (`pkg/proxy/iptables/proxier.go`: `iptablesJumpChains`, the `KUBE-FORWARD` rules of
/// `syncProxyRules`), `nf_conntrack_tcp_be_liberal` unset, masquerade bit 14; the same
/// lines for `ip6tables`. For `iptables-nft-restore --noflush`.
pub const UPSTREAM_KUBE_FORWARD: &str = "*filter
:KUBE-FORWARD - [0:0]
-I FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
";

/// What `iptables-nft -S` prints for [`UPSTREAM_KUBE_FORWARD`] (the chain and the jump,
/// as upstream's lines), in `-S` order.
pub const UPSTREAM_KUBE_FORWARD_S: [&str; 5] = [
    "-N KUBE-FORWARD",
    "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
    "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
    "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT",
    "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
];

/// Docker 28's filter table (moby `integration/network/bridge/iptablesdoc/generated/`,
/// `usernet-portmap-lo.md`'s "iptables commands", default bridge `docker0` and a user
/// network `bridge1` with a published port), with the `FORWARD` policy DROP that
/// `setupIPForwarding` sets when the daemon enabled forwarding itself
/// (`iptables -P FORWARD DROP`). For `iptables-nft-restore`.
pub const DOCKER_FILTER_V4: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-BRIDGE - [0:0]
:DOCKER-CT - [0:0]
:DOCKER-FORWARD - [0:0]
:DOCKER-INTERNAL - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-FORWARD
-A DOCKER -d 192.0.2.2/32 ! -i bridge1 -o bridge1 -p tcp -m tcp --dport 80 -j ACCEPT
-A DOCKER ! -i docker0 -o docker0 -j DROP
-A DOCKER ! -i bridge1 -o bridge1 -j DROP
-A DOCKER-BRIDGE -o docker0 -j DOCKER
-A DOCKER-BRIDGE -o bridge1 -j DOCKER
-A DOCKER-CT -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A DOCKER-CT -o bridge1 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A DOCKER-FORWARD -j DOCKER-CT
-A DOCKER-FORWARD -j DOCKER-INTERNAL
-A DOCKER-FORWARD -j DOCKER-BRIDGE
-A DOCKER-FORWARD -i docker0 -j ACCEPT
-A DOCKER-FORWARD -i bridge1 -j ACCEPT
COMMIT
";

/// Docker's ip6tables filter table for `docker0` (the same chains; Docker sets the
/// IPv6 `FORWARD` policy to DROP likewise).
pub const DOCKER_FILTER_V6: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-BRIDGE - [0:0]
:DOCKER-CT - [0:0]
:DOCKER-FORWARD - [0:0]
:DOCKER-INTERNAL - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-FORWARD
-A DOCKER ! -i docker0 -o docker0 -j DROP
-A DOCKER-BRIDGE -o docker0 -j DOCKER
-A DOCKER-CT -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A DOCKER-FORWARD -j DOCKER-CT
-A DOCKER-FORWARD -j DOCKER-INTERNAL
-A DOCKER-FORWARD -j DOCKER-BRIDGE
-A DOCKER-FORWARD -i docker0 -j ACCEPT
COMMIT
";

/// firewalld's nftables backend's forward path (`src/firewall/core/nftables.py`,
/// `build_default_rules` and `_build_default_rules_dnat`): `inet firewalld`'s
/// `filter_FORWARD` at priority filter + 10, which accepts established/related and
/// DNATed packets (`ct status dnat accept`; with `StrictForwardPorts=yes` DNATed packets
/// go to `filter_FORWARD_dnat`, which rejects), loopback, drops invalid, dispatches to
/// the zones (none forward here) and rejects the rest (`reject with icmpx
/// admin-prohibited`).
pub fn firewalld_table(strict_forward_ports: bool) -> String {
    let dnat = if strict_forward_ports {
        "\t\tct status dnat jump filter_FORWARD_dnat\n"
    } else {
        "\t\tct status dnat accept\n"
    };
    let dnat_chain = if strict_forward_ports {
        "\tchain filter_FORWARD_dnat {\n\t\treject with icmpx admin-prohibited\n\t}\n"
    } else {
        ""
    };
    format!(
        "table inet firewalld {{\n\
         {dnat_chain}\
         \tchain filter_FORWARD_dispatch {{\n\t}}\n\
         \tchain filter_FORWARD {{\n\
         \t\ttype filter hook forward priority filter + 10; policy accept;\n\
         \t\tct state {{ established, related }} accept\n\
         {dnat}\
         \t\tiifname \"lo\" accept\n\
         \t\tct state {{ invalid }} drop\n\
         \t\tjump filter_FORWARD_dispatch\n\
         \t\treject with icmpx admin-prohibited\n\
         \t}}\n\
         }}\n"
    )
}

/// Feed `rules` to `program` (`iptables-nft-restore`, `ip6tables-nft-restore`, with
/// `args`) inside `ns`; panics on failure.
pub fn restore(ns: &Netns, program: &str, args: &[&str], rules: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), program])
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write rules");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Load Docker's filter tables (both families) into `ns`.
pub fn load_docker(ns: &Netns) {
    restore(ns, "iptables-nft-restore", &[], DOCKER_FILTER_V4);
    restore(ns, "ip6tables-nft-restore", &[], DOCKER_FILTER_V6);
}

/// `iptables-nft -S` (or `ip6tables-nft -S`) lines.
pub fn rules_s(ns: &Netns, program: &str) -> Vec<String> {
    ns.exec_ok(program, &["-S"])
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}
