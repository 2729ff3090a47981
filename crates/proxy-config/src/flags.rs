//! The command line: every kube-proxy flag (same names, same value syntax), kube-proxy's
//! `_`/`-` equivalence in flag names, and ours. Flags that have no effect in
//! kube-nlproxy are accepted, listed under their own heading in `--help`, and logged once
//! by name when given ([`NO_EFFECT`]). A flag kube-proxy does not have is an error.

use std::net::IpAddr;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::config::{parse_ip_sloppy, split_host_port};
use crate::duration::GoDuration;
use klog::go_quote;

const KP: &str = "kube-proxy flags";
const LOG: &str = "Logging flags";
const NONE: &str = "kube-proxy flags without effect in kube-nlproxy (accepted, logged once)";
const OURS: &str = "kube-nlproxy flags";

#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "kube-nlproxy",
    about = "Kubernetes Service proxy: Services and EndpointSlices to one atomic nftables netlink \
             batch per sync, stale UDP conntrack entries cleared over ctnetlink. A drop-in for \
             kube-proxy: same flags, same KubeProxyConfiguration, same ports.",
    after_help = "With --config, kube-proxy's rule applies: the other configuration flags are \
                  ignored (each one given is logged), except the logging flags, \
                  --hostname-override and --master.\n\n\
                  Subcommand:\n  explain   trace a packet through the ruleset \
                  (kube-nlproxy explain --help)",
    max_term_width = 100
)]
pub struct Flags {
    /// The path to the configuration file (KubeProxyConfiguration,
    /// kubeproxy.config.k8s.io/v1alpha1). Exits when the file is written or renamed.
    #[arg(long, help_heading = KP)]
    pub config: Option<String>,
    /// If set, write the effective configuration (file or flags, defaulted) to this file
    /// in upstream's v1alpha1 YAML and exit.
    #[arg(long, help_heading = KP)]
    pub write_config_to: Option<String>,
    /// If true, remove kube-nlproxy's nftables tables and kube-proxy's iptables-mode
    /// leftovers, then exit. With --dry-run: report only, delete nothing.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub cleanup: Option<bool>,
    /// If true, do the initialisation that needs full privileges (conntrack sysctls,
    /// oom_score_adj), then exit; run again with only CAP_NET_ADMIN afterwards.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub init_only: Option<bool>,
    /// The name of the Node this proxy runs on (default: the host name, lowercased).
    /// Applies also with --config.
    #[arg(long, help_heading = KP)]
    pub hostname_override: Option<String>,
    /// Overrides the node's primary IP of its family (as kube-proxy; no socket is bound
    /// to it). 0.0.0.0 or :: means: from the Node object.
    #[arg(long, value_parser = ip_var, help_heading = KP)]
    pub bind_address: Option<String>,
    /// IP address and port of the health server (/healthz, /livez), default 0.0.0.0:10256;
    /// an IP without port gets --healthz-port. Empty disables it.
    #[arg(long, value_parser = ip_port_var, help_heading = KP)]
    pub healthz_bind_address: Option<String>,
    /// IP address and port of the metrics server, default 127.0.0.1:10249; an IP without
    /// port gets --metrics-port. Empty disables it.
    #[arg(long, value_parser = ip_port_var, help_heading = KP)]
    pub metrics_bind_address: Option<String>,
    /// Exit (status 1) when the health or metrics server cannot bind its port, instead of
    /// logging it and trying again every 5 s.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub bind_address_hard_fail: Option<bool>,
    /// Deprecated: port of the health server when --healthz-bind-address has none; 0
    /// disables the server (only without --config).
    #[arg(long, help_heading = KP)]
    pub healthz_port: Option<i32>,
    /// Deprecated: port of the metrics server when --metrics-bind-address has none; 0
    /// disables the server (only without --config).
    #[arg(long, help_heading = KP)]
    pub metrics_port: Option<i32>,
    /// SNAT all traffic sent to Service cluster IPs.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub masquerade_all: Option<bool>,
    /// CIDRs (comma-separated) and/or the keywords primary, all, localhost: the node
    /// addresses NodePorts are served on (default: primary in nftables mode, all in
    /// iptables mode; localhost: 127.0.0.0/8 and ::1/128, served by the iptables rules
    /// (IPv4) or the nftables mode's userspace TCP proxy).
    #[arg(long, value_delimiter = ',', help_heading = KP)]
    pub nodeport_addresses: Option<Vec<String>>,
    /// How local (pod) traffic is recognised: ClusterCIDR, NodeCIDR, BridgeInterface or
    /// InterfaceNamePrefix (default ClusterCIDR).
    #[arg(long, help_heading = KP)]
    pub detect_local_mode: Option<String>,
    /// The pods' CIDR range(s) in the cluster, comma-separated (one per family), for
    /// --detect-local-mode=ClusterCIDR.
    #[arg(long, help_heading = KP)]
    pub cluster_cidr: Option<String>,
    /// The pods' bridge interface, for --detect-local-mode=BridgeInterface.
    #[arg(long, help_heading = KP)]
    pub pod_bridge_interface: Option<String>,
    /// The pods' interface name prefix, for --detect-local-mode=InterfaceNamePrefix.
    #[arg(long, help_heading = KP)]
    pub pod_interface_name_prefix: Option<String>,
    /// Full resync period (e.g. 5s, 1m, 2h22m) in iptables and nftables mode; must be
    /// greater than 0 (default 30s).
    #[arg(long, help_heading = KP)]
    pub iptables_sync_period: Option<GoDuration>,
    /// Minimum period between syncs in iptables and nftables mode; 0 syncs on every
    /// change (default 1s).
    #[arg(long, help_heading = KP)]
    pub iptables_min_sync_period: Option<GoDuration>,
    /// The bit of the packet mark that requests SNAT, 0..31, in iptables mode (nftables
    /// mode reads nftables.masqueradeBit of the configuration file; default 14).
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub iptables_masquerade_bit: Option<i32>,
    /// iptables (default), nftables or ipvs: all run kube-nlproxy's nftables backend over
    /// netlink; the mode selects which section's settings apply.
    #[arg(long, help_heading = KP)]
    pub proxy_mode: Option<String>,
    /// Full resync period in ipvs mode.
    #[arg(long, help_heading = KP)]
    pub ipvs_sync_period: Option<GoDuration>,
    /// Minimum period between syncs in ipvs mode.
    #[arg(long, help_heading = KP)]
    pub ipvs_min_sync_period: Option<GoDuration>,
    /// Path to a kubeconfig file (default: in-cluster configuration).
    #[arg(long, help_heading = KP)]
    pub kubeconfig: Option<String>,
    /// The address of the Kubernetes API server (overrides the kubeconfig's). Applies
    /// also with --config.
    #[arg(long, help_heading = KP)]
    pub master: Option<String>,
    /// Queries per second to the API server (default 5; negative: unlimited).
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub kube_api_qps: Option<f32>,
    /// Burst of queries to the API server (default 10).
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub kube_api_burst: Option<i32>,
    /// Maximum conntrack entries per CPU core (0: leave nf_conntrack_max and ignore
    /// --conntrack-min; default 32768). Needs the host network and a writable /proc/sys.
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub conntrack_max_per_core: Option<i32>,
    /// Minimum nf_conntrack_max, whatever --conntrack-max-per-core gives (default 131072).
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub conntrack_min: Option<i32>,
    /// Idle timeout of established TCP connections (0: leave as is; default 24h0m0s).
    #[arg(long, help_heading = KP)]
    pub conntrack_tcp_timeout_established: Option<GoDuration>,
    /// Timeout of TCP connections in CLOSE_WAIT (0: leave as is; default 1h0m0s).
    #[arg(long, help_heading = KP)]
    pub conntrack_tcp_timeout_close_wait: Option<GoDuration>,
    /// Set nf_conntrack_tcp_be_liberal to 1.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub conntrack_tcp_be_liberal: Option<bool>,
    /// Idle timeout of UNREPLIED UDP entries (0: leave as is).
    #[arg(long, help_heading = KP)]
    pub conntrack_udp_timeout: Option<GoDuration>,
    /// Idle timeout of ASSURED UDP entries (0: leave as is).
    #[arg(long, help_heading = KP)]
    pub conntrack_udp_timeout_stream: Option<GoDuration>,
    /// oom_score_adj of this process, -1000..1000 (default -999).
    #[arg(long, allow_negative_numbers = true, help_heading = KP)]
    pub oom_score_adj: Option<i32>,

