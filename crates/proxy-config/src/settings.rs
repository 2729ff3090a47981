//! The effective configuration from `--config` and the flags, with upstream's precedence
//! (`Options.Complete` in `cmd/kube-proxy/app/options.go`):
//! - without `--config`, the flags are applied over the defaulted configuration;
//! - with `--config`, the file decides; only the logging flags, `--hostname-override`
//!   and `--master` still apply (each other configuration flag given is logged);
//!
//! then upstream's platform defaults, its validation, and the settings the daemon uses.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use ruleset::DetectLocalMode;

use crate::config::internal::{KubeProxyConfig, MODE_IPTABLES, MODE_IPVS, MODE_NFTABLES};
use crate::config::v1alpha1::{
    self as v1, append_port_if_needed, Conntrack, FlushFrequency, HEALTHZ_PORT, METRICS_PORT,
};
use crate::config::validate::{validate, ErrorList};
use crate::config::{self, ConfigError};
use crate::duration::GoDuration;
use crate::flags::Flags;
use crate::gates::{
    FeatureGates, ALLOW_SERVICE_EXTERNAL_IPS, KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS,
};
use crate::localhost;
use klog::go_quote;

/// Everything the daemon needs, derived from one effective configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The effective configuration, as `--write-config-to` writes it.
    pub config: KubeProxyConfig,
    pub node_name: String,
    /// The compiler's configuration, parsed here once (the host's addresses are filled in
    /// at start).
    pub ruleset: ruleset::ParsedConfig,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    pub conntrack: Conntrack,
    pub oom_score_adj: Option<i32>,
    pub kube: KubeSettings,
    pub json_logs: bool,
    pub verbosity: u32,
    /// `healthzBindAddress` / `metricsBindAddress`, completed (empty: disabled).
    pub healthz_bind_address: String,
    pub metrics_bind_address: String,
    /// `bindAddressHardFail`: a server that cannot bind ends the process.
    pub bind_address_hard_fail: bool,
    /// `bindAddress` when it names an address: the node's primary IP of its family.
    pub node_ip_override: Option<IpAddr>,
    /// The feature gates at kube-proxy 1.38's defaults, with `featureGates` applied.
    pub gates: FeatureGates,
    /// The families whose TCP NodePorts the userspace proxy serves on `127.0.0.1` /
    /// `::1` (nftables mode, the `KubeProxyNFTablesLocalhostNodePorts` gate, loopback in
    /// nodePortAddresses).
    pub localhost_proxy_families: Vec<kube_model::IpFamily>,
    /// What to log once at start (accepted-but-ignored options, notes).
    pub notices: Vec<Notice>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    pub kubeconfig: Option<String>,
    pub master: Option<String>,
    pub qps: f32,
    pub burst: i32,
    pub content_type: String,
}

