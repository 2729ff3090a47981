use super::*;
use crate::flags::Parsed;

fn flags(args: &[&str]) -> Flags {
    let mut v = vec!["kube-nlproxy".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    match Flags::parse_args(v) {
        Parsed::Run(f) => *f,
        Parsed::Exit { text, .. } => panic!("{text}"),
    }
}

fn tmp_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nlp-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn defaults_match_upstream() {
    let s = load(&flags(&["--hostname-override=Node-A"])).unwrap();
    assert_eq!(s.node_name, "node-a");
    assert_eq!(s.sync_period, Duration::from_secs(30));
    assert_eq!(s.min_sync_period, Duration::from_secs(1));
    assert_eq!(s.ruleset.masquerade_mark, 1 << 14);
    assert_eq!(s.healthz_bind_address, "0.0.0.0:10256");
    assert_eq!(s.metrics_bind_address, "127.0.0.1:10249");
    assert_eq!(s.kube.qps, 5.0);
    assert_eq!(s.kube.burst, 10);
    assert_eq!(s.conntrack.max_per_core, Some(32768));
    assert_eq!(s.oom_score_adj, Some(-999));
    assert_eq!(s.config.mode, "iptables");
    // iptables (the default mode): NodePorts on all addresses.
    let all: Vec<kube_model::Cidr> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
    assert_eq!(s.ruleset.node_port_cidrs, all);
    assert!(!s.ruleset.node_port_primary);
    let s = load(&flags(&["--hostname-override=a", "--proxy-mode=nftables"])).unwrap();
    assert!(s.ruleset.node_port_primary);
    assert!(s.ruleset.node_port_cidrs.is_empty());
}

/// With --config the file decides: configuration flags are ignored (and named),
/// logging flags and --hostname-override still apply.
#[test]
fn config_file_wins_over_flags() {
    let p = tmp_config(
        "c.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
         mode: nftables\nhostnameOverride: from-file\nnftables:\n  syncPeriod: 45s\n  masqueradeBit: 10\n",
    );
    let cfg = format!("--config={}", p.display());
    let s = load(&flags(&[&cfg])).unwrap();
    assert_eq!(s.node_name, "from-file");
    assert_eq!(s.sync_period, Duration::from_secs(45));
    assert_eq!(s.ruleset.masquerade_mark, 1 << 10);
    let s = load(&flags(&[
        &cfg,
        "--hostname-override=From-Flag",
        "--iptables-sync-period=20s",
        "--masquerade-all",
        "--v=4",
    ]))
    .unwrap();
    assert_eq!(s.node_name, "from-flag");
    assert_eq!(s.sync_period, Duration::from_secs(45), "flag ignored");
    assert!(!s.ruleset.masquerade_all, "flag ignored");
    assert_eq!(s.verbosity, 4, "logging flags apply");
    let ignored: Vec<String> = s
        .notices
        .iter()
        .filter_map(|n| match n {
            Notice::FlagIgnoredWithConfig { flag } => Some(flag.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ignored, ["--masquerade-all", "--iptables-sync-period"]);
}

/// Without --config, the flags apply (negative control of the test above).
#[test]
fn flags_apply_without_config() {
    let s = load(&flags(&[
        "--hostname-override=a",
        "--iptables-sync-period=20s",
        "--masquerade-all",
    ]))
    .unwrap();
    assert_eq!(s.sync_period, Duration::from_secs(20));
    assert!(s.ruleset.masquerade_all);
}

#[test]
fn values_upstream_rejects() {
    let err = |args: &[&str]| load(&flags(args)).unwrap_err().to_string();
    assert_eq!(
        err(&["--oom-score-adj=5000"]),
        "failed validate: oomScoreAdj: Invalid value: 5000: must be within the range [-1000, 1000]"
    );
    assert_eq!(
        err(&["--hostname-override=  "]),
        "failed complete: empty hostname-override is invalid"
    );
    assert!(err(&["--detect-local-mode=Foo"])
        .starts_with("failed validate: detectLocalMode: Unsupported value: \"Foo\""));
    assert!(err(&["--iptables-masquerade-bit=40"])
        .contains("iptables.masqueradeBit: Invalid value: 40"));
    assert!(err(&["--cluster-cidr=nope"]).contains("clusterCIDR: Invalid value: \"nope\""));
    assert!(err(&["--feature-gates=Foo"]).contains("missing bool value for Foo"));
    assert!(err(&["--feature-gates=Foo=maybe"]).contains("invalid value of Foo: maybe"));
}

#[test]
fn deprecated_port_flags_and_bind_address() {
    let s = load(&flags(&[
        "--hostname-override=a",
        "--healthz-bind-address=198.18.0.1",
        "--metrics-port=0",
        "--bind-address=198.18.0.9",
    ]))
    .unwrap();
    assert_eq!(s.healthz_bind_address, "198.18.0.1:10256");
    assert_eq!(s.metrics_bind_address, "");
    assert_eq!(s.node_ip_override, "198.18.0.9".parse().ok());
    let s = load(&flags(&["--hostname-override=a", "--bind-address=0.0.0.0"])).unwrap();
    assert_eq!(s.node_ip_override, None);
}

#[test]
fn ipvs_mode_uses_its_own_periods() {
    let s = load(&flags(&[
        "--hostname-override=a",
        "--proxy-mode=ipvs",
        "--iptables-sync-period=20s",
        "--ipvs-sync-period=10s",
    ]))
    .unwrap();
    assert_eq!(s.sync_period, Duration::from_secs(10));
}

/// ipvs mode is not silent: a warning says that it is deprecated upstream (1.35) and that
/// kube-nlproxy serves it without IPVS (nftables rules with the iptables proxier's
/// behaviour), and each IPVS-only setting given is named as without effect.
///
/// Negative control (run 2026-12-06, before): the only notice was an info line, `I ipvs
/// mode runs kube-nlproxy's nftables backend with the ipvs section's sync periods`.
#[test]
fn ipvs_mode_warns_that_it_runs_no_ipvs() {
    let s = load(&flags(&[
        "--hostname-override=a",
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=mh",
    ]))
    .unwrap();
    let lines: Vec<String> = s.notices.iter().map(ToString::to_string).collect();
    let w = lines
        .iter()
        .find(|l| l.starts_with("W ") && l.contains("ipvs proxier is deprecated"))
        .unwrap_or_else(|| panic!("no ipvs mode warning: {lines:#?}"));
    assert!(
        w.contains("no IPVS proxier") && w.contains("iptables proxier's behaviour"),
        "{w}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("W Flag has no effect") && l.contains("--ipvs-scheduler")),
        "{lines:#?}"
    );
}

/// `--feature-gates` / `featureGates` go through component-base's SetFromMap: an unknown
/// or locked gate ends kube-proxy with "failed complete: <SetFromMap's error>"; a
/// deprecated or GA gate is a warning; the resolved gates reach the compiler.
#[test]
fn feature_gates_are_resolved_as_upstream() {
    let err = |args: &[&str]| load(&flags(args)).unwrap_err().to_string();
    assert_eq!(
        err(&["--hostname-override=a", "--feature-gates=NoSuchGate=true"]),
        "failed complete: unrecognized feature gate: NoSuchGate"
    );
    assert_eq!(
        err(&["--hostname-override=a", "--feature-gates=TopologyAwareHints=false"]),
        "failed complete: cannot set feature gate TopologyAwareHints to false, feature is locked to true"
    );
    // the file's featureGates, likewise
    let p = tmp_config(
        "gates.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
         hostnameOverride: a\nfeatureGates:\n  Bogus: true\n",
    );
    assert_eq!(
        err(&[&format!("--config={}", p.display())]),
        "failed complete: unrecognized feature gate: Bogus"
    );

    // defaults: externalIPs programmed, no warning
    let s = load(&flags(&["--hostname-override=a"])).unwrap();
    assert!(s.ruleset.allow_external_ips);
    assert!(s.gates.enabled("KubeProxyNFTablesLocalhostNodePorts"));
    assert!(!s
        .notices
        .iter()
        .any(|n| matches!(n, Notice::FeatureGate { .. })));

    let s = load(&flags(&[
        "--hostname-override=a",
        "--feature-gates=AllowServiceExternalIPs=false,KubeProxyNFTablesLocalhostNodePorts=false",
    ]))
    .unwrap();
    assert!(!s.ruleset.allow_external_ips);
    assert!(!s.gates.enabled("KubeProxyNFTablesLocalhostNodePorts"));
    let lines: Vec<String> = s.notices.iter().map(|n| n.to_string()).collect();
    assert!(
        lines.contains(
            &"W Setting deprecated feature gate AllowServiceExternalIPs=false. It will be removed in a future release."
                .to_string()
        ),
        "{lines:?}"
    );
    // no longer reported as "has no effect"
    assert!(
        !lines.iter().any(|l| l.contains("feature-gates")),
        "{lines:?}"
    );
}

/// nftables mode's localhost NodePorts: `localhost` in nodePortAddresses selects both
/// families (and is no NodePort address of the rules: loopback is never in
/// nodeport-ips), the gate at its 1.38 default; the gate off selects none, with a note;
/// iptables mode never runs the proxy.
#[test]
fn localhost_node_ports_follow_mode_gate_and_node_port_addresses() {
    use kube_model::IpFamily;
    let run = |args: &[&str]| {
        let mut a = vec!["--hostname-override=a"];
        a.extend_from_slice(args);
        load(&flags(&a)).unwrap()
    };
    let s = run(&[
        "--proxy-mode=nftables",
        "--nodeport-addresses=primary,localhost",
    ]);
    assert_eq!(s.localhost_proxy_families, vec![IpFamily::V4, IpFamily::V6]);
    let s = run(&["--proxy-mode=nftables", "--nodeport-addresses=127.0.0.1/32"]);
    assert_eq!(s.localhost_proxy_families, vec![IpFamily::V4]);
    let s = run(&["--proxy-mode=nftables", "--nodeport-addresses=all"]);
    assert!(s.localhost_proxy_families.is_empty());
    let s = run(&[
        "--proxy-mode=nftables",
        "--nodeport-addresses=localhost",
        "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=false",
    ]);
    assert!(s.localhost_proxy_families.is_empty());
    let notes: Vec<String> = s.notices.iter().map(ToString::to_string).collect();
    assert!(
        notes.iter().any(|n| n.contains("the feature gate is off")),
        "{notes:?}"
    );
    let s = run(&["--proxy-mode=iptables", "--nodeport-addresses=localhost"]);
    assert!(s.localhost_proxy_families.is_empty());
    assert!(
        s.ruleset.localhost_node_ports_v4(),
        "iptables mode: by rules"
    );
}

/// `--kube-api-content-type`: protobuf (the default) and JSON are spoken without a note;
/// another type is noted (JSON used).
#[test]
fn api_content_type() {
    let notes = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["--hostname-override=n", "--nodeport-addresses=primary"];
        a.extend_from_slice(args);
        let s = load(&flags(&a)).unwrap();
        s.notices
            .iter()
            .map(ToString::to_string)
            .filter(|n| n.contains("ontentType") || n.contains("content-type"))
            .collect()
    };
    let s = load(&flags(&["--hostname-override=n"])).unwrap();
    assert_eq!(s.kube.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!(notes(&[]), Vec::<String>::new());
    assert_eq!(
        notes(&["--kube-api-content-type=application/json"]),
        Vec::<String>::new()
    );
    let n = notes(&["--kube-api-content-type=application/yaml"]);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].contains("JSON is used"), "{n:?}");
}