    // --- logging (component-base's logging flags) ---
    /// Print version information and quit (component-base's verflag): `--version` the
    /// version line, `--version=raw` every field.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "version")]
    pub version: Option<String>,
    /// Log verbosity: 0 start-up, configuration and errors; 2 each sync; 4 and above
    /// details.
    #[arg(short = 'v', long = "v", help_heading = LOG)]
    pub v: Option<u32>,
    /// Log format: text (klog's) or json (component-base's JSON).
    #[arg(long, help_heading = LOG)]
    pub logging_format: Option<String>,

    /// Serve /debug/pprof (what a Rust process can: the command line, allocator
    /// statistics, threads) and /debug/flags/v (set -v at run time) on the metrics
    /// server.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub profiling: Option<bool>,

    // --- accepted, without effect ---
    /// Show metrics hidden since that version: no metric is hidden.
    #[arg(long, help_heading = NONE)]
    pub show_hidden_metrics_for_version: Option<String>,
    /// iptables mode: IPv4 NodePorts on 127.0.0.1 when nodePortAddresses holds loopback
    /// (route_localnet, with the rules against CVE-2020-8558).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = KP)]
    pub iptables_localhost_nodeports: Option<bool>,
    /// IPVS scheduler: no IPVS.
    #[arg(long, help_heading = NONE)]
    pub ipvs_scheduler: Option<String>,
    /// IPVS cleanup exclusions: no IPVS.
    #[arg(long, value_delimiter = ',', help_heading = NONE)]
    pub ipvs_exclude_cidrs: Option<Vec<String>>,
    /// IPVS strict ARP: no IPVS.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub ipvs_strict_arp: Option<bool>,
    /// IPVS TCP timeout: no IPVS.
    #[arg(long, help_heading = NONE)]
    pub ipvs_tcp_timeout: Option<GoDuration>,
    /// IPVS TCP FIN timeout: no IPVS.
    #[arg(long, help_heading = NONE)]
    pub ipvs_tcpfin_timeout: Option<GoDuration>,
    /// IPVS UDP timeout: no IPVS.
    #[arg(long, help_heading = NONE)]
    pub ipvs_udp_timeout: Option<GoDuration>,
    /// Informer resync period: the watches keep the cache current without one.
    #[arg(long, help_heading = NONE)]
    pub config_sync_period: Option<GoDuration>,
    /// Content type of API requests: application/vnd.kubernetes.protobuf (the default;
    /// JSON read when the server answers JSON) or application/json.
    #[arg(long, help_heading = KP)]
    pub kube_api_content_type: Option<String>,
    /// Feature gates (key=value,...), as kube-proxy 1.38 reads them: unknown or locked
    /// gates are an error; AllAlpha / AllBeta set every alpha / beta gate
    /// (docs/feature-gates.md lists the ones that change the proxy).
    #[arg(long, help_heading = KP)]
    pub feature_gates: Option<String>,
    /// Per-file verbosity: not supported (use -v).
    #[arg(long, help_heading = NONE)]
    pub vmodule: Option<String>,
    /// Log flush frequency: logs are written unbuffered.
    #[arg(long, help_heading = NONE)]
    pub log_flush_frequency: Option<GoDuration>,
    /// JSON info buffer size: logs are written unbuffered.
    #[arg(long, help_heading = NONE)]
    pub log_json_info_buffer_size: Option<String>,
    /// Split JSON info and error streams: all logs go to stderr.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub log_json_split_stream: Option<bool>,
    /// Text info buffer size: logs are written unbuffered.
    #[arg(long, help_heading = NONE)]
    pub log_text_info_buffer_size: Option<String>,
    /// Split text info and error streams: all logs go to stderr.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub log_text_split_stream: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26): logs go to stderr.
    #[arg(long, help_heading = NONE)]
    pub log_dir: Option<String>,
    /// Removed klog flag (kube-proxy < 1.26): logs go to stderr.
    #[arg(long, help_heading = NONE)]
    pub log_file: Option<String>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, help_heading = NONE)]
    pub log_file_max_size: Option<String>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, help_heading = NONE)]
    pub log_backtrace_at: Option<String>,
    /// Removed klog flag (kube-proxy < 1.26): logs go to stderr.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub logtostderr: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26): logs go to stderr.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub alsologtostderr: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, help_heading = NONE)]
    pub stderrthreshold: Option<String>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub add_dir_header: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub skip_headers: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub skip_log_headers: Option<bool>,
    /// Removed klog flag (kube-proxy < 1.26).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub one_output: Option<bool>,
    /// Boot id file (cAdvisor's flag on kube-proxy's command line): not read.
    #[arg(long, help_heading = NONE)]
    pub boot_id_file: Option<String>,
    /// Machine id file (cAdvisor's flag on kube-proxy's command line): not read.
    #[arg(long, help_heading = NONE)]
    pub machine_id_file: Option<String>,
    /// Port range of the removed userspace proxier.
    #[arg(long, help_heading = NONE)]
    pub proxy_port_range: Option<String>,
    /// UDP idle timeout of the removed userspace proxier.
    #[arg(long, help_heading = NONE)]
    pub udp_timeout: Option<String>,
    /// Windows only.
    #[arg(long, help_heading = NONE)]
    pub windows_priorityclass: Option<String>,
    /// Windows only.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = NONE)]
    pub windows_service: Option<bool>,

    // --- ours ---
    /// Take the desired state from a YAML/JSON file or a directory of them (Service,
    /// EndpointSlice, Node, ServiceCIDR objects; multi-document and `kind: List`
    /// accepted), watched for changes, instead of the Kubernetes API.
    #[arg(long, help_heading = OURS)]
    pub manifests: Option<String>,
    /// Print the whole ruleset as nft text (loadable by `nft -f`) and exit; touch nothing.
    /// With --cleanup: report what would be removed, remove nothing.
    #[arg(long, help_heading = OURS)]
    pub dry_run: bool,
    /// Run one sync after the initial lists and exit: 0 on success, 1 on failure.
    #[arg(long, help_heading = OURS)]
    pub once: bool,
    /// Test mode: instead of the kernel, write every committed ruleset to this file
    /// (rendered as nft text). The same compile and diff path as a real sync.
    #[arg(long, hide = true)]
    pub render_to: Option<String>,
    /// How often the manifests are looked at besides inotify (the fallback; also the
    /// settle window of a change whose writer is not known, at most 2s). Hidden: for
    /// tests.
    #[arg(long, hide = true, default_value = "10s")]
    pub manifests_poll: GoDuration,
    /// Watch the manifests over inotify (false: only the poll). Hidden: for tests.
    #[arg(long, hide = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true")]
    pub manifests_inotify: bool,
    /// Server-side timeout of API watches; every other API time bound derives from it
    /// (see api_client::Timing). Hidden: for tests.
    #[arg(long, hide = true, default_value = "60s")]
    pub api_watch_timeout: GoDuration,

    /// With detect-local-mode NodeCIDR, how long the node's podCIDRs are waited for
    /// (kube-proxy's NodeManager: 5 minutes). Hidden: for tests.
    #[arg(long, hide = true, default_value = "5m")]
    pub pod_cidr_timeout: GoDuration,

    /// The flags given on the command line: clap id and value as written.
    #[arg(skip)]
    pub given: Vec<(String, String)>,
}

