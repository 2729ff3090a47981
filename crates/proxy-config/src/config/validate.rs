//! Validation of the effective configuration as upstream's
//! `pkg/proxy/apis/config/validation/validation.go` does it, with its field paths (the
//! v1alpha1 names: `healthzBindAddress`, `nftables.syncPeriod`, `conntrack.min`, ...)
//! and its error texts (`field: Invalid value: "x": detail`; several as `[a, b]`).

use std::fmt;

use crate::config::internal::{KubeProxyConfig, MODE_IPTABLES, MODE_IPVS, MODE_NFTABLES};
use crate::config::{parse_cidr_sloppy, parse_ip_sloppy, split_host_port};
use crate::duration::GoDuration;
use klog::go_quote;

/// One invalid field, printed as apimachinery's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Invalid value: <value>`; the value already rendered as Go prints it.
    Invalid(String),
    /// `Unsupported value: "x": supported values: "a", "b"`.
    NotSupported {
        value: String,
        supported: Vec<String>,
    },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FieldErrorKind::Invalid(v) => write!(f, "{}: Invalid value: {v}", self.field)?,
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
                write!(
                    f,
                    "{}: Unsupported value: {}: supported values: {}",
                    self.field,
                    go_quote(value),
                    list.join(", ")
                )?
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every invalid field; printed as upstream's aggregate (`a` or `[a, b]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ErrorList(pub Vec<FieldError>);

impl fmt::Display for ErrorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msgs: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        if msgs.len() == 1 {
            f.write_str(&msgs[0])
        } else {
            write!(f, "[{}]", msgs.join(", "))
        }
    }
}

const VALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const VALID_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";
const GE_ZERO: &str = "must be greater than or equal to 0";
const GT_ZERO: &str = "must be greater than 0";

struct V(Vec<FieldError>);

impl V {
    fn invalid(&mut self, field: &str, value: String, detail: &str) {
        self.0.push(FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Invalid(value),
            detail: detail.to_string(),
        });
    }
    fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        self.0.push(FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::NotSupported {
                value: value.to_string(),
                supported: supported.iter().map(|s| s.to_string()).collect(),
            },
            detail: String::new(),
        });
    }
    fn duration_ge0(&mut self, field: &str, d: GoDuration) {
        if d.is_negative() {
            self.invalid(field, d.to_string(), GE_ZERO);
        }
    }
    fn host_port(&mut self, field: &str, input: &str) {
        let Ok((host, port)) = split_host_port(input) else {
            self.invalid(field, go_quote(input), "must be IP:port");
            return;
        };
        if parse_ip_sloppy(host).is_none() {
            self.invalid(field, go_quote(host), VALID_IP);
        }
        match port.parse::<i64>() {
            Ok(p) if (1..=65535).contains(&p) => {}
            _ => self.invalid(field, go_quote(port), "must be a valid port"),
        }
    }
    fn sync_periods(&mut self, prefix: &str, sync: GoDuration, min: GoDuration) {
        if sync.0 <= 0 {
            self.invalid(&format!("{prefix}.syncPeriod"), sync.to_string(), GT_ZERO);
        }
        if min.is_negative() {
            self.invalid(&format!("{prefix}.minSyncPeriod"), min.to_string(), GE_ZERO);
        }
        if min > sync {
            self.invalid(
                &format!("{prefix}.syncPeriod"),
                min.to_string(),
                &format!("must be greater than or equal to {prefix}.minSyncPeriod"),
            );
        }
    }
}

fn masquerade_bit(v: &mut V, field: &str, bit: Option<i32>) {
    if let Some(b) = bit.filter(|b| !(0..=31).contains(b)) {
        v.invalid(field, b.to_string(), "must be within the range [0, 31]");
    }
}

/// The keywords `nodePortAddresses` accepts besides CIDRs.
pub const NODE_PORT_KEYWORDS: &[&str] = &["primary", "localhost", "all"];

