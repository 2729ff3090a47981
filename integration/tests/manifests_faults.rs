//! Manifests mode under file-system faults: a file rewritten in place slowly is never
//! taken as empty or partial, a file that does not parse is read once per version, odd
//! paths are logged once each.

use std::io::Write;
use std::time::{Duration, Instant};

use integration::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn start(dir: &TempDir, manifests: &str, verbose: bool) -> Daemon {
    let mut extra = vec!["--manifests-poll", "100ms"];
    if verbose {
        extra.extend(["-v", "4"]);
    }
    start_with(dir, manifests, &extra)
}

fn objects(n: u16) -> Vec<Value> {
    services_of_round(0, n)
}

/// Multi-document YAML: a prefix cut at a document boundary parses (to fewer objects).
fn yaml(objs: &[Value]) -> String {
    objs.iter().map(|o| format!("---\n{o}\n")).collect()
}

fn all_services(text: &str, n: u16) -> bool {
    (0..n).all(|i| text.contains(&format!("198.18.100.{} . tcp . 80 . 0 : ", i + 1)))
}

/// A writer that truncates the file and rewrites it document by document, pausing
/// 30 ms (less than the 100 ms poll) between documents, `rounds` times; meanwhile the
/// committed ruleset must always hold every service.
#[test]
fn a_file_rewritten_in_place_slowly_is_never_taken_as_partial() {
    let dir = TempDir::new("man-torn");
    let f = dir.path("cluster.yaml");
    let n = 8;
    let objs = objects(n);
    std::fs::write(&f, yaml(&objs)).unwrap();
    let mut d = start(&dir, f.to_str().unwrap(), false);
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || all_services(&read(&rules), n)),
        "initial sync:\n{}",
        d.log_text()
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (f, objs, stop) = (f.clone(), objs.clone(), stop.clone());
        std::thread::spawn(move || {
            for round in 0..4 {
                let mut file = std::fs::File::create(&f).unwrap(); // truncates in place
                std::thread::sleep(Duration::from_millis(30));
                for o in &objs {
                    // The same objects, each rewritten (a new annotation per round).
                    let mut o = o.clone();
                    o["metadata"]["annotations"] = serde_json::json!({"round": round.to_string()});
                    file.write_all(format!("---\n{o}\n").as_bytes()).unwrap();
                    file.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(30));
                }
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut samples = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let text = read(&rules);
        assert!(
            all_services(&text, n),
            "services dropped while the file was being rewritten:\n{text}\n--- log ---\n{}",
            d.log_text()
        );
        samples += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.join().unwrap();
    // And some time after the last write.
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        assert!(all_services(&read(&rules), n), "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(samples > 50, "{samples}");
    assert!(d.running());
}

/// A 50 MB file that never parses is read once, not at every poll.
#[test]
fn a_large_unparsable_file_is_read_once() {
    let dir = TempDir::new("man-bad-big");
    let mdir = dir.path("m");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(mdir.join("good.yaml"), yaml(&objects(1))).unwrap();
    let bad = mdir.join("big.json");
    let item = service("demo", "x", "198.18.100.200", 80).to_string();
    let mut text = String::from("{\"kind\":\"List\",\"apiVersion\":\"v1\",\"items\":[");
    while text.len() < 50 << 20 {
        text.push_str(&item);
        text.push(',');
    }
    // never closed: not JSON
    std::fs::write(&bad, &text).unwrap();
    drop(text);
    let d = start(&dir, mdir.to_str().unwrap(), true);
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || all_services(&read(&rules), 1)),
        "{}",
        d.log_text()
    );
    std::thread::sleep(Duration::from_millis(2000)); // about 20 polls
    let log = d.log_text();
    let reads = log
        .lines()
        .filter(|l| l.contains("reading") && l.contains("big.json"))
        .count();
    assert_eq!(reads, 1, "{log}");
    assert_eq!(log.matches("not JSON").count(), 1, "{log}");
    assert!(!read(&rules).contains("198.18.100.200"));
}

