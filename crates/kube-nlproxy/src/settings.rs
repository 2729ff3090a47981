//! Flags applied over the configuration file (flags win, as in kube-proxy), and the
//! effective settings derived from the result.

use std::time::Duration;

use ruleset::DetectLocalMode;

use crate::config::{Conntrack, KubeProxyConfiguration, ProxierSection};
use crate::duration::GoDuration;
use crate::flags::Flags;

/// Everything the daemon needs, derived from one effective KubeProxyConfiguration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The effective configuration (file + flags), as `--write-config-to` writes it.
    pub kpc: KubeProxyConfiguration,
    pub node_name: String,
    pub ruleset: ruleset::Config,
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    pub conntrack: Conntrack,
    pub oom_score_adj: Option<i32>,
    pub kube: KubeSettings,
    pub json_logs: bool,
    pub verbosity: u32,
    /// Things accepted but not applying here, to be logged once at start.
    pub warnings: Vec<String>,
    /// Informational lines to be logged once at start.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    pub kubeconfig: Option<String>,
    pub master: Option<String>,
    pub qps: f32,
    pub burst: i32,
    pub content_type: String,
}

/// Apply the flags that were given onto `kpc`.
pub fn apply_flags(kpc: &mut KubeProxyConfiguration, f: &Flags) -> Result<(), String> {
    macro_rules! set {
        ($flag:expr => $($field:expr),+) => {
            if let Some(v) = &$flag {
                $( $field = v.clone(); )+
            }
        };
    }
    set!(f.hostname_override => kpc.hostname_override);
    set!(f.bind_address => kpc.bind_address);
    set!(f.healthz_bind_address => kpc.healthz_bind_address);
    set!(f.metrics_bind_address => kpc.metrics_bind_address);
    set!(f.masquerade_all => kpc.linux.masquerade_all);
    set!(f.nodeport_addresses => kpc.node_port_addresses);
    set!(f.detect_local_mode => kpc.detect_local_mode);
    set!(f.cluster_cidr => kpc.cluster_cidr);
    set!(f.pod_bridge_interface => kpc.detect_local.bridge_interface);
    set!(f.pod_interface_name_prefix => kpc.detect_local.interface_name_prefix);
    set!(f.iptables_sync_period => kpc.iptables.sync_period, kpc.nftables.sync_period);
    set!(f.iptables_min_sync_period => kpc.iptables.min_sync_period, kpc.nftables.min_sync_period);
    if let Some(b) = f.iptables_masquerade_bit {
        kpc.iptables.masquerade_bit = Some(b);
        kpc.nftables.masquerade_bit = Some(b);
    }
    set!(f.proxy_mode => kpc.mode);
    set!(f.kubeconfig => kpc.client_connection.kubeconfig);
    set!(f.kube_api_qps => kpc.client_connection.qps);
    set!(f.kube_api_burst => kpc.client_connection.burst);
    set!(f.kube_api_content_type => kpc.client_connection.content_type);
    set!(f.config_sync_period => kpc.config_sync_period);
    let ct = &mut kpc.linux.conntrack;
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
    if let Some(v) = f.oom_score_adj {
        kpc.linux.oom_score_adj = Some(v);
    }
    if let Some(g) = &f.feature_gates {
        for kv in g.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--feature-gates: {kv:?} is not key=value"))?;
            let v: bool = v
                .trim()
                .parse()
                .map_err(|_| format!("--feature-gates: {kv:?}: value is not true or false"))?;
            kpc.feature_gates.insert(k.trim().to_string(), v);
        }
    }
    set!(f.v => kpc.logging.verbosity);
    set!(f.logging_format => kpc.logging.format);
    Ok(())
}

