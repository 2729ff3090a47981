//! `kubeproxy.config.k8s.io/v1alpha1` KubeProxyConfiguration: the versioned schema as
//! upstream declares it (`staging/src/k8s.io/kube-proxy/config/v1alpha1/types.go`), read
//! the way upstream reads it (Go JSON rules over YAML: `null` leaves a field at its zero
//! value, a `null` pointer is nil; unknown fields are collected by path for the lenient
//! decoder's warning), and defaulted as `pkg/proxy/apis/config/v1alpha1/defaults.go` does.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::duration::GoDuration;

pub const GROUP_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

/// Go's JSON decoding of `null` into a non-pointer field: no change (the zero value).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    #[serde(default, deserialize_with = "nullable")]
    pub api_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub feature_gates: BTreeMap<String, bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub client_connection: ClientConnection,
    #[serde(default, deserialize_with = "nullable")]
    pub logging: Logging,
    #[serde(default, deserialize_with = "nullable")]
    pub hostname_override: String,
    #[serde(default, deserialize_with = "nullable")]
    pub bind_address: String,
    #[serde(default, deserialize_with = "nullable")]
    pub healthz_bind_address: String,
    #[serde(default, deserialize_with = "nullable")]
    pub metrics_bind_address: String,
    #[serde(default, deserialize_with = "nullable")]
    pub bind_address_hard_fail: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub enable_profiling: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub show_hidden_metrics_for_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub mode: String,
    #[serde(default, deserialize_with = "nullable")]
    pub iptables: IPTables,
    #[serde(default, deserialize_with = "nullable")]
    pub ipvs: Ipvs,
    #[serde(default, deserialize_with = "nullable")]
    pub nftables: NFTables,
    #[serde(default, deserialize_with = "nullable")]
    pub winkernel: Winkernel,
    #[serde(default, deserialize_with = "nullable")]
    pub detect_local_mode: String,
    #[serde(default, deserialize_with = "nullable")]
    pub detect_local: DetectLocal,
    #[serde(rename = "clusterCIDR", default, deserialize_with = "nullable")]
    pub cluster_cidr: String,
    #[serde(default)]
    pub node_port_addresses: Option<Vec<String>>,
    #[serde(default)]
    pub oom_score_adj: Option<i32>,
    #[serde(default, deserialize_with = "nullable")]
    pub conntrack: Conntrack,
    #[serde(default)]
    pub config_sync_period: GoDuration,
    #[serde(default, deserialize_with = "nullable")]
    pub port_range: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "is_false"
    )]
    pub windows_run_as_service: bool,
}

/// `clientConnection` (component-base's ClientConnectionConfiguration).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConnection {
    #[serde(default, deserialize_with = "nullable")]
    pub kubeconfig: String,
    #[serde(default, deserialize_with = "nullable")]
    pub accept_content_types: String,
    #[serde(default, deserialize_with = "nullable")]
    pub content_type: String,
    #[serde(default, deserialize_with = "nullable", serialize_with = "go_f32")]
    pub qps: f32,
    #[serde(default, deserialize_with = "nullable")]
    pub burst: i32,
}

/// A float32 as Go's JSON encoder writes it (shortest form at 32-bit precision).
fn go_f32<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    let shortest: f64 = v.to_string().parse().unwrap_or(f64::from(*v));
    s.serialize_f64(shortest)
}

/// `logging` (component-base's LoggingConfiguration). `options` and `vmodule` are kept as
/// written; only `format`, `verbosity` and `flushFrequency` mean something here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Logging {
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub format: String,
    #[serde(default, deserialize_with = "nullable")]
    pub flush_frequency: FlushFrequency,
    #[serde(default, deserialize_with = "nullable")]
    pub verbosity: u32,
    #[serde(default, skip_serializing_if = "is_empty_value")]
    pub vmodule: Value,
    #[serde(default, skip_serializing_if = "is_empty_value")]
    pub options: Value,
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `flushFrequency`: nanoseconds as a number, or a duration string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FlushFrequency {
    Nanos(i64),
    Text(GoDuration),
}

impl Default for FlushFrequency {
    fn default() -> Self {
        FlushFrequency::Nanos(0)
    }
}

