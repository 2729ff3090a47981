//! The image made real (docs/deploy/README.md, "Building the image" and "How the image is
//! tested"): docs/deploy/Containerfile built with podman and no registry
//! (docs/deploy/build-offline: a Debian root filesystem made with mmdebstrap, `podman
//! import`, the binary cargo built), then run on a node whose "host network" is a
//! network namespace of the test's (`--network ns:/run/netns/NAME`), twice:
//!
//! - as kubeadm's DaemonSet runs kube-proxy (`cmd/kubeadm/app/phases/addons/proxy/
//!   manifests.go`; the image swap of docs/deploy/README.md): privileged, the command
//!   `/usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf
//!   --hostname-override=$(NODE_NAME)`, the ConfigMap's `config.conf` (the one kubeadm
//!   1.31 writes: `mode: ""`, the iptables drop-in case) and `kubeconfig.conf` at
//!   `/var/lib/kube-proxy`, hostPath `/run/xtables.lock` and `/lib/modules` (read-only);
//! - as docs/deploy/kube-nlproxy.yaml's DaemonSet runs it, read from the manifest: the
//!   privileged `--init-only` init container, then the proxy with NET_ADMIN only, a
//!   read-only root filesystem and no privilege escalation, with
//!   docs/deploy/kube-proxy-configmap.yaml's `config.conf` (`mode: nftables`).
//!
//! Both with the service account's token and CA, as the kubelet mounts them. The node
//! namespace is the router of a [`Line`]: the API-server double listens on its 127.0.0.1
//! and serves the node, a ClusterIP service and its endpoint, the server. Real TCP from
//! the client to the ClusterIP must reach the server through the container's rules (and
//! must not before the container runs), `/healthz` on 10256 must answer 200, the daemon
//! must exit 0 when stopped and leave the host's global conntrack settings alone.
//!
//! The containers' logs are printed, and written with the podman command lines and the
//! times to `$CARGO_TARGET_TMPDIR/image-run.log` (`.ci/run` prints it). Containers,
//! image tags and intermediate images of the run are removed at the end, also when the
//! test fails. podman reads a `containers.conf` of the test's (`CONTAINERS_CONF`), never
//! the machine's: the `runc` runtime, cgroupfs, no default ulimits or sysctls.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::{http_get, node, service, slice, ApiServer, TempDir};
use netns_tests::{require_root, wait_until, Line, Netns};

const WAIT: Duration = Duration::from_secs(30);
const CLUSTER_IP: &str = "198.18.100.1";
const ENDPOINT_PORT: u16 = 8080;
const NODE_NAME: &str = "node-a";
/// Marks every container and image of a run (`--label`), for the cleanup.
const LABEL_KEY: &str = "io.kube-nlproxy.test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The daemon to put in the image: `KUBE_NLPROXY_BIN` (CI's release build) or the one
/// cargo built for this test.
/// The most an image may weigh, uncompressed (kube-proxy's is about 30 MB).
const MAX_IMAGE_BYTES: u64 = 40_000_000;

/// The section names of an ELF64 little-endian file (empty if it is not one).
fn elf_sections(path: &Path) -> Vec<String> {
    let Ok(b) = std::fs::read(path) else {
        return Vec::new();
    };
    let u16_at = |o: usize| {
        b.get(o..o + 2)
            .map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
    };
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()) as usize)
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap()) as usize)
    };
    if b.get(..5) != Some(b"\x7fELF\x02".as_slice()) {
        return Vec::new();
    }
    let (Some(shoff), Some(size), Some(num), Some(strndx)) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e))
    else {
        return Vec::new();
    };
    let Some(strtab) = u64_at(shoff + strndx * size + 0x18) else {
        return Vec::new();
    };
    (0..num)
        .filter_map(|i| {
            let name = strtab + u32_at(shoff + i * size)?;
            let end = b.get(name..)?.iter().position(|&c| c == 0)?;
            Some(String::from_utf8_lossy(&b[name..name + end]).into_owned())
        })
        .collect()
}

fn binary() -> PathBuf {
    std::env::var_os("KUBE_NLPROXY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kube-nlproxy")))
}

