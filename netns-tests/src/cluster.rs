//! A two-node cluster made of network namespaces, for the Service conformance tests.
//!
//! ```text
//!                 client (external, 198.18.50.2 and .3 / 2001:db8:50::2 and ::3)
//!                   | eth0
//!                   | ext0 198.18.50.1 / 2001:db8:50::1   (node A's InternalIP)
//!   pods --- br0 -- node A (proxy, conntrack, forwarding) -- nb 198.18.10.1 / 2001:db8:10::1
//!   198.18.1.0/24                                                  |
//!   2001:db8:1::/64                                                | na 198.18.10.2 / 2001:db8:10::2
//!                                                   pods --- br0 -- node B (router, "sink")
//!                                                   198.18.2.0/24, 2001:db8:2::/64
//! ```
//!
//! - Pods are namespaces with a veth into their node's bridge (hairpin on, as the CNI
//!   bridge plugin sets it; bridged traffic goes through netfilter as with
//!   `br_netfilter`), default route via the bridge address. Each pod runs
//!   `echo-server` on port [`TARGET_PORT`] (TCP and UDP) replying with its name and
//!   the source address it saw.
//! - Node A runs the proxy (`engine-runner`, or the `kube-nlproxy` daemon when
//!   `KUBE_NLPROXY_BIN` names it) from a manifest file the test writes. It routes node
//!   B's pod CIDR via node B, and everything else (default) via node B too.
//! - Node B routes node A's pod CIDR and the client's network via node A. It treats
//!   the whole service CIDR as local (`ip route add local`) and runs a "sink"
//!   echo-server on ports 80 and [`UNUSED_PORT`]: traffic to a ClusterIP that the proxy
//!   does not handle ends up answered by `sink`, so a test can tell "dropped" or
//!   "rejected by the proxy" from "not routed".
//! - The client routes 198.18.0.0/15 and 2001:db8::/32 via node A.
//!
//! Every namespace and process is removed when the [`Cluster`] is dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{addr, scaled, veth, wait_until, Netns};

/// Port every pod's echo-server listens on (TCP and UDP).
pub const TARGET_PORT: u16 = 8080;
/// Service port of the services the tests create (TCP and UDP).
pub const SERVICE_PORT: u16 = 80;
/// A port no service uses (node B's sink answers it).
pub const UNUSED_PORT: u16 = 9999;

pub const NODE_A: &str = "node-a";
pub const NODE_B: &str = "node-b";
pub const ZONE_A: &str = "zone-a";

pub const CLIENT4: &str = "198.18.50.2";
pub const CLIENT4_OTHER: &str = "198.18.50.3";
pub const CLIENT6: &str = "2001:db8:50::2";
pub const CLIENT6_OTHER: &str = "2001:db8:50::3";
/// Node A's InternalIP (the address external clients use).
pub const NODE_A4: &str = "198.18.50.1";
pub const NODE_A6: &str = "2001:db8:50::1";
/// Node A's address on the node A - node B link (not a NodePort address).
pub const NODE_A_LINK4: &str = "198.18.10.1";
pub const NODE_A_LINK6: &str = "2001:db8:10::1";
pub const NODE_B_LINK4: &str = "198.18.10.2";
pub const NODE_B_LINK6: &str = "2001:db8:10::2";
/// Bridge (pod gateway) addresses.
pub const BRIDGE_A4: &str = "198.18.1.1";
pub const BRIDGE_A6: &str = "2001:db8:1::1";
pub const BRIDGE_B4: &str = "198.18.2.1";
pub const BRIDGE_B6: &str = "2001:db8:2::1";

pub const POD_CIDR_A4: &str = "198.18.1.0/24";
pub const POD_CIDR_A6: &str = "2001:db8:1::/64";
pub const POD_CIDR_B4: &str = "198.18.2.0/24";
pub const POD_CIDR_B6: &str = "2001:db8:2::/64";
/// clusterCIDR: both pod CIDRs and nothing else of the topology.
pub const CLUSTER_CIDR4: &str = "198.18.0.0/22";
pub const CLUSTER_CIDR6: &str = "2001:db8::/46";
/// Service CIDRs (ClusterIPs of the tests are in 198.18.100.0/24 and 2001:db8:100::/64;
/// the scale test uses the rest of the /20).
pub const SERVICE_CIDR4: &str = "198.18.96.0/20";
pub const SERVICE_CIDR6: &str = "2001:db8:100::/64";
/// nodePortAddresses: only the client-facing network of node A.
pub const NODE_PORT_CIDR4: &str = "198.18.50.0/24";
pub const NODE_PORT_CIDR6: &str = "2001:db8:50::/64";

/// Every address node A has (its `localAddresses`).
pub const NODE_A_ADDRESSES: [&str; 8] = [
    NODE_A4,
    NODE_A_LINK4,
    BRIDGE_A4,
    "127.0.0.1",
    NODE_A6,
    NODE_A_LINK6,
    BRIDGE_A6,
    "::1",
];

/// Address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fam {
    V4,
    V6,
}

impl Fam {
    pub const BOTH: [Fam; 2] = [Fam::V4, Fam::V6];
    /// Pick the address of this family.
    pub fn pick<'a>(self, v4: &'a str, v6: &'a str) -> &'a str {
        match self {
            Fam::V4 => v4,
            Fam::V6 => v6,
        }
    }
    pub fn slice_type(self) -> &'static str {
        self.pick("IPv4", "IPv6")
    }
    pub fn client(self) -> IpAddr {
        self.pick(CLIENT4, CLIENT6).parse().unwrap()
    }
    pub fn client_other(self) -> IpAddr {
        self.pick(CLIENT4_OTHER, CLIENT6_OTHER).parse().unwrap()
    }
    pub fn node_a(self) -> IpAddr {
        self.pick(NODE_A4, NODE_A6).parse().unwrap()
    }
}