/// `kube-nlproxy explain`: its own arguments (taken out of the command line before the
/// daemon flags are read); this declaration gives `explain --help`.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "kube-nlproxy explain",
    about = "Trace a packet through kube-nlproxy's nftables ruleset and print its verdict, \
             the reason, and every distinct path of chains with its end (dnat ADDR:PORT, \
             local, out, drop, reject).",
    override_usage = "kube-nlproxy explain --src IP[:PORT] --dst IP:PORT[/PROTO] [--iif NAME] \
                      [--from-host] [DAEMON FLAGS]",
    after_help = "By default the ruleset is read from the kernel (our tables ip/ip6 kube-nlproxy). \
                  With --manifests PATH --dry-run it is compiled from those manifests instead, \
                  touching nothing. The daemon's other flags (--config, --hostname-override, \
                  --cluster-cidr, --nodeport-addresses, ...) apply as for a sync; see \
                  kube-nlproxy --help.\n\nExamples:\n  kube-nlproxy explain --src 198.18.0.5 \
                  --dst 198.19.0.10:80/tcp\n  kube-nlproxy explain --manifests objs.yaml \
                  --hostname-override node-a --dry-run --src 198.18.0.5 --dst 198.18.0.2:30080/udp \
                  --iif eth0",
    max_term_width = 100
)]
pub struct ExplainFlags {
    /// Source address of the packet, with an optional source port (default 40000);
    /// IPv6 as [ADDR]:PORT.
    #[arg(long, value_name = "IP[:PORT]")]
    pub src: String,
    /// Destination address and port, with the protocol tcp (default), udp or sctp.
    #[arg(long, value_name = "IP:PORT[/PROTO]")]
    pub dst: String,
    /// Interface the packet arrives on (for pod traffic detected by bridge or interface
    /// name prefix).
    #[arg(long, value_name = "NAME")]
    pub iif: Option<String>,
    /// The packet is sent by the node itself (output path) instead of arriving from the
    /// network.
    #[arg(long)]
    pub from_host: bool,
    /// Compile the ruleset from the manifests at PATH (needs --dry-run).
    #[arg(long, value_name = "PATH")]
    pub manifests: Option<String>,
    /// With --manifests: compile, do not read the kernel.
    #[arg(long)]
    pub dry_run: bool,
}