/// Each odd path is logged once, with its reason, however many polls see it.
#[test]
fn odd_paths_are_logged_once_each() {
    let dir = TempDir::new("man-odd");
    let mdir = dir.path("m");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(mdir.join("good.yaml"), yaml(&objects(1))).unwrap();
    std::os::unix::fs::symlink(mdir.join("loop.yaml"), mdir.join("loop.yaml")).unwrap();
    std::os::unix::fs::symlink(mdir.join("nowhere"), mdir.join("dangling.json")).unwrap();
    std::fs::create_dir(mdir.join("dir.yaml")).unwrap();
    let fifo = mdir.join("fifo.yml");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(mdir.join("binary.yaml"), b"kind: Service\n\xff\xfe\n").unwrap();
    let d = start(&dir, mdir.to_str().unwrap(), false);
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || all_services(&read(&rules), 1)),
        "{}",
        d.log_text()
    );
    std::thread::sleep(Duration::from_millis(1500)); // about 15 polls
    let log = d.log_text();
    for (path, why) in [
        ("loop.yaml", "a symlink loop"),
        ("dangling.json", "a dangling symlink"),
        ("dir.yaml", "a directory"),
        ("fifo.yml", "a FIFO"),
    ] {
        let line = format!("{path}: skipped: {why}");
        assert_eq!(log.matches(&line).count(), 1, "{line}:\n{log}");
    }
    assert_eq!(
        log.matches("binary.yaml: not UTF-8 text").count(),
        1,
        "{log}"
    );
}

/// The services count of every sync the daemon logged (`"synced" ... services=N`).
fn synced_services(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains("\"synced\""))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("services="))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

/// Every sync the daemon logged holds the file's 20 services.
fn assert_no_prefix_committed(d: &Daemon) {
    let counts = synced_services(&d.log_text());
    assert!(!counts.is_empty(), "{}", d.log_text());
    assert!(
        counts.iter().all(|&n| n == 20),
        "a sync committed a prefix of the file: services per sync {counts:?}\n{}",
        d.log_text()
    );
}

/// 20 services whose endpoints carry `round` in their address (a change per round).
fn round_objects(round: u8) -> Vec<Value> {
    services_of_round(round, 20)
}

/// `n` services whose endpoints carry `round` in their address.
fn services_of_round(round: u8, n: u16) -> Vec<Value> {
    let mut v = vec![node("node-a", "198.18.0.10")];
    for i in 0..n {
        v.push(service(
            "demo",
            &format!("s{i}"),
            &format!("198.18.100.{}", i + 1),
            80,
        ));
        let ep = format!("198.18.{}.{}", 64 + round, i + 1);
        v.push(slice(
            "demo",
            &format!("s{i}"),
            &format!("s{i}-1"),
            &[&ep],
            8080,
            "node-a",
        ));
    }
    v
}

/// Rewrite `f` in place as a slow writer does: truncate, the first half of the
/// documents, a pause of `pause`, the rest, close.
fn slow_rewrite(f: &std::path::Path, objs: &[Value], pause: Duration) {
    let text = yaml(objs);
    let half = yaml(&objs[..objs.len() / 2]).len();
    let mut file = std::fs::File::create(f).unwrap();
    file.write_all(&text.as_bytes()[..half]).unwrap();
    file.flush().unwrap();
    std::thread::sleep(pause);
    file.write_all(&text.as_bytes()[half..]).unwrap();
}

/// The daemon as users run it in manifests mode (default watch and settle settings),
/// with `extra` flags.
fn start_with(dir: &TempDir, manifests: &str, extra: &[&str]) -> Daemon {
    let out = dir.path("ruleset.nft");
    let mut args = vec![
        "--manifests",
        manifests,
        "--hostname-override",
        "node-a",
        "--proxy-mode",
        "nftables",
        "--iptables-min-sync-period",
        "50ms",
        "--render-to",
        out.to_str().expect("utf-8"),
    ];
    args.extend(extra);
    Daemon::start(daemon_binary!(), &args, dir.path("daemon.log"))
}

fn start_default(dir: &TempDir, manifests: &str) -> Daemon {
    start_with(dir, manifests, &[])
}

/// Issue 21: a multi-document file rewritten in place by a writer that pauses 1.5 s
/// mid-file. A prefix of it parses (to 10 of the 20 services); the daemon must never
/// commit it.
#[test]
fn a_slow_writer_never_commits_a_prefix() {
    slow_writer_rounds("man-prefix", &[], 6);
}

/// The same without inotify, with a settle window (100 ms) shorter than the writer's
/// pause: the prefix parses and is stable, and is held back because it lost half of the
/// file's objects.
#[test]
fn without_inotify_a_prefix_that_lost_half_the_objects_is_held_back() {
    slow_writer_rounds(
        "man-prefix-poll",
        &["--manifests-inotify=false", "--manifests-poll", "100ms"],
        3,
    );
}

