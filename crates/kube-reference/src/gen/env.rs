//! The environments users run: the proxier's mode, the local-traffic detector,
//! `nodePortAddresses`, `masqueradeAll` and the node's families, drawn per case from
//! its seed ([`Env::random`]), and the upstream rules the model reads from them
//! (written from `cmd/kube-proxy/app/server.go`, `server_linux.go`,
//! `pkg/proxy/util/nodeport_addresses.go` and `localdetector.go`; not copied).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{family_of, ip, Env};
use crate::model::cidr_contains;
use crate::packets::{Origin, Probe};
use crate::rng::Rng;

/// Which upstream proxier the environment runs (`mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `mode: iptables` (kube-proxy's default, and kube-nlproxy's).
    Iptables,
    /// `mode: nftables`.
    Nftables,
}

/// `detectLocalMode` and its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectLocal {
    /// Sources in `clusterCIDRs` (of the family) are local pods.
    ClusterCidr,
    /// Sources in the Node's `spec.podCIDRs` (of the family).
    NodeCidr,
    /// Packets arriving on this bridge (`detectLocal.bridgeInterface`).
    BridgeInterface(String),
    /// Packets arriving on an interface whose name starts with this
    /// (`detectLocal.interfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

impl Env {
    /// A random environment; the common one ([`Env::default`]: nftables mode, the
    /// ClusterCIDR detector, `primary` NodePorts by default, a dual-stack node) half the time.
    pub fn random(rng: &mut Rng) -> Env {
        let mut env = Env::default();
        if rng.chance(50) {
            return env;
        }
        env.probe_loopback = true;
        if rng.chance(50) {
            env.mode = Mode::Iptables;
        }
        // the node: dual-stack, IPv4 only or IPv6 only (the cluster's services stay
        // dual-stack: kube-proxy runs both families' proxiers whatever the node has)
        match rng.below(5) {
            0 => env.keep_family(0, rng.chance(50)),
            1 => env.keep_family(1, rng.chance(50)),
            _ => {}
        }
        // a node lacking a family often has no clusterCIDR of it either
        if env.node_ips.len() == 1 && rng.chance(50) {
            let fam = family_of(&env.node_ips[0]);
            env.cluster_cidrs.retain(|c| family_of(&c.0) == fam);
        }
        env.detect_local = match rng.below(6) {
            0 | 1 => DetectLocal::ClusterCidr,
            2 => DetectLocal::NodeCidr,
            3 => DetectLocal::BridgeInterface(rng.pick(&["cbr0", "cni0"]).to_string()),
            _ => DetectLocal::InterfaceNamePrefix(rng.pick(&["veth", "cali", "lxc"]).to_string()),
        };
        env.pod_interface = match &env.detect_local {
            DetectLocal::BridgeInterface(b) => b.clone(),
            DetectLocal::InterfaceNamePrefix(p) => format!("{p}{:x}", rng.range(1, 0xffff)),
            _ => "veth1".into(),
        };
        env.masquerade_all = rng.chance(20);
        let lists: [&[&str]; 13] = [
            &[],
            &[],
            &["primary"],
            &["198.18.200.0/24"],
            &["198.18.201.0/24"],
            &["198.18.200.0/23"],
            &["2001:db8:201::/48"],
            &["2001:db8:200::/47"],
            &["198.18.201.0/24", "2001:db8:200::/48"],
            &["127.0.0.0/8", "198.18.200.0/24", "::1/128"],
            &["198.18.210.0/24", "2001:db8:210::/48"],
            &["0.0.0.0/0", "2001:db8:201::1/128"],
            &["198.18.200.1/32", "198.18.201.0/24", "::/0"],
        ];
        env.node_port_addresses = rng.pick(&lists).iter().map(|s| s.to_string()).collect();
        env
    }

    /// Keep the node's addresses and pod CIDR of family `fam` only; with `host_other`
    /// the host keeps one address of the other family that the Node does not list (a
    /// second interface's): kube-proxy has no node IP of that family, and serves its
    /// NodePorts there on every local address.
    fn keep_family(&mut self, fam: usize, host_other: bool) {
        let listed = std::mem::take(&mut self.node_ips);
        self.node_ips = listed
            .iter()
            .copied()
            .filter(|a| family_of(a) == fam)
            .collect();
        self.local_addrs
            .retain(|a| family_of(a) == fam || (host_other && !listed.contains(a)));
        self.pod_cidrs.retain(|c| family_of(&c.0) == fam);
    }

    /// The node IP of family `fam` as kube-proxy takes it (`detectNodeIPs`): the Node's
    /// first address of the family, or loopback when it has none.
    pub fn node_ip(&self, fam: usize) -> IpAddr {
        self.node_ips
            .iter()
            .find(|a| family_of(a) == fam)
            .copied()
            .unwrap_or(if fam == 0 {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            })
    }

