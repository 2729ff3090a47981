//! The gate lookup against upstream's messages (component-base `featuregate.SetFromMap`,
//! kube-proxy's `failed complete: ` prefix is added by the caller).

use super::*;

fn m(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn ok(pairs: &[(&str, bool)]) -> (FeatureGates, Vec<String>) {
    FeatureGates::resolve(&m(pairs)).expect("resolves")
}

/// Upstream's messages, as data: (featureGates, the error SetFromMap returns).
const ERRORS: &[(&[(&str, bool)], &str)] = &[
    (
        &[("NoSuchGate", true)],
        "unrecognized feature gate: NoSuchGate",
    ),
    (
        // removed after 1.35: unknown at 1.38
        &[("ServiceTrafficDistribution", true)],
        "unrecognized feature gate: ServiceTrafficDistribution",
    ),
    (
        &[("TopologyAwareHints", false)],
        "cannot set feature gate TopologyAwareHints to false, feature is locked to true",
    ),
    (
        &[("NFTablesProxyMode", false), ("TopologyAwareHints", false)],
        "[cannot set feature gate NFTablesProxyMode to false, feature is locked to true, \
         cannot set feature gate TopologyAwareHints to false, feature is locked to true]",
    ),
    (
        // the unknown gate ends the walk; errors found before it are kept
        &[("NFTablesProxyMode", false), ("Zzz", true)],
        "[cannot set feature gate NFTablesProxyMode to false, feature is locked to true, \
         unrecognized feature gate: Zzz]",
    ),
];

#[test]
fn errors_are_upstreams() {
    for (pairs, want) in ERRORS {
        assert_eq!(
            FeatureGates::resolve(&m(pairs)).unwrap_err(),
            *want,
            "{pairs:?}"
        );
    }
}

#[test]
fn deprecated_and_ga_gates_warn_as_upstream() {
    let (_, w) = ok(&[
        ("AllowServiceExternalIPs", false),
        ("TopologyAwareHints", true),
    ]);
    assert_eq!(
        w,
        [
            "Setting deprecated feature gate AllowServiceExternalIPs=false. It will be removed in a future release.",
            "Setting GA feature gate TopologyAwareHints=true. It will be removed in a future release.",
        ]
    );
    // alpha / beta gates and the AllAlpha / AllBeta keys: no warning
    let (_, w) = ok(&[
        ("AllAlpha", true),
        ("AllBeta", false),
        ("KubeProxyNFTablesLocalhostNodePorts", true),
    ]);
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn defaults_at_1_38() {
    let (g, _) = ok(&[]);
    for name in [
        "AllowServiceExternalIPs",
        "KubeProxyNFTablesLocalhostNodePorts",
        "ComponentStatusz",
        "ComponentFlagz",
        "TopologyAwareHints",
    ] {
        assert!(g.enabled(name), "{name}");
    }
    assert!(!g.enabled("LoggingAlphaOptions"));
    // unknown: off, never a panic
    assert!(!g.enabled("NoSuchGate"));
}

#[test]
fn explicit_values_and_all_alpha_all_beta() {
    let (g, _) = ok(&[("AllowServiceExternalIPs", false)]);
    assert!(!g.enabled("AllowServiceExternalIPs"));
    let (g, _) = ok(&[("AllBeta", false)]);
    assert!(!g.enabled("KubeProxyNFTablesLocalhostNodePorts"));
    assert!(!g.enabled("ComponentStatusz"));
    // AllBeta touches beta gates only
    assert!(g.enabled("AllowServiceExternalIPs"));
    assert!(g.enabled("TopologyAwareHints"));
    // an explicit key wins over AllBeta whatever the order
    let (g, _) = ok(&[("AllBeta", false), ("ComponentStatusz", true)]);
    assert!(g.enabled("ComponentStatusz"));
    assert!(!g.enabled("ComponentFlagz"));
    let (g, _) = ok(&[("AllAlpha", true)]);
    assert!(g.enabled("LoggingAlphaOptions"));
    assert!(g.enabled("KubeProxyNFTablesLocalhostNodePorts"));
}

#[test]
fn every_other_gate_is_known_and_well_formed() {
    let mut n = 0;
    for l in OTHER_GATES.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 3, "{l}");
        assert!(Stage::parse(f[1]).is_some(), "{l}");
        assert!(f[2] == "true" || f[2] == "false", "{l}");
        assert!(
            !PROXY_GATES.iter().any(|g| g.name == f[0]),
            "{} is in both lists",
            f[0]
        );
        assert!(is_known(f[0]));
        n += 1;
    }
    assert!(n > 200, "{n}");
    // a gate of another component is accepted, changes nothing here
    let (g, w) = ok(&[("SELinuxMount", true), ("KubeletInUserNamespace", false)]);
    assert!(!g.enabled("KubeletInUserNamespace"));
    assert_eq!(
        w,
        ["Setting GA feature gate SELinuxMount=true. It will be removed in a future release."]
    );
}

