//! The proxier settings the compiler needs (a subset of KubeProxyConfiguration, plus what
//! the daemon learns from the host).

use std::net::IpAddr;

use kube_model::{parse_cidr_sloppy, parse_ip_sloppy, Cidr, IpFamily};
use serde::Deserialize;

use crate::error::RulesetError;

/// How traffic from local pods is recognised (`detectLocalMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum DetectLocalMode {
    /// No detection: only masqueradeAll masquerades ClusterIP traffic.
    None,
    /// Source in any of the `clusterCIDRs` of the family.
    #[default]
    ClusterCIDR,
    /// Source in the node's `spec.podCIDRs`.
    NodeCIDR,
    /// Arriving on `podBridgeInterface`.
    BridgeInterface,
    /// Arriving on an interface whose name starts with `podInterfaceNamePrefix`.
    InterfaceNamePrefix,
}

/// Which upstream proxier's behaviour to follow where kube-proxy's modes differ
/// (`mode`: iptables, the default, or nftables; see docs/migration.md for what differs
/// and what we keep in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum Proxier {
    /// kube-proxy's iptables (and ipvs) mode: localhost NodePorts
    /// (`iptables.localhostNodePorts`), forwarded packets conntrack finds INVALID dropped.
    Iptables,
    /// kube-proxy's nftables mode.
    #[default]
    Nftables,
}

/// Compiler settings. Field names follow KubeProxyConfiguration where one exists.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Config {
    /// `kind` of the fixture document; ignored.
    #[serde(rename = "kind")]
    pub kind: Option<String>,
    /// This node's name (hostnameOverride); selects local endpoints.
    pub node_name: String,
    /// Families to program (`IPv4`, `IPv6`); a table is produced for each.
    pub families: Vec<String>,
    pub masquerade_all: bool,
    /// The bit of the packet mark that requests masquerading (`nftables.masqueradeBit`).
    pub masquerade_bit: u8,
    pub detect_local_mode: DetectLocalMode,
    /// `clusterCIDR`: every CIDR of a family marks local pods of that family.
    #[serde(rename = "clusterCIDRs")]
    pub cluster_cidrs: Vec<String>,
    pub pod_bridge_interface: String,
    pub pod_interface_name_prefix: String,
    /// CIDRs and/or `primary`; empty means `primary`. A CIDR covering its whole family
    /// (`0.0.0.0/0`, `::/0`) means every local address (`fib daddr type local`).
    pub node_port_addresses: Vec<String>,
    /// The host's interface addresses (from the daemon): NodePort addresses when
    /// nodePortAddresses lists CIDRs, and what the tracer takes as local.
    pub local_addresses: Vec<String>,
    /// Service CIDRs: traffic to an unallocated address in them is dropped.
    #[serde(rename = "serviceCIDRs")]
    pub service_cidrs: Vec<String>,
    /// The mode whose behaviour to follow where kube-proxy's modes differ.
    pub proxier: Proxier,
    /// `iptables.localhostNodePorts` (iptables proxier only): NodePorts on 127.0.0.1 when
    /// nodePortAddresses holds IPv4 loopback (the daemon sets `route_localnet`).
    pub localhost_node_ports: bool,
    /// `net.netfilter.nf_conntrack_tcp_be_liberal` is set: the iptables proxier then
    /// does not drop forwarded packets conntrack finds INVALID.
    pub conntrack_tcp_be_liberal: bool,
    /// The `KubeProxyNFTablesLocalhostNodePorts` feature gate (nftables proxier only;
    /// the daemon takes it from `featureGates`, on by default in 1.38): localhost
    /// NodePorts of UDP and SCTP (and TCP where no proxy serves them) are rejected and
    /// counted ([`ParsedConfig::localhost_rejects`]).
    #[serde(rename = "nftablesLocalhostNodePorts")]
    pub nftables_localhost_node_ports: bool,
    /// The host's `net.ipv4.conf.all.route_localnet` is 1 (set by another program, or by
    /// iptables mode before a move to nftables mode; the daemon reads it): the kernel
    /// then routes packets to 127.0.0.0/8 from other hosts, and the table drops them as
    /// kube-proxy's `KUBE-FIREWALL` rule does (CVE-2020-8558), whatever the mode.
    #[serde(rename = "routeLocalnet")]
    pub route_localnet: bool,
    /// The `AllowServiceExternalIPs` feature gate (KEP-5707; on by default): off, a
    /// Service's `spec.externalIPs` are not programmed at all.
    #[serde(rename = "allowExternalIPs")]
    pub allow_external_ips: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            kind: None,
            node_name: String::new(),
            families: vec!["IPv4".into(), "IPv6".into()],
            masquerade_all: false,
            masquerade_bit: 14,
            detect_local_mode: DetectLocalMode::ClusterCIDR,
            cluster_cidrs: Vec::new(),
            pod_bridge_interface: String::new(),
            pod_interface_name_prefix: String::new(),
            node_port_addresses: Vec::new(),
            local_addresses: Vec::new(),
            service_cidrs: Vec::new(),
            proxier: Proxier::Nftables,
            localhost_node_ports: false,
            conntrack_tcp_be_liberal: false,
            nftables_localhost_node_ports: false,
            route_localnet: false,
            allow_external_ips: true,
        }
    }
}

