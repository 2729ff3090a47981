//! The binary as a user runs it, inside network namespaces (never the root one):
//! `--manifests ... --once` programs the node (checked with real TCP/UDP packets through
//! client - router(node) - server, and with `nft list`), `--dry-run` prints exactly that
//! ruleset and touches nothing, `--cleanup` removes our tables and leaves an unrelated
//! table byte-identical, and no sync ever executes another program (strace).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use netns_tests::{normalize_listing, require_root, wait_until, Line, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nlproxy");

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("nlp-daemon-{tag}-{}", std::process::id()));
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

/// The node is the router of a [`Line`]; the only endpoint is the server.
fn manifests(endpoint: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Node
metadata: {{name: node-a}}
status:
  addresses: [{{type: InternalIP, address: {router}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: demo}}
spec:
  clusterIP: 198.18.3.10
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web-1, namespace: demo, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{{addresses: [{endpoint}], conditions: {{ready: true}}, nodeName: node-b}}]
---
apiVersion: v1
kind: Service
metadata: {{name: dns, namespace: demo}}
spec:
  clusterIP: 198.18.3.11
  ports: [{{name: dns, port: 53, targetPort: 5353, protocol: UDP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: dns-1, namespace: demo, labels: {{kubernetes.io/service-name: dns}}}}
addressType: IPv4
ports: [{{name: dns, port: 5353, protocol: UDP}}]
endpoints: [{{addresses: [{endpoint}], conditions: {{ready: true}}, nodeName: node-b}}]
---
apiVersion: v1
kind: Service
metadata: {{name: np, namespace: demo}}
spec:
  type: NodePort
  clusterIP: 198.18.3.12
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: np-1, namespace: demo, labels: {{kubernetes.io/service-name: np}}}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints: [{{addresses: [{endpoint}], conditions: {{ready: true}}, nodeName: node-b}}]
"#,
        router = Line::ROUTER4_C,
    )
}

const COMMON: &[&str] = &["--hostname-override", "node-a", "--proxy-mode", "nftables"];

/// Run the binary inside `ns` (as `ip netns exec` would for a user).
fn run_in(ns: &Netns, args: &[&str]) -> std::process::Output {
    let mut all = vec![BIN];
    all.extend_from_slice(args);
    Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .args(&all)
        .output()
        .expect("run kube-nlproxy")
}

fn run_ok(ns: &Netns, args: &[&str]) -> String {
    let out = run_in(ns, args);
    assert!(
        out.status.success(),
        "kube-nlproxy {args:?} failed ({:?}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn with_manifest<'a>(m: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--manifests", m.to_str().expect("utf-8")];
    v.extend_from_slice(COMMON);
    v.extend_from_slice(extra);
    v
}

fn our_listing(ns: &Netns) -> String {
    let mut s = ns.exec_ok("nft", &["list", "table", "ip", "kube-nlproxy"]);
    s.push_str(&ns.exec_ok("nft", &["list", "table", "ip6", "kube-nlproxy"]));
    s
}

fn tcp_server(ns: &Netns, port: u16) {
    let l = ns.run(move || TcpListener::bind(("0.0.0.0", port)).expect("bind tcp"));
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(b"hello from the endpoint");
        }
    });
}

fn udp_echo(ns: &Netns, port: u16) {
    let s = ns.run(move || UdpSocket::bind(("0.0.0.0", port)).expect("bind udp"));
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
}

fn tcp_get(ns: &Netns, dst: &str) -> Result<String, String> {
    let dst: SocketAddr = dst.parse().expect("addr");
    ns.run(move || {
        let mut c = TcpStream::connect_timeout(&dst, Duration::from_secs(2))
            .map_err(|e| format!("connect {dst}: {e}"))?;
        c.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let mut s = String::new();
        c.read_to_string(&mut s)
            .map_err(|e| format!("read {dst}: {e}"))?;
        Ok(s)
    })
}

