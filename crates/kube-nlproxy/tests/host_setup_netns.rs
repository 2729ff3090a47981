//! What the daemon changes on its host before it can run, and the loopback guard when a
//! node moves from iptables mode to nftables mode, inside network namespaces of the
//! test's (never the root one): `net.ipv4.conf.all.route_localnet` and the conntrack
//! timeouts are per network namespace, so the daemon run with `ip netns exec` writes
//! them there.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use netns_tests::{require_root, Line, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nlproxy");

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("nlp-host-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        Tmp(p)
    }
    fn path(&self, n: &str) -> PathBuf {
        self.0.join(n)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sysctl(ns: &Netns, key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    ns.run(move || std::fs::read_to_string(&path).unwrap_or_default())
        .trim()
        .to_string()
}

/// The daemon in `ns` with `args`, no in-cluster environment and no kubeconfig around;
/// (exit code, stderr). Killed after 20 s.
fn run_daemon(ns: &Netns, home: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN])
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the daemon");
    let mut status = None;
    for _ in 0..400 {
        if let Some(s) = child.try_wait().expect("wait") {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut err = String::new();
    use std::io::Read;
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    (status.and_then(|s| s.code()), err)
}

const SYSCTLS: &[&str] = &[
    "net.ipv4.conf.all.route_localnet",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
];

/// Without a usable source of desired state (no `--kubeconfig`, no `--master`, no
/// in-cluster environment; or a `--manifests` path that does not exist) the daemon exits
/// 1 before it writes a sysctl: kube-proxy creates its API client before its
/// `platformSetup` and its proxier write any (`cmd/kube-proxy/app/server.go`,
/// `newProxyServer`), so a crash-looping pod changes nothing on the node. iptables mode
/// with localhost NodePorts (the defaults) would set `route_localnet=1`, and the
/// conntrack timeouts would be set to 24 h / 1 h.
///
/// Negative control (run 2026-12-06, the sysctls applied before the source is checked, as
/// before this test): `no credentials: route_localnet written before the daemon could
/// run: 1`.
#[test]
fn no_sysctl_is_written_before_the_source_is_usable() {
    require_root!();
    let ns = Netns::new("hostsetup");
    ns.enable_conntrack();
    let tmp = Tmp::new("nosource");
    let before: Vec<String> = SYSCTLS.iter().map(|k| sysctl(&ns, k)).collect();
    assert_eq!(before[0], "0");
    let missing = tmp.path("no-such-manifests.yaml");
    for (case, args) in [
        (
            "no credentials",
            vec!["--hostname-override", "node-a", "--proxy-mode", "iptables"],
        ),
        (
            "no credentials, --init-only",
            vec!["--hostname-override", "node-a", "--init-only"],
        ),
        (
            "a missing manifests path",
            vec![
                "--hostname-override",
                "node-a",
                "--manifests",
                missing.to_str().unwrap(),
            ],
        ),
    ] {
        let (code, err) = run_daemon(&ns, &tmp.0, &args);
        assert_eq!(code, Some(1), "{case}: {err}");
        for (k, was) in SYSCTLS.iter().zip(&before) {
            let now = sysctl(&ns, k);
            assert_eq!(
                &now,
                was,
                "{case}: {} written before the daemon could run: {now}\n{err}",
                k.rsplit('.').next().unwrap()
            );
        }
    }
}

fn manifest(node_ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-a}}\n\
         status:\n  addresses: [{{type: InternalIP, address: {node_ip}}}]\n"
    )
}

/// A neighbour's TCP connection to `dst` through the node: whether it was answered
/// (accepted or refused: the node took the packet); a drop times out.
fn neighbour_reaches(client: &Netns, dst: SocketAddr) -> bool {
    client.run(
        move || match TcpStream::connect_timeout(&dst, Duration::from_secs(2)) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        },
    )
}

