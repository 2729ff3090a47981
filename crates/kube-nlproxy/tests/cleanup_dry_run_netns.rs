//! `--cleanup --dry-run` prints what `--cleanup` would delete and deletes nothing; the
//! same command without `--dry-run` deletes it (the negative control), inside a network
//! namespace of the test's own.

use std::io::Write;
use std::process::{Command, Stdio};

use netns_tests::{require_root, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nlproxy");

const KUBE_PROXY_NAT: &str = "*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-4N57TFCL4MD7ZTDA - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 198.18.3.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-4N57TFCL4MD7ZTDA
-A KUBE-SVC-4N57TFCL4MD7ZTDA -p tcp -m tcp -j DNAT --to-destination 198.18.64.9:8080
COMMIT
";

fn cleanup(ns: &Netns, dry_run: bool) -> (String, String) {
    let mut args = vec!["netns", "exec", ns.name(), BIN, "--cleanup"];
    if dry_run {
        args.push("--dry-run");
    }
    let out = Command::new("ip").args(&args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

#[test]
fn cleanup_dry_run_deletes_nothing() {
    require_root!();
    let ns = Netns::new("cleanup-dry");
    ns.nft("table ip kube-nlproxy {\n  chain c {\n  }\n}\n");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), "iptables-restore"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("iptables-restore");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(KUBE_PROXY_NAT.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let before = ns.exec_ok("nft", &["list", "ruleset"]);

    let (script, log) = cleanup(&ns, true);
    assert!(script.contains("delete table ip kube-nlproxy"), "{script}");
    assert!(script.contains("KUBE-SERVICES"), "{script}");
    assert!(log.contains("nothing deleted"), "{log}");
    assert_eq!(
        ns.exec_ok("nft", &["list", "ruleset"]),
        before,
        "dry run changed nothing"
    );

    // negative control: the same without --dry-run deletes
    cleanup(&ns, false);
    let after = ns.exec_ok("nft", &["list", "ruleset"]);
    assert!(
        !after.contains("kube-nlproxy") && !after.contains("KUBE-SERVICES"),
        "{after}"
    );
}
