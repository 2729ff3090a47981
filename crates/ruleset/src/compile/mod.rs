//! Internal model + node/config -> one `nft_model::Table` per family.
//!
//! The shape (see docs/ruleset.md): a fixed [`skeleton`] of chains and sets that depends
//! on the configuration, the node and the endpoint classes in use; every service port is
//! a [`fragment`]: elements of the skeleton's sets and maps, keyed by the destinations
//! it serves (session affinity adds a few per-port chains; its pins are one set of the
//! skeleton). A [`mirror`] holds the table as the sum of its fragments; [`compile`]
//! builds it from scratch, the incremental compiler ([`crate::incremental`]) keeps it up
//! to date.

pub mod affinity;
pub mod classes;
pub mod fragment;
pub mod mirror;
pub mod packed;
pub mod skeleton;

use std::net::IpAddr;

use kube_model::{IpFamily, Node};
use nft_model::build;
use nft_model::*;

use crate::config::{DetectLocalMode, NodePortAddrs, ParsedConfig};
use crate::rules::cidr_match;

pub fn nft_family(f: IpFamily) -> Family {
    match f {
        IpFamily::V4 => Family::Ip,
        IpFamily::V6 => Family::Ip6,
    }
}

/// What a family's tables depend on besides the services: the configuration and the node.
#[derive(Debug, Clone)]
pub struct Ctx<'a> {
    pub fam: IpFamily,
    pub family: Family,
    pub cfg: &'a ParsedConfig,
    pub node: Option<&'a Node>,
    /// This node's name (hostnameOverride, else the Node's): selects local endpoints.
    pub node_name: String,
    pub zone: Option<String>,
}

impl<'a> Ctx<'a> {
    pub fn new(fam: IpFamily, cfg: &'a ParsedConfig, node: Option<&'a Node>) -> Ctx<'a> {
        let node_name = if cfg.node_name.is_empty() {
            node.map(|n| n.name.clone()).unwrap_or_default()
        } else {
            cfg.node_name.clone()
        };
        Ctx {
            fam,
            family: nft_family(fam),
            cfg,
            node,
            node_name,
            zone: node.and_then(|n| n.zone.clone()),
        }
    }

    /// Where NodePorts are served.
    pub fn np_addrs(&self) -> NodePortAddrs {
        let primary: Option<&[IpAddr]> = self.node.map(|n| n.primary_ips.as_slice());
        self.cfg.node_port_addrs(self.fam, primary)
    }

    /// The protocols (numbers) whose NodePorts this table rejects on loopback (nftables
    /// mode's localhost NodePorts: [`ParsedConfig::localhost_rejects`]).
    pub fn localhost_rejects(&self) -> Vec<u8> {
        self.cfg.localhost_rejects(self.fam)
    }

    /// Whether this table serves NodePorts on loopback (IPv4, iptables mode).
    pub fn localhost_node_ports(&self) -> bool {
        self.fam == IpFamily::V4 && self.cfg.localhost_node_ports_v4()
    }

    /// The CIDRs local pods' addresses are in, when detection is by address: every
    /// clusterCIDR of the family, or the node's pod CIDR. `None` when one covers the whole
    /// family (every source is local: no detection).
    fn local_cidrs(&self) -> Option<Vec<kube_model::Cidr>> {
        let cidrs: Vec<kube_model::Cidr> = match self.cfg.detect_local_mode {
            DetectLocalMode::ClusterCIDR => self
                .cfg
                .cluster_cidrs
                .iter()
                .filter(|c| c.family() == self.fam)
                .copied()
                .collect(),
            DetectLocalMode::NodeCIDR => self.node?.pod_cidr(self.fam).into_iter().collect(),
            _ => return None,
        };
        // nested and duplicate prefixes once: a rule (or match) per outermost prefix
        let cidrs = kube_model::outermost(&cidrs);
        (!cidrs.is_empty() && !cidrs.iter().any(|c| c.is_all())).then_some(cidrs)
    }

    fn interface(&self) -> Option<(&str, bool)> {
        match self.cfg.detect_local_mode {
            DetectLocalMode::BridgeInterface => {
                Some((self.cfg.pod_bridge_interface.as_str(), false))
            }
            DetectLocalMode::InterfaceNamePrefix => {
                Some((self.cfg.pod_interface_name_prefix.as_str(), true))
            }
            _ => None,
        }
        .filter(|(n, _)| !n.is_empty())
    }

    /// Matches for traffic from local pods, one rule each (any of them matches).
    pub fn detector_local(&self) -> Vec<Vec<Expr>> {
        if let Some((name, prefix)) = self.interface() {
            return vec![build::iifname_cmp(name, prefix, false)];
        }
        self.local_cidrs()
            .unwrap_or_default()
            .iter()
            .map(|c| cidr_match(self.family, true, c, false))
            .collect()
    }

    /// One match for traffic not from local pods (from none of the local CIDRs), when a
    /// detector is configured for this family.
    pub fn detector_not_local(&self) -> Option<Vec<Expr>> {
        if let Some((name, prefix)) = self.interface() {
            return Some(build::iifname_cmp(name, prefix, true));
        }
        let cidrs = self.local_cidrs()?;
        Some(
            cidrs
                .iter()
                .flat_map(|c| cidr_match(self.family, true, c, true))
                .collect(),
        )
    }
}
