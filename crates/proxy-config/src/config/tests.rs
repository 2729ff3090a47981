//! Data-driven tests: `testdata/config/NAME.{in.yaml,flags}` in, the effective
//! configuration (`NAME.out.yaml`), the error (`NAME.err`) and the start-up lines about
//! the configuration (`NAME.notices`) out. See `testdata/config/README.md`.

use std::path::{Path, PathBuf};

use crate::flags::{Flags, Parsed};
use crate::settings;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/config")
}

fn case_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".in.yaml")
                .or_else(|| n.strip_suffix(".flags"))
                .map(String::from)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What a case gives: (out.yaml or "", err or "", notices).
fn run(name: &str) -> (String, String, String) {
    let mut args = vec!["kube-nlproxy".to_string()];
    let input = dir().join(format!("{name}.in.yaml"));
    if input.exists() {
        args.push(format!("--config={}", input.display()));
    }
    if let Ok(text) = std::fs::read_to_string(dir().join(format!("{name}.flags"))) {
        args.extend(text.lines().filter(|l| !l.is_empty()).map(String::from));
    }
    let flags = match Flags::parse_args(args) {
        Parsed::Run(f) => f,
        Parsed::Exit { text, .. } => return (String::new(), text, String::new()),
    };
    match settings::load(&flags) {
        Ok(s) => {
            let notices: Vec<String> = s.notices.iter().map(|n| format!("{n}\n")).collect();
            (
                crate::config::to_yaml(&s.config),
                String::new(),
                notices.concat(),
            )
        }
        Err(e) => (String::new(), format!("{e}\n"), String::new()),
    }
}

fn check(name: &str, ext: &str, got: &str, failures: &mut Vec<String>) {
    let path = dir().join(format!("{name}.{ext}"));
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        if got.is_empty() {
            let _ = std::fs::remove_file(&path);
        } else {
            std::fs::write(&path, got).unwrap();
        }
        return;
    }
    if want != got {
        failures.push(format!("{name}.{ext}:\n--- want\n{want}--- got\n{got}"));
    }
}

#[test]
fn fixtures() {
    let names = case_names();
    assert!(names.len() >= 10, "{names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let (out, err, notices) = run(name);
        check(name, "out.yaml", &out, &mut failures);
        check(name, "err", &err, &mut failures);
        check(name, "notices", &notices, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What `--write-config-to` writes reads back to the same configuration (except a
/// disabled server: an empty address reads back as the default, in upstream too).
#[test]
fn written_config_reads_back() {
    for name in case_names() {
        let (out, err, _) = run(&name);
        if !err.is_empty() || out.contains("BindAddress: \"\"") {
            continue;
        }
        let back = crate::config::load_text(&out).unwrap();
        assert!(back.unknown.is_empty(), "{name}: {:?}", back.unknown);
        let mut c = back.config;
        c.apply_platform_defaults();
        assert_eq!(crate::config::to_yaml(&c), out, "{name}");
    }
}

/// The fields upstream's own defaulting fills in for kubeadm's null, zero and empty
/// values (issue 13's list).
#[test]
fn kubeadm_nulls_are_defaulted() {
    let text = std::fs::read_to_string(dir().join("kubeadm-v1.31.in.yaml")).unwrap();
    let mut c = crate::config::load_text(&text).unwrap().config;
    c.apply_platform_defaults();
    assert_eq!(c.node_port_addresses, None);
    assert_eq!(c.sync_period, crate::duration::GoDuration::secs(30));
    assert_eq!(c.min_sync_period, crate::duration::GoDuration::secs(1));
    assert_eq!(c.healthz_bind_address, "0.0.0.0:10256");
    assert_eq!(c.metrics_bind_address, "127.0.0.1:10249");
    assert_eq!(c.linux.conntrack.max_per_core, Some(32768));
    assert_eq!(c.linux.conntrack.min, Some(131072));
    assert_eq!(c.linux.oom_score_adj, Some(-999));
    assert_eq!(c.client_connection.qps, 5.0);
    assert_eq!(c.client_connection.burst, 10);
    assert_eq!(c.iptables.masquerade_bit, Some(14));
    assert_eq!(c.mode, "iptables");
    assert!(crate::config::validate::validate(&c).is_ok());
}

#[test]
fn not_a_kube_proxy_configuration() {
    for (text, want) in [
        ("apiVersion: v1\nkind: Service\n", "no kind \"Service\" is registered for version \"v1\""),
        ("mode: nftables\n", "Object 'Kind' is missing"),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnftables:\n  syncPeriod: null\n",
            "invalid duration",
        ),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\noomScoreAdj: \"-999\"\n",
            "invalid type",
        ),
    ] {
        let e = crate::config::load_text(text).unwrap_err().to_string();
        assert!(e.starts_with("failed to decode: ") && e.contains(want), "{e}");
    }
}

#[test]
fn addresses_without_a_port_are_completed() {
    use crate::config::v1alpha1::append_port_if_needed as a;
    assert_eq!(a("0.0.0.0", 10256), "0.0.0.0:10256");
    assert_eq!(a("::", 10256), "[::]:10256");
    assert_eq!(a("198.18.0.1:9", 10256), "198.18.0.1:9");
    assert_eq!(a("nonsense", 10256), "nonsense");
}