impl FlushFrequency {
    pub fn is_zero(&self) -> bool {
        match self {
            FlushFrequency::Nanos(n) => *n == 0,
            FlushFrequency::Text(d) => d.is_zero(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IPTables {
    #[serde(default)]
    pub masquerade_bit: Option<i32>,
    #[serde(default, deserialize_with = "nullable")]
    pub masquerade_all: bool,
    #[serde(default)]
    pub localhost_node_ports: Option<bool>,
    #[serde(default)]
    pub sync_period: GoDuration,
    #[serde(default)]
    pub min_sync_period: GoDuration,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipvs {
    #[serde(default)]
    pub sync_period: GoDuration,
    #[serde(default)]
    pub min_sync_period: GoDuration,
    #[serde(default, deserialize_with = "nullable")]
    pub scheduler: String,
    #[serde(rename = "excludeCIDRs", default)]
    pub exclude_cidrs: Option<Vec<String>>,
    #[serde(rename = "strictARP", default, deserialize_with = "nullable")]
    pub strict_arp: bool,
    #[serde(default)]
    pub tcp_timeout: GoDuration,
    #[serde(default)]
    pub tcp_fin_timeout: GoDuration,
    #[serde(default)]
    pub udp_timeout: GoDuration,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NFTables {
    #[serde(default)]
    pub masquerade_bit: Option<i32>,
    #[serde(default, deserialize_with = "nullable")]
    pub masquerade_all: bool,
    #[serde(default)]
    pub sync_period: GoDuration,
    #[serde(default)]
    pub min_sync_period: GoDuration,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Winkernel {
    #[serde(default, deserialize_with = "nullable")]
    pub network_name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub source_vip: String,
    #[serde(rename = "enableDSR", default, deserialize_with = "nullable")]
    pub enable_dsr: bool,
    #[serde(default, deserialize_with = "nullable")]
    pub root_hns_endpoint_name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub forward_health_check_vip: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DetectLocal {
    #[serde(default, deserialize_with = "nullable")]
    pub bridge_interface: String,
    #[serde(default, deserialize_with = "nullable")]
    pub interface_name_prefix: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conntrack {
    #[serde(default)]
    pub max_per_core: Option<i32>,
    #[serde(default)]
    pub min: Option<i32>,
    #[serde(default)]
    pub tcp_established_timeout: Option<GoDuration>,
    #[serde(default)]
    pub tcp_close_wait_timeout: Option<GoDuration>,
    #[serde(default, deserialize_with = "nullable")]
    pub tcp_be_liberal: bool,
    #[serde(default)]
    pub udp_timeout: GoDuration,
    #[serde(default)]
    pub udp_stream_timeout: GoDuration,
}

/// A configuration decoded leniently: the object, and the paths of the fields the
/// schema does not have (`udpIdleTimeout`, `nftables.foo`), in document order.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub config: KubeProxyConfiguration,
    pub unknown: Vec<String>,
}

/// Why a document is not a KubeProxyConfiguration.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Syntax(String),
    #[error("Object 'Kind' is missing in the document")]
    MissingKind,
    #[error("no kind {kind:?} is registered for version {version:?}")]
    NotRegistered { kind: String, version: String },
}

fn path_text(p: &serde_ignored::Path) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", path_text(parent)),
        Path::Map { parent, key } => {
            let head = path_text(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => path_text(parent),
    }
}

/// Decode a YAML or JSON document. Unknown fields are collected, never fatal (upstream
/// falls back to its lenient decoder for v1alpha1); a wrong kind or group/version, or a
/// value of the wrong type, is an error.
pub fn decode(text: &str) -> Result<Decoded, DecodeError> {
    let value: Value = kube_model::manifest::single_document(text)
        .map_err(|e| DecodeError::Syntax(e.to_string()))?;
    let (kind, version) = match &value {
        Value::Object(m) => (
            m.get("kind").and_then(Value::as_str).unwrap_or_default(),
            m.get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
        _ => ("", ""),
    };
    if kind.is_empty() {
        return Err(DecodeError::MissingKind);
    }
    if kind != KIND || version != GROUP_VERSION {
        return Err(DecodeError::NotRegistered {
            kind: kind.to_string(),
            version: version.to_string(),
        });
    }
    let mut unknown = Vec::new();
    let config: KubeProxyConfiguration =
        serde_ignored::deserialize(value, |p| unknown.push(path_text(&p)))
            .map_err(|e| DecodeError::Syntax(e.to_string()))?;
    Ok(Decoded { config, unknown })
}

impl KubeProxyConfiguration {
    /// Upstream's `SetDefaults_KubeProxyConfiguration`: zero, empty and nil fields get
    /// their defaults; addresses without a port get the default port.
    pub fn set_defaults(&mut self) {
        if self.bind_address.is_empty() {
            self.bind_address = "0.0.0.0".into();
        }
        let v4 = crate::config::parse_ip_sloppy(&self.bind_address).is_some_and(|ip| {
            ip.is_ipv4() || matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
        });
        let (healthz_host, metrics_host) = if v4 {
            ("0.0.0.0", "127.0.0.1")
        } else {
            ("[::]", "[::1]")
        };
        if self.healthz_bind_address.is_empty() {
            self.healthz_bind_address = format!("{healthz_host}:{HEALTHZ_PORT}");
        } else {
            self.healthz_bind_address =
                append_port_if_needed(&self.healthz_bind_address, HEALTHZ_PORT);
        }
        if self.metrics_bind_address.is_empty() {
            self.metrics_bind_address = format!("{metrics_host}:{METRICS_PORT}");
        } else {
            self.metrics_bind_address =
                append_port_if_needed(&self.metrics_bind_address, METRICS_PORT);
        }
        self.oom_score_adj.get_or_insert(-999);
        if self.iptables.sync_period.is_zero() {
            self.iptables.sync_period = GoDuration::secs(30);
        }
        if self.iptables.min_sync_period.is_zero() {
            self.iptables.min_sync_period = GoDuration::secs(1);
        }
        self.iptables.localhost_node_ports.get_or_insert(true);
        if self.ipvs.sync_period.is_zero() {
            self.ipvs.sync_period = GoDuration::secs(30);
        }
        if self.nftables.sync_period.is_zero() {
            self.nftables.sync_period = GoDuration::secs(30);
        }
        if self.nftables.min_sync_period.is_zero() {
            self.nftables.min_sync_period = GoDuration::secs(1);
        }
        self.conntrack.max_per_core.get_or_insert(32 * 1024);
        self.conntrack.min.get_or_insert(128 * 1024);
        self.iptables.masquerade_bit.get_or_insert(14);
        self.nftables.masquerade_bit.get_or_insert(14);
        self.conntrack
            .tcp_established_timeout
            .get_or_insert(GoDuration::secs(24 * 3600));
        self.conntrack
            .tcp_close_wait_timeout
            .get_or_insert(GoDuration::secs(3600));
        if self.config_sync_period.is_zero() {
            self.config_sync_period = GoDuration::secs(15 * 60);
        }
        if self.client_connection.content_type.is_empty() {
            self.client_connection.content_type = "application/vnd.kubernetes.protobuf".into();
        }
        if self.client_connection.qps == 0.0 {
            self.client_connection.qps = 5.0;
        }
        if self.client_connection.burst == 0 {
            self.client_connection.burst = 10;
        }
        self.logging.set_recommended();
    }
}

impl Logging {
    /// component-base's `SetRecommendedLoggingConfiguration`.
    pub fn set_recommended(&mut self) {
        if self.format.is_empty() {
            self.format = "text".into();
        }
        if self.flush_frequency.is_zero() {
            self.flush_frequency = FlushFrequency::Text(GoDuration::secs(5));
        }
        if !self.options.is_object() {
            self.options = Value::Object(Default::default());
        }
        if let Value::Object(o) = &mut self.options {
            for format in ["json", "text"] {
                let f = o
                    .entry(format)
                    .or_insert_with(|| Value::Object(Default::default()));
                if !f.is_object() {
                    *f = Value::Object(Default::default());
                }
                if let Value::Object(f) = f {
                    let size = f.entry("infoBufferSize").or_insert(Value::Null);
                    if size.is_null() || size.as_str() == Some("") {
                        *size = Value::String("0".into());
                    }
                }
            }
        }
    }
}

/// kube-proxy's default ports (`pkg/cluster/ports`).
pub const HEALTHZ_PORT: u16 = 10256;
pub const METRICS_PORT: u16 = 10249;

/// Upstream's `AppendPortIfNeeded`: an IP without a port gets `port` (`[v6]:port`);
/// anything else is returned as it is, for validation to judge.
pub fn append_port_if_needed(addr: &str, port: u16) -> String {
    if crate::config::split_host_port(addr).is_ok() {
        return addr.to_string();
    }
    match crate::config::parse_ip_sloppy(addr) {
        Some(std::net::IpAddr::V4(_)) => format!("{addr}:{port}"),
        // Go's `To4()` is also true for an IPv4-mapped IPv6 address
        Some(std::net::IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => format!("{addr}:{port}"),
        Some(std::net::IpAddr::V6(_)) => format!("[{addr}]:{port}"),
        None => addr.to_string(),
    }
}