/// Transport protocol of a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub const BOTH: [Proto; 2] = [Proto::Tcp, Proto::Udp];
}

/// Which node a pod lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    A,
    B,
}

impl On {
    pub fn node_name(self) -> &'static str {
        match self {
            On::A => NODE_A,
            On::B => NODE_B,
        }
    }
}

/// Paths of the helper binaries (see [`bins!`](crate::bins)).
#[derive(Clone, Copy, Debug)]
pub struct Bins {
    pub echo_server: &'static str,
    pub engine_runner: &'static str,
}

/// The helper binaries of this package, for an integration test of `netns-tests`.
#[macro_export]
macro_rules! bins {
    () => {
        $crate::cluster::Bins {
            echo_server: env!("CARGO_BIN_EXE_echo-server"),
            engine_runner: env!("CARGO_BIN_EXE_engine-runner"),
        }
    };
}

/// A pod: a namespace behind its node's bridge.
#[derive(Debug)]
pub struct Pod {
    pub name: String,
    pub on: On,
    pub v4: IpAddr,
    pub v6: IpAddr,
    pub ns: Netns,
}

impl Pod {
    pub fn ip(&self, f: Fam) -> IpAddr {
        match f {
            Fam::V4 => self.v4,
            Fam::V6 => self.v6,
        }
    }
}

/// A spawned process (echo-server, proxy) killed and reaped on drop; its stdout and
/// stderr lines are collected.
pub struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn spawn(ns: &Netns, what: &str, program: &str, args: &[String]) -> Proc {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {program} in {}: {e}", ns.name()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        for (stream, tag) in [
            (Box::new(out) as Box<dyn Read + Send>, "out"),
            (Box::new(err), "err"),
        ] {
            let l = lines.clone();
            let w = what.to_string();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tag == "err" || w == "proxy" {
                        eprintln!("{w}: {line}");
                    }
                    l.lock().unwrap().push(line);
                }
            });
        }
        Proc { child, lines }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn wait_line(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        wait_until(timeout, || {
            self.lines().iter().any(|l| pred(l)) || matches!(self.child.try_wait(), Ok(Some(_)))
        });
        self.lines().iter().any(|l| pred(l))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // `ip netns exec` execs the program: this is its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which proxy binary runs on node A.
#[derive(Clone, Debug)]
pub enum ProxyKind {
    /// `engine-runner` (the sync engine fed from the manifest file, config from the
    /// manifest's `NlproxyConfig` document).
    EngineRunner(String),
    /// The `kube-nlproxy` daemon (`--manifests`, `--config` KubeProxyConfiguration).
    Daemon(String),
}

impl ProxyKind {
    /// `KUBE_NLPROXY_BIN` (a path to the daemon) if set, else engine-runner.
    /// In CI (`CI` set) the daemon is required: `.ci/run` builds the release binary and
    /// sets `KUBE_NLPROXY_BIN`.
    pub fn from_env(bins: &Bins) -> ProxyKind {
        match std::env::var("KUBE_NLPROXY_BIN") {
            Ok(p) if !p.is_empty() => ProxyKind::Daemon(p),
            _ if std::env::var_os("CI").is_some() => {
                panic!("the conformance suite runs the kube-nlproxy release binary in CI: set KUBE_NLPROXY_BIN (.ci/run does)")
            }
            _ => ProxyKind::EngineRunner(bins.engine_runner.to_string()),
        }
    }
}

static DAEMON: std::sync::Once = std::sync::Once::new();

/// Make the cluster run the real daemon (KUBE_NLPROXY_BIN, else the `kube-nlproxy`
/// binary cargo built next to the test, in the same target directory).
pub fn use_daemon() {
    DAEMON.call_once(|| {
        if std::env::var_os("KUBE_NLPROXY_BIN").is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let bin = exe
            .parent()
            .and_then(|d| d.parent())
            .map(|d| d.join("kube-nlproxy"))
            .filter(|p| p.exists())
            .unwrap_or_else(|| {
                panic!("no kube-nlproxy binary next to {exe:?}: build it (cargo build -p kube-nlproxy) or set KUBE_NLPROXY_BIN")
            });
        std::env::set_var("KUBE_NLPROXY_BIN", bin);
    });
}

static FILES: AtomicU64 = AtomicU64::new(0);

fn temp_path(what: &str, ext: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "nlp-conf-{what}-{}-{}.{ext}",
        std::process::id(),
        FILES.fetch_add(1, Ordering::SeqCst)
    ))
}

