//! What the engine logs (captured with a tracing subscriber): conflicts between services
//! once per change at WARN with both names; each sync at DEBUG with key=value fields.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use serde_json::json;
use sync_engine::*;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One test at a time: tracing caches, per call site, whether any subscriber wants it,
/// and rebuilds that when a scoped subscriber comes or goes; a call site first reached
/// on another test's thread (no subscriber there) while this test's capture was being
/// set up could stay off for it (seen: a capture that got no line at all, about once
/// in ten runs, whether the captures themselves were serialised or not).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log lines `f` emits at `level` and above.
fn capture<R>(level: tracing::Level, f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_max_level(level)
        .with_ansi(false)
        .without_time()
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (r, text.lines().map(str::to_string).collect())
}

fn with_external_ip(name: &str, ip: &str) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns1"},
        "spec": {"clusterIP": if name == "a" { "198.18.100.20" } else { "198.18.100.21" },
                 "externalIPs": [ip],
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
    }))
    .unwrap()
}

#[test]
fn a_conflict_between_services_is_logged_once_per_change_with_both_names() {
    let _one = one_at_a_time();
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(with_external_ip("a", "198.18.101.9")));
    e.handle(Event::ServiceApplied(with_external_ip("b", "198.18.101.9")));
    listed(&mut e);
    let (_, lines) = capture(tracing::Level::INFO, || e.sync().unwrap());
    let warns: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("two services claim"))
        .collect();
    assert_eq!(warns.len(), 1, "{lines:#?}");
    assert!(
        warns[0].contains("service=ns1/b") && warns[0].contains("other=ns1/a"),
        "{}",
        warns[0]
    );
    assert!(warns[0].contains("198.18.101.9"), "{}", warns[0]);

    // The same state again (a periodic full sync): nothing logged about it.
    w.clock.advance(Duration::from_secs(31));
    let (_, lines) = capture(tracing::Level::INFO, || e.sync().unwrap());
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("claim") || l.contains("conflict")),
        "{lines:#?}"
    );

    // Resolved: one INFO line.
    e.handle(Event::ServiceApplied(with_external_ip(
        "b",
        "198.18.101.10",
    )));
    w.clock.advance(Duration::from_secs(2));
    let (_, lines) = capture(tracing::Level::INFO, || e.sync().unwrap());
    let resolved: Vec<&String> = lines.iter().filter(|l| l.contains("resolved")).collect();
    assert_eq!(resolved.len(), 1, "{lines:#?}");
    assert!(resolved[0].contains("INFO"));
}

/// Each sync is one DEBUG line with key=value fields (kube-proxy logs syncs at -v=2),
/// never a Debug dump of a struct; nothing at INFO or above for a plain sync.
#[test]
fn each_sync_is_logged_at_debug_with_fields() {
    let _one = one_at_a_time();
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    let (_, lines) = capture(tracing::Level::TRACE, || e.sync().unwrap());
    let synced: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("DEBUG") && l.contains(" synced"))
        .collect();
    assert_eq!(synced.len(), 1, "{lines:#?}");
    for field in ["kind=", "ops=", "conntrack_targets=4", "compile_ms="] {
        assert!(synced[0].contains(field), "{field}: {}", synced[0]);
    }
    for l in &lines {
        assert!(
            !l.contains(" { ") && !l.contains("Some("),
            "a Debug dump in a log line: {l}"
        );
    }
    w.clock.advance(Duration::from_secs(2));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.3", true, true, false)],
    )));
    let (_, lines) = capture(tracing::Level::INFO, || e.sync().unwrap());
    assert!(
        lines.is_empty(),
        "a plain sync logs nothing at INFO: {lines:#?}"
    );
}

/// The sync line says how long the oldest change it consumed waited, from reaching the
/// engine to the kernel's ACK (`event_to_ack_ms`; the report's `since_event`), and
/// `none` for a sync no change asked for.
#[test]
fn the_sync_line_gives_the_time_from_the_oldest_change_to_the_ack() {
    let _one = one_at_a_time();
    let w = World::new();
    let mut e = w.engine(false);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();

    w.clock.advance(Duration::from_secs(2));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_millis(5));
    // a later change in the same sync does not restart the clock
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.3", true, true, false)],
    )));
    w.clock.advance(Duration::from_millis(2));
    let (r, lines) = capture(tracing::Level::DEBUG, || e.sync().unwrap());
    assert_eq!(r.since_event, Some(Duration::from_millis(7)));
    let synced: Vec<&String> = lines.iter().filter(|l| l.contains(" synced")).collect();
    assert_eq!(synced.len(), 1, "{lines:#?}");
    assert!(synced[0].contains("event_to_ack_ms=7.000"), "{}", synced[0]);

    // a periodic full sync with nothing queued
    w.clock.advance(Duration::from_secs(3600));
    let (r, lines) = capture(tracing::Level::DEBUG, || e.sync().unwrap());
    assert_eq!(r.since_event, None);
    assert!(
        lines.iter().any(|l| l.contains("event_to_ack_ms=none")),
        "{lines:#?}"
    );
}
