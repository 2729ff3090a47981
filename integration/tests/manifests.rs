//! Manifests mode: the ruleset follows file edits; an invalid object is reported and the
//! rest is programmed; a config file and the equivalent flags behave the same.

use std::process::Command;
use std::time::Duration;

use integration::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn yaml(objs: &[Value]) -> String {
    objs.iter()
        .map(|o| format!("---\n{o}\n"))
        .collect::<String>()
}

fn start(dir: &TempDir, manifests: &str) -> Daemon {
    let out = dir.path("ruleset.nft");
    Daemon::start(
        daemon_binary!(),
        &[
            "--manifests",
            manifests,
            "--hostname-override",
            "node-a",
            "--proxy-mode",
            "nftables",
            "--iptables-min-sync-period",
            "100ms",
            "--manifests-poll",
            "100ms",
            "--render-to",
            out.to_str().expect("utf-8"),
        ],
        dir.path("daemon.log"),
    )
}

fn wait_rules(d: &Daemon, dir: &TempDir, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let path = dir.path("ruleset.nft");
    let ok = wait_for(WAIT, || cond(&read(&path)));
    let text = read(&path);
    assert!(
        ok,
        "ruleset never showed {what}:\n{text}\n--- daemon log ---\n{}",
        d.log_text()
    );
    text
}

#[test]
fn ruleset_follows_file_edits() {
    let dir = TempDir::new("man-edit");
    let mdir = dir.path("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    let f1 = mdir.join("web.yaml");
    std::fs::write(
        &f1,
        yaml(&[
            node("node-a", "198.18.0.10"),
            service("demo", "web", "198.18.100.1", 80),
            slice("demo", "web", "web-1", &["198.18.64.11"], 8080, "node-a"),
        ]),
    )
    .unwrap();
    let d = start(&dir, mdir.to_str().unwrap());
    wait_rules(&d, &dir, "the initial service", |t| {
        t.contains("198.18.100.1 . tcp . 80 . 0 : ") && t.contains("198.18.64.11")
    });

    // Edit the file: another endpoint.
    std::fs::write(
        &f1,
        yaml(&[
            node("node-a", "198.18.0.10"),
            service("demo", "web", "198.18.100.1", 80),
            slice("demo", "web", "web-1", &["198.18.64.12"], 8080, "node-a"),
        ]),
    )
    .unwrap();
    wait_rules(&d, &dir, "the edited endpoint", |t| {
        t.contains("198.18.64.12") && !t.contains("198.18.64.11")
    });

    // A new file in the directory (JSON, as a List).
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        service("demo", "api", "198.18.100.2", 443),
        slice("demo", "api", "api-1", &["198.18.64.20"], 8443, "node-a"),
    ]});
    std::fs::write(mdir.join("api.json"), list.to_string()).unwrap();
    wait_rules(&d, &dir, "the service of the new file", |t| {
        t.contains("198.18.100.2 . tcp . 443 . 0 : ")
    });

    // Remove the first file: its service goes.
    std::fs::remove_file(&f1).unwrap();
    wait_rules(&d, &dir, "the removed file's service gone", |t| {
        !t.contains("198.18.100.1") && t.contains("198.18.100.2")
    });
}

#[test]
fn invalid_object_is_reported_and_the_rest_programmed() {
    let dir = TempDir::new("man-invalid");
    let f = dir.path("cluster.yaml");
    let mut bad_port = service("demo", "bad-port", "198.18.100.7", 80);
    bad_port["spec"]["ports"][0]["port"] = "eighty".into();
    let bad_ip = service("demo", "bad-ip", "198.18.300.1", 80);
    std::fs::write(
        &f,
        yaml(&[
            node("node-a", "198.18.0.10"),
            bad_port,
            service("demo", "good", "198.18.100.8", 80),
            bad_ip,
            slice("demo", "good", "good-1", &["198.18.64.80"], 8080, "node-a"),
        ]),
    )
    .unwrap();
    let d = start(&dir, f.to_str().unwrap());
    let text = wait_rules(&d, &dir, "the valid service", |t| {
        t.contains("198.18.100.8 . tcp . 80 . 0 : ") && t.contains("198.18.64.80")
    });
    assert!(!text.contains("198.18.100.7"), "{text}");
    assert!(
        wait_for(WAIT, || {
            let log = d.log_text();
            log.contains("Service demo/bad-port") && log.contains("demo/bad-ip")
        }),
        "invalid objects not reported:\n{}",
        d.log_text()
    );
    // Each is reported once, not at every sync or poll.
    std::thread::sleep(Duration::from_millis(800));
    let log = d.log_text();
    assert_eq!(log.matches("Service demo/bad-port").count(), 1, "{log}");
}

