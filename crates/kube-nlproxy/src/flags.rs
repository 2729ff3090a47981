//! The command line: kube-proxy's flags (same names and defaults) plus ours.
//!
//! kube-proxy flags that do not apply to this proxier are accepted and reported with a
//! warning, never an error ([`strip_ignored`]); kube-proxy's `_`/`-` equivalence in flag
//! names is kept.

use clap::Parser;

use crate::duration::GoDuration;

#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "kube-nlproxy",
    version,
    about = "Kubernetes Service proxy: Services and EndpointSlices to one atomic nftables netlink batch per sync, stale UDP conntrack entries cleared over ctnetlink",
    long_about = None
)]
pub struct Flags {
    // --- kube-proxy flags that apply ---
    /// Path to a KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1).
    #[arg(long)]
    pub config: Option<String>,
    /// Write the effective configuration to this file and exit.
    #[arg(long)]
    pub write_config_to: Option<String>,
    /// Remove everything this proxier created (its nftables tables) and exit.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub cleanup: Option<bool>,
    /// Do the privileged initialisation (conntrack sysctls) and exit.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub init_only: Option<bool>,
    /// The name of this node (default: the host name).
    #[arg(long)]
    pub hostname_override: Option<String>,
    #[arg(long)]
    pub bind_address: Option<String>,
    /// Address:port of the health server (default 0.0.0.0:10256).
    #[arg(long)]
    pub healthz_bind_address: Option<String>,
    /// Address:port of the metrics server (default 127.0.0.1:10249).
    #[arg(long)]
    pub metrics_bind_address: Option<String>,
    /// Masquerade all traffic sent to Service ClusterIPs.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub masquerade_all: Option<bool>,
    /// CIDRs (comma-separated) or `primary`: the addresses NodePorts are served on.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Option<Vec<String>>,
    /// ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix.
    #[arg(long)]
    pub detect_local_mode: Option<String>,
    /// Pod CIDRs of the cluster (comma-separated, one per family).
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    #[arg(long)]
    pub pod_bridge_interface: Option<String>,
    #[arg(long)]
    pub pod_interface_name_prefix: Option<String>,
    /// Full resync period (default 30s).
    #[arg(long)]
    pub iptables_sync_period: Option<GoDuration>,
    /// Minimum time between syncs (default 1s).
    #[arg(long)]
    pub iptables_min_sync_period: Option<GoDuration>,
    /// Bit of the packet mark requesting masquerade (default 14).
    #[arg(long)]
    pub iptables_masquerade_bit: Option<i32>,
    /// iptables or nftables: both run the nftables backend.
    #[arg(long)]
    pub proxy_mode: Option<String>,
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// Address of the Kubernetes API server (overrides the kubeconfig).
    #[arg(long)]
    pub master: Option<String>,
    #[arg(long)]
    pub kube_api_qps: Option<f32>,
    #[arg(long)]
    pub kube_api_burst: Option<i32>,
    #[arg(long)]
    pub kube_api_content_type: Option<String>,
    /// How often the watchers' caches are resynced (accepted; watches do not need it).
    #[arg(long)]
    pub config_sync_period: Option<GoDuration>,
    #[arg(long)]
    pub conntrack_max_per_core: Option<i32>,
    #[arg(long)]
    pub conntrack_min: Option<i32>,
    #[arg(long)]
    pub conntrack_tcp_timeout_established: Option<GoDuration>,
    #[arg(long)]
    pub conntrack_tcp_timeout_close_wait: Option<GoDuration>,
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub conntrack_tcp_be_liberal: Option<bool>,
    #[arg(long)]
    pub conntrack_udp_timeout: Option<GoDuration>,
    #[arg(long)]
    pub conntrack_udp_timeout_stream: Option<GoDuration>,
    #[arg(long, allow_negative_numbers = true)]
    pub oom_score_adj: Option<i32>,
    /// Feature gates (key=value,...): accepted and reported; none change this proxier.
    #[arg(long)]
    pub feature_gates: Option<String>,
    /// Log verbosity (kube-proxy's -v / --v).
    #[arg(short = 'v', long = "v")]
    pub v: Option<u32>,
    /// Log format: text or json.
    #[arg(long)]
    pub logging_format: Option<String>,

    // --- ours ---
    /// Take the desired state from a YAML/JSON file or a directory of them (Service,
    /// EndpointSlice, Node objects; multi-document and `kind: List` accepted), watched
    /// for changes, instead of the Kubernetes API.
    #[arg(long)]
    pub manifests: Option<String>,
    /// Print the whole ruleset as nft text (loadable by `nft -f`) and exit; touch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run one sync after the initial lists and exit: 0 on success, 1 on failure.
    #[arg(long)]
    pub once: bool,
    /// Test mode: instead of the kernel, write every committed ruleset to this file
    /// (rendered as nft text). The same compile and diff path as a real sync.
    #[arg(long, hide = true)]
    pub render_to: Option<String>,
    /// How often the manifests are checked for changes.
    #[arg(long, hide = true, default_value = "1s")]
    pub manifests_poll: GoDuration,
    /// Server-side timeout of API watches; every other API time bound derives from it
    /// (see api_client::Timing). Hidden: for tests.
    #[arg(long, hide = true, default_value = "60s")]
    pub api_watch_timeout: GoDuration,
}