    /// `nodePortAddresses` after upstream's defaulting (nftables mode: `primary` when
    /// unset; iptables mode: unset) and `primary` expanded to the node IPs that are not
    /// loopback (`server.go`, when it is the list's only entry).
    fn node_port_cidrs(&self) -> Vec<(IpAddr, u8)> {
        let mut list = self.node_port_addresses.clone();
        if list.is_empty() && self.mode == Mode::Nftables {
            list = vec!["primary".into()];
        }
        if list == ["primary"] {
            return (0..2)
                .map(|f| self.node_ip(f))
                .filter(|a| !a.is_loopback())
                .map(|a| (a, if a.is_ipv4() { 32 } else { 128 }))
                .collect();
        }
        list.iter()
            .filter_map(|s| {
                let (a, l) = s.split_once('/')?;
                Some((a.parse().ok()?, l.parse().ok()?))
            })
            .collect()
    }

    /// The addresses NodePorts of family `fam` are served on (`NewNodePortAddresses`
    /// and `GetNodeIPs`): no CIDR of the family, or a zero CIDR, is every local address;
    /// else the local addresses inside the CIDRs (none may match). Loopback: only the
    /// iptables proxier's IPv4 localhost NodePorts (`iptables.localhostNodePorts`, its
    /// default, which the daemon keeps) when the IPv4 part matches every address or
    /// holds 127.0.0.1; never IPv6 (`::1` is left out), never the nftables proxier's
    /// rules (its `ip daddr != 127.0.0.0/8` and `GetNodeIPs` without loopback).
    pub fn node_port_ips(&self, fam: usize) -> Vec<IpAddr> {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut local = self.local_addrs.clone();
        if fam == 0 && self.mode == Mode::Iptables {
            local.push(lo);
        }
        let cidrs: Vec<(IpAddr, u8)> = self
            .node_port_cidrs()
            .into_iter()
            .filter(|c| family_of(&c.0) == fam)
            .collect();
        let all = cidrs.is_empty() || cidrs.iter().any(|c| c.1 == 0);
        local
            .iter()
            .filter(|a| family_of(a) == fam)
            .filter(|a| all || cidrs.iter().any(|c| cidr_contains(c, a)))
            .copied()
            .collect()
    }

    /// The interface a probe arrives on: a pod on this node (its address in the node's
    /// pod CIDRs) on its pod interface, anything else from outside on `eth0`, the node's
    /// own packets on none.
    pub fn iif(&self, p: &Probe) -> Option<String> {
        match p.origin {
            Origin::Node => None,
            Origin::Pod if self.pod_cidrs.iter().any(|c| cidr_contains(c, &p.src)) => {
                Some(self.pod_interface.clone())
            }
            Origin::Pod | Origin::External => Some("eth0".into()),
        }
    }

    /// Whether family `fam` has a local-traffic detector (upstream's `getLocalDetectors`:
    /// the first CIDR of the family, or a no-op detector when there is none).
    pub fn detects_local(&self, fam: usize) -> bool {
        match &self.detect_local {
            DetectLocal::ClusterCidr => self.cluster_cidrs.iter().any(|c| family_of(&c.0) == fam),
            DetectLocal::NodeCidr => self.pod_cidrs.iter().any(|c| family_of(&c.0) == fam),
            DetectLocal::BridgeInterface(b) => !b.is_empty(),
            DetectLocal::InterfaceNamePrefix(p) => !p.is_empty(),
        }
    }

    /// Whether the detector of the probe's family takes it as from a local pod (false
    /// when the family has none).
    pub fn is_local(&self, p: &Probe) -> bool {
        let fam = family_of(&p.src);
        let first = |v: &[(IpAddr, u8)]| v.iter().find(|c| family_of(&c.0) == fam).copied();
        match &self.detect_local {
            DetectLocal::ClusterCidr => {
                first(&self.cluster_cidrs).is_some_and(|c| cidr_contains(&c, &p.src))
            }
            DetectLocal::NodeCidr => {
                first(&self.pod_cidrs).is_some_and(|c| cidr_contains(&c, &p.src))
            }
            DetectLocal::BridgeInterface(b) => {
                !b.is_empty() && self.iif(p).as_deref() == Some(b.as_str())
            }
            DetectLocal::InterfaceNamePrefix(pre) => {
                !pre.is_empty() && self.iif(p).is_some_and(|i| i.starts_with(pre.as_str()))
            }
        }
    }

    /// The config's `detectLocalMode` and its parameters, as JSON members.
    pub(super) fn detect_local_json(&self) -> String {
        match &self.detect_local {
            DetectLocal::ClusterCidr => String::new(),
            DetectLocal::NodeCidr => ", \"detectLocalMode\": \"NodeCIDR\"".into(),
            DetectLocal::BridgeInterface(b) => format!(
                ", \"detectLocalMode\": \"BridgeInterface\", \"podBridgeInterface\": \"{b}\""
            ),
            DetectLocal::InterfaceNamePrefix(p) => format!(
                ", \"detectLocalMode\": \"InterfaceNamePrefix\", \"podInterfaceNamePrefix\": \"{p}\""
            ),
        }
    }