/// The text of `kube-nlproxy explain --help`.
pub fn explain_help() -> String {
    ExplainFlags::command().render_long_help().to_string()
}

/// Why a flag's value was refused (pflag's wording after `invalid argument ... flag:`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    #[error("{} is not a valid IP address", go_quote(.0))]
    Ip(String),
    #[error("{} is not in a valid format (ip or ip:port): {reason}", go_quote(.input))]
    IpPort { input: String, reason: String },
    #[error("{} is not a valid number", go_quote(.0))]
    Port(String),
}

/// kube-proxy's `IPVar`: an IP address, or empty.
fn ip_var(s: &str) -> Result<String, FlagValueError> {
    if s.is_empty() || parse_ip_sloppy(s).is_some() {
        Ok(s.to_string())
    } else {
        Err(FlagValueError::Ip(s.to_string()))
    }
}

/// kube-proxy's `IPPortVar`: an IP, `IP:port`, or blank (disables).
fn ip_port_var(s: &str) -> Result<String, FlagValueError> {
    if s.trim().is_empty() {
        return Ok(String::new());
    }
    if parse_ip_sloppy(s).is_some() {
        return Ok(s.to_string());
    }
    let (host, port) = split_host_port(s).map_err(|e| FlagValueError::IpPort {
        input: s.to_string(),
        reason: e.to_string(),
    })?;
    if parse_ip_sloppy(host).is_none() {
        return Err(FlagValueError::Ip(host.to_string()));
    }
    match port.parse::<u16>() {
        Ok(_) => Ok(s.to_string()),
        Err(_) => Err(FlagValueError::Port(port.to_string())),
    }
}

