//! Whoever reaches port 10256 cannot starve the daemon: with its descriptor limit at
//! 1,024 and 1,100 hostile connections held open against the health port (half-sent
//! requests and idle connections, re-opened as soon as the daemon closes them),
//! `/healthz` keeps answering within 100 ms, `/metrics` answers, and the manifests are
//! still read. No root: loopback, the kernel replaced by `--render-to`.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
/// The daemon's descriptor limit (soft and hard), as in the reproduction.
const DAEMON_FDS: u64 = 1024;
const HOSTILE: usize = 1100;
const PROBES: usize = 20;
const BOUND: Duration = Duration::from_millis(100);

fn yaml(objs: &[Value]) -> String {
    objs.iter().map(|o| format!("---\n{o}\n")).collect()
}

/// This test's own soft limit up to its hard limit (it holds the hostile sockets).
fn raise_own_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a struct we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}

/// One hostile connection: even ones send half a request, odd ones nothing.
fn hostile(port: u16, i: usize) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    if i.is_multiple_of(2) {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .ok()?;
    }
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Whether the daemon closed the connection.
fn closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 64];
    match (&*s).read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// GET /healthz on a fresh connection: the status and how long it took, or the error.
fn probe(port: u16, path: &str) -> Result<(u16, Duration), String> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_secs(3),
    )
    .map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let took = t0.elapsed();
    let text = String::from_utf8_lossy(&raw);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line: {text:?}"))?;
    Ok((code, took))
}

#[test]
fn health_answers_within_100ms_under_1100_hostile_connections() {
    let own = raise_own_limit();
    assert!(
        own >= 2 * HOSTILE as u64 + 256,
        "this test needs {} descriptors, the hard limit is {own}",
        2 * HOSTILE + 256
    );
    let dir = TempDir::new("hostile");
    let mdir = dir.path("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    let file = mdir.join("all.yaml");
    let objs = vec![
        node("node-a", "198.18.0.10"),
        service("demo", "web", "198.18.128.10", 80),
        slice("demo", "web", "web-1", &["198.18.64.5"], 8080, "node-a"),
    ];
    std::fs::write(&file, yaml(&objs)).unwrap();
    let (hp, mp) = (free_port(), free_port());
    let out = dir.path("ruleset.nft");
    let limit = format!("--nofile={DAEMON_FDS}:{DAEMON_FDS}");
    let d = Daemon::start_wrapped(
        daemon_binary!(),
        &["prlimit", &limit, "--"],
        &[
            "--manifests",
            mdir.to_str().unwrap(),
            "--hostname-override",
            "node-a",
            "--iptables-min-sync-period",
            "100ms",
            "--manifests-poll",
            "100ms",
            "--healthz-bind-address",
            &format!("127.0.0.1:{hp}"),
            "--metrics-bind-address",
            &format!("127.0.0.1:{mp}"),
            "--render-to",
            out.to_str().unwrap(),
        ],
        dir.path("daemon.log"),
    );
    assert!(
        wait_for(WAIT, || probe(hp, "/healthz").is_ok_and(|(c, _)| c == 200)),
        "no healthz:\n{}",
        d.log_text()
    );

    // the attack: 1,100 connections, re-opened whenever the daemon closes one
    let stop = Arc::new(AtomicBool::new(false));
    let (opened, reopened) = (
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    );
    let attacker = {
        let (stop, opened, reopened) = (stop.clone(), opened.clone(), reopened.clone());
        std::thread::spawn(move || {
            let mut conns: Vec<Option<TcpStream>> = (0..HOSTILE).map(|i| hostile(hp, i)).collect();
            opened.store(conns.iter().flatten().count(), Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                // (a connect blocks while the daemon's accept queue is full)
                for (i, c) in conns.iter_mut().enumerate() {
                    if c.as_ref().is_none_or(closed) {
                        *c = hostile(hp, i);
                        reopened.fetch_add(1, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    assert!(
        wait_for(WAIT, || opened.load(Ordering::SeqCst) > 0),
        "attacker did not start"
    );
    std::thread::sleep(Duration::from_millis(500));

    let mut results = Vec::new();
    for _ in 0..PROBES {
        results.push(probe(hp, "/healthz"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = probe(mp, "/metrics");
    // the manifests are still read: a new endpoint reaches the rules
    let mut objs2 = objs.clone();
    objs2[2] = slice(
        "demo",
        "web",
        "web-1",
        &["198.18.64.5", "198.18.64.77"],
        8080,
        "node-a",
    );
    std::fs::write(&file, yaml(&objs2)).unwrap();
    let synced = wait_for(WAIT, || read(&out).contains("198.18.64.77"));
    stop.store(true, Ordering::SeqCst);
    attacker.join().unwrap();

    let log = d.log_text();
    let times: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok((c, t)) => format!("{c}/{}ms", t.as_millis()),
            Err(e) => e.clone(),
        })
        .collect();
    eprintln!(
        "opened {} hostile connections, re-opened {}; probes: {times:?}",
        opened.load(Ordering::SeqCst),
        reopened.load(Ordering::SeqCst)
    );
    assert!(
        opened.load(Ordering::SeqCst) >= 1000,
        "the attack did not get 1,000 connections in"
    );
    for r in &results {
        match r {
            Ok((200, t)) if *t <= BOUND => {}
            other => panic!("a /healthz probe failed or took over {BOUND:?}: {other:?}\nall: {times:?}\nlog:\n{log}"),
        }
    }
    assert!(
        matches!(metrics, Ok((200, _))),
        "/metrics did not answer: {metrics:?}"
    );
    assert!(
        synced,
        "the manifest change never reached the rules:\n{log}"
    );
    assert!(
        !log.contains("Too many open files"),
        "the daemon ran out of descriptors:\n{log}"
    );
}
