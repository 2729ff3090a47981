use std::path::Path;

use super::*;

const TEXT: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 198.18.100.1, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: bad, namespace: ns}
spec: {clusterIP: 198.18.100.2, ports: [{port: "eighty"}]}
---
kind: List
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
- apiVersion: v1
  kind: Node
  metadata: {name: node-b}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: a-1, namespace: ns, labels: {kubernetes.io/service-name: a}}
  addressType: IPv4
  endpoints: [{addresses: [198.18.1.1]}]
- apiVersion: networking.k8s.io/v1
  kind: ServiceCIDR
  metadata: {name: kubernetes}
  spec: {cidrs: [198.18.100.0/24]}
---
kind: ConfigMap
apiVersion: v1
metadata: {name: other}
"#;

struct Dir(PathBuf);
impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("nlp-man-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn join(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One look at the files (`_initial`: the first; the reader knows it from the files).
fn poll(r: &mut Reader, _initial: bool) -> Vec<String> {
    let mut out = Vec::new();
    r.poll(&mut |ev| {
        out.push(match ev {
            Event::ServiceApplied(s) => format!("+svc {}", kube_model::ns_key(&s.metadata)),
            Event::ServiceDeleted(s) => format!("-svc {}", kube_model::ns_key(&s.metadata)),
            Event::SliceApplied(s) => format!("+slice {}", kube_model::ns_key(&s.metadata)),
            Event::SliceDeleted(s) => format!("-slice {}", kube_model::ns_key(&s.metadata)),
            Event::NodeApplied(n) => format!(
                "node {}{}",
                n.metadata.name.unwrap_or_default(),
                if n.metadata.deletion_timestamp.is_some() {
                    " deleted"
                } else {
                    ""
                }
            ),
            Event::ServiceCidrs(c) => format!(
                "cidrs {:?}",
                c.iter().map(ToString::to_string).collect::<Vec<_>>()
            ),
            other => format!("{other:?}"),
        });
        true
    })
    .unwrap();
    out
}

fn reader(dir: &Path) -> Reader {
    let mut r = Reader::new(dir, "node-a", Duration::ZERO);
    r.timing.hold = Duration::from_millis(300);
    r
}

/// TEXT as one JSON array of its objects.
fn json_text() -> String {
    let docs = kube_model::manifest::documents(TEXT).unwrap();
    let raws: Vec<String> = docs
        .entries()
        .into_iter()
        .map(|e| e.unwrap().raw.to_string())
        .collect();
    format!("[{}]", raws.join(",\n"))
}

#[test]
fn a_json_file_is_parsed_once_a_yaml_file_again_to_decode_a_change() {
    let d = Dir::new("once");
    let f = d.join("m.json");
    std::fs::write(&f, json_text()).unwrap();
    let mut r = reader(&d.0);
    let want = [
        "+svc ns/a",
        "node node-a",
        "+slice ns/a-1",
        "cidrs [\"198.18.100.0/24\"]",
    ];
    assert_eq!(poll(&mut r, true), want);
    assert_eq!((r.parses, r.text_parses), (1, 1));
    assert!(r.logged[&f].iter().any(|p| p.contains("Service ns/bad")));
    // A change: read and parsed once more.
    std::fs::write(&f, json_text().replace("198.18.1.1", "198.18.1.2")).unwrap();
    assert!(poll(&mut r, false).is_empty(), "read only once settled");
    assert_eq!(poll(&mut r, false), ["+slice ns/a-1"]);
    assert_eq!((r.parses, r.text_parses), (2, 2));

    // YAML: at a cold start every object is decoded in the pass that names it (one
    // parse); a change is parsed again to decode what changed.
    let y = Dir::new("twice");
    let yf = y.join("m.yaml");
    std::fs::write(&yf, TEXT).unwrap();
    let mut r = reader(&y.0);
    assert_eq!(poll(&mut r, true), want);
    assert_eq!((r.parses, r.text_parses), (1, 1));
    std::fs::write(&yf, TEXT.replace("198.18.1.1", "198.18.1.2")).unwrap();
    assert!(poll(&mut r, false).is_empty(), "read only once settled");
    assert_eq!(poll(&mut r, false), ["+slice ns/a-1"]);
    assert_eq!((r.parses, r.text_parses), (2, 3));
}

#[test]
fn initial_read_then_only_changes() {
    let d = Dir::new("changes");
    let f = d.join("m.yaml");
    std::fs::write(&f, TEXT).unwrap();
    let mut r = reader(&d.0);
    let ev = poll(&mut r, true);
    assert_eq!(
        ev,
        [
            "+svc ns/a",
            "node node-a",
            "+slice ns/a-1",
            "cidrs [\"198.18.100.0/24\"]"
        ]
    );
    assert!(
        r.logged[&f].iter().any(|p| p.contains("Service ns/bad")),
        "{:?}",
        r.logged
    );
    // Unchanged: nothing read, nothing sent.
    assert!(poll(&mut r, false).is_empty());
    assert_eq!(r.parses, 1);
    // One endpoint changed: one event (after the change has settled: seen, then read).
    std::fs::write(&f, TEXT.replace("198.18.1.1", "198.18.1.2")).unwrap();
    assert!(poll(&mut r, false).is_empty(), "read only once settled");
    assert_eq!(poll(&mut r, false), ["+slice ns/a-1"]);
    // The service CIDR and the node go: deletion events.
    let text = TEXT.replace("198.18.1.1", "198.18.1.2");
    let cut = text
        .find("- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a}")
        .unwrap();
    let text = text[..cut].to_string()
        + &text[cut..].replacen(
            "  metadata: {name: node-a}\n",
            "  metadata: {name: node-c}\n",
            1,
        );
    let text = text.replace("198.18.100.0/24", "198.18.101.0/24");
    std::fs::write(&f, &text).unwrap();
    poll(&mut r, false);
    assert_eq!(
        poll(&mut r, false),
        ["node node-a deleted", "cidrs [\"198.18.101.0/24\"]"]
    );
    // The file removed: everything goes at once.
    std::fs::remove_file(&f).unwrap();
    assert_eq!(
        poll(&mut r, false),
        ["-svc ns/a", "-slice ns/a-1", "cidrs []"]
    );
}

/// A malformed ServiceCIDR (issue 21) is refused and keeps its last good value; the
/// others and every other object go on.
#[test]
fn a_malformed_service_cidr_keeps_its_last_good_value() {
    let d = Dir::new("badcidr");
    let f = d.join("m.yaml");
    std::fs::write(&f, TEXT).unwrap();
    let mut r = Reader::new(&f, "node-a", Duration::ZERO);
    let first = poll(&mut r, true);
    assert!(
        first.contains(&"cidrs [\"198.18.100.0/24\"]".to_string()),
        "{first:?}"
    );
    let bad = TEXT
        .replace("198.18.100.0/24", "198.18.100.0/40")
        .replace("198.18.1.1", "198.18.1.2");
    std::fs::write(&f, bad).unwrap();
    poll(&mut r, false);
    assert_eq!(
        poll(&mut r, false),
        ["+slice ns/a-1"],
        "the CIDR list is unchanged"
    );
    std::fs::write(&f, TEXT.replace("198.18.1.1", "198.18.1.2")).unwrap();
    poll(&mut r, false);
    assert!(
        poll(&mut r, false).is_empty(),
        "fixed back to the value kept"
    );
}

#[test]
fn a_file_that_does_not_parse_keeps_its_objects_and_is_read_once() {
    let d = Dir::new("unparsable");
    let f = d.join("m.json");
    let good = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"},"spec":{"clusterIP":"198.18.100.1","ports":[{"port":80}]}}"#;
    std::fs::write(&f, good).unwrap();
    let mut r = reader(&d.0);
    assert_eq!(poll(&mut r, true), ["+svc ns/a"]);
    // Torn: the first half of the text.
    std::fs::write(&f, &good[..good.len() / 2]).unwrap();
    for _ in 0..5 {
        assert!(poll(&mut r, false).is_empty());
    }
    assert_eq!(r.parses, 2, "an unparsable version is parsed once");
    assert!(
        r.logged[&f].iter().any(|p| p.contains("not JSON")),
        "{:?}",
        r.logged
    );
    std::fs::write(&f, good.replace("198.18.100.1", "198.18.100.9")).unwrap();
    poll(&mut r, false);
    assert_eq!(poll(&mut r, false), ["+svc ns/a"]);
}

#[test]
fn an_emptied_file_keeps_its_objects_for_a_while() {
    let d = Dir::new("empty");
    let f = d.join("m.yaml");
    std::fs::write(&f, TEXT).unwrap();
    let mut r = reader(&d.0);
    poll(&mut r, true);
    std::fs::write(&f, "").unwrap();
    let start = Instant::now();
    let mut events = Vec::new();
    while events.is_empty() {
        events = poll(&mut r, false);
        if events.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(start.elapsed() >= r.timing.hold, "{:?}", start.elapsed());
    assert_eq!(
        events,
        [
            "node node-a deleted",
            "-svc ns/a",
            "-slice ns/a-1",
            "cidrs []"
        ]
    );
}

#[test]
fn odd_paths_are_skipped_with_a_reason() {
    let d = Dir::new("odd");
    std::fs::write(d.join("good.yaml"), TEXT).unwrap();
    std::os::unix::fs::symlink(d.join("loop.yaml"), d.join("loop.yaml")).unwrap();
    std::os::unix::fs::symlink(d.join("missing"), d.join("dangling.yml")).unwrap();
    std::fs::create_dir(d.join("dir.yaml")).unwrap();
    let fifo = std::ffi::CString::new(d.join("fifo.json").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::write(d.join("latin1.yaml"), b"kind: Service\nname: \xe9\n").unwrap();
    std::fs::write(d.join(".hidden.yaml"), "not: [read").unwrap();
    std::fs::write(d.join("notes.txt"), "not a manifest").unwrap();
    let mut r = reader(&d.0);
    assert_eq!(poll(&mut r, true).len(), 4);
    let skipped: Vec<&str> = r.skipped.iter().map(String::as_str).collect();
    let name = |s: &str| d.join(s).display().to_string();
    assert_eq!(
        skipped,
        [
            format!("{}: skipped: a dangling symlink", name("dangling.yml")),
            format!("{}: skipped: a directory", name("dir.yaml")),
            format!("{}: skipped: a FIFO", name("fifo.json")),
            format!("{}: skipped: a symlink loop", name("loop.yaml")),
        ]
    );
    let latin1 = d.join("latin1.yaml");
    assert!(
        r.logged[&latin1].iter().any(|p| p.contains("not UTF-8")),
        "{:?}",
        r.logged
    );
    assert!(poll(&mut r, false).is_empty());
    assert_eq!(r.parses, 2, "the unreadable file is not read again");
}

#[test]
fn later_files_win_and_losing_the_winner_restores_the_other() {
    let d = Dir::new("dups");
    let svc = |ip: &str| {
        format!(
            r#"{{"kind":"Service","apiVersion":"v1","metadata":{{"name":"a","namespace":"ns"}},"spec":{{"clusterIP":"{ip}","ports":[{{"port":80}}]}}}}"#
        )
    };
    std::fs::write(d.join("1.json"), svc("198.18.100.1")).unwrap();
    std::fs::write(d.join("2.json"), svc("198.18.100.2")).unwrap();
    let mut r = reader(&d.0);
    let mut last_ip = String::new();
    r.poll(&mut |ev| {
        if let Event::ServiceApplied(s) = ev {
            last_ip = s.spec.unwrap().cluster_ip.unwrap();
        }
        true
    })
    .unwrap();
    assert_eq!(last_ip, "198.18.100.2");
    assert!(r.duplicates.iter().any(|m| m.contains("also defined in")));
    std::fs::remove_file(d.join("2.json")).unwrap();
    r.poll(&mut |ev| {
        if let Event::ServiceApplied(s) = ev {
            last_ip = s.spec.unwrap().cluster_ip.unwrap();
        }
        true
    })
    .unwrap();
    assert_eq!(last_ip, "198.18.100.1");
}

/// Log lines name objects as an operator does (`Service ns/a`), never with Rust's
/// `Debug` (`Service(ServiceKey { .. })`).
///
/// Negative control (run 2026-12-06, `{k:?}` as before): `Service(ServiceKey { .. })`
/// in the duplicate's line.
#[test]
fn duplicates_are_named_without_debug_dumps() {
    let d = Dir::new("dup-names");
    let svc = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"},"spec":{"clusterIP":"198.18.100.1","ports":[{"port":80}]}}"#;
    std::fs::write(d.join("1.json"), svc).unwrap();
    std::fs::write(d.join("2.json"), svc).unwrap();
    let mut r = reader(&d.0);
    r.poll(&mut |_| true).unwrap();
    let dup = r
        .duplicates
        .iter()
        .find(|m| m.contains("also defined in"))
        .unwrap_or_else(|| panic!("{:?}", r.duplicates));
    assert!(dup.contains("Service ns/a also defined in"), "{dup}");
    assert!(!dup.contains("ServiceKey"), "{dup}");
}

/// A cold start sends each object as it is read (the engine compiles while the rest is
/// read), and ends where reading the whole file first would: the last definition of a
/// key wins, and a later definition that does not decode takes an earlier one sent
/// before with it (deleted in the same look), as when nothing had been sent. The next
/// change is read the usual way. (Negative control, run 2026-12-06: without the stream,
/// `ns/a` is sent once and `ns/b` never, and the log differs.)
#[test]
fn a_cold_start_streams_and_ends_as_a_whole_read() {
    let d = Dir::new("stream");
    let svc = |name: &str, ip: &str| {
        format!(
            r#"{{"kind":"Service","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"clusterIP":"{ip}","ports":[{{"port":80}}]}}}}"#
        )
    };
    let bad = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"b","namespace":"ns"},"spec":{"ports":[{"port":"eighty"}]}}"#;
    let text = [
        svc("a", "198.18.100.1"),
        svc("b", "198.18.100.2"),
        svc("a", "198.18.100.3"),
        bad.to_string(),
    ]
    .join("\n");
    std::fs::write(d.join("m.json"), &text).unwrap();
    let mut r = reader(&d.0);
    let mut state: BTreeMap<String, String> = BTreeMap::new();
    let mut log = Vec::new();
    let parses_before = r.text_parses;
    r.poll(&mut |ev| {
        match ev {
            Event::ServiceApplied(s) => {
                let k = kube_model::ns_key(&s.metadata).to_string();
                log.push(format!("+{k}"));
                state.insert(k, s.spec.unwrap().cluster_ip.unwrap());
            }
            Event::ServiceDeleted(s) => {
                let k = kube_model::ns_key(&s.metadata).to_string();
                log.push(format!("-{k}"));
                state.remove(&k);
            }
            _ => {}
        }
        true
    })
    .unwrap();
    assert_eq!(
        state,
        BTreeMap::from([("ns/a".to_string(), "198.18.100.3".to_string())]),
        "{log:?}"
    );
    // sent while reading: a, b, a again (the later definition), then b deleted
    assert_eq!(log, ["+ns/a", "+ns/b", "+ns/a", "-ns/b"]);
    assert_eq!(r.text_parses - parses_before, 1);
    assert!(r
        .logged
        .values()
        .flatten()
        .any(|p| p.contains("Service ns/b")));
    // the next version is read the usual way: only what changed
    std::fs::write(
        d.join("m.json"),
        text.replace("198.18.100.3", "198.18.100.4"),
    )
    .unwrap();
    assert!(poll(&mut r, false).is_empty(), "read only once settled");
    assert_eq!(poll(&mut r, false), ["+svc ns/a"]);
}

/// The first file of a cold start that is one JSON List is sent item by item as it is
/// parsed (one parse); a text that turns out not to be read that way (a syntax error
/// after the items, a duplicate head key, not a List after all) has what it sent taken
/// back in the same look, and ends where reading the whole text first ends. (Negative
/// control, run 2026-12-08: without the taking back, the broken lists leave `ns/a` and
/// the node in the engine.)
#[test]
fn a_cold_list_streams_and_a_broken_one_is_taken_back() {
    let svc = |name: &str| {
        format!(
            r#"{{"kind":"Service","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"clusterIP":"198.18.100.1","ports":[{{"port":80}}]}}}}"#
        )
    };
    let node = r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-a"}}"#;
    let items = format!("[{},{node},{}]", svc("a"), svc("b"));
    let cases = [
        // (text, the state after the look, text parses)
        (
            format!(r#"{{"apiVersion":"v1","items":{items},"kind":"List"}}"#),
            vec!["node node-a", "ns/a", "ns/b"],
            1,
        ),
        (format!(r#"{{"items":{items},"kind":"List"}} x"#), vec![], 2),
        (
            format!(r#"{{"items":{items},"kind":"List","kind":"List"}}"#),
            vec![],
            2,
        ),
        (
            format!(
                r#"{{"items":{items},"metadata":{{"name":"c","namespace":"ns"}},"kind":"Service","spec":{{"ports":[{{"port":80}}]}}}}"#
            ),
            vec!["ns/c"],
            2,
        ),
    ];
    for (text, want, parses) in cases {
        let d = Dir::new("coldlist");
        std::fs::write(d.join("m.json"), &text).unwrap();
        let mut r = reader(&d.0);
        let mut state = BTreeSet::new();
        r.poll(&mut |ev| {
            match ev {
                Event::ServiceApplied(s) => {
                    state.insert(kube_model::ns_key(&s.metadata).to_string());
                }
                Event::ServiceDeleted(s) => {
                    state.remove(&kube_model::ns_key(&s.metadata).to_string());
                }
                Event::NodeApplied(n) if n.metadata.deletion_timestamp.is_none() => {
                    state.insert(format!("node {}", n.metadata.name.unwrap_or_default()));
                }
                Event::NodeApplied(n) => {
                    state.remove(&format!("node {}", n.metadata.name.unwrap_or_default()));
                }
                _ => {}
            }
            true
        })
        .unwrap();
        let want: BTreeSet<String> = want.into_iter().map(String::from).collect();
        assert_eq!(state, want, "{text}");
        assert_eq!(r.text_parses, parses, "{text}");
    }
}