/// The flags without effect, and what happens to them; logged once when given.
pub const NO_EFFECT: &[(&str, &str)] = &[
    (
        "show_hidden_metrics_for_version",
        "kube-nlproxy hides no metric",
    ),
    ("ipvs_scheduler", "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)"),
    (
        "ipvs_exclude_cidrs",
        "kube-nlproxy has no IPVS proxier; only keeps the IPVS services in these CIDRs when it removes kube-proxy's IPVS-mode leftovers",
    ),
    ("ipvs_strict_arp", "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)"),
    ("ipvs_tcp_timeout", "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)"),
    ("ipvs_tcpfin_timeout", "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)"),
    ("ipvs_udp_timeout", "kube-nlproxy has no IPVS proxier (ipvs mode runs its nftables rules)"),
    (
        "config_sync_period",
        "the watches keep their cache current; no periodic resync",
    ),
    ("vmodule", "per-file verbosity is not supported; use -v"),
    ("log_flush_frequency", "logs are written unbuffered"),
    ("log_json_info_buffer_size", "logs are written unbuffered"),
    ("log_json_split_stream", "all logs go to stderr"),
    ("log_text_info_buffer_size", "logs are written unbuffered"),
    ("log_text_split_stream", "all logs go to stderr"),
    ("log_dir", "removed from kube-proxy 1.26; logs go to stderr"),
    (
        "log_file",
        "removed from kube-proxy 1.26; logs go to stderr",
    ),
    ("log_file_max_size", "removed from kube-proxy 1.26"),
    ("log_backtrace_at", "removed from kube-proxy 1.26"),
    (
        "logtostderr",
        "removed from kube-proxy 1.26; logs go to stderr",
    ),
    (
        "alsologtostderr",
        "removed from kube-proxy 1.26; logs go to stderr",
    ),
    ("stderrthreshold", "removed from kube-proxy 1.26"),
    ("add_dir_header", "removed from kube-proxy 1.26"),
    ("skip_headers", "removed from kube-proxy 1.26"),
    ("skip_log_headers", "removed from kube-proxy 1.26"),
    ("one_output", "removed from kube-proxy 1.26"),
    ("boot_id_file", "not read"),
    ("machine_id_file", "not read"),
    ("proxy_port_range", "the userspace proxier was removed"),
    ("udp_timeout", "the userspace proxier was removed"),
    ("windows_priorityclass", "Windows only"),
    ("windows_service", "Windows only"),
];