fn slow_writer_rounds(tag: &str, extra: &[&str], rounds: u8) {
    let dir = TempDir::new(tag);
    let f = dir.path("cluster.yaml");
    std::fs::write(&f, yaml(&round_objects(0))).unwrap();
    let d = start_with(&dir, f.to_str().unwrap(), extra);
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || read(&rules).contains("198.18.64.20")),
        "initial sync:\n{}",
        d.log_text()
    );
    for round in 1..=rounds {
        // At a different moment of any period the daemon may have, each round.
        std::thread::sleep(Duration::from_millis(u64::from(round) * 337 % 1000));
        slow_rewrite(&f, &round_objects(round), Duration::from_millis(1500));
        let last = format!("198.18.{}.20", 64 + round);
        assert!(
            wait_for(WAIT, || read(&rules).contains(&last)),
            "round {round} never synced:\n{}",
            d.log_text()
        );
    }
    assert_no_prefix_committed(&d);
}

/// Also on the first read: a daemon started while a slow writer pauses mid-file waits
/// for the whole file.
#[test]
fn a_daemon_started_during_a_slow_write_waits_for_the_whole_file() {
    let dir = TempDir::new("man-prefix-start");
    let f = dir.path("cluster.yaml");
    let writer = {
        let f = f.clone();
        std::thread::spawn(move || slow_rewrite(&f, &round_objects(0), Duration::from_millis(1500)))
    };
    std::thread::sleep(Duration::from_millis(400));
    let d = start_default(&dir, f.to_str().unwrap());
    writer.join().unwrap();
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || read(&rules).contains("198.18.64.20")),
        "{}",
        d.log_text()
    );
    assert_no_prefix_committed(&d);
}

/// Rename into place (write a temporary file, rename it over the manifest) reaches the
/// engine at once: well within 200 ms while the poll fallback is 10 s.
#[test]
fn a_rename_into_place_reaches_the_engine_in_milliseconds() {
    let took = rename_latency("man-rename", &["--manifests-poll", "10s"]);
    assert!(took < Duration::from_millis(200), "took {took:?}");
}

/// Without inotify the poll fallback still picks the rename up (negative control of the
/// test above: with `--manifests-inotify=false` and a 10 s poll it takes the poll).
#[test]
fn without_inotify_the_poll_picks_up_a_rename() {
    let took = rename_latency(
        "man-rename-poll",
        &["--manifests-inotify=false", "--manifests-poll", "1s"],
    );
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

/// From renaming a new version over the manifest to the rendered ruleset holding it (a
/// small file: what is measured is the watch, not the parser of a debug build).
fn rename_latency(tag: &str, extra: &[&str]) -> Duration {
    let dir = TempDir::new(tag);
    let mdir = dir.path("m");
    std::fs::create_dir_all(&mdir).unwrap();
    let f = mdir.join("cluster.yaml");
    std::fs::write(&f, yaml(&services_of_round(0, 2))).unwrap();
    let d = start_with(&dir, mdir.to_str().unwrap(), extra);
    let rules = dir.path("ruleset.nft");
    assert!(
        wait_for(WAIT, || read(&rules).contains("198.18.64.2")),
        "{}",
        d.log_text()
    );
    std::thread::sleep(Duration::from_millis(300));
    let tmp = mdir.join(".cluster.yaml.tmp");
    std::fs::write(&tmp, yaml(&services_of_round(1, 2))).unwrap();
    let t = Instant::now();
    std::fs::rename(&tmp, &f).unwrap();
    while !read(&rules).contains("198.18.65.2") {
        assert!(t.elapsed() < WAIT, "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = t.elapsed();
    eprintln!("{tag}: the rename reached the rendered ruleset in {took:?}");
    took
}

/// A `--manifests` path that does not exist: one error line naming the path and the
/// reason once, exit 1.
///
/// Negative control (run 2026-12-06, anyhow's `{:#}` as before): `manifests /...: No such
/// file or directory (os error 2): No such file or directory (os error 2)`.
#[test]
fn a_missing_manifests_path_is_reported_once() {
    let dir = TempDir::new("manifests-missing");
    let missing = dir.path("nothing-here.yaml");
    let out = std::process::Command::new(daemon_binary!())
        .args([
            "--manifests",
            missing.to_str().unwrap(),
            "--hostname-override",
            "node-a",
            "--dry-run",
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("Error running ProxyServer"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(missing.to_str().unwrap()), "{line}");
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "the reason twice: {line}"
    );
}
