//! The daemon against a fault-injecting API-server double: requests accepted and never
//! answered, watches that send nothing, objects that do not decode, ServiceCIDR changes,
//! the node's start event, kubeconfigs that would run a program. Run twice: as
//! `apiserver_faults` with the daemon's default content type (protobuf) and as
//! `apiserver_faults_json` with `application/json`.
//!
//! Time bounds (`--api-watch-timeout 2s`, see api_client::Timing): response headers
//! within 1 s, no byte for 3 s ends a connection, backoff at most 1 s, a kind without
//! progress for 4 s is stalled and relisted; `--iptables-sync-period 2s` (a stall changes
//! no health answer: `apiserver_outage_health.rs`).

use std::time::{Duration, Instant};

use integration::*;
use serde_json::json;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(30);

struct Run {
    d: Daemon,
    dir: TempDir,
    healthz: u16,
}

fn start(server: &ApiServer, tag: &str) -> Run {
    let dir = TempDir::new(tag);
    let daemon = ApiDaemon::new(server, NODE)
        .args(&[
            "--iptables-sync-period",
            "2s",
            "--api-watch-timeout",
            "2s",
            "--kube-api-qps=-1",
        ])
        .content_type_of(env!("CARGO_CRATE_NAME"));
    let healthz = daemon.healthz();
    let d = daemon.start(daemon_binary!(), &dir);
    Run { d, dir, healthz }
}

impl Run {
    fn rules(&self) -> String {
        read(&self.dir.path("ruleset.nft"))
    }
    fn wait_rules(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let ok = wait_for(WAIT, || cond(&self.rules()));
        assert!(
            ok,
            "ruleset never showed {what}:\n{}\n--- log ---\n{}",
            self.rules(),
            self.d.log_text()
        );
        self.rules()
    }
    fn health(&self) -> Option<u16> {
        http_get(self.healthz, "/healthz").map(|(code, _, _)| code)
    }
}

fn seeded() -> ApiServer {
    let s = ApiServer::start();
    s.apply(node(NODE, "198.18.0.10"));
    s.apply(service("demo", "web", "198.18.100.1", 80));
    s.apply(slice("demo", "web", "web-1", &["198.18.64.11"], 8080, NODE));
    s
}

fn has_service(text: &str, ip: &str) -> bool {
    text.contains(&format!("{ip} . tcp . 80 . 0 : "))
}