/// kube-proxy's spelling equivalence: `--log_dir` is `--log-dir`.
pub fn normalize(args: Vec<String>) -> Vec<String> {
    let mut rest_positional = false;
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            if i == 0 || rest_positional || !a.starts_with("--") {
                return a;
            }
            if a == "--" {
                rest_positional = true;
                return a;
            }
            match a.split_once('=') {
                Some((n, v)) => format!("{}={v}", n.replace('_', "-")),
                None => a.replace('_', "-"),
            }
        })
        .collect()
}

/// The ids of the command's arguments (not of its groups).
fn cmd_args() -> Vec<String> {
    Flags::command()
        .get_arguments()
        .map(|a| a.get_id().as_str().to_string())
        .collect()
}

/// What `--version` asks for (component-base's `verflag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRequest {
    /// `--version`, `--version=true`: `Kubernetes <git version>`.
    Line,
    /// `--version=raw`: every field of the version information.
    Raw,
}

/// `--version`'s value as verflag reads it: `raw`, or a boolean in Go's spellings
/// (`strconv.ParseBool`).
fn version_request(v: &str) -> Result<Option<VersionRequest>, String> {
    match v {
        "raw" => Ok(Some(VersionRequest::Raw)),
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(Some(VersionRequest::Line)),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(None),
        other => Err(format!(
            "invalid argument {} for \"--version\" flag: strconv.ParseBool: parsing {}: invalid syntax\n",
            klog::go_quote(other),
            klog::go_quote(other)
        )),
    }
}

