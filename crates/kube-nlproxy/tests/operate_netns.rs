//! Operating the daemon inside network namespaces (never the root one): the
//! health-check node port of an externalTrafficPolicy Local LoadBalancer answers with the
//! local endpoint count, 503 with none, and closes when the service goes away; on start,
//! kube-proxy's iptables-mode leftovers are removed and everything else stays.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use netns_tests::{require_root, wait_until, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nlproxy");
const WAIT: Duration = Duration::from_secs(20);

struct Running(Child);
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node_manifest() -> &'static str {
    "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nstatus:\n  addresses: [{type: InternalIP, address: 198.18.3.1}]\n"
}

/// An ETP Local LoadBalancer with its endpoints on `nodes` (one endpoint per entry).
fn lb_manifest(nodes: &[&str]) -> String {
    let eps: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "{{addresses: [198.18.64.{}], conditions: {{ready: true}}, nodeName: {n}}}",
                i + 10
            )
        })
        .collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: lb, namespace: web}}\nspec:\n  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32000\n  clusterIP: 198.18.3.20\n  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30090, protocol: TCP}}]\nstatus:\n  loadBalancer:\n    ingress: [{{ip: 198.18.250.5}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: lb-1, namespace: web, labels: {{kubernetes.io/service-name: lb}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints: [{}]\n",
        eps.join(", ")
    )
}

/// The node's address (its InternalIP): health-check node ports listen there
/// (nftables mode's default nodePortAddresses is `primary`).
const NODE_IP: &str = "198.18.3.1";

/// GET http://NODE_IP:port/ from inside `ns`: (status, weight header, body).
fn get(ns: &Netns, port: u16) -> Option<(u16, Option<String>, String)> {
    get_at(ns, NODE_IP, port, "/")
}

fn get_path(ns: &Netns, port: u16, path: &str) -> Option<(u16, Option<String>, String)> {
    get_at(ns, "127.0.0.1", port, path)
}

fn get_at(ns: &Netns, ip: &str, port: u16, path: &str) -> Option<(u16, Option<String>, String)> {
    let (path, ip) = (path.to_string(), ip.to_string());
    ns.run(move || {
        let mut s = TcpStream::connect((ip.as_str(), port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .ok()?;
        let mut raw = String::new();
        s.read_to_string(&mut raw).ok()?;
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        let weight = head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-load-balancing-endpoint-weight:")
                .map(|v| v.trim().to_string())
        });
        Some((code, weight, body.to_string()))
    })
}

#[test]
fn health_check_node_port_reports_local_endpoints_and_closes_with_the_service() {
    require_root!();
    let ns = Netns::new("hcport");
    ns.ip(&["addr", "add", "198.18.3.1/32", "dev", "lo"]);
    let dir = std::env::temp_dir().join(format!("nlp-hc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let node = dir.join("node.yaml");
    let lb = dir.join("lb.yaml");
    std::fs::write(&node, node_manifest()).unwrap();
    std::fs::write(&lb, lb_manifest(&["node-a", "node-a", "node-b"])).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN, "--manifests"])
        .arg(&dir)
        .args([
            "--hostname-override",
            "node-a",
            "--proxy-mode",
            "nftables",
            "--manifests-poll",
            "100ms",
        ])
        .args([
            "--iptables-min-sync-period",
            "100ms",
            "--healthz-bind-address",
            "127.0.0.1:10256",
        ])
        .args(["--metrics-bind-address", "127.0.0.1:10249"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kube-nlproxy");
    let _daemon = Running(child);

    let mut last = None;
    let ok = wait_until(WAIT, || {
        last = get(&ns, 32000);
        matches!(&last, Some((200, Some(w), _)) if w == "2")
    });
    assert!(
        ok,
        "health-check port never answered 200 with 2 local endpoints: {last:?}"
    );
    let (_, _, body) = last.clone().unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["localEndpoints"], 2, "{body}");
    assert_eq!(v["service"]["namespace"], "web");
    assert_eq!(v["service"]["name"], "lb");
    assert_eq!(v["serviceProxyHealthy"], true);
    // only where NodePorts are served (nodePortAddresses: primary), as kube-proxy
    assert!(
        get_at(&ns, "127.0.0.1", 32000, "/").is_none(),
        "the health-check port must not listen on loopback"
    );
    // the proxy's own /healthz is served in the namespace too
    assert!(wait_until(WAIT, || get_path(&ns, 10256, "/healthz")
        .is_some_and(|r| r.0 == 200)));

    // every endpoint moves to another node: 503 with 0
    std::fs::write(&lb, lb_manifest(&["node-b"])).unwrap();
    let ok = wait_until(WAIT, || {
        last = get(&ns, 32000);
        matches!(&last, Some((503, Some(w), _)) if w == "0")
    });
    assert!(ok, "no 503 without local endpoints: {last:?}");

    // the service goes away: the port closes
    std::fs::remove_file(&lb).unwrap();
    assert!(
        wait_until(WAIT, || get(&ns, 32000).is_none()),
        "health-check port still open"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const KUBE_PROXY_RULES: &str = "*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-4N57TFCL4MD7ZTDA - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 198.18.3.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-4N57TFCL4MD7ZTDA
-A KUBE-SVC-4N57TFCL4MD7ZTDA -p tcp -m tcp -j DNAT --to-destination 198.18.64.9:8080
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:ALLOW - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -s 198.18.7.0/24 -j ALLOW
-A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
-A ALLOW -j ACCEPT
COMMIT
";

#[test]
fn start_removes_kube_proxy_iptables_leftovers() {
    require_root!();
    let ns = Netns::new("migrate-start");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name(), "iptables-restore"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("iptables-restore");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(KUBE_PROXY_RULES.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let dir = std::env::temp_dir().join(format!("nlp-mig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = dir.join("m.yaml");
    std::fs::write(&m, node_manifest()).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN, "--manifests"])
        .arg(&m)
        .args(["--hostname-override", "node-a", "--once"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("removed kube-proxy's nftables leftovers"),
        "{log}"
    );
    let saved = ns.exec_ok("iptables-save", &[]);
    assert!(
        !saved.contains("KUBE-SERVICES") && !saved.contains("KUBE-SVC-4N57TFCL4MD7ZTDA"),
        "{saved}"
    );
    for kept in [
        "-A INPUT -j KUBE-FIREWALL",
        "-A INPUT -s 198.18.7.0/24 -j ALLOW",
        "-A ALLOW -j ACCEPT",
    ] {
        assert!(saved.contains(kept), "{kept} must stay:\n{saved}");
    }
    assert!(ns
        .exec_ok("nft", &["list", "table", "ip", "kube-nlproxy"])
        .contains("table ip kube-nlproxy"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn start_in(ns: &Netns, dir: &std::path::Path, extra: &[&str], log: &std::path::Path) -> Running {
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN, "--manifests"])
        .arg(dir)
        .args(["--hostname-override", "node-a", "--proxy-mode", "nftables"])
        .args([
            "--iptables-min-sync-period",
            "100ms",
            "--manifests-poll",
            "100ms",
        ])
        .args(["--healthz-bind-address", "127.0.0.1:10256"])
        .args(["--metrics-bind-address", "127.0.0.1:10249"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start kube-nlproxy");
    Running(child)
}

/// As kube-proxy: each server starts on its own. With the health port taken (two pods
/// during a DaemonSet rollout), the metrics server and the health-check node ports start
/// anyway, and /healthz follows within 5 s of the port coming free; with
/// `--bind-address-hard-fail` the daemon exits instead.
#[test]
fn servers_start_independently_and_retry_binding() {
    require_root!();
    let ns = Netns::new("servers");
    ns.ip(&["addr", "add", "198.18.3.1/32", "dev", "lo"]);
    let dir = std::env::temp_dir().join(format!("nlp-srv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let m = dir.join("m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("node.yaml"), node_manifest()).unwrap();
    std::fs::write(m.join("lb.yaml"), lb_manifest(&["node-a"])).unwrap();
    // another process holds the health port
    let holder = ns.run(|| std::net::TcpListener::bind("127.0.0.1:10256").unwrap());
    let log = dir.join("daemon.log");
    let daemon = start_in(&ns, &m, &[], &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(WAIT, || get_path(&ns, 10249, "/metrics")
            .is_some_and(|r| r.0 == 200)),
        "the metrics server did not start while the health port was taken:\n{}",
        logs()
    );
    assert!(
        wait_until(WAIT, || get(&ns, 32000).is_some_and(|r| r.0 == 200)),
        "the health-check node port did not start while the health port was taken:\n{}",
        logs()
    );
    assert!(
        logs().contains(
            "\"Healthz server failed\" err=\"failed to start proxy healthz on 127.0.0.1:10256"
        ),
        "{}",
        logs()
    );
    // the port comes free: the health server binds at its next try (every 5 s)
    drop(holder);
    let t0 = std::time::Instant::now();
    assert!(
        wait_until(WAIT, || get_path(&ns, 10256, "/healthz")
            .is_some_and(|r| r.0 == 200)),
        "/healthz never came up:\n{}",
        logs()
    );
    assert!(
        t0.elapsed() <= Duration::from_millis(6500),
        "took {:?}",
        t0.elapsed()
    );
    drop(daemon);

    // hard fail: the daemon ends with status 1
    let holder = ns.run(|| std::net::TcpListener::bind("127.0.0.1:10249").unwrap());
    let log2 = dir.join("hard.log");
    let mut daemon = start_in(&ns, &m, &["--bind-address-hard-fail"], &log2);
    let mut status = None;
    assert!(
        wait_until(WAIT, || {
            status = daemon.0.try_wait().unwrap();
            status.is_some()
        }),
        "the daemon kept running with a port it cannot bind and --bind-address-hard-fail"
    );
    assert_eq!(status.unwrap().code(), Some(1));
    let text = std::fs::read_to_string(&log2).unwrap();
    assert!(
        text.contains("\"Error running ProxyServer\" err=\"starting metrics server failed: listen tcp 127.0.0.1:10249"),
        "{text}"
    );
    drop(holder);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The elements of `nodeport-ips` in the namespace's IPv4 table.
fn nodeport_ips(ns: &Netns) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "nft", "list", "set", "ip"])
        .args(["kube-nlproxy", "nodeport-ips"])
        .output()
        .expect("nft");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// nodePortAddresses selects among the host's addresses as they are now: an address
/// added after the start serves NodePorts, one removed stops (an rtnetlink monitor, not
/// the list read at start).
#[test]
fn node_port_addresses_follow_the_hosts_addresses() {
    require_root!();
    let ns = Netns::new("hostaddr");
    ns.ip(&["addr", "add", "198.18.5.1/32", "dev", "lo"]);
    let dir = std::env::temp_dir().join(format!("nlp-hostaddr-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("node.yaml"), node_manifest()).unwrap();
    std::fs::write(dir.join("lb.yaml"), lb_manifest(&["node-a"])).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN, "--manifests"])
        .arg(&dir)
        .args(["--hostname-override", "node-a", "--proxy-mode", "nftables"])
        .args(["--nodeport-addresses", "198.18.5.0/24"])
        .args([
            "--manifests-poll",
            "100ms",
            "--iptables-min-sync-period",
            "100ms",
        ])
        .args(["--healthz-bind-address", "127.0.0.1:10256"])
        .args(["--metrics-bind-address", "127.0.0.1:10249"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kube-nlproxy");
    let _daemon = Running(child);
    let mut last = String::new();
    assert!(
        wait_until(WAIT, || {
            last = nodeport_ips(&ns);
            last.contains("198.18.5.1")
        }),
        "the address present at start is not a NodePort address: {last}"
    );
    assert!(!last.contains("198.18.5.7"), "{last}");

    ns.ip(&["addr", "add", "198.18.5.7/32", "dev", "lo"]);
    assert!(
        wait_until(WAIT, || {
            last = nodeport_ips(&ns);
            last.contains("198.18.5.7")
        }),
        "an address added after the start is not served: {last}"
    );
    ns.ip(&["addr", "del", "198.18.5.1/32", "dev", "lo"]);
    assert!(
        wait_until(WAIT, || {
            last = nodeport_ips(&ns);
            !last.contains("198.18.5.1") && last.contains("198.18.5.7")
        }),
        "a removed address is still served: {last}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