/// The proxy's configuration in a test (the defaults are the conformance suite's, see
/// the module docs): the daemon's KubeProxyConfiguration, or engine-runner's document.
#[derive(Clone, Debug)]
pub struct ProxySettings {
    /// `mode`: `iptables` or `nftables`.
    pub mode: &'static str,
    /// `nodePortAddresses`; `None` leaves it unset (the mode's default).
    pub node_port_addresses: Option<Vec<String>>,
    /// `iptables.localhostNodePorts`; `None` leaves it unset (on by default).
    pub localhost_node_ports: Option<bool>,
    /// `clusterCIDR` (local-traffic detection); empty: no detector.
    pub cluster_cidrs: Vec<String>,
    /// `masqueradeAll` (of the mode's section).
    pub masquerade_all: bool,
    /// `featureGates` (the daemon only).
    pub feature_gates: Vec<(&'static str, bool)>,
}

impl Default for ProxySettings {
    fn default() -> ProxySettings {
        ProxySettings {
            mode: "nftables",
            node_port_addresses: Some(vec![NODE_PORT_CIDR4.into(), NODE_PORT_CIDR6.into()]),
            localhost_node_ports: None,
            cluster_cidrs: vec![CLUSTER_CIDR4.into(), CLUSTER_CIDR6.into()],
            masquerade_all: false,
            feature_gates: Vec::new(),
        }
    }
}

/// The proxy running in node A, fed from a manifest file.
pub struct Proxy {
    proc: Proc,
    kind: ProxyKind,
    manifest: PathBuf,
    config: Option<PathBuf>,
}

fn is_sync_line(l: &str) -> bool {
    // engine-runner: `synced ...`; the daemon at -v=2: klog's `...] "synced" kind=...`
    l.starts_with("synced")
        || l.contains(" synced ")
        || l.ends_with(" synced")
        || l.contains("] \"synced\"")
}

/// How long a reported sync took: its `compile_ms`, `commit_ms` and `conntrack_ms`
/// (both the daemon and engine-runner print them).
fn sync_duration(line: &str) -> Duration {
    let ms: f64 = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| matches!(*k, "compile_ms" | "commit_ms" | "conntrack_ms"))
        .filter_map(|(_, v)| v.trim_matches('"').parse::<f64>().ok())
        .sum();
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

impl Proxy {
    /// Number of completed syncs so far.
    pub fn syncs(&self) -> usize {
        self.proc.lines().iter().filter(|l| is_sync_line(l)).count()
    }
    pub fn lines(&self) -> Vec<String> {
        self.proc.lines()
    }
    pub fn kind(&self) -> &ProxyKind {
        &self.kind
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.manifest);
        if let Some(c) = &self.config {
            let _ = std::fs::remove_file(c);
        }
    }
}

/// Write a file atomically (write + rename), so a poller never reads half of it.
fn write_atomic(path: &PathBuf, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {tmp:?}: {e}"));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename {tmp:?}: {e}"));
}

/// The two-node cluster. See the module docs.
pub struct Cluster {
    // Field order is drop order: processes first, then namespaces.
    proxy: Option<Proxy>,
    _servers: Vec<Proc>,
    pub pods: Vec<Pod>,
    pub client: Netns,
    pub node_a: Netns,
    pub node_b: Netns,
    bins: Bins,
    settings: ProxySettings,
}

impl Cluster {
    /// Build the topology with these pods (name, node) and start their echo servers.
    /// The proxy is not started yet (see [`Cluster::start_proxy`]).
    pub fn new(bins: Bins, pods: &[(&str, On)]) -> Cluster {
        let node_a = new_ns("nodea");
        let node_b = new_ns("nodeb");
        let client = new_ns("ext");

        // Bridged traffic goes through netfilter only with br_netfilter, which a node's
        // network setup loads (a module on Debian's kernels, built in on some others).
        if !std::path::Path::new("/proc/sys/net/bridge").exists() {
            let _ = Command::new("modprobe").arg("br_netfilter").output();
        }
        for n in [&node_a, &node_b] {
            n.sysctl("net.ipv4.ip_forward", "1");
            n.sysctl("net.ipv6.conf.all.forwarding", "1");
            n.ip(&["link", "add", "br0", "type", "bridge"]);
            n.ip(&["link", "set", "br0", "up"]);
            // bridged pod-to-pod traffic goes through netfilter (br_netfilter), as on a
            // kube-proxy node; per namespace.
            for k in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"] {
                let key = format!("net.bridge.{k}");
                if std::path::Path::new(&format!("/proc/sys/net/bridge/{k}")).exists() {
                    n.sysctl(&key, "1");
                }
            }
        }
        node_a.enable_conntrack();
        addr(&node_a, "br0", &format!("{BRIDGE_A4}/24"));
        addr(&node_a, "br0", &format!("{BRIDGE_A6}/64"));
        addr(&node_b, "br0", &format!("{BRIDGE_B4}/24"));
        addr(&node_b, "br0", &format!("{BRIDGE_B6}/64"));

        // node A <-> node B
        veth(&node_a, "nb", &node_b, "na");
        addr(&node_a, "nb", &format!("{NODE_A_LINK4}/24"));
        addr(&node_a, "nb", &format!("{NODE_A_LINK6}/64"));
        addr(&node_b, "na", &format!("{NODE_B_LINK4}/24"));
        addr(&node_b, "na", &format!("{NODE_B_LINK6}/64"));
        node_a.ip(&["route", "add", POD_CIDR_B4, "via", NODE_B_LINK4]);
        node_a.ip(&["-6", "route", "add", POD_CIDR_B6, "via", NODE_B_LINK6]);
        node_a.ip(&["route", "add", "default", "via", NODE_B_LINK4]);
        node_a.ip(&["-6", "route", "add", "default", "via", NODE_B_LINK6]);
        node_b.ip(&["route", "add", "default", "via", NODE_A_LINK4]);
        node_b.ip(&["-6", "route", "add", "default", "via", NODE_A_LINK6]);
        // node B answers (with its sink) for every address of the service CIDRs.
        node_b.ip(&["route", "add", "local", SERVICE_CIDR4, "dev", "lo"]);
        node_b.ip(&["-6", "route", "add", "local", SERVICE_CIDR6, "dev", "lo"]);
        // lets the sink answer UDP from such an address (IPV6_PKTINFO source)
        node_b.sysctl("net.ipv6.ip_nonlocal_bind", "1");

