//! The effective configuration, shaped as upstream's internal type
//! (`pkg/proxy/apis/config/types.go`): one sync period pair for the mode in use, the
//! Linux settings (conntrack, masqueradeAll, oomScoreAdj) in one place, cluster CIDRs
//! as a list. Converted from and to v1alpha1 exactly as
//! `pkg/proxy/apis/config/v1alpha1/conversion.go` does.

use std::collections::BTreeMap;

use crate::config::v1alpha1 as v1;
use crate::duration::GoDuration;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct KubeProxyConfig {
    pub feature_gates: BTreeMap<String, bool>,
    pub client_connection: v1::ClientConnection,
    pub logging: v1::Logging,
    pub hostname_override: String,
    pub bind_address: String,
    pub healthz_bind_address: String,
    pub metrics_bind_address: String,
    pub bind_address_hard_fail: bool,
    pub enable_profiling: bool,
    pub show_hidden_metrics_for_version: String,
    pub mode: String,
    pub iptables: IPTables,
    pub ipvs: Ipvs,
    pub nftables: NFTables,
    pub winkernel: v1::Winkernel,
    pub detect_local_mode: String,
    pub detect_local: DetectLocal,
    pub node_port_addresses: Option<Vec<String>>,
    pub sync_period: GoDuration,
    pub min_sync_period: GoDuration,
    pub config_sync_period: GoDuration,
    pub linux: Linux,
    pub port_range: String,
    pub windows_run_as_service: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct IPTables {
    pub masquerade_bit: Option<i32>,
    pub localhost_node_ports: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ipvs {
    pub scheduler: String,
    pub exclude_cidrs: Option<Vec<String>>,
    pub strict_arp: bool,
    pub tcp_timeout: GoDuration,
    pub tcp_fin_timeout: GoDuration,
    pub udp_timeout: GoDuration,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct NFTables {
    pub masquerade_bit: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct DetectLocal {
    pub bridge_interface: String,
    pub interface_name_prefix: String,
    pub cluster_cidrs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Linux {
    pub conntrack: v1::Conntrack,
    pub masquerade_all: bool,
    pub oom_score_adj: Option<i32>,
}

pub const MODE_IPTABLES: &str = "iptables";
pub const MODE_IPVS: &str = "ipvs";
pub const MODE_NFTABLES: &str = "nftables";

impl KubeProxyConfig {
    /// Upstream's `newKubeProxyConfiguration`: a defaulted empty v1alpha1 object,
    /// converted (what the flags are applied to when no `--config` is given).
    pub fn defaulted() -> KubeProxyConfig {
        let mut v = v1::KubeProxyConfiguration::default();
        v.set_defaults();
        KubeProxyConfig::from_v1alpha1(v)
    }

    /// v1alpha1 -> internal (`Convert_v1alpha1_KubeProxyConfiguration_To_config_...`).
    pub fn from_v1alpha1(v: v1::KubeProxyConfiguration) -> KubeProxyConfig {
        let (sync_period, min_sync_period) = match v.mode.as_str() {
            MODE_IPVS => (v.ipvs.sync_period, v.ipvs.min_sync_period),
            MODE_NFTABLES => (v.nftables.sync_period, v.nftables.min_sync_period),
            _ => (v.iptables.sync_period, v.iptables.min_sync_period),
        };
        let masquerade_all = match v.mode.as_str() {
            MODE_NFTABLES => v.nftables.masquerade_all,
            _ => v.iptables.masquerade_all,
        };
        let cluster_cidrs = if v.cluster_cidr.is_empty() {
            Vec::new()
        } else {
            v.cluster_cidr.split(',').map(String::from).collect()
        };
        KubeProxyConfig {
            feature_gates: v.feature_gates,
            client_connection: v.client_connection,
            logging: v.logging,
            hostname_override: v.hostname_override,
            bind_address: v.bind_address,
            healthz_bind_address: v.healthz_bind_address,
            metrics_bind_address: v.metrics_bind_address,
            bind_address_hard_fail: v.bind_address_hard_fail,
            enable_profiling: v.enable_profiling,
            show_hidden_metrics_for_version: v.show_hidden_metrics_for_version,
            mode: v.mode,
            iptables: IPTables {
                masquerade_bit: v.iptables.masquerade_bit,
                localhost_node_ports: v.iptables.localhost_node_ports,
            },
            ipvs: Ipvs {
                scheduler: v.ipvs.scheduler,
                exclude_cidrs: v.ipvs.exclude_cidrs,
                strict_arp: v.ipvs.strict_arp,
                tcp_timeout: v.ipvs.tcp_timeout,
                tcp_fin_timeout: v.ipvs.tcp_fin_timeout,
                udp_timeout: v.ipvs.udp_timeout,
            },
            nftables: NFTables {
                masquerade_bit: v.nftables.masquerade_bit,
            },
            winkernel: v.winkernel,
            detect_local_mode: v.detect_local_mode,
            detect_local: DetectLocal {
                bridge_interface: v.detect_local.bridge_interface,
                interface_name_prefix: v.detect_local.interface_name_prefix,
                cluster_cidrs,
            },
            node_port_addresses: v.node_port_addresses,
            sync_period,
            min_sync_period,
            config_sync_period: v.config_sync_period,
            linux: Linux {
                conntrack: v.conntrack,
                masquerade_all,
                oom_score_adj: v.oom_score_adj,
            },
            port_range: v.port_range,
            windows_run_as_service: v.windows_run_as_service,
        }
    }

    /// internal -> v1alpha1 (`Convert_config_KubeProxyConfiguration_To_v1alpha1_...`),
    /// what `--write-config-to` writes. The sections of other modes get zero periods.
    pub fn to_v1alpha1(&self) -> v1::KubeProxyConfiguration {
        let c = self.clone();
        let mut out = v1::KubeProxyConfiguration {
            api_version: v1::GROUP_VERSION.into(),
            kind: v1::KIND.into(),
            feature_gates: c.feature_gates,
            client_connection: c.client_connection,
            logging: c.logging,
            hostname_override: c.hostname_override,
            bind_address: c.bind_address,
            healthz_bind_address: c.healthz_bind_address,
            metrics_bind_address: c.metrics_bind_address,
            bind_address_hard_fail: c.bind_address_hard_fail,
            enable_profiling: c.enable_profiling,
            show_hidden_metrics_for_version: c.show_hidden_metrics_for_version,
            mode: c.mode.clone(),
            iptables: v1::IPTables {
                masquerade_bit: c.iptables.masquerade_bit,
                localhost_node_ports: c.iptables.localhost_node_ports,
                ..Default::default()
            },
            ipvs: v1::Ipvs {
                scheduler: c.ipvs.scheduler,
                exclude_cidrs: c.ipvs.exclude_cidrs,
                strict_arp: c.ipvs.strict_arp,
                tcp_timeout: c.ipvs.tcp_timeout,
                tcp_fin_timeout: c.ipvs.tcp_fin_timeout,
                udp_timeout: c.ipvs.udp_timeout,
                ..Default::default()
            },
            nftables: v1::NFTables {
                masquerade_bit: c.nftables.masquerade_bit,
                ..Default::default()
            },
            winkernel: c.winkernel,
            detect_local_mode: c.detect_local_mode,
            detect_local: v1::DetectLocal {
                bridge_interface: c.detect_local.bridge_interface,
                interface_name_prefix: c.detect_local.interface_name_prefix,
            },
            cluster_cidr: c.detect_local.cluster_cidrs.join(","),
            node_port_addresses: c.node_port_addresses,
            oom_score_adj: c.linux.oom_score_adj,
            conntrack: c.linux.conntrack,
            config_sync_period: c.config_sync_period,
            port_range: c.port_range,
            windows_run_as_service: c.windows_run_as_service,
        };
        match c.mode.as_str() {
            MODE_NFTABLES => out.nftables.masquerade_all = c.linux.masquerade_all,
            _ => out.iptables.masquerade_all = c.linux.masquerade_all,
        }
        match c.mode.as_str() {
            MODE_IPVS => {
                out.ipvs.sync_period = c.sync_period;
                out.ipvs.min_sync_period = c.min_sync_period;
            }
            MODE_NFTABLES => {
                out.nftables.sync_period = c.sync_period;
                out.nftables.min_sync_period = c.min_sync_period;
            }
            _ => {
                out.iptables.sync_period = c.sync_period;
                out.iptables.min_sync_period = c.min_sync_period;
            }
        }
        out
    }

    /// Upstream's `platformApplyDefaults` (Linux): blank mode is iptables, nftables mode
    /// serves NodePorts on the primary IPs by default, blank detectLocalMode is
    /// ClusterCIDR.
    pub fn apply_platform_defaults(&mut self) {
        if self.mode.is_empty() {
            self.mode = MODE_IPTABLES.into();
        }
        if self.mode == MODE_NFTABLES && self.node_port_addresses.as_ref().is_none_or(Vec::is_empty)
        {
            self.node_port_addresses = Some(vec![NODE_PORT_ADDRESSES_PRIMARY.into()]);
        }
        if self.detect_local_mode.is_empty() {
            self.detect_local_mode = "ClusterCIDR".into();
        }
    }

    /// The masquerade bit of the mode in use (nftables mode reads its own section,
    /// iptables and ipvs modes the iptables one).
    pub fn masquerade_bit(&self) -> i32 {
        let bit = if self.mode == MODE_NFTABLES {
            self.nftables.masquerade_bit
        } else {
            self.iptables.masquerade_bit
        };
        bit.unwrap_or(14)
    }
}

/// The `nodePortAddresses` keyword for the node's primary IPs.
pub const NODE_PORT_ADDRESSES_PRIMARY: &str = "primary";