/// kube-proxy flags that take a value and do not apply here.
const IGNORED_WITH_VALUE: &[&str] = &[
    "boot-id-file",
    "healthz-port",
    "metrics-port",
    "ipvs-exclude-cidrs",
    "ipvs-min-sync-period",
    "ipvs-scheduler",
    "ipvs-sync-period",
    "ipvs-tcp-timeout",
    "ipvs-tcpfin-timeout",
    "ipvs-udp-timeout",
    "log-flush-frequency",
    "log-json-info-buffer-size",
    "log-text-info-buffer-size",
    "log-backtrace-at",
    "log-dir",
    "log-file",
    "log-file-max-size",
    "proxy-port-range",
    "show-hidden-metrics-for-version",
    "stderrthreshold",
    "vmodule",
    "windows-priorityclass",
    "udp-timeout",
];

/// kube-proxy boolean flags that do not apply here.
const IGNORED_BOOL: &[&str] = &[
    "add-dir-header",
    "alsologtostderr",
    "bind-address-hard-fail",
    "iptables-localhost-nodeports",
    "ipvs-strict-arp",
    "log-json-split-stream",
    "log-text-split-stream",
    "logtostderr",
    "one-output",
    "profiling",
    "skip-headers",
    "skip-log-headers",
];

/// Normalise kube-proxy spellings (`--log_dir` is `--log-dir`) and remove the flags that
/// do not apply; returns the remaining arguments and one warning per removed flag.
pub fn strip_ignored(args: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut it = args.into_iter();
    if let Some(argv0) = it.next() {
        out.push(argv0);
    }
    let mut rest_positional = false;
    while let Some(arg) = it.next() {
        if rest_positional || !arg.starts_with("--") || arg == "--" {
            rest_positional |= arg == "--";
            out.push(arg);
            continue;
        }
        let body = &arg[2..];
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.replace('_', "-"), Some(v.to_string())),
            None => (body.replace('_', "-"), None),
        };
        if IGNORED_WITH_VALUE.contains(&name.as_str()) {
            let v = match value {
                Some(v) => v,
                None => it.next().unwrap_or_default(),
            };
            warnings.push(format!(
                "flag --{name}={v} does not apply to kube-nlproxy; ignored"
            ));
            continue;
        }
        if IGNORED_BOOL.contains(&name.as_str()) {
            warnings.push(format!(
                "flag --{name}{} does not apply to kube-nlproxy; ignored",
                value.map(|v| format!("={v}")).unwrap_or_default()
            ));
            continue;
        }
        out.push(match value {
            Some(v) => format!("--{name}={v}"),
            None => format!("--{name}"),
        });
    }
    (out, warnings)
}

impl Flags {
    pub fn parse_from_env() -> (Flags, Vec<String>) {
        let (args, warnings) = strip_ignored(std::env::args().collect());
        (Flags::parse_from(args), warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> (Flags, Vec<String>) {
        let mut v = vec!["kube-nlproxy".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        let (args, w) = strip_ignored(v);
        (Flags::try_parse_from(args).expect("parses"), w)
    }

    #[test]
    fn kube_proxy_spellings() {
        let (f, w) = parse(&[
            "--v=4",
            "--proxy-mode=iptables",
            "--iptables-sync-period",
            "1m",
            "--hostname_override=node-a",
            "--masquerade-all",
            "--nodeport-addresses=198.18.0.0/15,primary",
            "--conntrack-max-per-core=0",
            "--oom-score-adj=-999",
            "--cleanup=false",
        ]);
        assert!(w.is_empty());
        assert_eq!(f.v, Some(4));
        assert_eq!(f.proxy_mode.as_deref(), Some("iptables"));
        assert_eq!(f.iptables_sync_period, Some(GoDuration::secs(60)));
        assert_eq!(f.hostname_override.as_deref(), Some("node-a"));
        assert_eq!(f.masquerade_all, Some(true));
        assert_eq!(
            f.nodeport_addresses,
            Some(vec!["198.18.0.0/15".into(), "primary".into()])
        );
        assert_eq!(f.oom_score_adj, Some(-999));
        assert_eq!(f.cleanup, Some(false));
        let (f, _) = parse(&["-v", "2"]);
        assert_eq!(f.v, Some(2));
    }

    #[test]
    fn ignored_flags_warn() {
        let (f, w) = parse(&[
            "--ipvs-scheduler",
            "rr",
            "--profiling",
            "--log_dir=/tmp",
            "--v=1",
        ]);
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(f.v, Some(1));
    }

    #[test]
    fn unknown_flags_fail() {
        let (args, _) = strip_ignored(vec!["x".into(), "--no-such-flag".into()]);
        assert!(Flags::try_parse_from(args).is_err());
    }
}