/// Check the effective configuration (after defaulting and the flags).
pub fn validate(c: &KubeProxyConfig) -> Result<(), ErrorList> {
    let mut v = V(Vec::new());
    masquerade_bit(&mut v, "iptables.masqueradeBit", c.iptables.masquerade_bit);
    let section = match c.mode.as_str() {
        MODE_IPVS => "ipvs",
        MODE_NFTABLES => "nftables",
        _ => "iptables",
    };
    if c.mode == MODE_NFTABLES {
        masquerade_bit(&mut v, "nftables.masqueradeBit", c.nftables.masquerade_bit);
    }
    v.sync_periods(section, c.sync_period, c.min_sync_period);
    if c.mode == MODE_IPVS {
        v.duration_ge0("ipvs.tcpTimeout", c.ipvs.tcp_timeout);
        v.duration_ge0("ipvs.tcpFinTimeout", c.ipvs.tcp_fin_timeout);
        v.duration_ge0("ipvs.udpTimeout", c.ipvs.udp_timeout);
        for (i, cidr) in c.ipvs.exclude_cidrs.iter().flatten().enumerate() {
            if parse_cidr_sloppy(cidr).is_none() {
                v.invalid(
                    &format!("ipvs.excludeCIDRs[{i}]"),
                    go_quote(cidr),
                    VALID_CIDR,
                );
            }
        }
    }
    let ct = &c.linux.conntrack;
    if let Some(n) = ct.max_per_core.filter(|n| *n < 0) {
        v.invalid("conntrack.maxPerCore", n.to_string(), GE_ZERO);
    }
    if let Some(n) = ct.min.filter(|n| *n < 0) {
        v.invalid("conntrack.min", n.to_string(), GE_ZERO);
    }
    v.duration_ge0(
        "conntrack.tcpEstablishedTimeout",
        ct.tcp_established_timeout.unwrap_or_default(),
    );
    v.duration_ge0(
        "conntrack.tcpCloseWaitTimeout",
        ct.tcp_close_wait_timeout.unwrap_or_default(),
    );
    v.duration_ge0("conntrack.udpTimeout", ct.udp_timeout);
    v.duration_ge0("conntrack.udpStreamTimeout", ct.udp_stream_timeout);
    // ipvs mode only with the `KubeProxyIPVS` gate (deprecated, on at 1.38; KEP-5495 turns
    // it off in 1.40): off, `ipvs` is refused as an unknown mode is (kubernetes PR
    // #139397: "kube-proxy should fail to start, just like if you said
    // --proxy-mode=userspace").
    let ipvs_allowed = crate::gates::FeatureGates::resolve(&c.feature_gates)
        .map_or(true, |(g, _)| g.enabled(crate::gates::KUBE_PROXY_IPVS));
    let modes: &[&str] = if ipvs_allowed {
        &["", MODE_IPTABLES, MODE_IPVS, MODE_NFTABLES]
    } else {
        &["", MODE_IPTABLES, MODE_NFTABLES]
    };
    if !modes.contains(&c.mode.as_str()) {
        v.invalid(
            "mode",
            go_quote(&c.mode),
            if ipvs_allowed {
                "must be iptables, ipvs, nftables or blank (blank means the best-available proxy [currently iptables])"
            } else {
                "must be iptables, nftables or blank (blank means the best-available proxy [currently iptables])"
            },
        );
    }
    if c.client_connection.burst < 0 {
        v.invalid(
            "clientConnection.burst",
            c.client_connection.burst.to_string(),
            GE_ZERO,
        );
    }
    if let Some(n) = c
        .linux
        .oom_score_adj
        .filter(|n| !(-1000..=1000).contains(n))
    {
        v.invalid(
            "oomScoreAdj",
            n.to_string(),
            "must be within the range [-1000, 1000]",
        );
    }
    if c.config_sync_period.0 <= 0 {
        v.invalid(
            "configSyncPeriod",
            c.config_sync_period.to_string(),
            GT_ZERO,
        );
    }
    if parse_ip_sloppy(&c.bind_address).is_none() {
        v.invalid("bindAddress", go_quote(&c.bind_address), VALID_IP);
    }
    if !c.healthz_bind_address.is_empty() {
        v.host_port("healthzBindAddress", &c.healthz_bind_address);
    }
    if !c.metrics_bind_address.is_empty() {
        v.host_port("metricsBindAddress", &c.metrics_bind_address);
    }
    let cidrs = &c.detect_local.cluster_cidrs;
    let joined = cidrs.join(",");
    match cidrs.len() {
        0 => {}
        1 => {
            if parse_cidr_sloppy(&cidrs[0]).is_none() {
                v.invalid("clusterCIDR", go_quote(&joined), VALID_CIDR);
            }
        }
        2 => {
            let fams: Vec<Option<bool>> = cidrs
                .iter()
                .map(|s| parse_cidr_sloppy(s).map(|(ip, _)| ip.is_ipv4()))
                .collect();
            if fams.contains(&None) || fams[0] == fams[1] {
                v.invalid(
                    "clusterCIDR",
                    go_quote(&joined),
                    "must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
                );
            }
        }
        _ => v.invalid(
            "clusterCIDR",
            go_quote(&joined),
            "only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
        ),
    }
    if !port_range_ok(&c.port_range) {
        v.invalid(
            "portRange",
            go_quote(&c.port_range),
            "must be a valid port range (e.g. 300-2000)",
        );
    }
    for (i, a) in c.node_port_addresses.iter().flatten().enumerate() {
        if !NODE_PORT_KEYWORDS.contains(&a.as_str()) && parse_cidr_sloppy(a).is_none() {
            v.invalid(&format!("nodePortAddresses[{i}]"), go_quote(a), VALID_CIDR);
        }
    }
    const LOCAL_MODES: &[&str] = &[
        "ClusterCIDR",
        "NodeCIDR",
        "BridgeInterface",
        "InterfaceNamePrefix",
        "",
    ];
    if !LOCAL_MODES.contains(&c.detect_local_mode.as_str()) {
        v.not_supported("detectLocalMode", &c.detect_local_mode, LOCAL_MODES);
    }
    if c.detect_local_mode == "BridgeInterface" && c.detect_local.bridge_interface.is_empty() {
        v.invalid(
            "detectLocal.bridgeInterface",
            go_quote(""),
            "must not be empty",
        );
    }
    if c.detect_local_mode == "InterfaceNamePrefix"
        && c.detect_local.interface_name_prefix.is_empty()
    {
        v.invalid(
            "detectLocal.interfaceNamePrefix",
            go_quote(""),
            "must not be empty",
        );
    }
    if !["json", "text"].contains(&c.logging.format.as_str()) {
        v.not_supported("logging.format", &c.logging.format, &["json", "text"]);
    }
    if v.0.is_empty() {
        Ok(())
    } else {
        Err(ErrorList(v.0))
    }
}