fn dry_run(args: &[&str]) -> String {
    let out = Command::new(daemon_binary!())
        .args(args)
        .output()
        .expect("run kube-nlproxy");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn config_file_and_flags_behave_the_same() {
    let dir = TempDir::new("man-config");
    let f = dir.path("cluster.yaml");
    let mut np = service("demo", "np", "198.18.100.9", 80);
    np["spec"]["type"] = "NodePort".into();
    np["spec"]["ports"][0]["nodePort"] = 30080.into();
    std::fs::write(
        &f,
        yaml(&[
            node("node-a", "198.18.0.10"),
            np,
            slice("demo", "np", "np-1", &["198.18.64.90"], 8080, "node-a"),
        ]),
    )
    .unwrap();
    let cfg = dir.path("config.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
         kind: KubeProxyConfiguration\n\
         mode: iptables\n\
         hostnameOverride: node-a\n\
         clusterCIDR: 198.18.64.0/18\n\
         detectLocalMode: ClusterCIDR\n\
         nodePortAddresses: [198.18.0.0/24]\n\
         iptables:\n  masqueradeBit: 10\n  syncPeriod: 20s\n  minSyncPeriod: 2s\n",
    )
    .unwrap();
    let m = f.to_str().unwrap();
    let from_file = dry_run(&[
        "--manifests",
        m,
        "--dry-run",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let from_flags = dry_run(&[
        "--manifests",
        m,
        "--dry-run",
        "--proxy-mode=iptables",
        "--hostname-override=node-a",
        "--cluster-cidr=198.18.64.0/18",
        "--detect-local-mode=ClusterCIDR",
        "--nodeport-addresses=198.18.0.0/24",
        "--iptables-masquerade-bit=10",
        "--iptables-sync-period=20s",
        "--iptables-min-sync-period=2s",
    ]);
    assert_eq!(from_file, from_flags);
    assert!(
        from_file.contains("0x00000400"),
        "mark bit 10:\n{from_file}"
    );
    assert!(
        from_file.contains("198.18.64.0/18"),
        "cluster CIDR:\n{from_file}"
    );
    // The defaults differ: the configuration did change something.
    let defaults = dry_run(&["--manifests", m, "--dry-run", "--hostname-override=node-a"]);
    assert_ne!(defaults, from_file);

    // --write-config-to from the flags, read back with --config: the same again.
    let written = dir.path("written.yaml");
    dry_run(&[
        "--proxy-mode=iptables",
        "--hostname-override=node-a",
        "--cluster-cidr=198.18.64.0/18",
        "--nodeport-addresses=198.18.0.0/24",
        "--iptables-masquerade-bit=10",
        "--iptables-sync-period=20s",
        "--iptables-min-sync-period=2s",
        "--write-config-to",
        written.to_str().unwrap(),
    ]);
    let text = read(&written);
    assert!(text.contains("kind: KubeProxyConfiguration"), "{text}");
    let again = dry_run(&[
        "--manifests",
        m,
        "--dry-run",
        "--config",
        written.to_str().unwrap(),
    ]);
    assert_eq!(again, from_file);

    // masqueradeAll: the mode's section in the file = --masquerade-all (a `linux:`
    // section is not v1alpha1: ignored with a warning, as kube-proxy does).
    let cfg2 = dir.path("config2.yaml");
    std::fs::write(
        &cfg2,
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
         kind: KubeProxyConfiguration\n\
         mode: nftables\n\
         nftables:\n  masqueradeAll: true\n",
    )
    .unwrap();
    let a = dry_run(&[
        "--manifests",
        m,
        "--dry-run",
        "--hostname-override=node-a",
        "--config",
        cfg2.to_str().unwrap(),
    ]);
    let b = dry_run(&[
        "--manifests",
        m,
        "--dry-run",
        "--hostname-override=node-a",
        "--proxy-mode=nftables",
        "--masquerade-all",
    ]);
    assert_eq!(a, b);
    assert_ne!(
        a,
        dry_run(&[
            "--manifests",
            m,
            "--dry-run",
            "--hostname-override=node-a",
            "--proxy-mode=nftables"
        ])
    );
}

#[test]
fn unknown_but_valid_kube_proxy_flags_are_accepted() {
    let dir = TempDir::new("man-flags");
    let f = dir.path("cluster.yaml");
    std::fs::write(&f, yaml(&[service("demo", "web", "198.18.100.1", 80)])).unwrap();
    let out = Command::new(daemon_binary!())
        .args([
            "--manifests",
            f.to_str().unwrap(),
            "--dry-run",
            "--hostname-override=node-a",
            "--ipvs-scheduler=rr",
            "--profiling",
            "--log_dir=/nonexistent",
            "--feature-gates=AllowServiceExternalIPs=true",
            "--v=2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ipvs-scheduler"), "{err}");
    assert!(err.contains("--log-dir"), "{err}");
    assert!(
        err.contains("Setting deprecated feature gate AllowServiceExternalIPs=true. It will be removed in a future release."),
        "{err}"
    );
    // A gate kube-proxy does not know is fatal, with upstream's message.
    let out = Command::new(daemon_binary!())
        .args([
            "--manifests",
            f.to_str().unwrap(),
            "--dry-run",
            "--hostname-override=node-a",
            "--feature-gates=SomeGate=true",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("failed complete: unrecognized feature gate: SomeGate"),
        "{err}"
    );
    // A flag kube-proxy does not have is an error.
    let out = Command::new(daemon_binary!())
        .args(["--no-such-flag"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn json_logging() {
    let dir = TempDir::new("man-json");
    let f = dir.path("cluster.yaml");
    std::fs::write(&f, yaml(&[service("demo", "web", "198.18.100.1", 80)])).unwrap();
    let out = Command::new(daemon_binary!())
        .args([
            "--manifests",
            f.to_str().unwrap(),
            "--dry-run",
            "--hostname-override=node-a",
            "--logging-format=json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let mut lines = 0;
    for line in err.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        // component-base's JSON: ts (ms), caller, msg, v (not on errors)
        assert!(v.get("ts").is_some_and(|t| t.is_f64()), "{line}");
        assert!(
            v.get("caller").is_some() && v.get("msg").is_some(),
            "{line}"
        );
        lines += 1;
    }
    assert!(lines > 0);
}

/// ServiceCIDR objects in the manifests give the service CIDRs: an address inside them
/// that no Service holds is dropped (kube-proxy learns them from the same objects).
#[test]
fn service_cidr_objects_enable_the_unallocated_cluster_ip_drop() {
    let dir = TempDir::new("man-scidr");
    let f = dir.path("all.yaml");
    let base = [
        node("node-a", "198.18.0.10"),
        service("demo", "web", "198.18.128.10", 80),
        slice("demo", "web", "web-1", &["198.18.64.5"], 8080, "node-a"),
    ];
    let dry = |text: &str| {
        std::fs::write(&f, text).unwrap();
        let out = Command::new(daemon_binary!())
            .args([
                "--manifests",
                f.to_str().unwrap(),
                "--hostname-override",
                "node-a",
                "--dry-run",
            ])
            .output()
            .expect("run --dry-run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let without = dry(&yaml(&base));
    assert!(!without.contains("198.18.128.0/24"), "{without}");
    let scidr = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["198.18.128.0/24"]}
    });
    let mut objs = base.to_vec();
    objs.push(scidr);
    let with = dry(&yaml(&objs));
    assert!(
        with.lines()
            .any(|l| l.contains("ip daddr 198.18.128.0/24") && l.contains("drop")),
        "{with}"
    );
}