fn udp_ask(ns: &Netns, dst: &str) -> Result<String, String> {
    let dst: SocketAddr = dst.parse().expect("addr");
    ns.run(move || {
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.send_to(b"ping", dst).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 64];
        let (n, _) = s
            .recv_from(&mut buf)
            .map_err(|e| format!("recv {dst}: {e}"))?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}

#[test]
fn once_programs_the_node_and_packets_flow() {
    require_root!();
    let line = Line::new();
    let tmp = Tmp::new("once");
    let m = tmp.path("cluster.yaml");
    std::fs::write(&m, manifests(Line::SERVER4)).expect("write manifests");
    tcp_server(&line.server, 8080);
    udp_echo(&line.server, 5353);

    // Before: nothing is programmed, the ClusterIP does not answer.
    assert!(tcp_get(&line.client, "198.18.3.10:80").is_err());

    // --dry-run prints the ruleset and touches nothing.
    let printed = run_ok(&line.router, &with_manifest(&m, &["--dry-run"]));
    assert!(printed.contains("table ip kube-nlproxy"), "{printed}");
    assert!(
        !line
            .router
            .exec_ok("nft", &["list", "tables"])
            .contains("kube-nlproxy"),
        "--dry-run changed the ruleset"
    );

    // --once: one sync, exit 0; conntrack sysctls through /proc/sys (per namespace).
    run_ok(
        &line.router,
        &with_manifest(&m, &["--once", "--conntrack-tcp-timeout-established=2h"]),
    );
    let listed = our_listing(&line.router);
    assert_eq!(
        normalize_listing(&listed),
        normalize_listing(&printed),
        "nft list differs from the --dry-run output"
    );
    let est = line.router.run(|| {
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established")
            .unwrap_or_default()
    });
    assert_eq!(est.trim(), "7200");

    // Real packets: ClusterIP TCP, ClusterIP UDP, NodePort.
    assert_eq!(
        tcp_get(&line.client, "198.18.3.10:80").as_deref(),
        Ok("hello from the endpoint")
    );
    assert_eq!(
        udp_ask(&line.client, "198.18.3.11:53").as_deref(),
        Ok("ping")
    );
    let np = format!("{}:30080", Line::ROUTER4_C);
    assert_eq!(
        tcp_get(&line.client, &np).as_deref(),
        Ok("hello from the endpoint")
    );

    // The printed ruleset loads as is with `nft -f` (in a fresh namespace).
    let fresh = Netns::new("dry");
    fresh.nft(&printed);
    assert_eq!(
        normalize_listing(&our_listing(&fresh)),
        normalize_listing(&printed)
    );

    // A failing run exits non-zero: a manifests path that does not exist.
    let out = run_in(
        &line.router,
        &with_manifest(&tmp.path("missing.yaml"), &["--once"]),
    );
    assert!(!out.status.success());
}

#[test]
fn cleanup_removes_only_our_tables() {
    require_root!();
    let ns = Netns::new("cleanup");
    ns.nft(
        "table inet unrelated {\n\
         \tset allowed { type ipv4_addr; elements = { 198.18.9.9, 198.18.9.10 } }\n\
         \tchain input { type filter hook input priority 10; policy accept; ip saddr @allowed counter accept; }\n\
         \tchain other { comment \"keep me\"; }\n\
         }\n\
         table ip kube-proxy-backup {\n\tchain x { }\n}\n",
    );
    let tmp = Tmp::new("cleanup");
    let m = tmp.path("cluster.yaml");
    std::fs::write(&m, manifests(Line::SERVER4)).expect("write manifests");
    run_ok(&ns, &with_manifest(&m, &["--once"]));
    assert!(ns
        .exec_ok("nft", &["list", "tables"])
        .contains("kube-nlproxy"));
    let unrelated = ns.exec_ok("nft", &["list", "table", "inet", "unrelated"]);
    // a near miss of kube-proxy's table name (kube-proxy's own `ip kube-proxy` is removed
    // by the migration: cleanup_netns.rs)
    let other = ns.exec_ok("nft", &["list", "table", "ip", "kube-proxy-backup"]);

    run_ok(&ns, &["--cleanup"]);
    let tables = ns.exec_ok("nft", &["list", "tables"]);
    assert!(!tables.contains("kube-nlproxy"), "{tables}");
    assert_eq!(
        ns.exec_ok("nft", &["list", "table", "inet", "unrelated"]),
        unrelated
    );
    assert_eq!(
        ns.exec_ok("nft", &["list", "table", "ip", "kube-proxy-backup"]),
        other
    );
    // Nothing left to remove: still success, still nothing else touched.
    run_ok(&ns, &["--cleanup"]);
    assert_eq!(
        ns.exec_ok("nft", &["list", "table", "inet", "unrelated"]),
        unrelated
    );
}

/// Children of `pid` (all threads).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    out
}

#[test]
fn syncs_never_execute_a_program() {
    require_root!();
    let ns = Netns::new("strace");
    let tmp = Tmp::new("strace");
    let mdir = tmp.path("m");
    std::fs::create_dir_all(&mdir).expect("dir");
    std::fs::write(mdir.join("c.yaml"), manifests(Line::SERVER4)).expect("write");
    let trace = tmp.path("trace.txt");
    let log = tmp.path("daemon.log");
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=execve",
            "-o",
        ])
        .arg(&trace)
        .arg(BIN)
        .args(["--manifests", mdir.to_str().expect("utf-8")])
        .args(COMMON)
        .args([
            "--manifests-poll",
            "100ms",
            "--iptables-min-sync-period",
            "100ms",
            "--v=2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start strace");
    let synced = |n: usize| {
        wait_until(Duration::from_secs(30), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("\"synced\" kind=")
                .count()
                >= n
        })
    };
    let ok1 = synced(1);
    // A change: a second (partial) sync.
    std::fs::write(mdir.join("c.yaml"), manifests("198.18.2.3")).expect("rewrite");
    let ok2 = ok1 && synced(2);
    // Stop the daemon (strace's child) with SIGTERM; strace exits with it.
    let daemon = children(child.id());
    for pid in &daemon {
        // SAFETY: sending a signal to our own grandchild.
        unsafe { libc::kill(*pid as i32, libc::SIGTERM) };
    }
    let exited = wait_until(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ok1 && ok2, "the daemon did not sync twice:\n{log_text}");
    assert!(exited, "the daemon did not stop on SIGTERM:\n{log_text}");
    assert!(
        ns.exec_ok("nft", &["list", "table", "ip", "kube-nlproxy"])
            .contains("198.18.2.3"),
        "the second sync was not committed"
    );
    let t = std::fs::read_to_string(&trace).expect("trace");
    let execs: Vec<&str> = t.lines().filter(|l| l.contains("execve(")).collect();
    assert_eq!(execs.len(), 1, "programs executed:\n{t}");
    assert!(execs[0].contains("kube-nlproxy"), "{t}");
}