    /// The config's mode and `nodePortAddresses` members as the daemon derives them
    /// (`proxy-config` `settings.rs`): iptables mode with `iptables.localhostNodePorts`
    /// (its default) and, unset, every address; nftables mode unset is `primary`.
    pub(super) fn mode_json(&self) -> String {
        let mut npa = self.node_port_addresses.clone();
        let mut s = String::new();
        if self.mode == Mode::Iptables {
            s.push_str(", \"proxier\": \"Iptables\", \"localhostNodePorts\": true");
            if npa.is_empty() {
                npa = vec!["0.0.0.0/0".into(), "::/0".into()];
            }
        }
        if !npa.is_empty() {
            let l: Vec<String> = npa.iter().map(|a| format!("\"{a}\"")).collect();
            s.push_str(&format!(", \"nodePortAddresses\": [{}]", l.join(", ")));
        }
        s
    }
}

/// The common environment's addresses, for [`Env::default`].
pub(super) fn default_addrs() -> (Vec<IpAddr>, Vec<IpAddr>) {
    (
        vec![ip("198.18.200.1"), ip("2001:db8:200::1")],
        vec![
            ip("198.18.200.1"),
            ip("2001:db8:200::1"),
            ip("198.18.201.1"),
            ip("2001:db8:201::1"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(mode: Mode, npa: &[&str]) -> Env {
        Env {
            mode,
            node_port_addresses: npa.iter().map(|s| s.to_string()).collect(),
            ..Env::default()
        }
    }

    /// `nodePortAddresses` as upstream reads it: nftables mode unset is `primary`,
    /// iptables mode unset every address; CIDRs of one family leave the other on every
    /// address; a CIDR holding no local address serves NodePorts nowhere.
    #[test]
    fn node_port_addresses_per_mode_and_family() {
        let all4 = vec![ip("198.18.200.1"), ip("198.18.201.1")];
        assert_eq!(
            with(Mode::Nftables, &[]).node_port_ips(0),
            [ip("198.18.200.1")]
        );
        let mut all4_lo = all4.clone();
        all4_lo.push(ip("127.0.0.1"));
        assert_eq!(with(Mode::Iptables, &[]).node_port_ips(0), all4_lo);
        assert_eq!(
            with(Mode::Iptables, &["primary"]).node_port_ips(1),
            [ip("2001:db8:200::1")]
        );
        let v6_only = with(Mode::Nftables, &["2001:db8:201::/48"]);
        assert_eq!(v6_only.node_port_ips(0), all4);
        assert_eq!(v6_only.node_port_ips(1), [ip("2001:db8:201::1")]);
        assert!(with(Mode::Nftables, &["198.18.210.0/24"])
            .node_port_ips(0)
            .is_empty());
        assert_eq!(
            with(Mode::Nftables, &["0.0.0.0/0", "198.18.210.0/24"]).node_port_ips(0),
            all4
        );
    }

    /// A node without an IPv6 address: `primary` gives no IPv6 CIDR, so IPv6 NodePorts
    /// are on every local IPv6 address (here the host's unlisted one); the node IP of
    /// the family is loopback.
    #[test]
    fn a_single_stack_node_serves_the_other_family_everywhere() {
        let mut env = Env::default();
        env.keep_family(0, true);
        assert_eq!(env.node_ips, [ip("198.18.200.1")]);
        assert_eq!(env.node_port_ips(0), [ip("198.18.200.1")]);
        assert_eq!(env.node_port_ips(1), [ip("2001:db8:201::1")]);
        assert_eq!(env.node_ip(1), ip("::1"));
    }

    /// Interface detectors: this node's pods arrive on the pod interface, remote pods
    /// and external clients on `eth0`, the node's own packets on none.
    #[test]
    fn interface_detectors_take_this_nodes_pods_only() {
        let env = Env {
            detect_local: DetectLocal::InterfaceNamePrefix("cali".into()),
            pod_interface: "cali12ab".into(),
            ..Env::default()
        };
        let probe = |src: &str, origin| Probe {
            src: ip(src),
            dst: ip("198.18.100.1"),
            proto: 6,
            dport: 80,
            origin,
        };
        assert!(env.is_local(&probe("198.18.1.9", Origin::Pod)));
        assert!(!env.is_local(&probe("198.18.2.9", Origin::Pod)));
        assert!(!env.is_local(&probe("198.18.200.1", Origin::Node)));
        let cidr = Env::default();
        assert!(cidr.is_local(&probe("198.18.2.9", Origin::Pod)));
    }
}