/// What parsing the command line gave: flags, or help/version text (exit 0), or an
/// error (exit 1, as kube-proxy exits on a flag error).
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Flags>),
    Exit { text: String, code: u8 },
}

impl Flags {
    /// Parse `args` (with the program name first).
    pub fn parse_args(args: Vec<String>) -> Parsed {
        let cmd = Flags::command();
        let m: ArgMatches = match cmd.try_get_matches_from(normalize(args)) {
            Ok(m) => m,
            Err(e) => {
                let code = if e.use_stderr() { 1 } else { 0 };
                return Parsed::Exit {
                    text: e.render().to_string(),
                    code,
                };
            }
        };
        let mut flags = match Flags::from_arg_matches(&m) {
            Ok(f) => f,
            Err(e) => {
                return Parsed::Exit {
                    text: e.render().to_string(),
                    code: 1,
                }
            }
        };
        if let Some(Err(text)) = flags.version.as_deref().map(version_request) {
            return Parsed::Exit { text, code: 1 };
        }
        // the arguments only: clap's derive also names a group after the struct
        // (`Flags`), whose raw values are every argument's (a stray `/flagz` line)
        let args: Vec<String> = cmd_args();
        flags.given = m
            .ids()
            .filter(|id| args.iter().any(|a| a == id.as_str()))
            .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
            .map(|id| {
                let raw: Vec<String> = m
                    .get_raw(id.as_str())
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                (id.as_str().to_string(), raw.join(","))
            })
            .collect();
        Parsed::Run(Box::new(flags))
    }

    /// What `--version` asks for, if anything (the value was checked when parsed).
    pub fn version_request(&self) -> Option<VersionRequest> {
        self.version
            .as_deref()
            .and_then(|v| version_request(v).ok().flatten())
    }

    /// Whether flag `id` (clap id, `snake_case`) was on the command line.
    pub fn was_given(&self, id: &str) -> bool {
        self.given.iter().any(|(g, _)| g == id)
    }

    /// The flags given on the command line, `kebab-case` name and value as given (several
    /// values joined by `,`), for `/flagz`.
    pub fn given_flags(&self) -> Vec<(String, String)> {
        self.given
            .iter()
            .map(|(id, v)| (id.replace('_', "-"), v.clone()))
            .collect()
    }

    /// The flags without effect that were given: name, value, what happens to them.
    pub fn no_effect_given(&self) -> Vec<(String, String, &'static str)> {
        NO_EFFECT
            .iter()
            .filter_map(|(id, why)| {
                let (_, value) = self.given.iter().find(|(g, _)| g == id)?;
                Some((id.replace('_', "-"), value.clone(), *why))
            })
            .collect()
    }

