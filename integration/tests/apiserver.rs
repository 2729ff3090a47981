//! The daemon against the API-server double (real list/watch wire protocol): initial
//! sync, updates, dropped connections, relist after 410 Gone, outage (rules unchanged).
//!
//! Run twice: as `apiserver` with the daemon's default content type (protobuf) and as
//! `apiserver_json` with `application/json`.
//!
//! The daemon runs unprivileged with `--render-to FILE`: the engine's compile/diff/sync
//! path with the kernel replaced by a file holding the committed ruleset.

use std::time::Duration;

use integration::*;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(30);

fn start(server: &ApiServer, dir: &TempDir) -> Daemon {
    start_with(server, dir, &[])
}

/// The daemon with `extra` arguments.
fn start_with(server: &ApiServer, dir: &TempDir, extra: &[&str]) -> Daemon {
    daemon(server)
        .args(&["--kube-api-qps", "50", "--kube-api-burst", "100"])
        .args(extra)
        .start(daemon_binary!(), dir)
}

/// The daemon against `server`, in this target's content type.
fn daemon(server: &ApiServer) -> ApiDaemon {
    ApiDaemon::new(server, NODE).content_type_of(env!("CARGO_CRATE_NAME"))
}

fn seeded() -> ApiServer {
    let s = ApiServer::start();
    s.apply(node(NODE, "198.18.0.10"));
    s.apply(service("demo", "web", "198.18.100.1", 80));
    s.apply(slice("demo", "web", "web-1", &["198.18.64.11"], 8080, NODE));
    // Another proxy's slice: never listed (label selector), never programmed.
    let mut foreign = slice("demo", "web", "web-foreign", &["198.18.64.99"], 8080, NODE);
    foreign["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = "other".into();
    s.apply(foreign);
    s
}

fn wait_rules(d: &Daemon, dir: &TempDir, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let path = dir.path("ruleset.nft");
    let ok = wait_for(WAIT, || cond(&read(&path)));
    let text = read(&path);
    assert!(
        ok,
        "ruleset never showed {what}:\n{text}\n--- daemon log ---\n{}",
        d.log_text()
    );
    text
}

/// Sent to endpoints (its first endpoint slot is in an endpoint map).
fn has_service(text: &str, ip: &str, port: u16) -> bool {
    text.contains(&format!("{ip} . tcp . {port} . 0 : "))
}

/// In the ruleset at all (sent to endpoints, or in a no-endpoint set).
fn known(text: &str, ip: &str, port: u16) -> bool {
    let key = format!("{ip} . tcp . {port}");
    text.contains(&format!("{key} ")) || text.contains(&format!("{key},"))
}

#[test]
fn initial_sync_then_updates() {
    let server = seeded();
    let dir = TempDir::new("api-updates");
    let mut d = start(&server, &dir);
    let text = wait_rules(&d, &dir, "the initial services", |t| {
        has_service(t, "198.18.100.1", 80) && t.contains("198.18.64.11")
    });
    assert!(text.contains("table ip kube-nlproxy"), "{text}");
    assert!(
        !text.contains("198.18.64.99"),
        "foreign slice programmed:\n{text}"
    );

    // Add a service and its endpoints.
    server.apply(service("demo", "api", "198.18.100.2", 443));
    server.apply(slice("demo", "api", "api-1", &["198.18.64.20"], 8443, NODE));
    wait_rules(&d, &dir, "the added service", |t| {
        has_service(t, "198.18.100.2", 443) && t.contains("198.18.64.20")
    });

    // Replace an endpoint.
    server.apply(slice("demo", "web", "web-1", &["198.18.64.12"], 8080, NODE));
    wait_rules(&d, &dir, "the replaced endpoint", |t| {
        t.contains("198.18.64.12") && !t.contains("198.18.64.11")
    });

    // Delete a service.
    server.delete("EndpointSlice", "demo", "api-1");
    server.delete("Service", "demo", "api");
    wait_rules(&d, &dir, "the deleted service gone", |t| {
        !t.contains("198.18.100.2") && has_service(t, "198.18.100.1", 80)
    });
    assert!(d.running());

    let reqs = server.requests();
    let watch = reqs
        .iter()
        .find(|r| r.contains("/api/v1/services?") && r.contains("watch=true"))
        .unwrap_or_else(|| panic!("no services watch in {reqs:#?}"));
    assert!(watch.contains("allowWatchBookmarks=true"), "{watch}");
    assert!(
        watch.contains("service.kubernetes.io%2Fservice-proxy-name"),
        "no label selector: {watch}"
    );
    assert!(
        reqs.iter()
            .any(|r| r.contains("/api/v1/nodes?") && r.contains("metadata.name%3Dnode-a")),
        "node not selected by name: {reqs:#?}"
    );
    let log = d.log_text();
    assert!(log.contains("synced"), "{log}");
    assert!(
        log.contains("kind=\"full\"") || log.contains("kind=full"),
        "{log}"
    );
}

#[test]
fn dropped_connections_resume_without_relist() {
    let server = seeded();
    let dir = TempDir::new("api-drop");
    let d = start(&server, &dir);
    wait_rules(&d, &dir, "the initial services", |t| {
        has_service(t, "198.18.100.1", 80)
    });
    let lists = |s: &ApiServer| {
        s.requests()
            .iter()
            .filter(|r| r.contains("/api/v1/services?") && !r.contains("watch=true"))
            .count()
    };
    let before = lists(&server);
    // An event the services watch does not select, then a bookmark: the resumed watch
    // must start from the bookmark's resourceVersion, which only bookmarks can tell.
    let rv = server.apply(node("node-b", "198.18.0.11"));
    std::thread::sleep(Duration::from_millis(1200));
    server.drop_connections();
    server.apply(service("demo", "late", "198.18.100.3", 80));
    wait_rules(&d, &dir, "the service added after the drop", |t| {
        known(t, "198.18.100.3", 80)
    });
    assert_eq!(
        lists(&server),
        before,
        "a dropped watch must resume, not relist"
    );
    let reqs = server.requests();
    let resumed: Vec<&String> = reqs
        .iter()
        .filter(|r| r.contains("/api/v1/services?") && r.contains("watch=true"))
        .collect();
    assert!(resumed.len() >= 2, "{reqs:#?}");
    let last = resumed[resumed.len() - 1];
    assert!(
        last.contains(&format!("resourceVersion={rv} "))
            || last.contains(&format!("resourceVersion={rv}&")),
        "resumed from the wrong resourceVersion (bookmark {rv}): {last}"
    );
}

/// Lists as client-go's reflector does for kube-proxy's informers: at
/// `resourceVersion=0`, which the API server answers from its watch cache in one response
/// whatever the page size (the double does the same), so a cluster larger than one page
/// is one list request per kind, not a quorum read paged by 500 and spaced out by the
/// client's rate limit.
#[test]
fn lists_from_the_watch_cache_in_one_request() {
    let s = ApiServer::start();
    s.apply(node(NODE, "198.18.0.10"));
    for i in 0..1200u32 {
        let ip = format!("198.18.{}.{}", 100 + i / 250, 1 + i % 250);
        s.apply(service("demo", &format!("s{i}"), &ip, 80));
    }
    let dir = TempDir::new("api-rv0");
    // lists, not streamed lists (client-go's gate off)
    let d = start_with(&s, &dir, &["--feature-gates", "WatchListClient=false"]);
    wait_rules(&d, &dir, "all 1,200 services", |t| {
        known(t, "198.18.100.1", 80) && known(t, "198.18.104.200", 80)
    });
    let reqs = s.requests();
    let lists: Vec<&String> = reqs
        .iter()
        .filter(|r| {
            r.contains("/apis/discovery.k8s.io/v1/endpointslices?")
                || r.contains("/api/v1/services?")
        })
        .filter(|r| !r.contains("watch=true"))
        .collect();
    assert_eq!(lists.len(), 2, "one list per kind: {lists:#?}");
    for l in &lists {
        assert!(
            l.contains("resourceVersion=0&") || l.contains("resourceVersion=0 "),
            "not a list from the watch cache: {l}"
        );
    }
}

#[test]
fn once_against_the_api() {
    let server = seeded();
    let dir = TempDir::new("api-once");
    let out = dir.path("ruleset.nft");
    let status = ApiDaemon::new(&server, NODE).once(daemon_binary!(), &dir);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let text = read(&out);
    assert!(has_service(&text, "198.18.100.1", 80), "{text}");
}

#[test]
fn relist_after_410_gone() {
    let server = seeded();
    let dir = TempDir::new("api-relist");
    let d = start(&server, &dir);
    wait_rules(&d, &dir, "the initial services", |t| {
        has_service(t, "198.18.100.1", 80)
    });
    // While the daemon cannot see it: a deletion and an addition, then the history is
    // compacted, so resuming the watch gets 410 Gone and the watcher relists.
    server.set_down(true);
    server.delete("EndpointSlice", "demo", "web-1");
    server.delete("Service", "demo", "web");
    server.apply(service("demo", "new", "198.18.100.4", 80));
    server.apply(slice("demo", "new", "new-1", &["198.18.64.40"], 8080, NODE));
    server.compact();
    std::thread::sleep(Duration::from_millis(500));
    server.set_down(false);
    let text = wait_rules(&d, &dir, "the relisted state", |t| {
        has_service(t, "198.18.100.4", 80) && !known(t, "198.18.100.1", 80)
    });
    assert!(text.contains("198.18.64.40"), "{text}");
    assert!(d.log_text().contains("relisted"), "{}", d.log_text());
}

#[test]
fn outage_leaves_rules_unchanged() {
    let server = seeded();
    let dir = TempDir::new("api-outage");
    let mut d = start(&server, &dir);
    let before = wait_rules(&d, &dir, "the initial services", |t| {
        has_service(t, "198.18.100.1", 80) && t.contains("198.18.64.11")
    });
    let mtime = std::fs::metadata(dir.path("ruleset.nft"))
        .and_then(|m| m.modified())
        .expect("mtime");
    server.set_down(true);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        d.running(),
        "the daemon exited during the outage:\n{}",
        d.log_text()
    );
    assert_eq!(
        read(&dir.path("ruleset.nft")),
        before,
        "rules changed during the outage"
    );
    let mtime2 = std::fs::metadata(dir.path("ruleset.nft"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(mtime, mtime2, "a batch was committed during the outage");
    assert!(
        d.log_text().contains("watch failed"),
        "the outage was not reported:\n{}",
        d.log_text()
    );
    // Back: the daemon catches up.
    server.set_down(false);
    server.apply(service("demo", "after", "198.18.100.5", 80));
    wait_rules(&d, &dir, "the service added after the outage", |t| {
        known(t, "198.18.100.5", 80) && has_service(t, "198.18.100.1", 80)
    });
}

/// `rest_client_rate_limiter_duration_seconds{host,verb}`: every request through the
/// client-side rate limiter is timed there, as client-go times its `tryThrottle`; with a
/// burst of 1 and 1 QPS the requests of the start (five kinds' lists and watches and the
/// node's event) wait, some for most of a second. Without a rate limiter (negative QPS)
/// there is no series, as client-go has no limiter to time then.
///
/// Negative control (run 2026-12-06, before): no `rest_client_rate_limiter_duration_seconds`
/// series at all.
#[test]
fn the_rate_limiter_is_timed() {
    let server = seeded();
    for (limited, args) in [
        (true, vec!["--kube-api-qps", "1", "--kube-api-burst", "1"]),
        (false, vec!["--kube-api-qps=-1"]),
    ] {
        let dir = TempDir::new("rate-limiter");
        let daemon = daemon(&server).args(&args);
        let mp = daemon.metrics();
        let d = daemon.start(daemon_binary!(), &dir);
        wait_rules(&d, &dir, "the service", |t| {
            has_service(t, "198.18.100.1", 80)
        });
        let text = http_get(mp, "/metrics").map(|x| x.2).unwrap_or_default();
        let count: f64 = text
            .lines()
            .filter(|l| l.starts_with("rest_client_rate_limiter_duration_seconds_count{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        let sum: f64 = text
            .lines()
            .filter(|l| l.starts_with("rest_client_rate_limiter_duration_seconds_sum{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if limited {
            assert!(
                text.contains("# HELP rest_client_rate_limiter_duration_seconds [ALPHA] Client side rate limiter latency in seconds. Broken down by verb, and host."),
                "{text}"
            );
            assert!(count >= 4.0, "requests timed: {count}\n{text}");
            assert!(sum >= 1.0, "time waited: {sum} s\n{text}");
        } else {
            assert_eq!(count, 0.0, "no limiter, no series:\n{text}");
        }
    }
}
