//! The proxier settings the compiler needs (a subset of KubeProxyConfiguration, plus what
//! the daemon learns from the host).

use std::net::IpAddr;

use kube_model::{parse_cidr_sloppy, parse_ip_sloppy, Cidr, IpFamily};
use serde::Deserialize;

use crate::RulesetError;

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
        }
    }
}

/// Where NodePorts are served, for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodePortAddrs {
    /// Every local address except loopback (`fib daddr type local`).
    AllLocal,
    /// These addresses (never loopback).
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
        }
    }
}

impl ParsedConfig {
    /// Where NodePorts are served in `family`, given the node's primary IPs.
    pub fn node_port_addrs(&self, family: IpFamily, primary_ips: &[IpAddr]) -> NodePortAddrs {
        let cidrs: Vec<&Cidr> = self
            .node_port_cidrs
            .iter()
            .filter(|c| c.family() == family)
            .collect();
        if cidrs.iter().any(|c| c.is_all()) {
            return NodePortAddrs::AllLocal;
        }
        let mut out: Vec<IpAddr> = Vec::new();
        if self.node_port_primary {
            out.extend(primary_ips.iter().filter(|ip| IpFamily::of(ip) == family));
        }
        for c in cidrs {
            out.extend(self.local_addresses.iter().filter(|ip| c.contains(ip)));
        }
        out.retain(|ip| !ip.is_loopback());
        out.sort();
        out.dedup();
        NodePortAddrs::Addrs(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_parses_to_the_default_parsed_config() {
        assert_eq!(Config::default().parse(), Ok(ParsedConfig::default()));
    }
}