/// A program the test needs; missing, it fails in CI (.ci/run installs it) and skips
/// elsewhere.
fn tool(name: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed (apt-get install {package})"
        );
        eprintln!("SKIPPED image_netns: {name} is not installed (apt-get install {package})");
    }
    found
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// podman with the test's containers.conf; the run's record (commands, logs, times).
struct Podman {
    conf: PathBuf,
    id: String,
    record: std::sync::Mutex<String>,
}

impl Podman {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "podman {args:?} failed:\n{}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn note(&self, s: &str) {
        eprintln!("{s}");
        let mut r = self.record.lock().unwrap_or_else(|e| e.into_inner());
        r.push_str(s);
        r.push('\n');
    }

    fn label(&self) -> String {
        format!("{LABEL_KEY}={}", self.id)
    }

    fn image(&self) -> String {
        format!("localhost/kube-nlproxy-test:{}", self.id)
    }

    fn base(&self) -> String {
        format!("localhost/kube-nlproxy-test-base:{}", self.id)
    }

    /// The ids podman lists for `what` (`ps` or `images`) with the run's label.
    fn labelled(&self, what: &str) -> Vec<String> {
        let filter = format!("label={}", self.label());
        let o = self.run(&[what, "-a", "-q", "--no-trunc", "--filter", &filter]);
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Remove the run's containers, image tags and intermediate images.
    fn clean(&self) {
        let containers = self.labelled("ps");
        if !containers.is_empty() {
            let mut args = vec!["rm", "-f", "-t", "0"];
            args.extend(containers.iter().map(String::as_str));
            let _ = self.run(&args);
        }
        let (image, base) = (self.image(), self.base());
        for tag in [&image, &base] {
            let _ = self.run(&["rmi", "-f", tag]);
        }
        let images = self.labelled("images");
        if !images.is_empty() {
            let mut args = vec!["rmi", "-f"];
            args.extend(images.iter().map(String::as_str));
            let _ = self.run(&args);
        }
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        self.clean();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-run.log");
        let r = self.record.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::fs::write(&out, r.as_bytes());
        eprintln!("(the run's record is in {})", out.display());
    }
}