    /// `--bind-address` as an IP, if it names one that is not unspecified.
    pub fn bind_ip(s: &str) -> Option<IpAddr> {
        parse_ip_sloppy(s).filter(|ip| !ip.is_unspecified())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Flags {
        let mut v = vec!["kube-nlproxy".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match Flags::parse_args(v) {
            Parsed::Run(f) => *f,
            Parsed::Exit { text, code } => panic!("exit {code}: {text}"),
        }
    }

    fn fails(args: &[&str]) -> String {
        let mut v = vec!["kube-nlproxy".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match Flags::parse_args(v) {
            Parsed::Run(_) => panic!("parsed: {args:?}"),
            Parsed::Exit { text, code } => {
                assert_eq!(code, 1, "{text}");
                text
            }
        }
    }

    #[test]
    fn kube_proxy_spellings() {
        let f = parse(&[
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
        assert!(f.was_given("hostname_override"));
        assert!(!f.was_given("kubeconfig"));
        assert_eq!(parse(&["-v", "2"]).v, Some(2));
        assert_eq!(parse(&["-v=3"]).v, Some(3));
    }

    #[test]
    fn no_effect_flags_are_accepted_and_named() {
        let f = parse(&["--ipvs-scheduler", "rr", "--log_dir=/tmp", "--v=1"]);
        let names: Vec<(String, String)> = f
            .no_effect_given()
            .into_iter()
            .map(|(n, v, _)| (n, v))
            .collect();
        assert_eq!(
            names,
            [
                ("ipvs-scheduler".to_string(), "rr".to_string()),
                ("log-dir".into(), "/tmp".into())
            ]
        );
        assert_eq!(f.v, Some(1));
    }

    #[test]
    fn bad_values_fail_as_kube_proxy() {
        let e = fails(&["--healthz-bind-address=nonsense"]);
        assert!(
            e.contains("\"nonsense\" is not in a valid format (ip or ip:port): address nonsense: missing port in address"),
            "{e}"
        );
        let e = fails(&["--bind-address=1.2.3"]);
        assert!(e.contains("\"1.2.3\" is not a valid IP address"), "{e}");
        let e = fails(&["--metrics-bind-address=1.2.3.4:x"]);
        assert!(e.contains("\"x\" is not a valid number"), "{e}");
        fails(&["--no-such-flag"]);
        fails(&["--iptables-sync-period=10"]);
        fails(&["positional"]);
    }

    #[test]
    fn addresses_accepted() {
        let f = parse(&[
            "--healthz-bind-address=0.0.0.0",
            "--metrics-bind-address=[::1]:10249",
            "--bind-address=198.18.0.1",
        ]);
        assert_eq!(f.healthz_bind_address.as_deref(), Some("0.0.0.0"));
        assert_eq!(f.metrics_bind_address.as_deref(), Some("[::1]:10249"));
        assert_eq!(
            parse(&["--healthz-bind-address="])
                .healthz_bind_address
                .as_deref(),
            Some("")
        );
    }

    /// Every flag has a description, and every flag under the no-effect heading says in
    /// NO_EFFECT what happens to it (and the other way round).
    #[test]
    fn every_flag_is_described() {
        let cmd = Flags::command();
        let mut undescribed = Vec::new();
        let mut no_effect_heading = Vec::new();
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                undescribed.push(id.to_string());
            }
            if a.get_help_heading() == Some(NONE) {
                no_effect_heading.push(id.to_string());
            }
        }
        assert!(
            undescribed.is_empty(),
            "flags without a description: {undescribed:?}"
        );
        let mut listed: Vec<String> = NO_EFFECT.iter().map(|(id, _)| id.to_string()).collect();
        listed.sort();
        no_effect_heading.sort();
        assert_eq!(listed, no_effect_heading);
        let help = cmd.clone().render_long_help().to_string();
        assert!(help.contains("explain"), "{help}");
    }

    /// `explain --help` documents every explain argument.
    #[test]
    fn explain_help_is_complete() {
        let cmd = ExplainFlags::command();
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" {
                continue;
            }
            assert!(
                a.get_help()
                    .is_some_and(|h| !h.to_string().trim().is_empty()),
                "explain --{id} has no description"
            );
        }
        let help = explain_help();
        for flag in [
            "--src",
            "--dst",
            "--iif",
            "--from-host",
            "--manifests",
            "--dry-run",
        ] {
            assert!(help.contains(flag), "{flag}: {help}");
        }
    }
}
