//! `/healthz` through an API-server outage, as upstream's health server answers it
//! (`pkg/proxy/healthcheck/proxy_health.go`, kube-proxy 1.35 and later: the version
//! with per-family `status`): unhealthy only when a change was queued and not applied
//! within the health timeout (2 x syncPeriod), or the node is not eligible. An API
//! server whose requests are accepted and never answered queues nothing: the rules in
//! place are still right, and cloud load balancers that probe `/healthz`
//! (`externalTrafficPolicy: Cluster`, KEP-3836) must not take every node out at once.
//!
//! Time bounds: `--iptables-sync-period 1s` (health timeout 2 s), `--api-watch-timeout
//! 2s` (a kind without progress for 4 s is stalled and relisted). A hang of 30 s is
//! fifteen health timeouts; the 5 minutes at the default syncPeriod (30 s, a
//! 60 s timeout) is five.

use std::time::{Duration, Instant};

use integration::*;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(30);
const HANG: Duration = Duration::from_secs(30);
/// 2 x `--iptables-sync-period`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

fn has_service(text: &str, ip: &str) -> bool {
    text.contains(&format!("{ip} . tcp . 80 . 0 : "))
}

/// The API double with this node and one Service with one endpoint on it.
fn demo_api() -> ApiServer {
    let server = ApiServer::start();
    server.apply(node(NODE, "198.18.0.10"));
    server.apply(service("demo", "web", "198.18.100.1", 80));
    server.apply(slice("demo", "web", "web-1", &["198.18.64.11"], 8080, NODE));
    server
}

/// The API hangs (requests accepted, never answered) for 30 s with nothing queued:
/// `/healthz` answers 200 all along, while the stall is still detected, logged and
/// relisted. Then a change arrives and cannot be applied (the kernel stand-in refuses
/// the commit): 503 once it has waited past the health timeout, also while the API
/// hangs again, and 200 once it is applied (with the API still hung: applying needs no
/// API).
///
/// Negative control (run 2026-12-06): with the stalled source counted as a queued
/// change again (`ops-server/src/health.rs`: `healthy && stale_source(now).is_none()` for
/// /healthz, the code before this test), the first phase fails: `/healthz answered 503
/// 4.0s into a hang with nothing queued` (the stall is dated from the last progress).
#[test]
fn healthz_stays_up_through_a_hung_api_and_fails_only_for_a_change_left_unapplied() {
    let server = demo_api();
    let dir = TempDir::new("outage-health");
    let daemon = ApiDaemon::new(&server, NODE).args(&[
        "--iptables-sync-period",
        "1s",
        "--api-watch-timeout",
        "2s",
        "--kube-api-qps=-1",
    ]);
    let healthz = daemon.healthz();
    let d = daemon.start(daemon_binary!(), &dir);
    let out = dir.path("ruleset.nft");
    let rules = || read(&out);
    let health = || http_get(healthz, "/healthz").map(|(code, _, body)| (code, body));
    assert!(
        wait_for(WAIT, || has_service(&rules(), "198.18.100.1")),
        "{}",
        d.log_text()
    );
    assert!(
        wait_for(WAIT, || health().is_some_and(|(c, _)| c == 200)),
        "{}",
        d.log_text()
    );

    // 1. The API hangs, nothing is queued: 200 throughout.
    server.set_hang(true);
    let hang = Instant::now();
    while hang.elapsed() < HANG {
        let at = hang.elapsed();
        match health() {
            Some((200, _)) => {}
            other => panic!(
                "/healthz answered {other:?} {at:.1?} into a hang with nothing queued\n--- log ---\n{}",
                d.log_text()
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = d.log_text();
    assert!(
        log.contains("source stalled"),
        "the stall is still detected and logged:\n{log}"
    );
    assert!(has_service(&rules(), "198.18.100.1"), "rules unchanged");

    // 2. The API answers again; the kernel stand-in refuses every commit (a directory
    //    where the ruleset file is renamed to), and a change arrives: queued, not
    //    applied.
    server.set_hang(false);
    assert!(
        wait_for(WAIT, || d.log_text().contains("source recovered")),
        "{}",
        d.log_text()
    );
    std::fs::remove_file(&out).unwrap();
    std::fs::create_dir(&out).unwrap();
    server.apply(service("demo", "late", "198.18.100.3", 80));
    let queued = Instant::now();
    assert!(
        wait_for(WAIT, || d.log_text().contains("sync failed")),
        "the refused commit is logged:\n{}",
        d.log_text()
    );
    assert!(
        wait_for(WAIT, || health().is_some_and(|(c, _)| c == 503)),
        "/healthz stayed 200 with a change left unapplied:\n{}",
        d.log_text()
    );
    let unhealthy_after = queued.elapsed();
    assert!(
        unhealthy_after >= HEALTH_TIMEOUT - Duration::from_millis(300),
        "503 after {unhealthy_after:?}, before the health timeout ({HEALTH_TIMEOUT:?})"
    );
    let (_, body) = health().unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["healthy"], false, "{v}");
    assert_eq!(v["nodeEligible"], true, "{v}");

    // 3. The API hangs again: still 503 (the queued change is what counts) ...
    server.set_hang(true);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(health().map(|x| x.0), Some(503), "{}", d.log_text());
    // ... and 200 once the change is applied, with the API still hung.
    std::fs::remove_dir(&out).unwrap();
    assert!(
        wait_for(WAIT, || rules().contains("198.18.100.3")),
        "the queued change was never applied:\n{}",
        d.log_text()
    );
    assert!(
        wait_for(WAIT, || health().is_some_and(|(c, _)| c == 200)),
        "/healthz did not recover once the change was applied:\n{}",
        d.log_text()
    );
}

/// The case as operators run it: default settings (syncPeriod 30 s, so a health
/// timeout of 60 s; the API client's own timeouts), and an API server that accepts
/// requests and never answers them for 5 minutes, with nothing queued: `/healthz`
/// answers 200 every second of it, and the rules stay. (Negative control, run
/// 2026-12-06 with the stalled source counted against health again, as in the first
/// test's: `/healthz answered Some(503) 120.4s into a hang with nothing queued`.)
#[test]
fn healthz_stays_up_through_a_five_minute_hang_at_the_default_settings() {
    const LONG_HANG: Duration = Duration::from_secs(300);
    let server = demo_api();
    let dir = TempDir::new("outage-health-5m");
    let daemon = ApiDaemon::new(&server, NODE);
    let healthz = daemon.healthz();
    let d = daemon.start(daemon_binary!(), &dir);
    let out = dir.path("ruleset.nft");
    let health = || http_get(healthz, "/healthz").map(|(code, _, _)| code);
    assert!(
        wait_for(WAIT, || has_service(&read(&out), "198.18.100.1")),
        "{}",
        d.log_text()
    );
    assert!(wait_for(WAIT, || health() == Some(200)), "{}", d.log_text());
    server.set_hang(true);
    let hang = Instant::now();
    let mut probes = 0;
    while hang.elapsed() < LONG_HANG {
        let at = hang.elapsed();
        match health() {
            Some(200) => probes += 1,
            other => panic!(
                "/healthz answered {other:?} {at:.1?} into a hang with nothing queued (defaults)\n--- log ---\n{}",
                d.log_text()
            ),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(probes >= 250, "{probes} probes answered in 5 minutes");
    assert!(has_service(&read(&out), "198.18.100.1"), "rules unchanged");
    server.set_hang(false);
}
