//! `/flagz`'s list, as component-base's `zpages/flagz` lists kube-proxy's flag set: every
//! flag (`VisitAll`: hidden and deprecated ones too) with its value as pflag prints it,
//! the value given on the command line, else the default. kube-proxy's defaults are
//! pflag's texts of its defaulted configuration (`cmd/kube-proxy/app/options.go`:
//! durations as Go prints them, `30s`, `15m0s`; lists as `[]`); our own flags' come
//! from their declarations.

use clap::CommandFactory;

use crate::flags::Flags;

/// kube-proxy's flags whose declaration here has no default (an unset `Option`), with
/// the value kube-proxy prints for them when not given. A flag absent from this table
/// and without a declared default prints as an empty string (upstream's empty string
/// flags: `--config`, `--kubeconfig`, `--master`, ...).
const UPSTREAM_DEFAULTS: &[(&str, &str)] = &[
    ("bind-address", "0.0.0.0"),
    ("bind-address-hard-fail", "false"),
    ("boot-id-file", "/proc/sys/kernel/random/boot_id"),
    ("cleanup", "false"),
    ("config-sync-period", "15m0s"),
    ("conntrack-max-per-core", "32768"),
    ("conntrack-min", "131072"),
    ("conntrack-tcp-be-liberal", "false"),
    ("conntrack-tcp-timeout-close-wait", "1h0m0s"),
    ("conntrack-tcp-timeout-established", "24h0m0s"),
    ("conntrack-udp-timeout", "0s"),
    ("conntrack-udp-timeout-stream", "0s"),
    ("healthz-bind-address", "0.0.0.0:10256"),
    ("healthz-port", "10256"),
    ("init-only", "false"),
    ("iptables-localhost-nodeports", "true"),
    ("iptables-masquerade-bit", "14"),
    ("iptables-min-sync-period", "1s"),
    ("iptables-sync-period", "30s"),
    ("ipvs-exclude-cidrs", "[]"),
    ("ipvs-min-sync-period", "0s"),
    ("ipvs-strict-arp", "false"),
    ("ipvs-sync-period", "30s"),
    ("ipvs-tcp-timeout", "0s"),
    ("ipvs-tcpfin-timeout", "0s"),
    ("ipvs-udp-timeout", "0s"),
    ("kube-api-burst", "10"),
    (
        "kube-api-content-type",
        "application/vnd.kubernetes.protobuf",
    ),
    ("kube-api-qps", "5"),
    ("log-flush-frequency", "5s"),
    ("log-json-info-buffer-size", "0"),
    ("log-json-split-stream", "false"),
    ("log-text-info-buffer-size", "0"),
    ("log-text-split-stream", "false"),
    ("logging-format", "text"),
    (
        "machine-id-file",
        "/etc/machine-id,/var/lib/dbus/machine-id",
    ),
    ("masquerade-all", "false"),
    ("metrics-bind-address", "127.0.0.1:10249"),
    ("metrics-port", "10249"),
    ("nodeport-addresses", "[]"),
    ("oom-score-adj", "-999"),
    ("profiling", "false"),
    ("v", "0"),
    ("version", "false"),
];

/// Every flag and its value (given, else the default), sorted by name.
pub fn all(f: &Flags) -> Vec<(String, String)> {
    let given = f.given_flags();
    let mut out: Vec<(String, String)> = Flags::command()
        .get_arguments()
        .filter(|a| a.get_long().is_some())
        .map(|a| {
            let name = a.get_long().unwrap_or_default().to_string();
            let value = given
                .iter()
                .find(|(g, _)| *g == name)
                .map(|(_, v)| v.clone())
                .or_else(|| {
                    let d: Vec<String> = a
                        .get_default_values()
                        .iter()
                        .map(|v| v.to_string_lossy().into_owned())
                        .collect();
                    (!d.is_empty()).then(|| d.join(","))
                })
                .or_else(|| {
                    UPSTREAM_DEFAULTS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| v.to_string())
                })
                .unwrap_or_default();
            (name, value)
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::Parsed;

    fn parse(args: &[&str]) -> Flags {
        let mut v = vec!["kube-proxy".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match Flags::parse_args(v) {
            Parsed::Run(f) => *f,
            Parsed::Exit { text, .. } => panic!("{text}"),
        }
    }

    /// Every flag is listed once, with kube-proxy's default when not given and the value
    /// given otherwise; nothing but flags (no clap group).
    ///
    /// Negative control (run 2026-12-06, the given flags as collected before): a stray
    /// `("Flags", "hostname_override,iptables_sync_period")` (clap's group) among them;
    /// and `/flagz` listed the given flags only.
    #[test]
    fn every_flag_with_its_value() {
        let f = parse(&["--hostname-override=node-a", "--iptables-sync-period=10s"]);
        let all = all(&f);
        let get = |n: &str| {
            all.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{n} missing: {all:?}"))
        };
        assert_eq!(get("hostname-override"), "node-a");
        assert_eq!(get("iptables-sync-period"), "10s");
        assert_eq!(get("healthz-bind-address"), "0.0.0.0:10256");
        assert_eq!(get("conntrack-tcp-timeout-established"), "24h0m0s");
        assert_eq!(get("config"), "");
        assert_eq!(get("feature-gates"), "");
        assert_eq!(get("v"), "0");
        assert!(
            all.iter().all(|(k, _)| k != "Flags" && k != "help"),
            "{all:?}"
        );
        let mut names: Vec<&String> = all.iter().map(|(k, _)| k).collect();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!(all.len() > 60, "{}", all.len());
        assert!(
            !f.given_flags().iter().any(|(k, _)| k == "Flags"),
            "{:?}",
            f.given_flags()
        );
    }
}
