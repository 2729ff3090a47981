//! A kernel booted with `ipv6.disable=1` (issue 22 item 5): the daemon runs, programs
//! IPv4 (upstream's nftables mode assumes both families and programs both, as its
//! iptables mode does with iptables-nft, whose ip6 tables such a kernel still takes),
//! serves real IPv4 traffic of a dual-stack service and stays healthy. Run by the kernel
//! suite on a kernel booted with that option (`netns-tests/kernels/kernel-suite
//! 6.12-noipv6`); it fails on a kernel with IPv6 (it would test nothing).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns_tests::{addr, require_root, veth, Netns};

struct Daemon(Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 198.18.1.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  clusterIP: 198.18.100.10
  clusterIPs: [198.18.100.10, "2001:db8:100::10"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  ports: [{name: tcp, port: 80, targetPort: 8080}, {name: udp, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: demo, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [198.18.2.2], conditions: {ready: true}}]
ports: [{name: tcp, port: 8080}, {name: udp, port: 5353, protocol: UDP}]
"#;

fn wait(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
#[ignore = "kernel suite on a kernel booted with ipv6.disable=1 (kernel-suite 6.12-noipv6)"]
fn an_ipv6_disabled_kernel_is_proxied_in_ipv4() {
    require_root!();
    assert!(
        !std::path::Path::new("/proc/sys/net/ipv6").exists(),
        "this kernel has IPv6: boot it with ipv6.disable=1"
    );
    let bin = std::env::var("KUBE_NLPROXY_BIN").expect("KUBE_NLPROXY_BIN: the daemon");
    let (client, router, server) = (Netns::new("cli"), Netns::new("rtr"), Netns::new("srv"));
    veth(&client, "eth0", &router, "c0");
    veth(&server, "eth0", &router, "s0");
    addr(&client, "eth0", "198.18.1.2/24");
    addr(&router, "c0", "198.18.1.1/24");
    addr(&router, "s0", "198.18.2.1/24");
    addr(&server, "eth0", "198.18.2.2/24");
    client.ip(&["route", "add", "default", "via", "198.18.1.1"]);
    server.ip(&["route", "add", "default", "via", "198.18.2.1"]);
    router.sysctl("net.ipv4.ip_forward", "1");
    let tcp = server.spawn(|| {
        let l = TcpListener::bind("198.18.2.2:8080").unwrap();
        l.set_nonblocking(false).unwrap();
        for s in l.incoming().take(3) {
            let mut s = s.unwrap();
            let _ = s.write_all(b"hello");
        }
    });
    let udp = server.spawn(|| {
        let s = UdpSocket::bind("198.18.2.2:5353").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut b = [0u8; 16];
        for _ in 0..20 {
            if let Ok((n, from)) = s.recv_from(&mut b) {
                let _ = s.send_to(&b[..n], from);
            }
        }
    });
    let dir = std::env::temp_dir().join(format!("nlp-noipv6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("cluster.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let d = Daemon(
        Command::new("ip")
            .args(["netns", "exec", router.name(), &bin])
            .args(["--manifests", manifest.to_str().unwrap()])
            .args(["--hostname-override", "node-a", "--proxy-mode", "iptables"])
            .args(["--healthz-bind-address", "198.18.1.1:10256", "-v", "2"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the daemon"),
    );
    let log_text = || std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    assert!(
        wait(Duration::from_secs(120), || log_text()
            .contains("\"synced\"")),
        "no sync:\n{}",
        log_text()
    );
    // TCP and UDP through the ClusterIP
    let got = client.run(|| {
        let mut s = TcpStream::connect_timeout(
            &"198.18.100.10:80".parse().unwrap(),
            Duration::from_secs(10),
        )
        .expect("connect through the ClusterIP");
        let mut b = String::new();
        s.read_to_string(&mut b).unwrap();
        b
    });
    assert_eq!(got, "hello");
    let echoed = client.run(|| {
        let s = UdpSocket::bind("198.18.1.2:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        (0..10).any(|_| {
            s.send_to(b"ping", "198.18.100.10:53").unwrap();
            let mut b = [0u8; 16];
            s.recv_from(&mut b).is_ok()
        })
    });
    assert!(echoed, "UDP through the ClusterIP");
    // healthy, running, and no sync failed
    let health = client.run(|| {
        let mut s = TcpStream::connect("198.18.1.1:10256").ok()?;
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
        let mut b = String::new();
        s.read_to_string(&mut b).ok()?;
        Some(b)
    });
    assert!(
        health
            .as_deref()
            .is_some_and(|h| h.starts_with("HTTP/1.1 200") || h.starts_with("HTTP/1.0 200")),
        "{health:?}\n{}",
        log_text()
    );
    std::thread::sleep(Duration::from_secs(2));
    let text = log_text();
    assert!(!text.contains("sync failed"), "{text}");
    let tables = router.exec_ok("nft", &["list", "tables"]);
    assert!(tables.contains("table ip kube-nlproxy"), "{tables}");
    eprintln!("tables:\n{tables}\nlog:\n{text}");
    drop(d);
    drop((tcp, udp));
    let _ = std::fs::remove_dir_all(&dir);
}