/// One line to log at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Upstream's line when unknown fields made strict decoding fail (info).
    LenientDecoding { err: String },
    /// A configuration flag given together with `--config` (warning).
    FlagIgnoredWithConfig { flag: String },
    /// A flag without effect here (warning).
    FlagNoEffect {
        flag: String,
        value: String,
        reason: &'static str,
    },
    /// A configuration field set to something that has no effect here (warning).
    FieldNoEffect {
        field: String,
        value: String,
        reason: &'static str,
    },
    /// Informational (info).
    Note { msg: &'static str, detail: String },
    /// Upstream's `checkBadConfig` finding (logged as an error; the proxy goes on).
    IncompleteConfig { err: &'static str },
    /// component-base's warning for setting a deprecated or GA feature gate.
    FeatureGate { msg: String },
    /// ipvs mode (warning): deprecated upstream, and served here without IPVS.
    IpvsMode,
    /// detect-local-mode ClusterCIDR without a cluster CIDR (info, upstream's line): no
    /// traffic is told local by its source.
    NoClusterCidr,
}

/// kube-proxy's line (`getLocalDetectors`) when detect-local-mode is ClusterCIDR and no
/// cluster CIDR is given (logged once, here whatever the primary family: none is given).
pub const NO_CLUSTER_CIDR: &str =
    "Detect-local-mode set to ClusterCIDR, but no cluster CIDR specified for primary IP family";

/// Upstream's deprecation warning of ipvs mode (1.35, KEP-5495), and what kube-nlproxy
/// runs instead of an IPVS proxier.
pub const IPVS_MODE: &str = "The ipvs proxier is deprecated (Kubernetes 1.35; off by default \
from 1.40 through the KubeProxyIPVS feature gate, removed in 1.43): use nftables. \
kube-nlproxy has no IPVS proxier: in ipvs mode it programs its nftables rules with the \
iptables proxier's behaviour and the ipvs section's sync periods, creates no IPVS virtual \
service, no kube-ipvs0 link and no ipset (it removes kube-proxy's), and the IPVS-only \
settings (scheduler, strictARP, timeouts) have no effect";

impl std::fmt::Display for Notice {
    /// One line: the severity letter, the message, the key/values (for tests and docs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::LenientDecoding { err } => write!(
                f,
                "I Using lenient decoding as strict decoding failed err={}",
                go_quote(err)
            ),
            Notice::FlagIgnoredWithConfig { flag } => write!(
                f,
                "W Flag ignored because a configuration file is specified by --config flag={flag}"
            ),
            Notice::FlagNoEffect { flag, value, reason } => write!(
                f,
                "W Flag has no effect in kube-nlproxy flag={flag} value={} reason={}",
                go_quote(value),
                go_quote(reason)
            ),
            Notice::FieldNoEffect { field, value, reason } => write!(
                f,
                "W Configuration field has no effect in kube-nlproxy field={field} value={} reason={}",
                go_quote(value),
                go_quote(reason)
            ),
            Notice::Note { msg, detail } => write!(f, "I {msg} detail={}", go_quote(detail)),
            Notice::IncompleteConfig { err } => write!(
                f,
                "E Kube-proxy configuration may be incomplete or incorrect err={}",
                go_quote(err)
            ),
            Notice::FeatureGate { msg } => write!(f, "W {msg}"),
            Notice::IpvsMode => write!(f, "W {IPVS_MODE}"),
            Notice::NoClusterCidr => write!(f, "I {NO_CLUSTER_CIDR} clusterCIDRs=[]"),
        }
    }
}

impl Notice {
    /// Log it (start-up lines are at verbosity 0).
    pub fn log(&self) {
        use tracing::{info, warn};
        match self {
            Notice::LenientDecoding { err } => {
                info!(err = %err, "Using lenient decoding as strict decoding failed")
            }
            Notice::FlagIgnoredWithConfig { flag } => warn!(
                flag = %flag,
                "Flag ignored because a configuration file is specified by --config"
            ),
            Notice::FlagNoEffect {
                flag,
                value,
                reason,
            } => warn!(
                flag = %flag,
                value = %value,
                reason = %reason,
                "Flag has no effect in kube-nlproxy"
            ),
            Notice::FieldNoEffect {
                field,
                value,
                reason,
            } => warn!(
                field = %field,
                value = %value,
                reason = %reason,
                "Configuration field has no effect in kube-nlproxy"
            ),
            Notice::Note { msg, detail } => info!(detail = %detail, "{msg}"),
            Notice::IncompleteConfig { err } => tracing::error!(
                err = %err,
                "Kube-proxy configuration may be incomplete or incorrect"
            ),
            Notice::FeatureGate { msg } => warn!("{msg}"),
            Notice::IpvsMode => warn!("{IPVS_MODE}"),
            Notice::NoClusterCidr => info!(clusterCIDRs = "[]", "{NO_CLUSTER_CIDR}"),
        }
    }
}