#[test]
fn all_lists_every_gate_with_upstreams_stage_names() {
    let (g, _) = ok(&[("AllowServiceExternalIPs", false)]);
    let all = g.all();
    assert!(all.len() > 250, "{}", all.len());
    let find = |n: &str| all.iter().find(|(name, ..)| *name == n).copied();
    assert_eq!(
        find("AllowServiceExternalIPs"),
        Some(("AllowServiceExternalIPs", "DEPRECATED", false))
    );
    assert_eq!(
        find("KubeProxyNFTablesLocalhostNodePorts"),
        Some(("KubeProxyNFTablesLocalhostNodePorts", "BETA", true))
    );
    assert_eq!(
        find("TopologyAwareHints"),
        Some(("TopologyAwareHints", "", true))
    );
    assert_eq!(find("AllAlpha"), Some(("AllAlpha", "ALPHA", false)));
    assert_eq!(find("AllBeta"), Some(("AllBeta", "BETA", false)));
}

/// `NFTablesNetlink` (kubernetes PR #137536: beta and on by default since 1.37) is a
/// gate kube-proxy knows: a ConfigMap that turns it off must not stop the daemon.
///
/// Negative control (run 2026-12-06, the gate list before it was added):
/// `unrecognized feature gate: NFTablesNetlink`.
#[test]
fn nftables_netlink_is_known_beta_and_on() {
    let (g, w) = ok(&[("NFTablesNetlink", false)]);
    assert!(w.is_empty(), "a beta gate set warns nothing: {w:?}");
    assert!(!g.enabled("NFTablesNetlink"));
    let (g, _) = ok(&[]);
    assert!(g.enabled("NFTablesNetlink"), "on by default since 1.37");
    let (g, _) = ok(&[("AllBeta", false)]);
    assert!(!g.enabled("NFTablesNetlink"), "a beta gate follows AllBeta");
}

/// Gates that are new in 1.38 (alpha) or changed stage in 1.38 are known with their 1.38
/// stage and default.
///
/// Negative control (run 2026-12-06, the 1.37 list): `unrecognized feature gate:
/// ContainerUlimits`.
#[test]
fn gates_of_1_38_are_known() {
    for name in [
        "ContainerUlimits",
        "MutableContainerProbes",
        "PodDefaultNetwork",
        "SecurityProfileOCI",
    ] {
        let (g, _) = ok(&[(name, true)]);
        assert!(g.enabled(name), "{name}");
        let (g, _) = ok(&[]);
        assert!(!g.enabled(name), "{name} is alpha, off by default");
    }
    let (g, _) = ok(&[]);
    assert!(
        g.enabled("WindowsCPUAndMemoryAffinity"),
        "beta and on in 1.38 (alpha until 1.37)"
    );
}

/// Every gate is listed once in `kubernetes_feature_enabled` (one series per gate).
///
/// Negative control (run 2026-12-06, with `WatchListClient` twice in `PROXY_GATES`):
/// `WatchListClient listed 2 times`.
#[test]
fn every_gate_is_listed_once() {
    let (g, _) = ok(&[]);
    let all = g.all();
    for (name, _, _) in &all {
        let n = all.iter().filter(|(x, _, _)| x == name).count();
        assert_eq!(n, 1, "{name} listed {n} times");
    }
    let mut names: Vec<&str> = PROXY_GATES.iter().map(|g| g.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names.len(),
        PROXY_GATES.len(),
        "a gate twice in PROXY_GATES"
    );
}