/// apimachinery's `ParsePortRange`: empty, `base-max` or `base+size`, within 0..=65535.
fn port_range_ok(s: &str) -> bool {
    let s = s.trim();
    if s.is_empty() {
        return true;
    }
    let num = |t: &str| t.parse::<u32>().ok().filter(|n| *n <= 65535);
    if let Some((a, b)) = s.split_once('-') {
        return matches!((num(a), num(b)), (Some(a), Some(b)) if a <= b);
    }
    if let Some((a, n)) = s.split_once('+') {
        return matches!((num(a), num(n)), (Some(a), Some(n)) if a + n <= 65536);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> KubeProxyConfig {
        let mut c = KubeProxyConfig::defaulted();
        c.apply_platform_defaults();
        c
    }

    fn errs(c: &KubeProxyConfig) -> String {
        validate(c)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(errs(&base()), "");
    }

    /// Field paths and texts as upstream's TestValidateV1Alpha1FieldPaths expects them.
    #[test]
    fn field_paths_as_upstream() {
        let mut c = base();
        c.bind_address = "10.10.12.11:2000".into();
        c.healthz_bind_address = "0.0.0.0".into();
        c.metrics_bind_address = "127.0.0.1".into();
        c.iptables.masquerade_bit = Some(32);
        c.linux.oom_score_adj = Some(1001);
        c.linux.conntrack.min = Some(-1);
        c.linux.conntrack.udp_timeout = GoDuration::secs(-1);
        c.client_connection.burst = -1;
        c.detect_local_mode = "invalid".into();
        c.node_port_addresses = Some(vec!["192.168.0.0/16".into(), "invalid".into()]);
        c.logging.format = "invalid".into();
        let e = validate(&c).unwrap_err();
        let fields: Vec<&str> = e.0.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "iptables.masqueradeBit",
                "conntrack.min",
                "conntrack.udpTimeout",
                "clientConnection.burst",
                "oomScoreAdj",
                "bindAddress",
                "healthzBindAddress",
                "metricsBindAddress",
                "nodePortAddresses[1]",
                "detectLocalMode",
                "logging.format"
            ]
        );
        let text = e.to_string();
        assert!(
            text.starts_with(
                "[iptables.masqueradeBit: Invalid value: 32: must be within the range [0, 31], "
            ),
            "{text}"
        );
        assert!(text
            .contains("oomScoreAdj: Invalid value: 1001: must be within the range [-1000, 1000]"));
        assert!(text.contains("healthzBindAddress: Invalid value: \"0.0.0.0\": must be IP:port"));
        assert!(text.contains(
            "conntrack.udpTimeout: Invalid value: -1s: must be greater than or equal to 0"
        ));
        assert!(text.contains("detectLocalMode: Unsupported value: \"invalid\": supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""));
    }

    /// As upstream's TestValidateV1Alpha1SyncPeriodPaths, for every mode.
    #[test]
    fn sync_period_paths_per_mode() {
        for (mode, prefix) in [
            ("iptables", "iptables"),
            ("ipvs", "ipvs"),
            ("nftables", "nftables"),
        ] {
            for (sync, min, field, detail) in [
                (0, 0, "syncPeriod", "must be greater than 0".to_string()),
                (
                    1,
                    -1,
                    "minSyncPeriod",
                    "must be greater than or equal to 0".to_string(),
                ),
                (
                    1,
                    2,
                    "syncPeriod",
                    format!("must be greater than or equal to {prefix}.minSyncPeriod"),
                ),
            ] {
                let mut c = base();
                c.mode = mode.into();
                c.sync_period = GoDuration::secs(sync);
                c.min_sync_period = GoDuration::secs(min);
                let e = validate(&c).unwrap_err();
                assert_eq!(e.0.len(), 1, "{mode}: {e}");
                assert_eq!(e.0[0].field, format!("{prefix}.{field}"));
                assert_eq!(e.0[0].detail, detail);
            }
        }
    }

    #[test]
    fn cluster_cidrs_and_keywords() {
        let mut c = base();
        c.detect_local.cluster_cidrs = vec!["192.168.0.0/16".into(), "10.0.0.0/8".into()];
        assert!(errs(&c).starts_with("clusterCIDR: Invalid value: \"192.168.0.0/16,10.0.0.0/8\": must be a valid DualStack CIDR"));
        c.detect_local.cluster_cidrs = vec!["198.18.0.0/15".into(), "2001:db8::/32".into()];
        assert_eq!(errs(&c), "");
        c.node_port_addresses = Some(vec!["primary".into(), "198.18.0.0/15".into()]);
        assert_eq!(errs(&c), "");
        c.mode = "userspace".into();
        assert!(errs(&c).starts_with("mode: Invalid value: \"userspace\""));
    }

    /// `--feature-gates KubeProxyIPVS=false --proxy-mode ipvs` does not start, as
    /// upstream since the gate (1.37, kubernetes PR #139397) refuses it; with the gate
    /// on (its 1.38 default) ipvs mode is valid.
    ///
    /// Negative control (run 2026-12-06, the gate not consulted): `left: ""` (accepted).
    #[test]
    fn ipvs_mode_needs_the_kube_proxy_ipvs_gate() {
        let mut c = base();
        c.mode = "ipvs".into();
        assert_eq!(errs(&c), "");
        c.feature_gates.insert("KubeProxyIPVS".into(), false);
        assert_eq!(
            errs(&c),
            "mode: Invalid value: \"ipvs\": must be iptables, nftables or blank (blank means \
             the best-available proxy [currently iptables])"
        );
        c.mode = "nftables".into();
        assert_eq!(errs(&c), "", "the gate off refuses ipvs mode only");
    }

    #[test]
    fn port_ranges() {
        assert!(port_range_ok(""));
        assert!(port_range_ok("300-2000"));
        assert!(port_range_ok("300+10"));
        assert!(!port_range_ok("2000-300"));
        assert!(!port_range_ok("80"));
    }
}