/// Requests accepted and never answered (and open connections silent for good): the
/// stall is logged, /healthz stays 200 (nothing is queued: upstream's rule, see
/// `apiserver_outage_health.rs`), rules stay; once the server answers new connections,
/// the daemon catches up within response + backoff + a list (bound: 5 s).
#[test]
fn a_hung_api_is_given_up_and_the_daemon_recovers() {
    let server = seeded();
    let r = start(&server, "api-hang");
    r.wait_rules("the initial service", |t| has_service(t, "198.18.100.1"));
    assert!(
        wait_for(WAIT, || r.health() == Some(200)),
        "{}",
        r.d.log_text()
    );
    server.set_hang(true);
    server.apply(service("demo", "late", "198.18.100.3", 80));
    assert!(
        wait_for(WAIT, || r.d.log_text().contains("source stalled")),
        "no stall logged:\n{}",
        r.d.log_text()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(r.health(), Some(200), "{}", r.d.log_text());
    let during = r.rules();
    assert!(has_service(&during, "198.18.100.1") && !during.contains("198.18.100.3"));
    server.set_hang(false);
    let back = Instant::now();
    r.wait_rules("the service added during the hang", |t| {
        t.contains("198.18.100.3")
    });
    let took = back.elapsed();
    assert!(
        took <= Duration::from_secs(5),
        "recovered after {took:?}:\n{}",
        r.d.log_text()
    );
    assert!(
        wait_for(WAIT, || r.health() == Some(200)),
        "{}",
        r.d.log_text()
    );
    assert!(
        r.d.log_text().contains("source recovered"),
        "{}",
        r.d.log_text()
    );
}

/// A query parameter of a request line (`GET /path?a=1&b=2 HTTP/1.1`), as sent.
fn param<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let target = line.split_whitespace().nth(1)?;
    let (_, query) = target.split_once('?')?;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// A watch that answers its headers and then sends nothing (no event, no bookmark, no
/// end): the kind stalls and is relisted, and a change made meanwhile arrives. The
/// relist resumes from the last resourceVersion the kind synced, as client-go's
/// reflector does (`lastSyncResourceVersion` outlives a `ListAndWatch` call), neither
/// from the watch cache (`0`, possibly older than what it saw) nor from the most recent
/// state (`""`): streamed lists, and list + watch on a server that refuses them.
#[test]
fn a_silent_watch_is_relisted_from_the_last_version_synced() {
    for streamed in [true, false] {
        let server = seeded();
        server.set_no_watch_list(!streamed);
        let r = start(&server, "api-stall-rv");
        // the services' event: the services kind has synced this version once the
        // rules show it; every kind has synced at least the version the double had
        // when the daemon started (its lists), later bookmarks carry this one
        let synced = server.apply(service("demo", "before", "198.18.100.5", 80));
        let started = synced - 1;
        r.wait_rules("the services before the stall", |t| {
            has_service(t, "198.18.100.1") && t.contains("198.18.100.5")
        });
        let mark = server.requests().len();
        server.set_silent_watches(true);
        server.drop_connections();
        std::thread::sleep(Duration::from_millis(300));
        server.apply(service("demo", "quiet", "198.18.100.4", 80));
        r.wait_rules("the service added while watches were silent", |t| {
            t.contains("198.18.100.4")
        });
        let log = r.d.log_text();
        assert!(
            log.contains("source stalled") && log.contains("relisted"),
            "{log}"
        );
        let requests = server.requests().split_off(mark);
        let relists: Vec<&String> = requests
            .iter()
            .filter(|l| {
                param(l, "watch") != Some("true") || param(l, "sendInitialEvents") == Some("true")
            })
            .collect();
        let want = synced.to_string();
        let first = relists.iter().find(|l| l.contains("/api/v1/services?"));
        assert_eq!(
            first.and_then(|l| param(l, "resourceVersion")),
            Some(want.as_str()),
            "streamed {streamed}: the services' relist after the stall resumes from the last version synced:\n{relists:#?}\n--- log ---\n{log}"
        );
        for l in &relists {
            let rv: Option<u64> = param(l, "resourceVersion").and_then(|v| v.parse().ok());
            assert!(
                rv.is_some_and(|rv| rv >= started),
                "streamed {streamed}: a relist from before what the kind synced: {l}\n{relists:#?}"
            );
        }
    }
}

/// An undecodable Service among good ones, in a list and in a watch event: named and
/// skipped; the others are programmed; a good service that turns undecodable goes.
#[test]
fn an_undecodable_service_is_named_and_skipped() {
    let server = seeded();
    let error = apply_undecodable(&server, "bad", "198.18.100.7");
    server.apply(service("demo", "good", "198.18.100.8", 80));
    let r = start(&server, "api-undecodable");
    r.wait_rules("the good services", |t| {
        has_service(t, "198.18.100.1") && t.contains("198.18.100.8")
    });
    assert!(!r.rules().contains("198.18.100.7"));
    let log = r.d.log_text();
    assert!(log.contains("demo/bad") && log.contains(error), "{log}");
    assert!(
        !log.contains("ServiceList"),
        "a list body was logged:\n{log}"
    );
    // In a watch event: a bad one, then a good one.
    apply_undecodable(&server, "bad2", "198.18.100.7");
    server.apply(service("demo", "good2", "198.18.100.9", 80));
    r.wait_rules("the good service after the bad event", |t| {
        t.contains("198.18.100.9")
    });
    assert!(
        wait_for(WAIT, || r.d.log_text().contains("demo/bad2")),
        "{}",
        r.d.log_text()
    );
    // A good service turning undecodable is removed, the rest stays.
    apply_undecodable(&server, "good", "198.18.100.8");
    r.wait_rules("the service that turned undecodable gone", |t| {
        !t.contains("198.18.100.8") && t.contains("198.18.100.9")
    });
    assert_eq!(
        r.d.log_text().matches("demo/bad2").count(),
        1,
        "{}",
        r.d.log_text()
    );
}

/// Apply the Service `demo/name` in a form the daemon cannot decode in this target's
/// encoding, and return what the daemon's error says. JSON: `spec.ports[0].port` a
/// string. Protobuf: the same field (ServicePort.port, field 3, an int32) sent with the
/// wrong wire type (length-delimited), as bytes the double serves as given.
fn apply_undecodable(server: &ApiServer, name: &str, ip: &str) -> &'static str {
    let mut obj = service("demo", name, ip, 80);
    if env!("CARGO_CRATE_NAME").ends_with("_json") {
        obj["spec"]["ports"][0]["port"] = "eighty".into();
        server.apply(obj);
        // klog quotes the value: the error's own quotes come escaped
        return r#"invalid type: string \"eighty\""#;
    }
    let field = |number: u8, bytes: &[u8]| {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).expect("short")];
        out.extend_from_slice(bytes);
        out
    };
    // ObjectMeta: name (1), namespace (3)
    let meta = [field(1, name.as_bytes()), field(3, b"demo")].concat();
    // ServicePort.port (3) as a string: the wrong wire type
    let port = field(3, b"80");
    // ServiceSpec.ports (1), Service.metadata (1) and .spec (2)
    let spec = field(1, &port);
    server.apply_encoded(obj, [field(1, &meta), field(2, &spec)].concat());
    "invalid wire type"
}

