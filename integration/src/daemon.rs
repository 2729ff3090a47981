//! The daemon under test: the binary cargo built, run as a child process (killed on
//! drop), its one command line against the API double ([`ApiDaemon`]), scratch
//! directories, free ports and a plain HTTP GET for its health and metrics servers.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::api_server::ApiServer;

/// The `kube-nlproxy` binary cargo built for the calling test target
/// (`CARGO_BIN_EXE_kube-nlproxy`): the daemon-level tests are test targets of the
/// `kube-nlproxy` package (see its Cargo.toml), so cargo rebuilds the daemon, with every
/// crate it depends on, before running them.
#[macro_export]
macro_rules! daemon_binary {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_kube-nlproxy"))
    };
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("nlp-it-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon; killed on drop. Its stderr (the log) goes to a file.
pub struct Daemon {
    child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(bin: &Path, args: &[&str], log: PathBuf) -> Daemon {
        Daemon::start_wrapped(bin, &[], args, log)
    }

    /// The daemon started through `wrapper` (a command that execs the rest, e.g.
    /// `prlimit --nofile=1024:1024 --`).
    pub fn start_wrapped(bin: &Path, wrapper: &[&str], args: &[&str], log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).expect("log file");
        // Unless a test picks them, the health and metrics servers listen on free
        // loopback ports, so parallel daemons never compete for kube-proxy's ports (port
        // 0 is refused by kube-proxy's validation).
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for flag in ["--healthz-bind-address", "--metrics-bind-address"] {
            if !args.iter().any(|a| a.starts_with(flag)) {
                args.extend([flag.to_string(), format!("127.0.0.1:{}", free_port())]);
            }
        }
        // syncs are logged at verbosity 2, as kube-proxy's
        if !args
            .iter()
            .any(|a| a.starts_with("--v") || a.starts_with("-v"))
        {
            args.push("--v=2".into());
        }
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("start kube-nlproxy");
        Daemon { child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon against the API double, as every API test runs it: `--master` the double,
/// named by the test, in nftables mode, syncing at most every 100 ms, the kernel replaced
/// by the file `dir/ruleset.nft` (`--render-to`: the committed ruleset), its health and
/// metrics servers on free loopback ports picked before it starts ([`ApiDaemon::healthz`],
/// [`ApiDaemon::metrics`]), its log in `dir/daemon.log`; the test's own arguments
/// ([`ApiDaemon::args`]) after these.
///
/// ```ignore
/// let d = ApiDaemon::new(&server, NODE)
///     .args(&["--kube-api-qps=-1"])
///     .start(daemon_binary!(), &dir);
/// ```
#[derive(Debug, Clone)]
pub struct ApiDaemon {
    master: String,
    node: String,
    healthz: SocketAddr,
    metrics: SocketAddr,
    render: bool,
    extra: Vec<String>,
}

impl ApiDaemon {
    /// Against the API double `api`, as the node `node`.
    pub fn new(api: &ApiServer, node: &str) -> ApiDaemon {
        ApiDaemon::at(&api.url(), node)
    }

    /// Against whatever answers (or nothing) at `url`.
    pub fn at(url: &str, node: &str) -> ApiDaemon {
        let free = || SocketAddr::from(([127, 0, 0, 1], free_port()));
        ApiDaemon {
            master: url.to_string(),
            node: node.to_string(),
            healthz: free(),
            metrics: free(),
            render: true,
            extra: Vec::new(),
        }
    }

    /// More arguments, after the common ones.
    pub fn args(mut self, args: &[&str]) -> ApiDaemon {
        self.extra.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// The content type of the test target `target` ([`content_type_args`]; pass
    /// `env!("CARGO_CRATE_NAME")`).
    pub fn content_type_of(self, target: &str) -> ApiDaemon {
        self.args(&content_type_args(target))
    }

    /// The health and metrics servers at these addresses instead of free loopback ports.
    pub fn serving_on(mut self, healthz: SocketAddr, metrics: SocketAddr) -> ApiDaemon {
        self.healthz = healthz;
        self.metrics = metrics;
        self
    }

    /// The real kernel: no `--render-to` (the test runs as root in a namespace of its own).
    pub fn kernel(mut self) -> ApiDaemon {
        self.render = false;
        self
    }

    /// The health server's port.
    pub fn healthz(&self) -> u16 {
        self.healthz.port()
    }

    /// The metrics server's port.
    pub fn metrics(&self) -> u16 {
        self.metrics.port()
    }

    /// The whole command line, scratch files in `dir`.
    pub fn command_line(&self, dir: &TempDir) -> Vec<String> {
        let mut args: Vec<String> = [
            "--master",
            &self.master,
            "--hostname-override",
            &self.node,
            "--proxy-mode",
            "nftables",
            "--iptables-min-sync-period",
            "100ms",
            "--healthz-bind-address",
            &self.healthz.to_string(),
            "--metrics-bind-address",
            &self.metrics.to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        if self.render {
            args.push("--render-to".into());
            args.push(dir.path("ruleset.nft").to_string_lossy().into_owned());
        }
        args.extend(self.extra.iter().cloned());
        args
    }

    /// Start it (killed when the [`Daemon`] is dropped).
    pub fn start(&self, bin: &Path, dir: &TempDir) -> Daemon {
        self.start_wrapped(bin, &[], dir)
    }

    /// Start it through `wrapper` (see [`Daemon::start_wrapped`]).
    pub fn start_wrapped(&self, bin: &Path, wrapper: &[&str], dir: &TempDir) -> Daemon {
        let args = self.command_line(dir);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Daemon::start_wrapped(bin, wrapper, &args, dir.path("daemon.log"))
    }

    /// Run it with `--once` to its end: one sync, then exit.
    pub fn once(&self, bin: &Path, dir: &TempDir) -> std::process::Output {
        Command::new(bin)
            .args(self.command_line(dir))
            .arg("--once")
            .output()
            .expect("run kube-nlproxy --once")
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET over HTTP/1.1 with a plain TCP stream: (status code, headers, body), or None if
/// nothing answers. Enough for our own small JSON and text responses.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((code, head.to_string(), body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Poll `cond` every 50 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file's text, or "" when it does not exist (yet).
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The daemon's content-type arguments for the test target `target` (pass
/// `env!("CARGO_CRATE_NAME")`): a target whose name ends in `_json` is the same test file
/// run with the daemon asked for `application/json`; the others leave the default,
/// protobuf, as kube-proxy's.
pub fn content_type_args(target: &str) -> Vec<&'static str> {
    if target.ends_with("_json") {
        vec!["--kube-api-content-type", "application/json"]
    } else {
        Vec::new()
    }
}