/// The host's name, lowercased (kube-proxy's default node name).
pub fn os_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_lowercase()
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Derive the effective settings.
pub fn derive(kpc: KubeProxyConfiguration, flags: &Flags) -> Result<Settings, String> {
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let mode = kpc.mode.trim().to_string();
    let section: &ProxierSection = match mode.as_str() {
        "nftables" => &kpc.nftables,
        "" | "iptables" => &kpc.iptables,
        other => {
            warnings.push(format!(
                "mode {other:?} is not supported; running the nftables backend with the iptables settings"
            ));
            &kpc.iptables
        }
    };
    notes.push(format!(
        "mode {:?}: kube-nlproxy runs its nftables backend (tables ip/ip6 kube-nlproxy) over netlink",
        if mode.is_empty() { "iptables (default)" } else { mode.as_str() }
    ));
    let sync_period = section.sync_period.0;
    let min_sync_period = section.min_sync_period.0;
    if sync_period.is_zero() {
        return Err("syncPeriod must be greater than 0".into());
    }
    if min_sync_period > sync_period {
        return Err(format!(
            "minSyncPeriod ({}) must not exceed syncPeriod ({})",
            GoDuration(min_sync_period),
            GoDuration(sync_period)
        ));
    }
    let masquerade_bit = section.masquerade_bit.unwrap_or(14);
    if !(0..=31).contains(&masquerade_bit) {
        return Err(format!("masqueradeBit {masquerade_bit} is not in 0..=31"));
    }
    let masquerade_all = kpc.linux.masquerade_all || section.masquerade_all;

    let detect_local_mode = match kpc.detect_local_mode.trim() {
        "" | "ClusterCIDR" => DetectLocalMode::ClusterCIDR,
        "NodeCIDR" => DetectLocalMode::NodeCIDR,
        "BridgeInterface" => DetectLocalMode::BridgeInterface,
        "InterfaceNamePrefix" => DetectLocalMode::InterfaceNamePrefix,
        other => {
            return Err(format!(
                "detectLocalMode {other:?} is not ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix"
            ))
        }
    };
    let cluster_cidrs = if kpc.detect_local.cluster_cidrs.is_empty() {
        split_list(&kpc.cluster_cidr)
    } else {
        kpc.detect_local.cluster_cidrs.clone()
    };
    if detect_local_mode == DetectLocalMode::ClusterCIDR && cluster_cidrs.is_empty() {
        notes.push(
            "detectLocalMode ClusterCIDR without clusterCIDR: no local-traffic detection".into(),
        );
    }
    if detect_local_mode == DetectLocalMode::BridgeInterface
        && kpc.detect_local.bridge_interface.is_empty()
    {
        return Err("detectLocalMode BridgeInterface needs --pod-bridge-interface".into());
    }
    if detect_local_mode == DetectLocalMode::InterfaceNamePrefix
        && kpc.detect_local.interface_name_prefix.is_empty()
    {
        return Err("detectLocalMode InterfaceNamePrefix needs --pod-interface-name-prefix".into());
    }
    let mut node_port_addresses: Vec<String> = kpc
        .node_port_addresses
        .iter()
        .flat_map(|s| split_list(s))
        .collect();
    if node_port_addresses.is_empty() && mode != "nftables" {
        // kube-proxy's iptables mode serves NodePorts on every local address by default
        // (localhost excepted here: never served, see CVE-2020-8558).
        node_port_addresses = vec!["0.0.0.0/0".into(), "::/0".into()];
        notes.push(
            "nodePortAddresses empty in iptables mode: NodePorts on all local addresses (set it to \"primary\" for the nftables default)".into(),
        );
    }
    let node_name = {
        let o = kpc.hostname_override.trim().to_lowercase();
        if o.is_empty() {
            os_hostname()
        } else {
            o
        }
    };
    if node_name.is_empty() {
        return Err("no node name: set --hostname-override".into());
    }

    for (k, v) in &kpc.feature_gates {
        warnings.push(format!(
            "feature gate {k}={v} accepted; it does not change kube-nlproxy"
        ));
    }
    for k in kpc.unknown.keys() {
        warnings.push(format!("configuration field {k:?} is unknown; ignored"));
    }
    if kpc.enable_profiling {
        warnings.push("enableProfiling does not apply to kube-nlproxy; ignored".into());
    }
    if !kpc.port_range.is_empty() {
        warnings.push("portRange does not apply to kube-nlproxy; ignored".into());
    }
    if kpc.iptables.localhost_node_ports == Some(true) && mode != "nftables" {
        notes.push(
            "localhost NodePorts are never served by kube-nlproxy (iptables.localhostNodePorts ignored)"
                .into(),
        );
    }
    let content_type = kpc.client_connection.content_type.clone();
    if content_type.contains("protobuf") {
        notes.push(format!(
            "kube-api-content-type {content_type}: the API client speaks JSON (application/json)"
        ));
    }
    let json_logs = match kpc.logging.format.as_str() {
        "" | "text" => false,
        "json" => true,
        other => return Err(format!("logging format {other:?} is not text or json")),
    };
    let conntrack = kpc.conntrack().clone();
    let ruleset = ruleset::Config {
        kind: None,
        node_name: node_name.clone(),
        families: vec!["IPv4".into(), "IPv6".into()],
        masquerade_all,
        masquerade_bit: masquerade_bit as u8,
        detect_local_mode,
        cluster_cidrs,
        pod_bridge_interface: kpc.detect_local.bridge_interface.clone(),
        pod_interface_name_prefix: kpc.detect_local.interface_name_prefix.clone(),
        node_port_addresses,
        local_addresses: Vec::new(),
        service_cidrs: Vec::new(),
    };
    ruleset.parse().map_err(|e| e.to_string())?;
    let kube = KubeSettings {
        kubeconfig: Some(kpc.client_connection.kubeconfig.clone()).filter(|s| !s.is_empty()),
        master: flags.master.clone().filter(|s| !s.is_empty()),
        qps: kpc.client_connection.qps,
        burst: kpc.client_connection.burst,
        content_type,
    };
    Ok(Settings {
        node_name,
        ruleset,
        sync_period,
        min_sync_period,
        conntrack,
        oom_score_adj: kpc.oom_score_adj.or(kpc.linux.oom_score_adj),
        kube,
        json_logs,
        verbosity: kpc.logging.verbosity,
        warnings,
        notes,
        kpc,
    })
}