/// ServiceCIDR objects are followed: created, changed and deleted while running.
#[test]
fn service_cidrs_are_watched() {
    let server = seeded();
    let cidr = |c: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
               "metadata": {"name": "kubernetes"}, "spec": {"cidrs": [c]}})
    };
    server.apply(cidr("198.18.128.0/24"));
    let r = start(&server, "api-scidr");
    let drop_of = |t: &str, c: &str| {
        t.lines()
            .any(|l| l.contains(&format!("ip daddr {c}")) && l.contains("drop"))
    };
    r.wait_rules("the first service CIDR", |t| drop_of(t, "198.18.128.0/24"));
    server.apply(cidr("198.18.129.0/24"));
    r.wait_rules("the changed service CIDR", |t| {
        drop_of(t, "198.18.129.0/24") && !t.contains("198.18.128.0/24")
    });
    server.delete("ServiceCIDR", "", "kubernetes");
    r.wait_rules("no service CIDR", |t| !t.contains("198.18.129.0/24"));
}

/// A malformed ServiceCIDR (issue 21: `198.19.0.0/40` stopped every sync on every node,
/// and the log never named it) is refused once, named by kind and name; its last good
/// value is kept; every other change keeps syncing and `/healthz` stays 200.
#[test]
fn a_malformed_service_cidr_is_refused_and_blocks_nothing() {
    let server = seeded();
    let cidr = |name: &str, c: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
               "metadata": {"name": name}, "spec": {"cidrs": [c]}})
    };
    server.apply(cidr("kubernetes", "198.18.128.0/24"));
    server.apply(cidr("extra", "198.18.130.0/24"));
    let r = start(&server, "api-scidr-bad");
    let drop_of = |t: &str, c: &str| {
        t.lines()
            .any(|l| l.contains(&format!("ip daddr {c}")) && l.contains("drop"))
    };
    r.wait_rules("both service CIDRs", |t| {
        drop_of(t, "198.18.128.0/24") && drop_of(t, "198.18.130.0/24")
    });
    // "extra" turns malformed, and a new object is malformed from the start
    server.apply(cidr("extra", "198.19.0.0/40"));
    server.apply(cidr("broken", "not-a-cidr"));
    // every other change is still programmed
    server.apply(service("demo", "api", "198.18.100.2", 80));
    server.apply(slice("demo", "api", "api-1", &["198.18.64.12"], 8443, NODE));
    let t = r.wait_rules("the new service", |t| has_service(t, "198.18.100.2"));
    assert!(
        drop_of(&t, "198.18.130.0/24"),
        "the last good value of extra is kept:\n{t}"
    );
    assert!(!t.contains("198.19.0.0"), "{t}");
    let log = r.d.log_text();
    for name in ["servicecidr extra", "servicecidr broken"] {
        let lines = log.lines().filter(|l| l.contains(name)).count();
        assert_eq!(lines, 1, "{name} named once:\n{log}");
    }
    // a Node with a bad field, sent again (status updates): reported once
    for zone in ["zone-b", "zone-c"] {
        let mut n = node(NODE, "198.18.0.10");
        n["spec"]["podCIDRs"] = json!(["198.18.64.0/33"]);
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!(zone);
        server.apply(n);
    }
    assert!(
        wait_for(WAIT, || r.d.log_text().contains("zone-c")
            || r.d.log_text().contains("198.18.64.0/33")),
        "{}",
        r.d.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    let log = r.d.log_text();
    let bad_node = log.lines().filter(|l| l.contains("198.18.64.0/33")).count();
    assert_eq!(bad_node, 1, "the node's bad podCIDR reported once:\n{log}");
    // healthy well past 2 x syncPeriod (4 s) with the bad objects in place
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(r.health(), Some(200), "{}", r.d.log_text());
    server.apply(cidr("extra", "198.18.131.0/24"));
    r.wait_rules("extra fixed", |t| {
        drop_of(t, "198.18.131.0/24") && !drop_of(t, "198.18.130.0/24")
    });
}

