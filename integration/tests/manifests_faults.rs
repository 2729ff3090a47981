//! Manifests mode under file-system faults: a file rewritten in place slowly is never
//! taken as empty or partial, a file that does not parse is read once per version, odd
//! paths are logged once each.

use std::io::Write;
use std::time::{Duration, Instant};

use integration::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn start(dir: &TempDir, manifests: &str, verbose: bool) -> Daemon {
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
        "--manifests-poll",
        "100ms",
        "--render-to",
        out.to_str().expect("utf-8"),
    ];
    if verbose {
        args.extend(["-v", "4"]);
    }
    Daemon::start(daemon_binary!(), &args, dir.path("daemon.log"))
}

fn objects(n: u16) -> Vec<Value> {
    let mut v = vec![node("node-a", "198.18.0.10")];
    for i in 0..n {
        let ip = format!("198.18.100.{}", i + 1);
        let ep = format!("198.18.64.{}", i + 1);
        v.push(service("demo", &format!("s{i}"), &ip, 80));
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
