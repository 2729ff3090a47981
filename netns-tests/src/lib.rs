//! Network-namespace test harness.
//!
//! Every host is a network namespace of its own with a unique name, removed when its
//! [`Netns`] is dropped (also while a failing test unwinds). Nothing is ever added to
//! the root namespace. Test addresses come from 198.18.0.0/15 and 2001:db8::/32 only.
//!
//! Tests may use `ip`, `nft` and `conntrack` as tools and oracles; the product never does.

pub mod bench;
pub mod bench_cluster;
pub mod bulk;
pub mod churn;
pub mod cleanup_scenarios;
pub mod cluster;
pub mod ct;
pub mod engine;
pub mod fuzz_world;
pub mod host_firewalls;
pub mod neighbour;
pub mod oracle;
pub mod sample;
pub mod sctp;
pub mod transport;
pub mod upstream;
pub mod upstream_flows;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Whether this process may create namespaces. Outside CI a test without root
/// prints that it is skipped; in CI (`CI` set) it fails instead.
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: needs root, and root tests must not be skipped in CI");
    }
    eprintln!("SKIPPED {test}: needs root (run the tests as root)");
    false
}

/// Skip (or in CI fail) the calling test when not root.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::require_root(module_path!()) {
            return;
        }
    };
}

/// A network namespace owned by the test.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Create a uniquely named namespace with `lo` up.
    pub fn new(role: &str) -> Netns {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("nlp-{role}-{}-{n}", std::process::id());
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> <args>`, panicking on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.arg("-n").arg(&self.name).args(args);
        stdout(run_ok(&mut c))
    }

    /// Run a program inside the namespace; returns its output whatever its status.
    pub fn exec(&self, program: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {program} in {}: {e}", self.name))
    }

    /// Run a program inside the namespace and return its stdout, panicking on failure.
    pub fn exec_ok(&self, program: &str, args: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]).args(args);
        stdout(run_ok(&mut c))
    }

    /// Load an nft script inside the namespace (`nft -f -`), panicking on failure.
    pub fn nft(&self, script: &str) {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn nft");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write script");
        let out = child.wait_with_output().expect("wait nft");
        assert!(
            out.status.success(),
            "nft -f in {} failed: {}\nscript:\n{script}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Write a sysctl inside the namespace (e.g. `net.ipv4.ip_forward`).
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let v = value.to_string();
        self.run(move || std::fs::write(&path, v).unwrap_or_else(|e| panic!("write {path}: {e}")));
    }

    /// Make conntrack track flows in this namespace, as a host firewall on a real
    /// node does: a table with a `ct state` rule.
    pub fn enable_conntrack(&self) {
        self.nft(
            "table inet nlp-host-firewall {\n\
             \tchain input { type filter hook input priority 0; policy accept; ct state invalid counter; }\n\
             \tchain forward { type filter hook forward priority 0; policy accept; ct state invalid counter; }\n\
             \tchain output { type filter hook output priority 0; policy accept; ct state invalid counter; }\n\
             }\n",
        );
    }

    /// Run `f` on a thread that has entered this namespace; sockets it opens live there.
    pub fn run<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(move || {
                let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                // SAFETY: a valid namespace fd; setns affects only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Netns {
    /// Start a thread that enters this namespace and runs `f` (sockets it opens live
    /// there); unlike [`Netns::run`] it is not joined here.
    pub fn spawn<F, R>(&self, f: F) -> std::thread::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: a valid namespace fd; setns affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Connect `a` and `b` with a veth pair named `a_if` (in `a`) and `b_if` (in `b`), both up.
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) {
    run_ok(Command::new("ip").args([
        "link", "add", a_if, "netns", &a.name, "type", "veth", "peer", "name", b_if, "netns",
        &b.name,
    ]));
    a.ip(&["link", "set", a_if, "up"]);
    b.ip(&["link", "set", b_if, "up"]);
}

/// Add an address (CIDR) to an interface; IPv6 addresses skip duplicate address detection.
pub fn addr(ns: &Netns, ifname: &str, cidr: &str) {
    if cidr.contains(':') {
        ns.ip(&["-6", "addr", "add", cidr, "dev", ifname, "nodad"]);
    } else {
        ns.ip(&["addr", "add", cidr, "dev", ifname]);
    }
}

/// How much slower than this machine the tests run: `NLP_TIME_SCALE` (a whole number,
/// default 1). The kernel suite sets it inside an emulated guest (see docs/kernels.md),
/// where everything is an order of magnitude slower; timeouts and waits of the shared
/// scenarios go through [`scaled`], so on the host they are exactly as written.
pub fn time_scale() -> u32 {
    std::env::var("NLP_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// `d` times [`time_scale`].
pub fn scaled(d: Duration) -> Duration {
    d * time_scale()
}

/// The running kernel's release (`uname -r`), e.g. `6.1.0-57-cloud-amd64`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Major and minor version of a kernel release string (`6.12.118+deb13-cloud-amd64` ->
/// (6, 12)); `None` when it does not start with `N.N`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Poll `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Three hosts in a line: client — router — server, IPv4 and IPv6, with forwarding
/// on in the router and conntrack active there (the router is the "node").
pub struct Line {
    pub client: Netns,
    pub router: Netns,
    pub server: Netns,
}

impl Line {
    pub const CLIENT4: &'static str = "198.18.1.2";
    pub const ROUTER4_C: &'static str = "198.18.1.1";
    pub const ROUTER4_S: &'static str = "198.18.2.1";
    pub const SERVER4: &'static str = "198.18.2.2";
    pub const CLIENT6: &'static str = "2001:db8:1::2";
    pub const ROUTER6_C: &'static str = "2001:db8:1::1";
    pub const ROUTER6_S: &'static str = "2001:db8:2::1";
    pub const SERVER6: &'static str = "2001:db8:2::2";

    pub fn new() -> Line {
        let client = Netns::new("cli");
        let router = Netns::new("rtr");
        let server = Netns::new("srv");
        veth(&client, "eth0", &router, "c0");
        veth(&server, "eth0", &router, "s0");
        addr(&client, "eth0", "198.18.1.2/24");
        addr(&client, "eth0", "2001:db8:1::2/64");
        addr(&router, "c0", "198.18.1.1/24");
        addr(&router, "c0", "2001:db8:1::1/64");
        addr(&router, "s0", "198.18.2.1/24");
        addr(&router, "s0", "2001:db8:2::1/64");
        addr(&server, "eth0", "198.18.2.2/24");
        addr(&server, "eth0", "2001:db8:2::2/64");
        client.ip(&["route", "add", "default", "via", "198.18.1.1"]);
        client.ip(&["-6", "route", "add", "default", "via", "2001:db8:1::1"]);
        server.ip(&["route", "add", "default", "via", "198.18.2.1"]);
        server.ip(&["-6", "route", "add", "default", "via", "2001:db8:2::1"]);
        router.sysctl("net.ipv4.ip_forward", "1");
        router.sysctl("net.ipv6.conf.all.forwarding", "1");
        router.enable_conntrack();
        Line {
            client,
            router,
            server,
        }
    }
}

impl Default for Line {
    fn default() -> Self {
        Line::new()
    }
}

fn run_ok(c: &mut Command) -> Output {
    let out = c.output().unwrap_or_else(|e| panic!("running {c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Normalize an nft table listing (or a rendering of one) for comparison:
/// - whitespace collapsed, empty lines dropped, an `elements = { ... }` list that nft
///   wrapped over several lines joined into one line;
/// - the items of every `elements = { ... }` list sorted (nft lists them in the kernel's
///   hash order);
/// - runtime state dropped: `expires <time>` of elements, counter values set to 0.
///
/// Quoted strings (comments, interface names) are kept as they are.
pub fn normalize_listing(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut pending: Option<Vec<String>> = None;
    for raw in text.lines() {
        let toks = tokens(raw);
        if toks.is_empty() {
            continue;
        }
        let mut line = match pending.take() {
            Some(mut open) => {
                open.extend(toks);
                open
            }
            None => toks,
        };
        if line.first().map(String::as_str) == Some("elements") && brace_depth(&line) > 0 {
            pending = Some(line);
            continue;
        }
        strip_runtime(&mut line);
        let mut s = line.join(" ");
        if s.starts_with("elements = {") {
            s = sort_elements(&s);
        }
        out.push(s);
    }
    if let Some(rest) = pending {
        out.push(rest.join(" "));
    }
    out.join("\n")
}

/// [`normalize_listing`], and the objects of each table (sets, maps, chains, counters)
/// sorted: for a table whose objects were declared over several batches, which the
/// kernel lists in the order they were declared (a rendering lists them in its own).
/// The rules of a chain keep their order.
pub fn normalize_listing_unordered(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut objects: Vec<String> = Vec::new();
    let mut object: Vec<String> = Vec::new();
    let mut depth = 0;
    for line in normalize_listing(text).lines() {
        let after = depth + brace_depth(&tokens(line));
        match (depth, after) {
            // a table's closing brace: its objects, sorted, before it
            (1, 0) => {
                objects.sort();
                out.append(&mut objects);
                out.push(line.to_string());
            }
            (0, _) => out.push(line.to_string()),
            _ => {
                object.push(line.to_string());
                if after == 1 {
                    objects.push(object.join("\n"));
                    object.clear();
                }
            }
        }
        depth = after;
    }
    // an unclosed table: what was read of it, as it came
    out.append(&mut objects);
    out.append(&mut object);
    out.join("\n")
}

/// Split a line into tokens at whitespace outside double quotes.
fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c.is_whitespace() && !quoted {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Open minus closed braces outside quotes.
fn brace_depth(toks: &[String]) -> i32 {
    let mut depth = 0;
    for t in toks.iter().filter(|t| !t.starts_with('"')) {
        depth += t.matches('{').count() as i32 - t.matches('}').count() as i32;
    }
    depth
}

/// Drop `expires <time>` pairs and zero `packets N bytes M`.
fn strip_runtime(toks: &mut Vec<String>) {
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        match toks[i].as_str() {
            "expires" if i + 1 < toks.len() => {
                // keep a separator glued to the time (`expires 9s996ms,`)
                let t = &toks[i + 1];
                let tail: String = t.chars().filter(|c| matches!(c, ',' | '}')).collect();
                if !tail.is_empty() {
                    match out.last_mut() {
                        Some(prev) => *prev = format!("{prev}{tail}"),
                        None => out.push(tail),
                    }
                }
                i += 2;
            }
            "packets" | "bytes"
                if i + 1 < toks.len() && toks[i + 1].chars().all(|c| c.is_ascii_digit()) =>
            {
                out.push(toks[i].clone());
                out.push("0".into());
                i += 2;
            }
            _ => {
                out.push(toks[i].clone());
                i += 1;
            }
        }
    }
    *toks = out;
}

/// Sort the items of `elements = { a, b, c }` (split at top-level commas).
fn sort_elements(line: &str) -> String {
    let (Some(open), Some(close)) = (line.find('{'), line.rfind('}')) else {
        return line.to_string();
    };
    if close <= open {
        return line.to_string();
    }
    let body = &line[open + 1..close];
    let mut items = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut depth) = (false, 0i32);
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                items.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    items.push(cur.trim().to_string());
    items.retain(|i| !i.is_empty());
    items.sort();
    format!(
        "{}{{ {} }}{}",
        &line[..open],
        items.join(", "),
        &line[close + 1..]
    )
}

#[cfg(test)]
mod listing_tests {
    use super::normalize_listing_unordered as unordered;

    const A: &str = "table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n\tchain c {\n\t\tjump d\n\t\taccept\n\t}\n\tchain d {\n\t}\n}\n";

    #[test]
    fn objects_compare_in_any_order_but_rules_and_contents_do_not() {
        let moved = "table ip t {\n\tchain d {\n\t}\n\tchain c {\n\t\tjump d\n\t\taccept\n\t}\n\tset s {\n\t\ttype ipv4_addr\n\t}\n}\n";
        assert_eq!(unordered(A), unordered(moved));
        let rules_swapped = A.replace("\t\tjump d\n\t\taccept\n", "\t\taccept\n\t\tjump d\n");
        assert_ne!(unordered(A), unordered(&rules_swapped));
        let other_type = A.replace("ipv4_addr", "ipv6_addr");
        assert_ne!(unordered(A), unordered(&other_type));
        let one_less = A.replace("\tchain d {\n\t}\n", "");
        assert_ne!(unordered(A), unordered(&one_less));
    }
}