/// Where NodePorts are served, for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodePortAddrs {
    /// Every local address (`fib daddr type local`), loopback only with localhost
    /// NodePorts ([`ParsedConfig::localhost_node_ports_v4`]).
    AllLocal,
    /// These addresses (loopback ones only with localhost NodePorts).
    Addrs(Vec<IpAddr>),
}

/// [`Config`] checked and parsed: what the compiler and the engine take (typed, parsed
/// once at the edge; nothing downstream parses a string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedConfig {
    pub node_name: String,
    pub families: Vec<IpFamily>,
    pub masquerade_all: bool,
    pub masquerade_mark: u32,
    pub detect_local_mode: DetectLocalMode,
    pub cluster_cidrs: Vec<Cidr>,
    pub pod_bridge_interface: String,
    pub pod_interface_name_prefix: String,
    pub node_port_primary: bool,
    pub node_port_cidrs: Vec<Cidr>,
    pub local_addresses: Vec<IpAddr>,
    pub service_cidrs: Vec<Cidr>,
    pub proxier: Proxier,
    pub localhost_node_ports: bool,
    pub conntrack_tcp_be_liberal: bool,
    /// `KubeProxyNFTablesLocalhostNodePorts` (see [`Config`]).
    pub nftables_localhost_node_ports: bool,
    /// The host's `route_localnet` is 1 (see [`Config`]).
    pub route_localnet: bool,
    /// `AllowServiceExternalIPs`: program `spec.externalIPs` (see [`Config`]).
    pub allow_external_ips: bool,
}