        // client <-> node A
        veth(&client, "eth0", &node_a, "ext0");
        addr(&node_a, "ext0", &format!("{NODE_A4}/24"));
        addr(&node_a, "ext0", &format!("{NODE_A6}/64"));
        for a in [CLIENT4, CLIENT4_OTHER] {
            addr(&client, "eth0", &format!("{a}/24"));
        }
        addr(&client, "eth0", &format!("{CLIENT6}/64"));
        // deprecated: never chosen as a source address unless bound explicitly
        client.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{CLIENT6_OTHER}/64"),
            "dev",
            "eth0",
            "nodad",
            "preferred_lft",
            "0",
        ]);
        client.ip(&["route", "add", "198.18.0.0/15", "via", NODE_A4]);
        client.ip(&["-6", "route", "add", "2001:db8::/32", "via", NODE_A6]);

        let mut built = Vec::new();
        let (mut na, mut nb) = (0u32, 0u32);
        for (name, on) in pods {
            let (node, idx, net4, net6) = match on {
                On::A => {
                    na += 1;
                    (&node_a, na, "198.18.1", "2001:db8:1")
                }
                On::B => {
                    nb += 1;
                    (&node_b, nb, "198.18.2", "2001:db8:2")
                }
            };
            assert!(name.len() <= 12, "pod name {name} too long");
            let ns = new_ns(&format!("pod{name}"));
            let port = format!("v{name}");
            veth(&ns, "eth0", node, &port);
            node.ip(&["link", "set", &port, "master", "br0"]);
            node.ip(&[
                "link",
                "set",
                &port,
                "type",
                "bridge_slave",
                "hairpin",
                "on",
            ]);
            let v4 = format!("{net4}.{}", 10 + idx);
            let v6 = format!("{net6}::{}", 10 + idx);
            addr(&ns, "eth0", &format!("{v4}/24"));
            addr(&ns, "eth0", &format!("{v6}/64"));
            ns.ip(&["route", "add", "default", "via", &format!("{net4}.1")]);
            ns.ip(&[
                "-6",
                "route",
                "add",
                "default",
                "via",
                &format!("{net6}::1"),
            ]);
            built.push(Pod {
                name: name.to_string(),
                on: *on,
                v4: v4.parse().unwrap(),
                v6: v6.parse().unwrap(),
                ns,
            });
        }

        let mut servers = Vec::new();
        for p in &built {
            servers.push(echo_server(bins, &p.ns, &p.name, &[TARGET_PORT]));
        }
        servers.push(echo_server(
            bins,
            &node_b,
            "sink",
            &[SERVICE_PORT, UNUSED_PORT],
        ));

        // Warm up: every pod answers node A on both families (neighbours resolved), the
        // client reaches node A.
        for p in &built {
            for ip in [p.v4, p.v6] {
                let dst = SocketAddr::new(ip, TARGET_PORT);
                let ok = wait_until(scaled(Duration::from_secs(10)), || {
                    probe(&node_a, Proto::Udp, dst, None, Duration::from_millis(200)).pod()
                        == Some(p.name.as_str())
                });
                assert!(ok, "pod {} does not answer on {dst}", p.name);
            }
        }
        for ip in [NODE_A4, NODE_A6] {
            let dst = sa(ip, UNUSED_PORT);
            let ok = wait_until(scaled(Duration::from_secs(10)), || {
                probe(&client, Proto::Udp, dst, None, Duration::from_millis(200))
                    == Outcome::Refused
            });
            assert!(ok, "the client does not reach node A at {dst}");
        }

        Cluster {
            proxy: None,
            _servers: servers,
            pods: built,
            client,
            node_a,
            node_b,
            bins,
            settings: ProxySettings::default(),
        }
    }

    pub fn pod(&self, name: &str) -> &Pod {
        self.pods
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// Run an echo-server named `name` (`{port}` is replaced by each port) on `ports` in
    /// the namespace of `at` (a pod's name, [`NODE_A`] or [`NODE_B`]), until the cluster
    /// is dropped.
    pub fn serve(&mut self, at: &str, name: &str, ports: &[u16]) {
        let ns = match at {
            NODE_A => &self.node_a,
            NODE_B => &self.node_b,
            pod => &self.pod(pod).ns,
        };
        let p = echo_server(self.bins, ns, name, ports);
        self._servers.push(p);
    }

    /// The full manifest: the config document (engine-runner), node A, then `objects`.
    fn manifest_text(&self, kind: &ProxyKind, objects: &[Value]) -> String {
        let mut docs = Vec::new();
        match kind {
            ProxyKind::EngineRunner(_) => docs.push(engine_runner_config(&self.settings)),
            // the daemon learns the service CIDRs from ServiceCIDR objects, as kube-proxy
            ProxyKind::Daemon(_) => docs.push(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
                "metadata": {"name": "kubernetes"},
                "spec": {"cidrs": [SERVICE_CIDR4, SERVICE_CIDR6]}
            })),
        }
        docs.push(node_a_doc());
        docs.extend(objects.iter().cloned());
        docs.iter()
            .map(|d| serde_json::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// Start the proxy in node A on these objects and wait until its rules are in
    /// (both tables listed, one sync reported), at most `timeout`.
    pub fn start_proxy(&mut self, objects: &[Value], timeout: Duration) {
        self.start_proxy_with(objects, timeout, ProxySettings::default());
    }

    /// [`Cluster::start_proxy`] with these settings.
    pub fn start_proxy_with(
        &mut self,
        objects: &[Value],
        timeout: Duration,
        settings: ProxySettings,
    ) {
        assert!(self.proxy.is_none(), "proxy already running");
        self.settings = settings;
        let kind = ProxyKind::from_env(&self.bins);
        let manifest = temp_path("manifest", "yaml");
        write_atomic(&manifest, &self.manifest_text(&kind, objects));
        let m = manifest.to_string_lossy().to_string();
        let (program, args, config) = match &kind {
            ProxyKind::EngineRunner(p) => (
                p.clone(),
                vec![
                    m,
                    "--min-sync-ms".into(),
                    "100".into(),
                    "--sync-ms".into(),
                    "3600000".into(),
                ],
                None,
            ),
            ProxyKind::Daemon(p) => {
                let cfg = temp_path("config", "yaml");
                write_atomic(&cfg, &daemon_config(&self.settings));
                (
                    p.clone(),
                    vec![
                        "--config".into(),
                        cfg.to_string_lossy().to_string(),
                        "--manifests".into(),
                        m,
                        "--hostname-override".into(),
                        NODE_A.into(),
                        "--manifests-poll".into(),
                        "100ms".into(),
                        // one line per sync (the harness counts them)
                        "-v".into(),
                        "2".into(),
                    ],
                    Some(cfg),
                )
            }
        };
        let proc = Proc::spawn(&self.node_a, "proxy", &program, &args);
        let proxy = Proxy {
            proc,
            kind,
            manifest,
            config,
        };
        let start = Instant::now();
        let ok = wait_until(timeout, || {
            proxy.syncs() > 0
                && self
                    .node_a
                    .exec("nft", &["list", "table", "ip", "kube-nlproxy"])
                    .status
                    .success()
                && self
                    .node_a
                    .exec("nft", &["list", "table", "ip6", "kube-nlproxy"])
                    .status
                    .success()
        });
        assert!(
            ok,
            "the proxy did not program its tables within {timeout:?}: {:?}",
            proxy.lines()
        );
        eprintln!("proxy: rules in after {:?}", start.elapsed());
        self.proxy = Some(proxy);
    }

    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("proxy not started")
    }

    /// Kill the proxy (SIGKILL: a crash; our tables stay in the kernel), run `between`
    /// (with node A's namespace), then start it again on `objects` with the same
    /// settings and wait until it synced (see [`Cluster::start_proxy`]).
    pub fn restart_proxy(
        &mut self,
        objects: &[Value],
        timeout: Duration,
        between: impl FnOnce(&Netns),
    ) {
        drop(self.proxy.take().expect("proxy not started"));
        between(&self.node_a);
        let settings = self.settings.clone();
        self.start_proxy_with(objects, timeout, settings);
    }

    /// Replace the objects and wait (at most `timeout`) for the syncs that apply them.
    pub fn apply(&self, objects: &[Value], timeout: Duration) {
        let p = self.proxy();
        let before = p.syncs();
        write_atomic(&p.manifest, &self.manifest_text(&p.kind, objects));
        assert!(
            wait_until(timeout, || p.syncs() > before),
            "no sync within {timeout:?} after the manifest changed: {:?}",
            p.lines()
        );
        // One change may take more than one sync (the objects arrive as separate events
        // and a sync may start after the first one): wait until no sync has followed
        // for 3 x minSyncPeriod (times the time scale) plus twice the longest sync so
        // far (a sync is reported when it ends, conntrack cleanup included, and on a
        // loaded machine that cleanup alone can take seconds).
        let mut last = (p.syncs(), Instant::now());
        let settled = wait_until(timeout, || {
            let n = p.syncs();
            if n != last.0 {
                last = (n, Instant::now());
            }
            let longest = p
                .proc
                .lines()
                .iter()
                .filter(|l| is_sync_line(l))
                .map(|l| sync_duration(l))
                .max()
                .unwrap_or_default();
            last.1.elapsed() >= scaled(Duration::from_millis(300)) + 2 * longest
        });
        assert!(settled, "the proxy keeps syncing: {:?}", p.lines());
    }
}