/// A node moved from iptables mode to nftables mode. In iptables mode the daemon sets
/// `route_localnet=1` (localhost NodePorts) and guards it with the iptables proxier's
/// `KUBE-FIREWALL` rule in its table: a neighbour routing 127.0.0.0/8 to the node does not
/// reach a program listening on the node's loopback (kubelet's 127.0.0.1:10248, say).
/// Proven here that the guard went with iptables mode's rules while `route_localnet`
/// stayed 1: the loopback-only listener answered the neighbour (CVE-2020-8558). Upstream
/// leaves no such gap: its iptables mode writes `KUBE-FIREWALL` into the iptables filter
/// table, and its nftables mode never deletes that chain (it is shared with kubelet,
/// which writes the same rule). Fixed as upstream stays safe: whenever the daemon finds
/// `route_localnet=1` on the node, its rules carry the same guard in every mode; the
/// sysctl, which is not nftables mode's, is left alone (another program may need it).
///
/// Negative control (run 2026-12-06, without the guard when `route_localnet` is found
/// set, `ParsedConfig::route_localnet` ignored by the skeleton): `after the move to
/// nftables mode: route_localnet 1, a neighbour reached the node's loopback-only
/// listener on 127.0.0.5:7771`.
#[test]
fn a_node_moved_from_iptables_to_nftables_mode_keeps_loopback_unreachable_from_outside() {
    require_root!();
    let l = Line::new();
    let tmp = Tmp::new("localnet");
    let file = tmp.path("node.yaml");
    std::fs::write(&file, manifest(Line::ROUTER4_C)).unwrap();
    // a program of the node's that listens on loopback only
    let listener = l
        .router
        .run(|| TcpListener::bind("127.0.0.5:7771"))
        .expect("bind on the node's loopback");
    listener.set_nonblocking(true).unwrap();
    // the neighbour routes 127.0.0.0/8 (but its own 127.0.0.1) to the node
    l.client.ip(&[
        "route",
        "del",
        "local",
        "127.0.0.0/8",
        "dev",
        "lo",
        "table",
        "local",
    ]);
    l.client
        .ip(&["route", "add", "127.0.0.0/8", "via", Line::ROUTER4_C]);
    l.client.sysctl("net.ipv4.conf.all.route_localnet", "1");
    let dst: SocketAddr = "127.0.0.5:7771".parse().unwrap();
    let once = |mode: &str| {
        let (code, err) = run_daemon(
            &l.router,
            &tmp.0,
            &[
                "--manifests",
                file.to_str().unwrap(),
                "--hostname-override",
                "node-a",
                "--proxy-mode",
                mode,
                "--once",
            ],
        );
        assert_eq!(code, Some(0), "{mode} mode: {err}");
        err
    };

    // iptables mode: set and guarded
    once("iptables");
    assert_eq!(
        sysctl(&l.router, "net.ipv4.conf.all.route_localnet"),
        "1",
        "iptables mode serves localhost NodePorts"
    );
    assert!(
        !neighbour_reaches(&l.client, dst),
        "iptables mode: a neighbour reached the node's loopback-only listener on {dst}"
    );

    // the move: nftables mode
    let err = once("nftables");
    let localnet = sysctl(&l.router, "net.ipv4.conf.all.route_localnet");
    let reached = neighbour_reaches(&l.client, dst);
    assert!(
        !reached && localnet == "1",
        "after the move to nftables mode: route_localnet {localnet}, {} the node's \
         loopback-only listener on {dst}\n{err}",
        if reached {
            "a neighbour reached"
        } else {
            "no neighbour reached"
        }
    );
    assert!(
        err.contains("route_localnet=1 on this node"),
        "the guard is logged:\n{err}"
    );
    // the node itself still reaches its loopback
    let local = l
        .router
        .run(move || TcpStream::connect_timeout(&dst, Duration::from_secs(2)).is_ok());
    assert!(local, "the node's own connection to {dst}");
    drop(listener);
}