/// Why the configuration was refused; printed as upstream prints it.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("failed complete: {0}")]
    Config(#[from] ConfigError),
    #[error("failed complete: empty hostname-override is invalid")]
    EmptyHostnameOverride,
    #[error("invalid argument {} for \"--feature-gates\" flag: {reason}", go_quote(.value))]
    FeatureGates { value: String, reason: String },
    /// component-base's `SetFromMap` refused `featureGates` (unknown or locked gate).
    #[error("failed complete: {0}")]
    Gates(String),
    #[error("failed validate: {0}")]
    Invalid(#[from] ErrorList),
    #[error("couldn't determine hostname: {0}")]
    Hostname(String),
    #[error("empty hostname is invalid")]
    EmptyHostname,
    #[error("configuration: {0}")]
    Ruleset(#[from] ruleset::RulesetError),
}

/// Flags that map to configuration fields: ignored when `--config` is given.
const CONFIG_FLAGS: &[&str] = &[
    "bind_address",
    "healthz_bind_address",
    "metrics_bind_address",
    "healthz_port",
    "metrics_port",
    "masquerade_all",
    "nodeport_addresses",
    "detect_local_mode",
    "cluster_cidr",
    "pod_bridge_interface",
    "pod_interface_name_prefix",
    "iptables_sync_period",
    "iptables_min_sync_period",
    "iptables_masquerade_bit",
    "proxy_mode",
    "ipvs_sync_period",
    "ipvs_min_sync_period",
    "kubeconfig",
    "kube_api_qps",
    "kube_api_burst",
    "conntrack_max_per_core",
    "conntrack_min",
    "conntrack_tcp_timeout_established",
    "conntrack_tcp_timeout_close_wait",
    "conntrack_tcp_be_liberal",
    "conntrack_udp_timeout",
    "conntrack_udp_timeout_stream",
    "oom_score_adj",
    "bind_address_hard_fail",
    "profiling",
    "show_hidden_metrics_for_version",
    "iptables_localhost_nodeports",
    "ipvs_scheduler",
    "ipvs_exclude_cidrs",
    "ipvs_strict_arp",
    "ipvs_tcp_timeout",
    "ipvs_tcpfin_timeout",
    "ipvs_udp_timeout",
    "config_sync_period",
    "kube_api_content_type",
    "feature_gates",
];

/// Go's `strconv.ParseBool`.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `--feature-gates` as cliflag's MapStringBool reads it.
fn feature_gates(value: &str) -> Result<BTreeMap<String, bool>, SettingsError> {
    let mut out = BTreeMap::new();
    let err = |reason: String| SettingsError::FeatureGates {
        value: value.to_string(),
        reason,
    };
    for s in value.split(',') {
        if s.is_empty() {
            continue;
        }
        let Some((k, v)) = s.split_once('=') else {
            return Err(err(format!("missing bool value for {s}")));
        };
        let (k, v) = (k.trim(), v.trim());
        let b = go_bool(v).ok_or_else(|| {
            err(format!(
                "invalid value of {k}: {v}, err: strconv.ParseBool: parsing {}: invalid syntax",
                go_quote(v)
            ))
        })?;
        out.insert(k.to_string(), b);
    }
    Ok(out)
}

/// Upstream's `addressFromDeprecatedFlags`: port 0 disables the server.
fn address_from_deprecated_flags(addr: &str, port: i32) -> String {
    if port == 0 {
        return String::new();
    }
    append_port_if_needed(addr, u16::try_from(port).unwrap_or(0))
}

/// The flags over the defaulted configuration (no `--config`).
pub fn apply_flags(c: &mut KubeProxyConfig, f: &Flags) -> Result<(), SettingsError> {
    macro_rules! set {
        ($flag:expr => $field:expr) => {
            if let Some(v) = &$flag {
                $field = v.clone();
            }
        };
    }
    set!(f.bind_address => c.bind_address);
    set!(f.healthz_bind_address => c.healthz_bind_address);
    set!(f.metrics_bind_address => c.metrics_bind_address);
    set!(f.bind_address_hard_fail => c.bind_address_hard_fail);
    set!(f.profiling => c.enable_profiling);
    set!(f.show_hidden_metrics_for_version => c.show_hidden_metrics_for_version);
    set!(f.proxy_mode => c.mode);
    if let Some(b) = f.iptables_masquerade_bit {
        c.iptables.masquerade_bit = Some(b);
    }
    set!(f.masquerade_all => c.linux.masquerade_all);
    if let Some(b) = f.iptables_localhost_nodeports {
        c.iptables.localhost_node_ports = Some(b);
    }
    set!(f.ipvs_scheduler => c.ipvs.scheduler);
    if let Some(v) = &f.ipvs_exclude_cidrs {
        c.ipvs.exclude_cidrs = Some(v.clone());
    }
    set!(f.ipvs_strict_arp => c.ipvs.strict_arp);
    set!(f.ipvs_tcp_timeout => c.ipvs.tcp_timeout);
    set!(f.ipvs_tcpfin_timeout => c.ipvs.tcp_fin_timeout);
    set!(f.ipvs_udp_timeout => c.ipvs.udp_timeout);
    set!(f.detect_local_mode => c.detect_local_mode);
    set!(f.pod_bridge_interface => c.detect_local.bridge_interface);
    set!(f.pod_interface_name_prefix => c.detect_local.interface_name_prefix);
    if let Some(v) = &f.nodeport_addresses {
        c.node_port_addresses = Some(v.clone());
    }
    if let Some(v) = f.oom_score_adj {
        c.linux.oom_score_adj = Some(v);
    }
    let ct = &mut c.linux.conntrack;
    if let Some(v) = f.conntrack_max_per_core {
        ct.max_per_core = Some(v);
    }
    if let Some(v) = f.conntrack_min {
        ct.min = Some(v);
    }
    if let Some(v) = f.conntrack_tcp_timeout_established {
        ct.tcp_established_timeout = Some(v);
    }
    if let Some(v) = f.conntrack_tcp_timeout_close_wait {
        ct.tcp_close_wait_timeout = Some(v);
    }
    set!(f.conntrack_tcp_be_liberal => ct.tcp_be_liberal);
    set!(f.conntrack_udp_timeout => ct.udp_timeout);
    set!(f.conntrack_udp_timeout_stream => ct.udp_stream_timeout);
    set!(f.config_sync_period => c.config_sync_period);
    set!(f.kubeconfig => c.client_connection.kubeconfig);
    set!(f.kube_api_content_type => c.client_connection.content_type);
    set!(f.kube_api_burst => c.client_connection.burst);
    set!(f.kube_api_qps => c.client_connection.qps);
    if let Some(g) = &f.feature_gates {
        c.feature_gates.extend(feature_gates(g)?);
    }
    apply_logging_flags(c, f);
    // processV1Alpha1Flags
    if let Some(d) = f.iptables_sync_period.filter(|_| c.mode != MODE_IPVS) {
        c.sync_period = d;
    }
    if let Some(d) = f.iptables_min_sync_period.filter(|_| c.mode != MODE_IPVS) {
        c.min_sync_period = d;
    }
    if let Some(d) = f.ipvs_sync_period.filter(|_| c.mode == MODE_IPVS) {
        c.sync_period = d;
    }
    if let Some(d) = f.ipvs_min_sync_period.filter(|_| c.mode == MODE_IPVS) {
        c.min_sync_period = d;
    }
    if let Some(v) = &f.cluster_cidr {
        c.detect_local.cluster_cidrs = if v.is_empty() {
            Vec::new()
        } else {
            v.split(',').map(String::from).collect()
        };
    }
    if f.write_config_to.is_none() {
        c.healthz_bind_address = address_from_deprecated_flags(
            &c.healthz_bind_address,
            f.healthz_port.unwrap_or(i32::from(HEALTHZ_PORT)),
        );
        c.metrics_bind_address = address_from_deprecated_flags(
            &c.metrics_bind_address,
            f.metrics_port.unwrap_or(i32::from(METRICS_PORT)),
        );
    }
    Ok(())
}

/// The logging flags win over the file (`copyLogsFromFlags`).
fn apply_logging_flags(c: &mut KubeProxyConfig, f: &Flags) {
    if let Some(v) = f.v {
        c.logging.verbosity = v;
    }
    if let Some(fmt) = &f.logging_format {
        c.logging.format = fmt.clone();
    }
    if let Some(d) = f.log_flush_frequency {
        c.logging.flush_frequency = FlushFrequency::Text(d);
    }
}

/// The effective configuration and the start-up notices, validated.
pub fn effective(flags: &Flags) -> Result<(KubeProxyConfig, Vec<Notice>), SettingsError> {
    let mut notices = Vec::new();
    let mut c = match flags.config.as_deref().filter(|p| !p.is_empty()) {
        Some(path) => {
            let loaded = config::load_file(path)?;
            if !loaded.unknown.is_empty() {
                notices.push(Notice::LenientDecoding {
                    err: config::strict_decoding_error(&loaded.unknown),
                });
            }
            let mut c = loaded.config;
            apply_logging_flags(&mut c, flags);
            for id in CONFIG_FLAGS.iter().filter(|id| flags.was_given(id)) {
                notices.push(Notice::FlagIgnoredWithConfig {
                    flag: format!("--{}", id.replace('_', "-")),
                });
            }
            c
        }
        None => {
            let mut c = KubeProxyConfig::defaulted();
            apply_flags(&mut c, flags)?;
            c
        }
    };
    c.apply_platform_defaults();
    if let Some(h) = flags.hostname_override.as_deref().filter(|h| !h.is_empty()) {
        let h = h.trim();
        if h.is_empty() {
            return Err(SettingsError::EmptyHostnameOverride);
        }
        c.hostname_override = h.to_lowercase();
    }
    // Options.Complete ends with SetFromMap(featureGates); validation comes after.
    let (_, warnings) = FeatureGates::resolve(&c.feature_gates).map_err(SettingsError::Gates)?;
    notices.extend(warnings.into_iter().map(|msg| Notice::FeatureGate { msg }));
    for (flag, value, reason) in flags.no_effect_given() {
        if flags.config.is_none() || !CONFIG_FLAGS.contains(&flag.replace('-', "_").as_str()) {
            notices.push(Notice::FlagNoEffect {
                flag: format!("--{flag}"),
                value,
                reason,
            });
        }
    }
    validate(&c)?;
    Ok((c, notices))
}

/// The host's name (kube-proxy's default node name).
pub fn os_hostname() -> std::io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Upstream's `nodeutil.GetHostname`.
pub fn node_name(hostname_override: &str) -> Result<String, SettingsError> {
    let name = if hostname_override.is_empty() {
        os_hostname().map_err(|e| SettingsError::Hostname(e.to_string()))?
    } else {
        hostname_override.to_string()
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(SettingsError::EmptyHostname);
    }
    Ok(name.to_lowercase())
}

/// The configuration fields set to something without effect here.
fn field_notices(c: &KubeProxyConfig, notices: &mut Vec<Notice>) {
    let mut push = |field: &str, value: String, reason: &'static str| {
        notices.push(Notice::FieldNoEffect {
            field: field.to_string(),
            value,
            reason,
        })
    };
    if !c.show_hidden_metrics_for_version.is_empty() {
        push(
            "showHiddenMetricsForVersion",
            c.show_hidden_metrics_for_version.clone(),
            "kube-nlproxy hides no metric",
        );
    }
    let ipvs = &c.ipvs;
    const NO_IPVS: &str = "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)";
    const EXCLUDE_CIDRS: &str = "kube-nlproxy has no IPVS proxier; only keeps the IPVS services in these CIDRs when it removes kube-proxy's IPVS-mode leftovers";
    if !ipvs.scheduler.is_empty() {
        push("ipvs.scheduler", ipvs.scheduler.clone(), NO_IPVS);
    }
    if let Some(x) = ipvs.exclude_cidrs.as_ref().filter(|x| !x.is_empty()) {
        push("ipvs.excludeCIDRs", x.join(","), EXCLUDE_CIDRS);
    }
    if ipvs.strict_arp {
        push("ipvs.strictARP", "true".into(), NO_IPVS);
    }
    for (field, d) in [
        ("ipvs.tcpTimeout", ipvs.tcp_timeout),
        ("ipvs.tcpFinTimeout", ipvs.tcp_fin_timeout),
        ("ipvs.udpTimeout", ipvs.udp_timeout),
    ] {
        if !d.is_zero() {
            push(field, d.to_string(), NO_IPVS);
        }
    }
    if c.winkernel != v1::Winkernel::default() {
        push("winkernel", "(set)".into(), "Windows only");
    }
    if c.windows_run_as_service {
        push("windowsRunAsService", "true".into(), "Windows only");
    }
    if c.config_sync_period != GoDuration::secs(15 * 60) {
        push(
            "configSyncPeriod",
            c.config_sync_period.to_string(),
            "the watches keep their cache current; no periodic resync",
        );
    }
    if !c.client_connection.accept_content_types.is_empty() {
        push(
            "clientConnection.acceptContentTypes",
            c.client_connection.accept_content_types.clone(),
            "the API client accepts protobuf, else JSON, as its contentType says",
        );
    }
    if !c.port_range.is_empty() {
        push(
            "portRange",
            c.port_range.clone(),
            "the userspace proxier was removed",
        );
    }
    if !c.logging.vmodule.is_null() {
        push(
            "logging.vmodule",
            c.logging.vmodule.to_string(),
            "per-file verbosity is not supported; use verbosity",
        );
    }
}

/// A content type the API client speaks: Kubernetes' protobuf or JSON (parameters
/// aside).
fn is_api_content_type(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/vnd.kubernetes.protobuf")
        || media.eq_ignore_ascii_case("application/json")
}

fn nanos(d: GoDuration) -> Duration {
    d.std()
}

/// Derive the daemon's settings from the effective configuration.
pub fn derive(
    c: KubeProxyConfig,
    flags: &Flags,
    mut notices: Vec<Notice>,
) -> Result<Settings, SettingsError> {
    if flags.config.as_deref().is_some_and(|p| !p.is_empty()) {
        // without --config, the flags set these fields and were named already
        field_notices(&c, &mut notices);
    }
    let mode = c.mode.clone();
    if mode == MODE_IPVS {
        notices.push(Notice::IpvsMode);
    }
    if mode == MODE_IPVS && c.iptables.localhost_node_ports == Some(true) {
        notices.push(Notice::Note {
            msg: "localhost NodePorts are not served by kube-nlproxy in ipvs mode",
            detail: "iptables.localhostNodePorts".into(),
        });
    }
    let detect_local_mode = match c.detect_local_mode.as_str() {
        "NodeCIDR" => DetectLocalMode::NodeCIDR,
        "BridgeInterface" => DetectLocalMode::BridgeInterface,
        "InterfaceNamePrefix" => DetectLocalMode::InterfaceNamePrefix,
        _ => DetectLocalMode::ClusterCIDR,
    };
    if detect_local_mode == DetectLocalMode::ClusterCIDR && c.detect_local.cluster_cidrs.is_empty()
    {
        notices.push(Notice::NoClusterCidr);
    }
    let mut node_port_addresses = Vec::new();
    for a in c.node_port_addresses.iter().flatten() {
        match a.as_str() {
            "all" => node_port_addresses.extend(["0.0.0.0/0".to_string(), "::/0".to_string()]),
            "localhost" => node_port_addresses.extend(localhost::LOCALHOST_CIDRS.map(String::from)),
            other => node_port_addresses.push(other.to_string()),
        }
    }
    if c.node_port_addresses.as_ref().is_none_or(Vec::is_empty) {
        // upstream: unset means every local IP (iptables and ipvs mode)
        node_port_addresses = vec!["0.0.0.0/0".into(), "::/0".into()];
        notices.push(Notice::IncompleteConfig {
            err: "nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`",
        });
    }
    let node_name = node_name(&c.hostname_override)?;
    let (gates, _) = FeatureGates::resolve(&c.feature_gates).map_err(SettingsError::Gates)?;
    let localhost_proxy_families = localhost_proxy(
        c.mode == MODE_NFTABLES,
        gates.enabled(KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS),
        &node_port_addresses,
        &mut notices,
    );
    let content_type = c.client_connection.content_type.clone();
    if !is_api_content_type(&content_type) {
        notices.push(Notice::Note {
            msg: "the API client speaks protobuf or JSON; JSON is used",
            detail: format!("clientConnection.contentType={content_type}"),
        });
    }
    let ruleset = ruleset::Config {
        kind: None,
        node_name: node_name.clone(),
        families: vec!["IPv4".into(), "IPv6".into()],
        masquerade_all: c.linux.masquerade_all,
        masquerade_bit: u8::try_from(c.masquerade_bit()).unwrap_or(14),
        detect_local_mode,
        cluster_cidrs: c.detect_local.cluster_cidrs.clone(),
        pod_bridge_interface: c.detect_local.bridge_interface.clone(),
        pod_interface_name_prefix: c.detect_local.interface_name_prefix.clone(),
        node_port_addresses,
        local_addresses: Vec::new(),
        service_cidrs: Vec::new(),
        proxier: if mode == MODE_NFTABLES {
            ruleset::Proxier::Nftables
        } else {
            ruleset::Proxier::Iptables
        },
        localhost_node_ports: (mode == MODE_IPTABLES || mode.is_empty())
            && c.iptables.localhost_node_ports.unwrap_or(true),
        conntrack_tcp_be_liberal: c.linux.conntrack.tcp_be_liberal,
        nftables_localhost_node_ports: mode == MODE_NFTABLES
            && gates.enabled(KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS),
        // The host's, read by the daemon at start (not configuration).
        route_localnet: false,
        allow_external_ips: gates.enabled(ALLOW_SERVICE_EXTERNAL_IPS),
    }
    .parse()?;
    let kube = KubeSettings {
        kubeconfig: Some(c.client_connection.kubeconfig.clone()).filter(|s| !s.is_empty()),
        master: flags.master.clone().filter(|s| !s.is_empty()),
        qps: c.client_connection.qps,
        burst: c.client_connection.burst,
        content_type,
    };
    Ok(Settings {
        node_name,
        ruleset,
        sync_period: nanos(c.sync_period),
        min_sync_period: nanos(c.min_sync_period),
        conntrack: c.linux.conntrack.clone(),
        oom_score_adj: c.linux.oom_score_adj,
        kube,
        json_logs: c.logging.format == "json",
        verbosity: c.logging.verbosity,
        healthz_bind_address: c.healthz_bind_address.clone(),
        metrics_bind_address: c.metrics_bind_address.clone(),
        bind_address_hard_fail: c.bind_address_hard_fail,
        node_ip_override: Flags::bind_ip(&c.bind_address),
        gates,
        localhost_proxy_families,
        notices,
        config: c,
    })
}

/// The families of nftables mode's localhost NodePort proxy; a note when
/// nodePortAddresses asks for loopback in nftables mode but the gate is off.
fn localhost_proxy(
    nftables: bool,
    gate: bool,
    node_port_addresses: &[String],
    notices: &mut Vec<Notice>,
) -> Vec<kube_model::IpFamily> {
    if nftables && !gate && !localhost::proxy_families(true, true, node_port_addresses).is_empty() {
        notices.push(Notice::Note {
            msg: "localhost NodePorts are not served: the feature gate is off",
            detail: KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS.into(),
        });
    }
    localhost::proxy_families(nftables, gate, node_port_addresses)
}

/// Load the config file (if any), apply the flags, validate, derive the settings.
pub fn load(flags: &Flags) -> Result<Settings, SettingsError> {
    let (c, notices) = effective(flags)?;
    derive(c, flags, notices)
}

#[cfg(test)]
mod tests;