/// A namespace where new interfaces skip IPv6 duplicate address detection (link-local
/// addresses usable at once: no delay on the first packets).
fn new_ns(role: &str) -> Netns {
    let ns = Netns::new(role);
    ns.sysctl("net.ipv6.conf.all.accept_dad", "0");
    ns.sysctl("net.ipv6.conf.default.accept_dad", "0");
    ns
}

fn echo_server(bins: Bins, ns: &Netns, name: &str, ports: &[u16]) -> Proc {
    let mut args = vec![name.to_string()];
    args.extend(ports.iter().map(u16::to_string));
    let mut p = Proc::spawn(ns, name, bins.echo_server, &args);
    assert!(
        p.wait_line(scaled(Duration::from_secs(10)), |l| l == "ready"),
        "echo-server {name} did not start: {:?}",
        p.lines()
    );
    p
}

/// The `NlproxyConfig` document engine-runner reads.
fn engine_runner_config(s: &ProxySettings) -> Value {
    let iptables = s.mode == "iptables";
    let mut v = json!({
        "kind": "NlproxyConfig",
        "nodeName": NODE_A,
        "families": ["IPv4", "IPv6"],
        "clusterCIDRs": s.cluster_cidrs,
        "serviceCIDRs": [SERVICE_CIDR4, SERVICE_CIDR6],
        "localAddresses": NODE_A_ADDRESSES,
        "masqueradeAll": s.masquerade_all,
        "proxier": if iptables { "Iptables" } else { "Nftables" },
        "localhostNodePorts": iptables && s.localhost_node_ports.unwrap_or(true),
    });
    // unset: the mode's default (iptables: every address; nftables: primary)
    v["nodePortAddresses"] = match &s.node_port_addresses {
        Some(a) => json!(a),
        None if iptables => json!(["0.0.0.0/0", "::/0"]),
        None => json!(["primary"]),
    };
    v
}