/// Load the config file (if any), apply the flags, derive the settings.
pub fn load(flags: &Flags) -> Result<Settings, String> {
    let mut kpc = match &flags.config {
        Some(path) => KubeProxyConfiguration::load(path).map_err(|e| e.to_string())?,
        None => KubeProxyConfiguration::default(),
    };
    apply_flags(&mut kpc, flags)?;
    derive(kpc, flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn flags(args: &[&str]) -> Flags {
        let mut v = vec!["kube-nlproxy".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        Flags::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_match_upstream() {
        let s = load(&flags(&["--hostname-override=Node-A"])).unwrap();
        assert_eq!(s.node_name, "node-a");
        assert_eq!(s.sync_period, Duration::from_secs(30));
        assert_eq!(s.min_sync_period, Duration::from_secs(1));
        assert_eq!(s.ruleset.masquerade_bit, 14);
        assert_eq!(s.kpc.healthz_bind_address, "0.0.0.0:10256");
        assert_eq!(s.kpc.metrics_bind_address, "127.0.0.1:10249");
        assert_eq!(s.kube.qps, 5.0);
        assert_eq!(s.kube.burst, 10);
        assert_eq!(s.conntrack.max_per_core, Some(32768));
        assert_eq!(s.oom_score_adj, Some(-999));
        // iptables (the default mode): NodePorts on all addresses.
        assert_eq!(s.ruleset.node_port_addresses, vec!["0.0.0.0/0", "::/0"]);
        let s = load(&flags(&["--hostname-override=a", "--proxy-mode=nftables"])).unwrap();
        assert!(s.ruleset.node_port_addresses.is_empty(), "primary");
    }

    #[test]
    fn flags_override_config() {
        let dir = std::env::temp_dir().join(format!("nlp-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
             mode: nftables\nhostnameOverride: from-file\nnftables:\n  syncPeriod: 45s\n  masqueradeBit: 10\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let s = load(&flags(&["--config", p])).unwrap();
        assert_eq!(s.node_name, "from-file");
        assert_eq!(s.sync_period, Duration::from_secs(45));
        assert_eq!(s.ruleset.masquerade_bit, 10);
        let s = load(&flags(&[
            "--config",
            p,
            "--hostname-override=from-flag",
            "--iptables-sync-period=20s",
        ]))
        .unwrap();
        assert_eq!(s.node_name, "from-flag");
        assert_eq!(s.sync_period, Duration::from_secs(20));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(load(&flags(&[
            "--hostname-override=a",
            "--detect-local-mode=Foo"
        ]))
        .is_err());
        assert!(load(&flags(&[
            "--hostname-override=a",
            "--iptables-masquerade-bit=40"
        ]))
        .is_err());
        assert!(load(&flags(&["--hostname-override=a", "--cluster-cidr=nope"])).is_err());
    }

    #[test]
    fn ipvs_mode_warns() {
        let s = load(&flags(&["--hostname-override=a", "--proxy-mode=ipvs"])).unwrap();
        assert!(s.warnings.iter().any(|w| w.contains("ipvs")));
    }
}
