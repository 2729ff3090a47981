//! KubeProxyConfiguration (`kubeproxy.config.k8s.io/v1alpha1`) with upstream's defaults.
//!
//! Unknown fields are accepted (and reported once by [`KubeProxyConfiguration::load`]);
//! fields that do not apply to this proxier are read and ignored with a warning.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;

pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeProxyConfiguration {
    pub api_version: String,
    pub kind: String,
    pub feature_gates: BTreeMap<String, bool>,
    pub client_connection: ClientConnection,
    pub logging: Logging,
    pub hostname_override: String,
    pub bind_address: String,
    pub healthz_bind_address: String,
    pub metrics_bind_address: String,
    pub bind_address_hard_fail: bool,
    pub enable_profiling: bool,
    pub show_hidden_metrics_for_version: String,
    pub mode: String,
    pub iptables: ProxierSection,
    pub ipvs: serde_json::Value,
    pub nftables: ProxierSection,
    pub winkernel: serde_json::Value,
    pub windows: serde_json::Value,
    pub linux: Linux,
    /// Deprecated top-level form of `linux.conntrack` (older v1alpha1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<Conntrack>,
    /// Deprecated top-level form of `linux.oomScoreAdj`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    pub detect_local_mode: String,
    pub detect_local: DetectLocal,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: String,
    pub node_port_addresses: Vec<String>,
    pub config_sync_period: GoDuration,
    pub port_range: String,
    /// Fields this proxier does not know.
    #[serde(flatten, skip_serializing)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientConnection {
    pub kubeconfig: String,
    pub accept_content_types: String,
    pub content_type: String,
    pub qps: f32,
    pub burst: i32,
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection {
            kubeconfig: String::new(),
            accept_content_types: String::new(),
            content_type: "application/vnd.kubernetes.protobuf".into(),
            qps: 5.0,
            burst: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Logging {
    pub format: String,
    pub flush_frequency: serde_json::Value,
    pub verbosity: u32,
    pub options: serde_json::Value,
}

impl Default for Logging {
    fn default() -> Self {
        Logging {
            format: "text".into(),
            flush_frequency: serde_json::Value::String("5s".into()),
            verbosity: 0,
            options: serde_json::json!({}),
        }
    }
}

/// `iptables` and `nftables` sections (the same meaning in their modes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxierSection {
    pub masquerade_bit: Option<i32>,
    pub masquerade_all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localhost_node_ports: Option<bool>,
    pub sync_period: GoDuration,
    pub min_sync_period: GoDuration,
}

impl Default for ProxierSection {
    fn default() -> Self {
        ProxierSection {
            masquerade_bit: Some(14),
            masquerade_all: false,
            localhost_node_ports: None,
            sync_period: GoDuration::secs(30),
            min_sync_period: GoDuration::secs(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Linux {
    pub conntrack: Conntrack,
    pub masquerade_all: bool,
    pub oom_score_adj: Option<i32>,
}

impl Default for Linux {
    fn default() -> Self {
        Linux {
            conntrack: Conntrack::default(),
            masquerade_all: false,
            oom_score_adj: Some(-999),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Conntrack {
    pub max_per_core: Option<i32>,
    pub min: Option<i32>,
    pub tcp_established_timeout: Option<GoDuration>,
    pub tcp_close_wait_timeout: Option<GoDuration>,
    pub tcp_be_liberal: bool,
    pub udp_timeout: GoDuration,
    pub udp_stream_timeout: GoDuration,
}

impl Default for Conntrack {
    fn default() -> Self {
        Conntrack {
            max_per_core: Some(32768),
            min: Some(131072),
            tcp_established_timeout: Some(GoDuration::secs(86400)),
            tcp_close_wait_timeout: Some(GoDuration::secs(3600)),
            tcp_be_liberal: false,
            udp_timeout: GoDuration::default(),
            udp_stream_timeout: GoDuration::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DetectLocal {
    pub bridge_interface: String,
    pub interface_name_prefix: String,
    #[serde(rename = "clusterCIDRs")]
    pub cluster_cidrs: Vec<String>,
}

impl Default for KubeProxyConfiguration {
    fn default() -> Self {
        KubeProxyConfiguration {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            feature_gates: BTreeMap::new(),
            client_connection: ClientConnection::default(),
            logging: Logging::default(),
            hostname_override: String::new(),
            bind_address: "0.0.0.0".into(),
            healthz_bind_address: "0.0.0.0:10256".into(),
            metrics_bind_address: "127.0.0.1:10249".into(),
            bind_address_hard_fail: false,
            enable_profiling: false,
            show_hidden_metrics_for_version: String::new(),
            mode: String::new(),
            iptables: ProxierSection {
                localhost_node_ports: Some(true),
                ..ProxierSection::default()
            },
            ipvs: serde_json::json!({
                "syncPeriod": "30s", "minSyncPeriod": "0s", "scheduler": "",
                "excludeCIDRs": null, "strictARP": false, "tcpTimeout": "0s",
                "tcpFinTimeout": "0s", "udpTimeout": "0s"
            }),
            nftables: ProxierSection::default(),
            winkernel: serde_json::json!({}),
            windows: serde_json::json!({}),
            linux: Linux::default(),
            conntrack: None,
            oom_score_adj: None,
            detect_local_mode: String::new(),
            detect_local: DetectLocal::default(),
            cluster_cidr: String::new(),
            node_port_addresses: Vec::new(),
            config_sync_period: GoDuration::secs(15 * 60),
            port_range: String::new(),
            unknown: BTreeMap::new(),
        }
    }
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: String, reason: String },
}

impl KubeProxyConfiguration {
    /// Read a configuration file (YAML or JSON). Unknown fields are kept in
    /// [`KubeProxyConfiguration::unknown`] for the caller to warn about.
    pub fn load(path: &str) -> Result<KubeProxyConfiguration, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&text).map_err(|reason| ConfigError::Parse {
            path: path.into(),
            reason,
        })
    }

    pub fn parse(text: &str) -> Result<KubeProxyConfiguration, String> {
        let c: KubeProxyConfiguration = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if c.kind != KIND {
            return Err(format!("kind is {:?}, expected {KIND:?}", c.kind));
        }
        if c.api_version != API_VERSION {
            return Err(format!(
                "apiVersion is {:?}, expected {API_VERSION:?}",
                c.api_version
            ));
        }
        Ok(c)
    }

    /// The effective conntrack section (`linux.conntrack`, or the deprecated top-level one
    /// when only that was given).
    pub fn conntrack(&self) -> &Conntrack {
        match &self.conntrack {
            Some(c) if self.linux.conntrack == Conntrack::default() => c,
            _ => &self.linux.conntrack,
        }
    }

    /// As YAML, for `--write-config-to`.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_roundtrip_through_yaml() {
        let c = KubeProxyConfiguration::default();
        let text = c.to_yaml();
        let back = KubeProxyConfiguration::parse(&text).unwrap();
        assert_eq!(back, c);
        assert!(text.contains("healthzBindAddress: 0.0.0.0:10256"));
        assert!(text.contains("metricsBindAddress: 127.0.0.1:10249"));
    }

    #[test]
    fn partial_file_takes_defaults_and_keeps_unknown() {
        let c = KubeProxyConfiguration::parse(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
             mode: nftables\nnftables:\n  syncPeriod: 1m\nsomethingNew: 3\n",
        )
        .unwrap();
        assert_eq!(c.mode, "nftables");
        assert_eq!(c.nftables.sync_period, GoDuration::secs(60));
        assert_eq!(c.nftables.min_sync_period, GoDuration::secs(1));
        assert_eq!(c.nftables.masquerade_bit, Some(14));
        assert_eq!(c.linux.conntrack.max_per_core, Some(32768));
        assert!(c.unknown.contains_key("somethingNew"));
    }

    #[test]
    fn wrong_kind_is_refused() {
        assert!(KubeProxyConfiguration::parse("apiVersion: v1\nkind: Service\n").is_err());
    }
}