/// The KubeProxyConfiguration the daemon reads (the same settings).
fn daemon_config(s: &ProxySettings) -> String {
    let section = if s.mode == "iptables" {
        "iptables"
    } else {
        "nftables"
    };
    let mut text = format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
         kind: KubeProxyConfiguration\n\
         mode: {mode}\n\
         hostnameOverride: {NODE_A}\n\
         clusterCIDR: \"{cidrs}\"\n\
         detectLocalMode: ClusterCIDR\n\
         healthzBindAddress: \"0.0.0.0:10256\"\n\
         metricsBindAddress: \"127.0.0.1:10249\"\n\
         linux:\n  conntrack:\n    maxPerCore: 0\n    min: 0\n\
         {section}:\n  minSyncPeriod: 100ms\n  syncPeriod: 1h\n  masqueradeAll: {masq}\n",
        mode = s.mode,
        cidrs = s.cluster_cidrs.join(","),
        masq = s.masquerade_all,
    );
    if let Some(l) = s.localhost_node_ports {
        text.push_str(&format!("  localhostNodePorts: {l}\n"));
    }
    if !s.feature_gates.is_empty() {
        text.push_str("featureGates:\n");
        for (gate, on) in &s.feature_gates {
            text.push_str(&format!("  {gate}: {on}\n"));
        }
    }
    if let Some(a) = &s.node_port_addresses {
        let list: Vec<String> = a.iter().map(|c| format!("\"{c}\"")).collect();
        text.push_str(&format!("nodePortAddresses: [{}]\n", list.join(", ")));
    }
    text
}

/// Node A's Node object: addresses, pod CIDRs, zone label.
pub fn node_a_doc() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE_A, "labels": {"topology.kubernetes.io/zone": ZONE_A}},
        "spec": {"podCIDR": POD_CIDR_A4, "podCIDRs": [POD_CIDR_A4, POD_CIDR_A6]},
        "status": {"addresses": [
            {"type": "InternalIP", "address": NODE_A4},
            {"type": "InternalIP", "address": NODE_A6},
            {"type": "Hostname", "address": NODE_A}
        ]}
    })
}

/// A Service with one TCP and one UDP port ([`SERVICE_PORT`] -> [`TARGET_PORT`], port
/// names `tcp` and `udp`; with a node port, the same number for both).
#[derive(Clone, Debug, Default)]
pub struct Svc {
    pub name: String,
    pub cluster_ips: Vec<String>,
    /// `ClusterIP` (default), `NodePort`, `LoadBalancer`.
    pub type_: String,
    pub node_port: Option<u16>,
    pub external_ips: Vec<String>,
    pub lb_ips: Vec<String>,
    pub source_ranges: Vec<String>,
    pub etp_local: bool,
    pub health_check_node_port: Option<u16>,
    pub itp_local: bool,
    pub affinity_timeout: Option<u32>,
    pub traffic_distribution: Option<String>,
}

impl Svc {
    pub fn new(name: &str, cluster_ips: &[&str]) -> Svc {
        Svc {
            name: name.into(),
            cluster_ips: cluster_ips.iter().map(|s| s.to_string()).collect(),
            type_: "ClusterIP".into(),
            ..Svc::default()
        }
    }
    pub fn node_port(mut self, np: u16) -> Svc {
        self.type_ = "NodePort".into();
        self.node_port = Some(np);
        self
    }
    pub fn load_balancer(mut self, np: u16, lb_ips: &[&str]) -> Svc {
        self.type_ = "LoadBalancer".into();
        self.node_port = Some(np);
        self.lb_ips = lb_ips.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn external_ips(mut self, ips: &[&str]) -> Svc {
        self.external_ips = ips.iter().map(|s| s.to_string()).collect();
        self
    }
    pub fn to_json(&self) -> Value {
        let ports: Vec<Value> = [("tcp", "TCP"), ("udp", "UDP")]
            .iter()
            .map(|(n, p)| {
                let mut v = json!({"name": n, "port": SERVICE_PORT, "targetPort": TARGET_PORT, "protocol": p});
                if let Some(np) = self.node_port {
                    v["nodePort"] = json!(np);
                }
                v
            })
            .collect();
        let families: Vec<&str> = self
            .cluster_ips
            .iter()
            .map(|ip| if ip.contains(':') { "IPv6" } else { "IPv4" })
            .collect();
        let mut spec = json!({
            "type": self.type_,
            "clusterIP": self.cluster_ips.first(),
            "clusterIPs": self.cluster_ips,
            "ipFamilies": families,
            "ipFamilyPolicy": if families.len() > 1 { "RequireDualStack" } else { "SingleStack" },
            "ports": ports,
        });
        if !self.external_ips.is_empty() {
            spec["externalIPs"] = json!(self.external_ips);
        }
        if !self.source_ranges.is_empty() {
            spec["loadBalancerSourceRanges"] = json!(self.source_ranges);
        }
        if self.etp_local {
            spec["externalTrafficPolicy"] = json!("Local");
        } else if self.type_ != "ClusterIP" {
            spec["externalTrafficPolicy"] = json!("Cluster");
        }
        if let Some(h) = self.health_check_node_port {
            spec["healthCheckNodePort"] = json!(h);
        }
        if self.itp_local {
            spec["internalTrafficPolicy"] = json!("Local");
        }
        if let Some(t) = self.affinity_timeout {
            spec["sessionAffinity"] = json!("ClientIP");
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": t}});
        }
        if let Some(t) = &self.traffic_distribution {
            spec["trafficDistribution"] = json!(t);
        }
        let mut v = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": "conf"},
            "spec": spec,
        });
        if !self.lb_ips.is_empty() {
            let ingress: Vec<Value> = self.lb_ips.iter().map(|ip| json!({"ip": ip})).collect();
            v["status"] = json!({"loadBalancer": {"ingress": ingress}});
        }
        v
    }
}