/// The node's start event, as kube-proxy posts it, once.
#[test]
fn the_node_start_event_is_posted_once() {
    let server = seeded();
    let r = start(&server, "api-event");
    r.wait_rules("the initial service", |t| has_service(t, "198.18.100.1"));
    assert!(
        wait_for(WAIT, || !server.posts().is_empty()),
        "{}",
        r.d.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    let posts = server.posts();
    assert_eq!(posts.len(), 1, "{posts:#?}");
    let (path, ev) = &posts[0];
    assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/default/events");
    assert_eq!(ev["apiVersion"], "events.k8s.io/v1");
    assert_eq!(ev["kind"], "Event");
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["reason"], "Starting");
    assert_eq!(ev["action"], "StartKubeProxy");
    assert_eq!(ev["reportingController"], "kube-proxy");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        ev["reportingInstance"],
        format!("kube-proxy-{}", host.trim())
    );
    assert_eq!(
        ev["regarding"],
        json!({"kind": "Node", "name": NODE, "uid": NODE})
    );
    assert_eq!(ev["metadata"]["namespace"], "default");
    let name = ev["metadata"]["name"].as_str().unwrap();
    let hex = name.strip_prefix("node-a.").expect("<node>.<hex time>");
    assert!(u128::from_str_radix(hex, 16).is_ok(), "{name}");
    assert!(
        ev["eventTime"].as_str().is_some_and(|t| t.contains('T')),
        "{ev}"
    );
    assert!(
        ev.get("note").is_none() && ev.get("related").is_none(),
        "{ev}"
    );
}