/// The containers.conf of the test: runc (crun fails on some hosts' cgroups), cgroupfs
/// (no systemd needed), events to a file, and no default ulimits (podman raises
/// RLIMIT_NOFILE past a hard limit the host may not allow) or default sysctls.
const CONTAINERS_CONF: &str = "\
[containers]
default_ulimits = []
default_sysctls = []
[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
";

/// An echo server on `ns`'s `addr:port` until `stop`: each connection gets one line
/// naming the server and the source address it saw.
fn echo_server(ns: &Netns, addr: &str, port: u16, stop: Arc<AtomicBool>) {
    let bind: SocketAddr = format!("{addr}:{port}").parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    ns.spawn(move || {
        let l = TcpListener::bind(bind).unwrap_or_else(|e| panic!("bind {bind}: {e}"));
        l.set_nonblocking(true).unwrap();
        tx.send(()).unwrap();
        let end = Instant::now() + Duration::from_secs(600);
        while !stop.load(Ordering::SeqCst) && Instant::now() < end {
            match l.accept() {
                Ok((mut s, peer)) => {
                    let _ = writeln!(s, "hello from {bind}, you are {}", peer.ip());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("echo server started");
}

/// One TCP request from `ns` to `dst`: the line the server answered.
fn request(ns: &Netns, dst: &str) -> Result<String, String> {
    let dst: SocketAddr = dst.parse().unwrap();
    ns.run(move || {
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(1))
            .map_err(|e| format!("connect {dst}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut line = String::new();
        s.read_to_string(&mut line)
            .map_err(|e| format!("read {dst}: {e}"))?;
        Ok(line.trim().to_string())
    })
}

fn configmap() -> serde_json::Value {
    let text = std::fs::read_to_string(repo().join("docs/deploy/kube-proxy-configmap.yaml"))
        .expect("docs/deploy/kube-proxy-configmap.yaml");
    kube_model::manifest::single_document(&text).expect("one YAML document")
}

/// kubeadm's kubeconfig.conf (the same layout as the docs ConfigMap's) with the
/// control-plane endpoint replaced by the double's URL.
fn kubeconfig(url: &str) -> String {
    let kc = configmap()["data"]["kubeconfig.conf"]
        .as_str()
        .expect("kubeconfig.conf")
        .to_string();
    let endpoint = "https://control-plane.example:6443";
    assert!(kc.contains(endpoint), "{kc}");
    kc.replace(endpoint, url)
}

/// The service account's files as the kubelet projects them: a token, a CA certificate
/// (made here with openssl; the double is plain HTTP, the client still loads it) and
/// the namespace.
fn make_service_account(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("token"), "image-test-token").unwrap();
    std::fs::write(dir.join("namespace"), "kube-system").unwrap();
    let o = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=image-test-ca"])
        .arg("-keyout")
        .arg(dir.join("ca.key"))
        .arg("-out")
        .arg(dir.join("ca.crt"))
        .output()
        .expect("openssl");
    assert!(o.status.success(), "openssl: {}", text(&o));
    std::fs::remove_file(dir.join("ca.key")).unwrap();
}

/// A hostPath volume's source: the host's `path` when it exists; otherwise what the
/// runtime would create there (an empty directory, or with `type: FileOrCreate` an
/// empty file), made in the scratch directory so that the host is left as it was.
fn host_path(pm: &Podman, scratch: &TempDir, path: &str, dir: bool) -> PathBuf {
    if Path::new(path).exists() {
        return PathBuf::from(path);
    }
    let stand_in = scratch.path(&path.trim_start_matches('/').replace('/', "-"));
    if dir {
        std::fs::create_dir_all(&stand_in).unwrap();
    } else {
        std::fs::write(&stand_in, "").unwrap();
    }
    pm.note(&format!(
        "== the host has no {path}: mounting an empty {} instead",
        if dir { "directory" } else { "file" }
    ));
    stand_in
}

/// The host's global conntrack settings (the container is privileged: it could write them).
fn host_conntrack() -> (String, String) {
    let r = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    (
        r("/sys/module/nf_conntrack/parameters/hashsize"),
        r("/proc/sys/net/netfilter/nf_conntrack_max"),
    )
}

// ---------------------------------------------------------------------------------------
// pods, as the kubelet runs them, in podman's terms

/// A container of the pod.
struct Container {
    name: String,
    /// `command`, with `$(NODE_NAME)` expanded as the kubelet expands it from the
    /// container's environment (`NODE_NAME` from `fieldRef: spec.nodeName`).
    command: Vec<String>,
    privileged: bool,
    cap_drop: Vec<String>,
    cap_add: Vec<String>,
    read_only_root: bool,
    no_new_privileges: bool,
    /// (source, mount path, read-only)
    mounts: Vec<(PathBuf, String, bool)>,
}

/// A pod of a DaemonSet on the node: init containers run to completion in order, then
/// the container.
struct Pod {
    init: Vec<Container>,
    main: Container,
}

/// What the pod's volumes are on this node.
struct Volumes {
    /// The `kube-proxy` ConfigMap's files.
    configmap: PathBuf,
    /// The service account's projected token, CA and namespace (mounted into every
    /// container at /var/run/secrets/kubernetes.io/serviceaccount).
    service_account: PathBuf,
    /// hostPath sources (see [`host_path`]).
    host: Vec<(String, PathBuf)>,
}

impl Volumes {
    fn host(&self, path: &str) -> PathBuf {
        self.host
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no hostPath {path} on the test's node"))
    }
}

fn expand(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| a.replace("$(NODE_NAME)", NODE_NAME))
        .collect()
}

/// kubeadm's kube-proxy DaemonSet (`cmd/kubeadm/app/phases/addons/proxy/manifests.go`):
/// one privileged container, its command, the ConfigMap at /var/lib/kube-proxy,
/// hostPath /run/xtables.lock (FileOrCreate) and /lib/modules (read-only). The kubelet
/// mounts ConfigMap volumes read-only.
fn kubeadm_pod(v: &Volumes) -> Pod {
    let command = [
        "/usr/local/bin/kube-proxy",
        "--config=/var/lib/kube-proxy/config.conf",
        "--hostname-override=$(NODE_NAME)",
    ]
    .map(String::from);
    Pod {
        init: vec![],
        main: Container {
            name: "kube-proxy".into(),
            command: expand(&command),
            privileged: true,
            cap_drop: vec![],
            cap_add: vec![],
            read_only_root: false,
            no_new_privileges: false,
            mounts: vec![
                (v.configmap.clone(), "/var/lib/kube-proxy".into(), true),
                (
                    v.host("/run/xtables.lock"),
                    "/run/xtables.lock".into(),
                    false,
                ),
                (v.host("/lib/modules"), "/lib/modules".into(), true),
            ],
        },
    }
}

/// The pod of docs/deploy/kube-nlproxy.yaml's DaemonSet, read from the manifest.
fn manifest_pod(v: &Volumes) -> Pod {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let text = std::fs::read_to_string(repo().join("docs/deploy/kube-nlproxy.yaml"))
        .expect("docs/deploy/kube-nlproxy.yaml");
    let docs = kube_model::manifest::documents(&text).expect("valid YAML");
    let ds: DaemonSet = docs
        .entries()
        .into_iter()
        .map(|e| e.expect("an object"))
        .find(|e| e.kind == "DaemonSet")
        .expect("a DaemonSet")
        .decode()
        .expect("a DaemonSet");
    let spec = ds.spec.template.spec.expect("pod spec");
    assert_eq!(
        spec.host_network,
        Some(true),
        "the proxy needs the host network"
    );
    let volumes = spec.volumes.clone().unwrap_or_default();
    let container = |c: &k8s_openapi::api::core::v1::Container| {
        for e in c.env.iter().flatten() {
            let field = e.value_from.as_ref().and_then(|f| f.field_ref.as_ref());
            assert!(
                e.name == "NODE_NAME" && field.is_some_and(|f| f.field_path == "spec.nodeName"),
                "{}: env {} is not known to the test",
                c.name,
                e.name
            );
        }
        let sc = c.security_context.clone().unwrap_or_default();
        let caps = sc.capabilities.clone().unwrap_or_default();
        let mounts = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let vol = volumes
                    .iter()
                    .find(|vol| vol.name == m.name)
                    .unwrap_or_else(|| panic!("{}: no volume {}", c.name, m.name));
                let ro = m.read_only == Some(true);
                if vol
                    .config_map
                    .as_ref()
                    .is_some_and(|cm| cm.name == "kube-proxy")
                {
                    (v.configmap.clone(), m.mount_path.clone(), true)
                } else if let Some(hp) = &vol.host_path {
                    (v.host(&hp.path), m.mount_path.clone(), ro)
                } else {
                    panic!("{}: volume {} is not known to the test", c.name, m.name)
                }
            })
            .collect();
        Container {
            name: c.name.clone(),
            command: expand(c.command.as_deref().expect("a command")),
            privileged: sc.privileged == Some(true),
            cap_drop: caps.drop.unwrap_or_default(),
            cap_add: caps.add.unwrap_or_default(),
            read_only_root: sc.read_only_root_filesystem == Some(true),
            no_new_privileges: sc.allow_privilege_escalation == Some(false),
            mounts,
        }
    };
    let mut containers = spec.containers.iter().map(container);
    let main = containers.next().expect("a container");
    assert!(containers.next().is_none(), "one container");
    Pod {
        init: spec
            .init_containers
            .iter()
            .flatten()
            .map(container)
            .collect(),
        main,
    }
}

/// `podman run` of `c` on the node: the pod's label, the node's network namespace as
/// the host network, `NODE_NAME`, the security context, the volumes, the command.
fn podman_run(pm: &Podman, c: &Container, name: &str, netns: &Netns, v: &Volumes) -> Vec<String> {
    let mut a: Vec<String> = ["run", "--name", name, "--label", &pm.label()]
        .map(String::from)
        .to_vec();
    a.push(format!("--network=ns:/run/netns/{}", netns.name()));
    a.push(format!("--env=NODE_NAME={NODE_NAME}"));
    if c.privileged {
        a.push("--privileged".into());
    }
    a.extend(c.cap_drop.iter().map(|x| format!("--cap-drop={x}")));
    a.extend(c.cap_add.iter().map(|x| format!("--cap-add={x}")));
    if c.read_only_root {
        // only the root filesystem, as the kubelet does (podman adds tmpfs mounts by default)
        a.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    }
    if c.no_new_privileges {
        a.push("--security-opt=no-new-privileges".into());
    }
    for (src, dst, ro) in &c.mounts {
        a.push(format!(
            "--volume={}:{dst}{}",
            src.display(),
            if *ro { ":ro" } else { "" }
        ));
    }
    a.push(format!(
        "--volume={}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
        v.service_account.display()
    ));
    a.push(format!("--entrypoint={}", c.command[0]));
    a.push(pm.image());
    a.extend(c.command[1..].iter().cloned());
    a
}

// ---------------------------------------------------------------------------------------
// a node

/// Run `pod` (made from the node's volumes by `make_pod`) with `config_conf` as the
/// ConfigMap's config.conf, on a fresh node; check traffic and /healthz; record the logs.
fn run_case(
    pm: &Podman,
    scratch: &TempDir,
    case: &str,
    config_conf: &str,
    make_pod: fn(&Volumes) -> Pod,
) {
    let line = Line::new();
    let api = line.router.run(ApiServer::start);
    api.apply(node(NODE_NAME, Line::ROUTER4_C));
    api.apply(service("demo", "web", CLUSTER_IP, 80));
    api.apply(slice(
        "demo",
        "web",
        "web-1",
        &[Line::SERVER4],
        ENDPOINT_PORT,
        NODE_NAME,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    echo_server(&line.server, Line::SERVER4, ENDPOINT_PORT, stop.clone());
    let target = format!("{CLUSTER_IP}:80");
    // no proxy yet: the ClusterIP is not served
    assert!(
        request(&line.client, &target).is_err(),
        "{target} answered before the container ran"
    );

    // the ConfigMap volume, the service account, the host paths
    let configmap = scratch.path(&format!("{case}-configmap"));
    std::fs::create_dir_all(&configmap).unwrap();
    std::fs::write(configmap.join("config.conf"), config_conf).unwrap();
    std::fs::write(configmap.join("kubeconfig.conf"), kubeconfig(&api.url())).unwrap();
    let service_account = scratch.path(&format!("{case}-serviceaccount"));
    make_service_account(&service_account);
    let host = ["/run/xtables.lock", "/lib/modules"]
        .map(|p| {
            (
                p.to_string(),
                host_path(pm, scratch, p, p == "/lib/modules"),
            )
        })
        .to_vec();
    let volumes = Volumes {
        configmap,
        service_account,
        host,
    };
    let pod = make_pod(&volumes);
    let t0 = Instant::now();

    for c in &pod.init {
        let name = format!("kube-nlproxy-test-{}-{case}-{}", pm.id, c.name);
        let args = podman_run(pm, c, &name, &line.router, &volumes);
        pm.note(&format!(
            "== {case}: init container {}: podman {}",
            c.name,
            args.join(" ")
        ));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = pm.run(&args);
        pm.note(&format!(
            "== {case}: init container {} exited {:?} after {:.1?}:\n{}",
            c.name,
            out.status.code(),
            t0.elapsed(),
            text(&out)
        ));
        assert!(
            out.status.success(),
            "{case}: init container {} failed",
            c.name
        );
        pm.ok(&["rm", &name]);
    }

    let name = format!("kube-nlproxy-test-{}-{case}-{}", pm.id, pod.main.name);
    let mut args = podman_run(pm, &pod.main, &name, &line.router, &volumes);
    args.insert(1, "--detach".into());
    pm.note(&format!(
        "== {case}: container {}: podman {}",
        pod.main.name,
        args.join(" ")
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    pm.ok(&args);
    let logs = || text(&pm.run(&["logs", &name]));
    let state = || {
        pm.ok(&[
            "inspect",
            "--format",
            "{{.State.Status}} {{.State.ExitCode}}",
            &name,
        ])
    };

    let healthz = || {
        line.router
            .run(|| http_get(10256, "/healthz"))
            .map(|(code, _, body)| (code, body))
    };
    let healthy = wait_until(WAIT, || healthz().is_some_and(|(c, _)| c == 200));
    let t_healthy = t0.elapsed();
    let mut answer = Err(String::new());
    let served = healthy
        && wait_until(WAIT, || {
            answer = request(&line.client, &target);
            answer.is_ok()
        });
    let t_served = t0.elapsed();
    if !served {
        panic!(
            "{case}: healthz {:?}, {target}: {answer:?}; container {}\n--- container log ---\n{}\n--- node's ruleset ---\n{}",
            healthz(),
            state(),
            logs(),
            line.router.exec_ok("nft", &["list", "ruleset"])
        );
    }
    let answer = answer.unwrap();
    assert!(
        answer.starts_with(&format!("hello from {}:{ENDPOINT_PORT}", Line::SERVER4)),
        "{case}: {target} answered {answer:?}"
    );
    let (code, body) = healthz().unwrap();
    pm.note(&format!(
        "== {case}: /healthz {code} {body} after {t_healthy:.1?}; client {} -> {target} -> {answer:?} after {t_served:.1?}",
        Line::CLIENT4
    ));
    pm.note(&format!(
        "== {case}: the node's tables: {}",
        line.router
            .exec_ok("nft", &["list", "tables"])
            .lines()
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // the pod is deleted: SIGTERM, as the kubelet stops it
    pm.ok(&["stop", "-t", "10", &name]);
    let log = logs();
    pm.note(&format!("== {case}: stopped: {}", state()));
    pm.note(&format!("== {case}: podman logs {name}\n{log}"));
    assert_eq!(
        state(),
        "exited 0",
        "{case}: the daemon did not exit cleanly"
    );
    // The node is a namespace of the test's, not the host's: the global conntrack
    // settings are not the daemon's to write there.
    assert!(
        log.contains("not in the host's network namespace: nf_conntrack_max (global) left alone")
            && !log.contains("sysctl=\"net.netfilter.nf_conntrack_max\""),
        "{case}: the daemon took the node's namespace for the host's"
    );
    pm.ok(&["rm", &name]);
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn the_image_runs_as_kubeadms_and_our_daemonsets_run_it() {
    require_root!();
    if !(tool("podman", "podman") && tool("runc", "runc") && tool("openssl", "openssl")) {
        return;
    }
    let scratch = TempDir::new("image");
    let conf = scratch.path("containers.conf");
    std::fs::write(&conf, CONTAINERS_CONF).unwrap();
    let pm = Podman {
        conf,
        id: format!("{}", std::process::id()),
        record: Default::default(),
    };
    pm.clean();
    let before = host_conntrack();

    // build: the offline path of docs/deploy, the binary cargo (or CI) built
    let bin = binary();
    let t0 = Instant::now();
    let label = pm.label();
    // the size limit holds for a release build (KUBE_NLPROXY_BIN, as CI sets it); the
    // binary cargo built for this test is a dev build, larger without its debug info
    let release = std::env::var_os("KUBE_NLPROXY_BIN").is_some();
    let max_bytes = if release {
        MAX_IMAGE_BYTES.to_string()
    } else {
        i64::MAX.to_string()
    };
    let debug_out = scratch.path("kube-nlproxy.debug");
    let out = Command::new("bash")
        .arg(repo().join("docs/deploy/build-offline"))
        .arg(&bin)
        .arg(pm.image())
        .args(["--", "--label", &label])
        .env("CONTAINERS_CONF", &pm.conf)
        .env("BASE_TAG", pm.base())
        .env("MAX_IMAGE_BYTES", &max_bytes)
        .env("DEBUG_OUT", &debug_out)
        .output()
        .expect("docs/deploy/build-offline");
    let build_log = text(&out);
    assert!(out.status.success(), "build-offline failed:\n{build_log}");
    pm.note(&format!(
        "== build: docs/deploy/build-offline {} {} ({:.1?})\n{}",
        bin.display(),
        pm.image(),
        t0.elapsed(),
        build_log
            .lines()
            .filter(|l| l.starts_with("== ") || l.contains("STEP") || l.starts_with("Successfully"))
            .collect::<Vec<_>>()
            .join("\n")
    ));

    // the image: kube-proxy's path is a symlink to the binary, the entrypoint is ours,
    // there is no shell
    let image = pm.image();
    let root = PathBuf::from(pm.ok(&["image", "mount", &image]));
    let link = std::fs::read_link(root.join("usr/local/bin/kube-proxy"));
    let shell = root.join("bin/sh").exists();
    let binary_in_image = root.join("usr/local/bin/kube-nlproxy").is_file();
    let sections = elf_sections(&root.join("usr/local/bin/kube-nlproxy"));
    pm.ok(&["image", "unmount", &image]);
    // no debug info in the image's binary (`.debug_gdb_scripts`, 34 loaded bytes that
    // name Rust's pretty-printers, is no debug info); it names its separate debug file
    let debug: Vec<&String> = sections
        .iter()
        .filter(|n| n.starts_with(".debug_") && *n != ".debug_gdb_scripts")
        .collect();
    assert!(
        debug.is_empty() && sections.iter().any(|n| n == ".gnu_debuglink"),
        "the image's binary: debug sections {debug:?}, sections {sections:?}"
    );
    assert_eq!(
        link.as_ref().ok().map(|p| p.as_path()),
        Some(Path::new("kube-nlproxy")),
        "/usr/local/bin/kube-proxy: {link:?}"
    );
    assert!(
        binary_in_image && !shell,
        "binary {binary_in_image}, /bin/sh {shell}"
    );
    let entrypoint = pm.ok(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Entrypoint}}",
        &image,
    ]);
    assert_eq!(entrypoint, r#"["/usr/local/bin/kube-nlproxy"]"#);
    let size = pm.ok(&["image", "inspect", "--format", "{{.Size}}", &image]);
    pm.note(&format!(
        "== image {image}: {size} bytes, /usr/local/bin/kube-proxy -> kube-nlproxy, entrypoint {entrypoint}, no /bin/sh, no debug info in the binary"
    ));
    // the size CI holds the image to (uncompressed; build-offline checks it too): a
    // release build (KUBE_NLPROXY_BIN, as .ci/run sets it); a debug build's code alone
    // is larger
    if release {
        let bytes: u64 = size.trim().parse().expect("a size");
        assert!(
            bytes <= MAX_IMAGE_BYTES,
            "the image is {bytes} bytes, over {MAX_IMAGE_BYTES}"
        );
    }

    // an image swap of kubeadm's DaemonSet, with the config.conf kubeadm writes
    let kubeadm = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../proxy-config/testdata/config/kubeadm-v1.31.in.yaml"),
    )
    .expect("kubeadm's config.conf");
    run_case(&pm, &scratch, "kubeadm", &kubeadm, kubeadm_pod);
    // docs/deploy/kube-nlproxy.yaml with docs/deploy/kube-proxy-configmap.yaml
    let docs = configmap()["data"]["config.conf"]
        .as_str()
        .expect("config.conf")
        .to_string();
    run_case(&pm, &scratch, "kube-nlproxy-yaml", &docs, manifest_pod);

    assert_eq!(
        host_conntrack(),
        before,
        "the host's conntrack hashsize or nf_conntrack_max changed"
    );
    pm.clean();
    let left = (pm.labelled("ps"), pm.labelled("images"));
    assert!(
        left.0.is_empty() && left.1.is_empty(),
        "left behind: {left:?}"
    );
}

/// The section reader the image check relies on, on the binary cargo built (no root).
#[test]
fn elf_sections_names_the_sections() {
    let s = elf_sections(Path::new(env!("CARGO_BIN_EXE_kube-nlproxy")));
    assert!(s.iter().any(|n| n == ".text"), "{s:?}");
    assert!(
        s.iter().any(|n| n == ".debug_info"),
        "a dev build has debug info: {s:?}"
    );
}