fn bad(field: &str, value: &str, reason: &str) -> RulesetError {
    RulesetError::Config {
        field: field.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

impl Config {
    /// Check and parse. Errors name the field and the value.
    pub fn parse(&self) -> Result<ParsedConfig, RulesetError> {
        let mut families = Vec::new();
        for f in &self.families {
            let fam =
                IpFamily::from_k8s_name(f).ok_or_else(|| bad("families", f, "not IPv4 or IPv6"))?;
            if !families.contains(&fam) {
                families.push(fam);
            }
        }
        families.sort();
        if self.masquerade_bit > 31 {
            return Err(bad(
                "masqueradeBit",
                &self.masquerade_bit.to_string(),
                "not in 0..=31",
            ));
        }
        let cidrs = |field: &str, v: &[String]| -> Result<Vec<Cidr>, RulesetError> {
            v.iter()
                .map(|s| parse_cidr_sloppy(s).ok_or_else(|| bad(field, s, "not a cidr")))
                .collect()
        };
        let cluster_cidrs = cidrs("clusterCIDRs", &self.cluster_cidrs)?;
        let service_cidrs = cidrs("serviceCIDRs", &self.service_cidrs)?;
        let mut node_port_primary = self.node_port_addresses.is_empty();
        let mut node_port_cidrs = Vec::new();
        for s in &self.node_port_addresses {
            if s.trim() == "primary" {
                node_port_primary = true;
            } else {
                node_port_cidrs.push(
                    parse_cidr_sloppy(s)
                        .ok_or_else(|| bad("nodePortAddresses", s, "not a cidr or primary"))?,
                );
            }
        }
        let local_addresses = self
            .local_addresses
            .iter()
            .map(|s| {
                parse_ip_sloppy(s).ok_or_else(|| bad("localAddresses", s, "not an ip address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let check_ifname = |field: &str, v: &str| -> Result<(), RulesetError> {
            if v.len() > 15
                || v.chars()
                    .any(|c| c == '"' || c == '\\' || c.is_whitespace() || c.is_control())
            {
                return Err(bad(field, v, "not an interface name"));
            }
            Ok(())
        };
        check_ifname("podBridgeInterface", &self.pod_bridge_interface)?;
        check_ifname("podInterfaceNamePrefix", &self.pod_interface_name_prefix)?;
        Ok(ParsedConfig {
            node_name: self.node_name.clone(),
            families,
            masquerade_all: self.masquerade_all,
            masquerade_mark: 1u32 << self.masquerade_bit,
            detect_local_mode: self.detect_local_mode,
            cluster_cidrs,
            pod_bridge_interface: self.pod_bridge_interface.clone(),
            pod_interface_name_prefix: self.pod_interface_name_prefix.clone(),
            node_port_primary,
            node_port_cidrs,
            local_addresses,
            service_cidrs,
            proxier: self.proxier,
            localhost_node_ports: self.localhost_node_ports,
            conntrack_tcp_be_liberal: self.conntrack_tcp_be_liberal,
            nftables_localhost_node_ports: self.nftables_localhost_node_ports,
            route_localnet: self.route_localnet,
            allow_external_ips: self.allow_external_ips,
        })
    }
}

impl Default for ParsedConfig {
    /// What [`Config::default`] parses to.
    fn default() -> ParsedConfig {
        ParsedConfig {
            node_name: String::new(),
            families: vec![IpFamily::V4, IpFamily::V6],
            masquerade_all: false,
            masquerade_mark: 1 << 14,
            detect_local_mode: DetectLocalMode::ClusterCIDR,
            cluster_cidrs: Vec::new(),
            pod_bridge_interface: String::new(),
            pod_interface_name_prefix: String::new(),
            node_port_primary: true,
            node_port_cidrs: Vec::new(),
            local_addresses: Vec::new(),
            service_cidrs: Vec::new(),
            proxier: Proxier::Nftables,
            localhost_node_ports: false,
            conntrack_tcp_be_liberal: false,
            nftables_localhost_node_ports: false,
            route_localnet: false,
            allow_external_ips: true,
        }
    }
}

impl ParsedConfig {
    /// Whether `other` differs from this configuration in the host's addresses or the
    /// service CIDRs at most (what the compiler takes without recompiling everything).
    pub fn same_but_addresses(&self, other: &ParsedConfig) -> bool {
        ParsedConfig {
            local_addresses: other.local_addresses.clone(),
            service_cidrs: other.service_cidrs.clone(),
            ..self.clone()
        } == *other
    }

    /// nodePortAddresses' CIDRs of `family`.
    fn node_port_cidrs_of(&self, family: IpFamily) -> impl Iterator<Item = &Cidr> {
        self.node_port_cidrs
            .iter()
            .filter(move |c| c.family() == family)
    }

    /// Where NodePorts are served in `family`, given the node's primary IPs (`None`:
    /// the Node is not known yet). As upstream's `NodePortAddresses` of the family, after
    /// `primary` became the node's (non-loopback) IPs: a family without a CIDR (none
    /// listed of it, or no node IP of it) is served on every local address.
    pub fn node_port_addrs(
        &self,
        family: IpFamily,
        primary_ips: Option<&[IpAddr]>,
    ) -> NodePortAddrs {
        let cidrs: Vec<&Cidr> = self.node_port_cidrs_of(family).collect();
        if cidrs.iter().any(|c| c.is_all()) {
            return NodePortAddrs::AllLocal;
        }
        let mut out: Vec<IpAddr> = Vec::new();
        let mut listed = !cidrs.is_empty();
        if self.node_port_primary {
            match primary_ips {
                // nothing from `primary` until the Node arrives
                None => listed = true,
                Some(p) => {
                    let mine = p
                        .iter()
                        .filter(|ip| IpFamily::of(ip) == family && !ip.is_loopback());
                    for ip in mine {
                        listed = true;
                        out.push(*ip);
                    }
                }
            }
        }
        if !listed {
            return NodePortAddrs::AllLocal;
        }
        for c in cidrs {
            out.extend(self.local_addresses.iter().filter(|ip| c.contains(ip)));
        }
        let localhost = family == IpFamily::V4 && self.localhost_node_ports_v4();
        out.retain(|ip| !ip.is_loopback() || localhost);
        out.sort();
        out.dedup();
        NodePortAddrs::Addrs(out)
    }

    /// Whether IPv4 NodePorts are served on loopback (127.0.0.1), as the iptables
    /// proxier does (`pkg/proxy/iptables/proxier.go`): with `localhostNodePorts`, when
    /// nodePortAddresses' IPv4 part holds a loopback address (none listed: every
    /// address). The daemon must then set `net.ipv4.conf.all.route_localnet=1`; the
    /// table drops packets to 127.0.0.0/8 from elsewhere that are not DNATed
    /// (CVE-2020-8558). Never in the nftables proxier's mode, whose localhost NodePorts
    /// are a userspace proxy, not rules. `primary` never counts as loopback (a node
    /// without an IPv4 address is the one case where upstream would differ).
    pub fn localhost_node_ports_v4(&self) -> bool {
        if self.proxier != Proxier::Iptables
            || !self.localhost_node_ports
            || !self.families.contains(&IpFamily::V4)
        {
            return false;
        }
        let loopback = std::net::Ipv4Addr::new(127, 0, 0, 0).into();
        let mut cidrs = self.node_port_cidrs_of(IpFamily::V4).peekable();
        if cidrs.peek().is_none() {
            return !self.node_port_primary;
        }
        cidrs.any(|c| c.addr.is_loopback() || c.contains(&loopback))
    }

    /// Whether `family`'s TCP NodePorts are served on loopback by nftables mode's
    /// userspace proxy: the gate on and a CIDR of the family in nodePortAddresses whose
    /// network address is loopback (upstream's `ContainsExplicitLoopback`: `localhost`,
    /// `127.0.0.1/32`, `::1/128`; never `0.0.0.0/0`).
    pub fn localhost_proxy(&self, family: IpFamily) -> bool {
        self.proxier == Proxier::Nftables
            && self.nftables_localhost_node_ports
            && self
                .node_port_cidrs_of(family)
                .any(|c| c.addr.is_loopback())
    }

    /// The protocols (IANA numbers, in UDP, SCTP, TCP order) whose NodePorts `family`'s
    /// table rejects on loopback, counting them in a named counter per protocol, as
    /// kube-proxy's nftables proxier with `KubeProxyNFTablesLocalhostNodePorts` (KEP-6032):
    /// UDP and SCTP always (the proxy serves TCP only), TCP when no proxy serves the
    /// family (see decision 0010 for what is read from upstream and what inferred).
    pub fn localhost_rejects(&self, family: IpFamily) -> Vec<u8> {
        if self.proxier != Proxier::Nftables
            || !self.nftables_localhost_node_ports
            || !self.families.contains(&family)
        {
            return Vec::new();
        }
        let mut out = vec![17, 132];
        if !self.localhost_proxy(family) {
            out.push(6);
        }
        out
    }

    /// Whether forwarded packets that conntrack finds INVALID are dropped, as the
    /// iptables proxier's `KUBE-FORWARD` chain does (kubernetes issues #74839, #117924)
    /// unless `nf_conntrack_tcp_be_liberal` is set.
    pub fn drops_invalid_forwarded(&self) -> bool {
        self.proxier == Proxier::Iptables && !self.conntrack_tcp_be_liberal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_parses_to_the_default_parsed_config() {
        assert_eq!(Config::default().parse(), Ok(ParsedConfig::default()));
    }

    fn parsed(node_port_addresses: &[&str]) -> ParsedConfig {
        Config {
            node_port_addresses: node_port_addresses.iter().map(|s| s.to_string()).collect(),
            local_addresses: [
                "198.18.50.1",
                "198.18.10.1",
                "2001:db8:50::1",
                "127.0.0.1",
                "::1",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            ..Config::default()
        }
        .parse()
        .unwrap()
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    /// As upstream's `NewNodePortAddresses(family, cidrs)`: CIDRs of one family only
    /// leave the other family on every address; `primary` is the node's IPs, and a
    /// family the node has no IP of is served on every address.
    #[test]
    fn node_port_addresses_of_one_family_leave_the_other_on_every_address() {
        let c = parsed(&["198.18.50.0/24"]);
        assert_eq!(
            c.node_port_addrs(IpFamily::V4, None),
            NodePortAddrs::Addrs(ips(&["198.18.50.1"]))
        );
        assert_eq!(
            c.node_port_addrs(IpFamily::V6, None),
            NodePortAddrs::AllLocal
        );
        let c = parsed(&["2001:db8:50::/64"]);
        assert_eq!(
            c.node_port_addrs(IpFamily::V4, None),
            NodePortAddrs::AllLocal
        );
        assert_eq!(
            c.node_port_addrs(IpFamily::V6, None),
            NodePortAddrs::Addrs(ips(&["2001:db8:50::1"]))
        );
        let c = parsed(&["primary"]);
        let v4_only = ips(&["198.18.50.1"]);
        assert_eq!(
            c.node_port_addrs(IpFamily::V4, Some(&v4_only)),
            NodePortAddrs::Addrs(v4_only.clone())
        );
        assert_eq!(
            c.node_port_addrs(IpFamily::V6, Some(&v4_only)),
            NodePortAddrs::AllLocal
        );
        // the Node not known yet: nothing
        assert_eq!(
            c.node_port_addrs(IpFamily::V6, None),
            NodePortAddrs::Addrs(vec![])
        );
        // both families listed: each on its own addresses
        let c = parsed(&["198.18.50.0/24", "2001:db8:50::/64"]);
        assert_eq!(
            c.node_port_addrs(IpFamily::V6, None),
            NodePortAddrs::Addrs(ips(&["2001:db8:50::1"]))
        );
    }
}
