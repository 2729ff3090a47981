//! The daemon under test: the binary cargo built, run as a child process (killed on
//! drop), scratch directories, free ports and a plain HTTP GET for its health and
//! metrics servers.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// The daemon against the API double at `url` (`--master`) as the API tests run it:
/// named `node`, in nftables mode, syncing at most every 100 ms, the kernel replaced by
/// the file `dir/ruleset.nft` (`--render-to`: the committed ruleset), its log in
/// `dir/daemon.log`; `extra` after these.
pub fn start_against_api(
    bin: &Path,
    url: &str,
    node: &str,
    dir: &TempDir,
    extra: &[&str],
) -> Daemon {
    let out = dir.path("ruleset.nft");
    let mut args = vec![
        "--master",
        url,
        "--hostname-override",
        node,
        "--proxy-mode",
        "nftables",
        "--iptables-min-sync-period",
        "100ms",
        "--render-to",
        out.to_str().expect("a UTF-8 path"),
    ];
    args.extend(extra);
    Daemon::start(bin, &args, dir.path("daemon.log"))
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