/// A kubeconfig whose user would make the client run a program is refused before
/// anything runs: the program's marker file never appears, no request is made.
#[test]
fn a_kubeconfig_that_runs_a_program_is_refused() {
    let server = ApiServer::start();
    let dir = TempDir::new("api-exec");
    let marker = dir.path("ran");
    for user in [
        format!(
            "exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ['-c', 'touch {}']}}",
            marker.display()
        ),
        format!(
            "auth-provider: {{name: gcp, config: {{cmd-path: /bin/touch, cmd-args: '{}'}}}}",
            marker.display()
        ),
    ] {
        let kc = dir.path("kubeconfig");
        std::fs::write(
            &kc,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters: [{{name: k, cluster: {{server: '{}'}}}}]\n\
                 contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
                 users: [{{name: u, user: {{{user}}}}}]\n",
                server.url()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(daemon_binary!())
            .args([
                "--kubeconfig",
                kc.to_str().unwrap(),
                "--hostname-override",
                NODE,
                "--once",
                "--render-to",
                dir.path("r.nft").to_str().unwrap(),
            ])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "the kubeconfig's program ran:\n{err}");
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("runs a program") && err.contains("tokenFile"), "{err}");
    }
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}

/// Neither `--kubeconfig` nor `--master`, and no in-cluster environment: kube-proxy uses
/// the in-cluster configuration only (`cmd/kube-proxy/app/server.go`, `createClient`:
/// `rest.InClusterConfig()`), so a `KUBECONFIG` or `~/.kube/config` on the node (often an
/// admin credential) is never read: the daemon exits 1 with upstream's error and no
/// request reaches the server those files name.
///
/// Negative control (run 2026-12-06, the fallback to the default kubeconfig restored in
/// `api_client::config`): `the daemon used a kubeconfig it was not given:
/// ["GET /api/v1/nodes?...`.
#[test]
fn without_kubeconfig_or_master_only_the_in_cluster_config_is_used() {
    let server = ApiServer::start();
    server.apply(node(NODE, "198.18.0.10"));
    let dir = TempDir::new("api-no-config");
    let kc = dir.path("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: k, cluster: {{server: '{}'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             users: [{{name: u, user: {{token: admin}}}}]\n",
            server.url()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path("home/.kube")).unwrap();
    std::fs::copy(&kc, dir.path("home/.kube/config")).unwrap();
    for kubeconfig_env in [true, false] {
        let mut cmd = std::process::Command::new(daemon_binary!());
        cmd.args([
            "--hostname-override",
            NODE,
            "--once",
            "--render-to",
            dir.path("r.nft").to_str().unwrap(),
        ])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", dir.path("home"));
        if kubeconfig_env {
            cmd.env("KUBECONFIG", &kc);
        } else {
            cmd.env_remove("KUBECONFIG");
        }
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(
            server.requests().is_empty(),
            "the daemon used a kubeconfig it was not given: {:?}\n{err}",
            server.requests()
        );
        assert_eq!(status.and_then(|s| s.code()), Some(1), "{err}");
        assert!(
            err.contains("Neither kubeconfig file nor master URL was specified"),
            "{err}"
        );
        assert!(
            err.contains(
                "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and \
                 KUBERNETES_SERVICE_PORT must be defined"
            ),
            "{err}"
        );
    }
}

/// A request that gets no answer (nothing listens at the server's address: connection
/// refused) is logged as a failed request, not as the server refusing the streamed list
/// (which it did not answer).
///
/// Negative control (run 2026-12-06, before): `"the streamed list was refused; listing
/// instead" path="/api/v1/nodes" err="ServiceError: client error (Connect)"` (the reason
/// itself, kube-rs' error source, was not logged either: now `...: Connection refused`).
#[test]
fn an_unanswered_streamed_list_is_not_called_refused() {
    let dir = TempDir::new("api-conn-refused");
    let url = format!("http://127.0.0.1:{}", free_port());
    let d = ApiDaemon::at(&url, NODE)
        .args(&["--api-watch-timeout", "2s", "--kube-api-qps=-1"])
        .content_type_of(env!("CARGO_CRATE_NAME"))
        .start(daemon_binary!(), &dir);
    assert!(
        wait_for(WAIT, || d
            .log_text()
            .contains("the streamed list request failed; listing instead")),
        "{}",
        d.log_text()
    );
    let log = d.log_text();
    assert!(log.contains("Connection refused"), "the reason: {log}");
    assert!(!log.contains("refused the streamed list"), "{log}");
    assert!(!log.contains("the streamed list was refused"), "{log}");
}
