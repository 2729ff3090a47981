//! Golden tests of the exact log lines.

use super::*;
use std::time::Duration;

/// The crates these tests count as the program's own (klog: the events they log).
const OURS: &[&str] = &["kube_nlproxy", "sync_engine", "ruleset", "klog"];

fn at() -> SystemTime {
    // 2026-11-30 15:25:12.918571 UTC
    UNIX_EPOCH + Duration::new(1_796_052_312, 918_571_000)
}

fn utc(t: SystemTime) -> LocalTime {
    let d = t.duration_since(UNIX_EPOCH).unwrap();
    let s = d.as_secs();
    // enough for this test's instant: 2026-11-30
    assert_eq!(s / 86400, 20_787);
    LocalTime {
        month: 11,
        day: 30,
        hour: (s % 86400 / 3600) as u32,
        minute: (s % 3600 / 60) as u32,
        second: (s % 60) as u32,
        micros: d.subsec_micros(),
    }
}

fn rec(sev: char, msg: &str, kvs: Vec<(&str, Val)>) -> Record {
    Record {
        severity: sev,
        v: 0,
        file: "crates/kube-nlproxy/src/main.rs".into(),
        line: 123,
        msg: msg.into(),
        err: None,
        kvs: kvs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

#[test]
fn klog_text_header_and_values() {
    let r = rec(
        'I',
        "synced",
        vec![
            ("kind", Val::Str("full".into())),
            ("services", Val::U(3)),
            ("commit_ms", Val::F(0.25)),
            ("ok", Val::B(true)),
            ("quote", Val::Str("a \"b\"\tc".into())),
        ],
    );
    assert_eq!(
        format_text(&r, utc(at()), 1),
        "I1130 15:25:12.918571       1 main.rs:123] \"synced\" kind=\"full\" services=3 commit_ms=0.25 ok=true quote=\"a \\\"b\\\"\\tc\"\n"
    );
    let mut e = rec('E', "sync failed", vec![("node", Val::Str("a".into()))]);
    e.err = Some("boom".into());
    assert_eq!(
        format_text(&e, utc(at()), 4_194_303),
        "E1130 15:25:12.918571 4194303 main.rs:123] \"sync failed\" err=\"boom\" node=\"a\"\n"
    );
}

#[test]
fn klog_multi_line_values() {
    let r = rec(
        'W',
        "two lines",
        vec![
            ("text", Val::Str("a\nb".into())),
            ("end", Val::Str("c\n".into())),
        ],
    );
    assert_eq!(
        format_text(&r, utc(at()), 1),
        "W1130 15:25:12.918571       1 main.rs:123] \"two lines\" text=<\n\ta\n\tb\n > end=<\n\tc\n >\n"
    );
}

#[test]
fn component_base_json() {
    let mut r = rec(
        'I',
        "synced",
        vec![("kind", Val::Str("full".into())), ("ops", Val::U(10))],
    );
    r.v = 2;
    assert_eq!(
        format_json(&r, 1_796_052_312_918.571),
        "{\"ts\":1796052312918.571,\"caller\":\"kube-nlproxy/main.rs:123\",\"msg\":\"synced\",\"v\":2,\"kind\":\"full\",\"ops\":10}\n"
    );
    let mut e = rec('E', "sync failed", vec![("node", Val::Str("a\nb".into()))]);
    e.err = Some("boom".into());
    assert_eq!(
        format_json(&e, 1.5),
        "{\"ts\":1.5,\"caller\":\"kube-nlproxy/main.rs:123\",\"msg\":\"sync failed\",\"node\":\"a\\nb\",\"err\":\"boom\"}\n"
    );
}

#[test]
fn go_float_formatting() {
    for (f, want) in [
        (0.25, "0.25"),
        (3.0, "3"),
        (123456.0, "123456"),
        (1_000_000.0, "1e+06"),
        (1_234_567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (0.0, "0"),
    ] {
        assert_eq!(go_float(f), want, "{f}");
    }
}

#[test]
fn verbosity_convention() {
    assert_eq!(verbosity(&Level::ERROR, "kube_nlproxy", OURS), 0);
    assert_eq!(verbosity(&Level::INFO, "sync_engine::engine", OURS), 0);
    assert_eq!(verbosity(&Level::DEBUG, "sync_engine::engine", OURS), 2);
    assert_eq!(verbosity(&Level::TRACE, "ruleset", OURS), 4);
    assert_eq!(verbosity(&Level::DEBUG, "kube_client::client", OURS), 6);
    assert_eq!(verbosity(&Level::TRACE, "hyper", OURS), 9);
}

/// Through tracing: `-v` filters as agreed, fields are typed, `error` becomes `err`,
/// an error event's `err` comes first.
fn capture(format: Format, v: u32, emit: impl FnOnce() -> u32) -> (String, u32) {
    use tracing_subscriber::prelude::*;
    let buf = Arc::new(Mutex::new(Vec::new()));
    let layer = KlogLayer {
        format,
        sink: Sink::Buffer(buf.clone()),
        pid: 1,
        now: at,
        local: utc,
        ours: OURS,
    };
    let sub = tracing_subscriber::registry().with(layer.with_filter(targets(v, OURS)));
    let line = tracing::subscriber::with_default(sub, emit);
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    (text, line)
}

#[test]
fn through_tracing_text() {
    let (out, l) = capture(Format::Text, 0, || {
        let l = line!() + 1;
        tracing::info!(node = "node-a", count = 2u64, "Starting kube-nlproxy");
        tracing::debug!("not at -v=0");
        tracing::error!(error = %std::io::Error::other("boom"), op = "commit", "Sync failed");
        l
    });
    assert_eq!(
        out,
        format!(
            "I1130 15:25:12.918571       1 tests.rs:{l}] \"Starting kube-nlproxy\" node=\"node-a\" count=2\n\
             E1130 15:25:12.918571       1 tests.rs:{}] \"Sync failed\" err=\"boom\" op=\"commit\"\n",
            l + 2
        )
    );
}

#[test]
fn through_tracing_verbosity() {
    let (out, _) = capture(Format::Text, 2, || {
        tracing::debug!("at two");
        tracing::trace!("at four");
        0
    });
    assert!(
        out.contains("\"at two\"") && !out.contains("at four"),
        "{out}"
    );
    let (out, _) = capture(Format::Json, 4, || {
        tracing::trace!(x = 1i64, "at four");
        0
    });
    assert!(
        out.starts_with("{\"ts\":1796052312918.571,\"caller\":\"klog/tests.rs:"),
        "{out}"
    );
    assert!(
        out.ends_with("\"msg\":\"at four\",\"v\":4,\"x\":1}\n"),
        "{out}"
    );
}