/// One endpoint of a slice.
#[derive(Clone, Debug)]
pub struct Ep {
    pub addr: IpAddr,
    pub node: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub zone: Option<String>,
}

impl Ep {
    /// A ready endpoint for `pod` in family `f`.
    pub fn ready(pod: &Pod, f: Fam) -> Ep {
        Ep {
            addr: pod.ip(f),
            node: pod.on.node_name().into(),
            ready: true,
            serving: true,
            terminating: false,
            zone: None,
        }
    }
    /// Serving but terminating (not ready).
    pub fn terminating(pod: &Pod, f: Fam) -> Ep {
        Ep {
            ready: false,
            serving: true,
            terminating: true,
            ..Ep::ready(pod, f)
        }
    }
    /// Neither ready nor serving.
    pub fn not_ready(pod: &Pod, f: Fam) -> Ep {
        Ep {
            ready: false,
            serving: false,
            terminating: false,
            ..Ep::ready(pod, f)
        }
    }
    pub fn zone(mut self, z: &str) -> Ep {
        self.zone = Some(z.into());
        self
    }
}

/// The EndpointSlice of `service` for family `f` (name `<service>-<v4|v6>`), ports
/// `tcp` and `udp` on [`TARGET_PORT`].
pub fn slice(service: &str, f: Fam, eps: &[Ep]) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|e| {
            let mut v = json!({
                "addresses": [e.addr.to_string()],
                "nodeName": e.node,
                "conditions": {"ready": e.ready, "serving": e.serving, "terminating": e.terminating},
            });
            if let Some(z) = &e.zone {
                v["zone"] = json!(z);
                v["hints"] = json!({"forZones": [{"name": z}]});
            }
            v
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-{}", f.pick("v4", "v6")),
            "namespace": "conf",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": f.slice_type(),
        "endpoints": endpoints,
        "ports": [
            {"name": "tcp", "port": TARGET_PORT, "protocol": "TCP"},
            {"name": "udp", "port": TARGET_PORT, "protocol": "UDP"},
        ],
    })
}

/// What a probe got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An echo-server answered: its name and the source address it saw.
    Reply { pod: String, seen: IpAddr },
    /// Connection refused (TCP RST or ICMP unreachable port / ICMP reject).
    Refused,
    /// Nothing came back within the timeout (dropped).
    Timeout,
    /// Anything else (e.g. host unreachable), with the error.
    Error(String),
}

impl Outcome {
    pub fn pod(&self) -> Option<&str> {
        match self {
            Outcome::Reply { pod, .. } => Some(pod),
            _ => None,
        }
    }
    pub fn seen(&self) -> Option<IpAddr> {
        match self {
            Outcome::Reply { seen, .. } => Some(*seen),
            _ => None,
        }
    }
}

fn parse_reply(line: &str) -> Outcome {
    let mut w = line.split_whitespace();
    match (w.next(), w.next().and_then(|s| s.parse().ok())) {
        (Some(pod), Some(seen)) => Outcome::Reply {
            pod: pod.to_string(),
            seen,
        },
        _ => Outcome::Error(format!("bad reply {line:?}")),
    }
}

/// One probe from the calling thread's namespace: a new TCP connection or a new UDP flow
/// (fresh socket, ephemeral port) to `dst`, optionally from source address `src`.
pub fn probe_here(
    proto: Proto,
    dst: SocketAddr,
    src: Option<IpAddr>,
    timeout: Duration,
) -> Outcome {
    match proto {
        Proto::Tcp => tcp_probe(dst, src, timeout),
        Proto::Udp => udp_probe(dst, src, timeout),
    }
}

fn udp_probe(dst: SocketAddr, src: Option<IpAddr>, timeout: Duration) -> Outcome {
    let bind: IpAddr = src.unwrap_or(if dst.is_ipv4() {
        IpAddr::from([0u8; 4])
    } else {
        IpAddr::from([0u16; 8])
    });
    let sock = match UdpSocket::bind((bind, 0)) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(format!("bind {bind}: {e}")),
    };
    if let Err(e) = sock.connect(dst) {
        return Outcome::Error(format!("connect {dst}: {e}"));
    }
    // Like a real UDP client, resend on silence (three sends within `timeout`, on the
    // same flow): an ICMP error can be lost to the kernel's ICMP rate limits, which
    // are shared with every namespace (the global token bucket), so a single
    // datagram under load can time out where the stack did refuse. A flow that is
    // dropped still times out.
    const SENDS: u32 = 3;
    sock.set_read_timeout(Some(timeout / SENDS)).unwrap();
    let mut buf = [0u8; 600];
    for _ in 0..SENDS {
        if let Err(e) = sock.send(b"probe") {
            return match e.kind() {
                std::io::ErrorKind::ConnectionRefused => Outcome::Refused,
                _ => Outcome::Error(format!("send {dst}: {e}")),
            };
        }
        match sock.recv(&mut buf) {
            Ok(n) => return parse_reply(&String::from_utf8_lossy(&buf[..n])),
            Err(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => return Outcome::Refused,
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => continue,
                _ => return Outcome::Error(format!("recv {dst}: {e}")),
            },
        }
    }
    Outcome::Timeout
}

fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn tcp_probe(dst: SocketAddr, src: Option<IpAddr>, timeout: Duration) -> Outcome {
    let start = Instant::now();
    let fam = if dst.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket call.
    let fd = unsafe {
        libc::socket(
            fam,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Outcome::Error(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: we own fd; the stream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    if let Some(s) = src {
        let (sa, len) = sockaddr(SocketAddr::new(s, 0));
        // SAFETY: valid address of the given length.
        let rc = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_storage).cast(), len) };
        if rc != 0 {
            return Outcome::Error(format!("bind {s}: {}", std::io::Error::last_os_error()));
        }
    }
    let (sa, len) = sockaddr(dst);
    // SAFETY: valid address of the given length.
    let rc = unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return connect_error(e);
        }
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n == 0 {
        return Outcome::Timeout;
    }
    if n < 0 {
        return Outcome::Error(format!("poll: {}", std::io::Error::last_os_error()));
    }
    match stream.take_error() {
        Ok(Some(e)) => return connect_error(e),
        Err(e) => return Outcome::Error(format!("SO_ERROR: {e}")),
        Ok(None) => {}
    }
    stream.set_nonblocking(false).unwrap();
    let left = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(100));
    stream.set_read_timeout(Some(left)).unwrap();
    let mut text = String::new();
    let mut s = stream;
    match s.read_to_string(&mut text) {
        Ok(_) if !text.is_empty() => parse_reply(text.trim()),
        Ok(_) => Outcome::Error("connected, but the server sent nothing".into()),
        Err(e) => match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                Outcome::Error("connected, but no reply line in time".into())
            }
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                if text.is_empty() =>
            {
                Outcome::Refused
            }
            _ if !text.is_empty() => parse_reply(text.trim()),
            _ => Outcome::Error(format!("read: {e}")),
        },
    }
}

fn connect_error(e: std::io::Error) -> Outcome {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Outcome::Refused,
        _ => Outcome::Error(format!("connect: {e}")),
    }
}

/// Default time to wait for an answer that should come.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// Time to wait for a refusal (ICMP errors may need one retransmission, see the tests).
pub const REFUSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Time after which silence counts as "dropped".
pub const DROP_TIMEOUT: Duration = Duration::from_millis(1500);

/// One probe from namespace `ns`.
pub fn probe(
    ns: &Netns,
    proto: Proto,
    dst: SocketAddr,
    src: Option<IpAddr>,
    timeout: Duration,
) -> Outcome {
    ns.run(move || probe_here(proto, dst, src, timeout))
}

/// `n` probes (each a new connection / flow) from `ns`, in order.
pub fn probes(ns: &Netns, proto: Proto, dst: SocketAddr, n: usize) -> Vec<Outcome> {
    ns.run(move || {
        (0..n)
            .map(|_| probe_here(proto, dst, None, REPLY_TIMEOUT))
            .collect()
    })
}

/// New connections from `ns` to `dst` until every pod of `expected` answered (at most
/// `max` connections). Panics on a reply from another pod or a failed probe; returns
/// the replies per pod.
pub fn reach_all(
    ns: &Netns,
    proto: Proto,
    dst: SocketAddr,
    expected: &[&str],
    max: usize,
) -> BTreeMap<String, Vec<Outcome>> {
    let want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    let got = ns.run(move || {
        let mut got: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
        for _ in 0..max {
            let o = probe_here(proto, dst, None, REPLY_TIMEOUT);
            match o.pod() {
                Some(p) => got.entry(p.to_string()).or_default().push(o.clone()),
                None => panic!("{proto:?} {dst}: probe failed: {o:?} (so far {got:?})"),
            }
            if want.iter().all(|w| got.contains_key(w)) {
                break;
            }
        }
        got
    });
    let seen: Vec<&String> = got.keys().collect();
    for p in &seen {
        assert!(
            expected.contains(&p.as_str()),
            "{proto:?} {dst}: reply from {p}, expected only {expected:?}"
        );
    }
    assert_eq!(
        got.len(),
        expected.len(),
        "{proto:?} {dst}: within {max} new connections only {seen:?} answered, expected {expected:?}"
    );
    got
}

/// `ip:port` as a socket address (IPv6 without brackets accepted).
pub fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap_or_else(|_| panic!("bad ip {ip}")), port)
}

/// Minimal HTTP GET from `ns` (for health-check node ports): status code and body.
pub fn http_get(ns: &Netns, dst: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let path = path.to_string();
    ns.run(move || {
        use std::io::Write;
        let mut s = TcpStream::connect_timeout(&dst, REPLY_TIMEOUT).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut text = String::new();
        s.read_to_string(&mut text).map_err(|e| e.to_string())?;
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad response {text:?}"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((code, body))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_durations_of_the_daemon_and_engine_runner() {
        let daemon = "proxy: 2026-11-30T17:56:08.901082Z  INFO kube_nlproxy: synced kind=\"partial\" services=1 endpoints=5 ops=9 bytes=1292 compile_ms=0.1 commit_ms=0.314 conntrack_ms=710.169 conntrack_deleted=0";
        assert!(is_sync_line(daemon));
        assert_eq!(sync_duration(daemon).as_micros(), 710_583);
        let klog = r#"I1130 18:34:05.725053    8949 main.rs:252] "synced" kind="partial" services=1 endpoints=5 ops=9 bytes=1292 compile_ms=0.1 commit_ms=0.314 conntrack_ms=710.169 conntrack_deleted=0"#;
        assert!(is_sync_line(klog));
        assert_eq!(sync_duration(klog).as_micros(), 710_583);
        assert!(!is_sync_line(
            r#"I1130 18:34:05.725233    8949 operate.rs:137] "serving /healthz and /livez""#
        ));
        let runner = "synced full=true ops=12 targets=0 deleted=0 errors=0 compile_ms=3 commit_ms=1 conntrack_ms=0";
        assert!(is_sync_line(runner));
        assert_eq!(sync_duration(runner), Duration::from_millis(4));
        assert_eq!(sync_duration("repaired"), Duration::ZERO);
    }
}
