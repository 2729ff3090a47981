//! daemon-bench: the real `kube-nlproxy` daemon measured end to end, run the way users
//! run it, each run in fresh network namespaces (removed at the end), with the peers
//! (upstream kube-proxy's rulesets loaded by `nft -f` and `iptables-restore`) in the same
//! run. Root only; build with `cargo build --release -p kube-nlproxy -p netns-tests`.
//! What each figure measures: docs/benchmarks.md.
//!
//! Usage: daemon-bench [--bin PATH] [--runs N] [--services N,N..] [--endpoints M]
//!                     [--seconds S] [--source manifests|api|both]
//!                     [--daemon-arg ARG]... [--shape uniform|prod] [--seed N]
//!                     [--nodes N] [--changes K] [--connections N] [--nft-file FILE]...
//!                     SCENARIO...
//!
//! Scenarios: `cold` (start until the first batch is committed, from a manifests file and
//! from the API-server double), `peers` (ours vs `nft -f` vs `iptables-restore` at 4k),
//! `change` (one change with N services loaded: the engine's event-to-ACK and the
//! double's send-to-sync), `e2e` (event sent -> a new TCP connection reaches the new
//! endpoint), `churn` (100 endpoint changes/s: latency, CPU, RSS), `idle` (no change:
//! wakeups per second and CPU of the daemon left alone), or `all`; `fleet` (not in
//! `all`: `--nodes` daemons, each in a node namespace of its own, against one API double
//! on a bridge: the fleet's cold start, `--changes` endpoint changes reaching every node,
//! bytes per node); `first-packet` (not in `all`: a new TCP connection's connect() round
//! trip through our rules, upstream's nftables table and no proxy, three node namespaces
//! in the same run, `--connections` each; `--nft-file` adds tables loaded by hand).
//!
//! The cluster is `integration::scale` (`--shape uniform`, the default: N services of
//! one TCP port, each with one EndpointSlice of M endpoints, shaped as the API server
//! returns them) or the production shape of `shape` (`--shape prod`, from `--seed`);
//! addresses only from 198.18.0.0/15 and 2001:db8::/32.

mod observer;
mod options;
mod probe;
mod report;
mod scenarios;
mod shape;

use std::path::{Path, PathBuf};

use options::parse_args;

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\nusage: daemon-bench [--bin PATH] [--runs N] [--services N,N..] [--endpoints M] [--seconds S] [--source manifests|api|both] [--daemon-arg ARG]... [--shape uniform|prod] [--seed N] [--nodes N] [--changes K] [--rate N,N..] [--ct-entries N] [--connections N] [--nft-file FILE]... cold|peers|change|e2e|churn|churn-prod|stale|idle|all|fleet|first-packet ...");
            std::process::exit(2);
        }
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("daemon-bench needs root (network namespaces)");
        std::process::exit(2);
    }
    if !o.bin.exists() {
        eprintln!("no daemon binary at {} (--bin)", o.bin.display());
        std::process::exit(2);
    }
    let dir = std::env::temp_dir().join(format!("nlp-daemon-bench-{}", std::process::id()));
    netns_tests::bench::cleanup_on_signal(dir.clone());
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let scratch = Scratch(dir);
    println!(
        "daemon-bench: {} ({}), {} runs, {} endpoints per service, kernel {}",
        o.bin.display(),
        version(&o.bin),
        o.runs,
        o.endpoints,
        netns_tests::kernel_release()
    );
    let all = o.scenarios.iter().any(|s| s == "all");
    let want = |s: &str| all || o.scenarios.iter().any(|x| x == s);
    if want("cold") {
        scenarios::cold::cold(&o, &scratch.0);
    }
    if want("peers") {
        scenarios::peers::peers(&o, &scratch.0);
    }
    if want("change") {
        scenarios::change::change(&o);
    }
    if want("e2e") {
        scenarios::e2e::e2e(&o);
    }
    if want("churn") {
        scenarios::churn::churn(&o);
    }
    if o.scenarios.iter().any(|s| s == "churn-prod") {
        scenarios::churn_prod::churn_prod(&o);
    }
    if o.scenarios.iter().any(|s| s == "stale") {
        scenarios::stale::stale(&o);
    }
    if want("idle") {
        scenarios::idle::idle(&o, &scratch.0);
    }
    // not in `all`: three node namespaces and 20k connections each
    if o.scenarios.iter().any(|s| s == "first-packet") {
        scenarios::first_packet::first_packet(&o, &scratch.0);
    }
    // not in `all`: it starts `--nodes` daemons
    if o.scenarios.iter().any(|s| s == "fleet") {
        scenarios::fleet::fleet(&o);
    }
    // not a measurement: the cluster's manifests file, kept in the working directory
    // (to run the daemon on it by hand, e.g. under perf)
    if o.scenarios.iter().any(|s| s == "manifest") {
        for n in o.services.clone().unwrap_or(vec![10_000]) {
            let p = scenarios::manifest_for(&o, &scratch.0, n);
            let to = std::path::PathBuf::from(p.file_name().expect("a file name"));
            std::fs::copy(&p, &to).expect("copy the manifests file");
            println!("   wrote {}", to.display());
        }
    }
}

fn version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
