//! Logs as kube-proxy writes them: klog's text format by default, component-base's JSON
//! format with `--logging-format=json`, and klog's verbosity levels.
//!
//! Text (klog `formatHeader` and `internal/serialize`):
//! `I1130 15:25:12.918571       1 main.rs:123] "message" key="value" n=3`
//! - severity letter I/W/E, month, day, local time to the microsecond, the process id
//!   right-aligned in 7 columns, the source file's base name and line, `] `;
//! - the message always quoted (Go's `strconv.Quote`); strings and errors quoted,
//!   numbers and booleans plain, multi-line strings as `key=<` / tab-indented lines / ` >`;
//! - for an error event, its `err` first after the message.
//!
//! JSON (component-base `logs/json`, zap + zapr): `{"ts":<ms since epoch, float>,
//! "caller":"<crate>/<file>:<line>","msg":"...","v":<verbosity>, key/values...}`; an error
//! event has no `v` and carries its error last as `err`.
//!
//! Verbosity (agreed across the project): tracing ERROR/WARN/INFO are klog E/W/I at
//! verbosity 0, DEBUG is 2, TRACE is 4 — for the program's own crates (the `ours` list
//! the program passes, by crate name). Dependencies' DEBUG and TRACE (the API client,
//! HTTP) count as 6 and 9, where client-go logs its requests.
//! A field named `error` is written as `err`, klog's key. `RUST_LOG` overrides the filter.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

mod go;
pub use go::{go_float, go_quote};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::layer::{Context, Layer};

/// Output format (`--logging-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Whether `target` (a module path) is in one of the crates of `ours`.
fn is_ours(target: &str, ours: &[&str]) -> bool {
    let root = target.split("::").next().unwrap_or(target);
    ours.contains(&root)
}

/// The klog verbosity of an event of `level` from `target`, given the program's own
/// crates `ours`.
pub fn verbosity(level: &Level, target: &str, ours: &[&str]) -> u32 {
    let ours = is_ours(target, ours);
    match *level {
        Level::ERROR | Level::WARN | Level::INFO => 0,
        Level::DEBUG => {
            if ours {
                2
            } else {
                6
            }
        }
        _ => {
            if ours {
                4
            } else {
                9
            }
        }
    }
}

/// The filter for `-v=N`: what [`verbosity`] puts at N or below.
pub fn targets(v: u32, ours: &[&str]) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::LevelFilter;
    let level = |debug_at: u32, trace_at: u32| {
        if v >= trace_at {
            LevelFilter::TRACE
        } else if v >= debug_at {
            LevelFilter::DEBUG
        } else {
            LevelFilter::INFO
        }
    };
    let mut t = tracing_subscriber::filter::Targets::new().with_default(level(6, 9));
    for crate_name in ours {
        t = t.with_target(*crate_name, level(2, 4));
    }
    t
}

/// A value as the event recorded it.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    I(i128),
    U(u128),
    F(f64),
    B(bool),
}

/// Broken-down local time (what klog's header shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalTime {
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub micros: u32,
}

impl LocalTime {
    /// `t` in the process's time zone (`localtime_r`, as Go's `time.Now()` is local).
    pub fn of(t: SystemTime) -> LocalTime {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = libc::time_t::try_from(d.as_secs()).unwrap_or(0);
        // SAFETY: tm is plain data; localtime_r writes it and reads only `secs`.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
        if !ok {
            return LocalTime {
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0,
                micros: 0,
            };
        }
        LocalTime {
            month: (tm.tm_mon + 1) as u32,
            day: tm.tm_mday as u32,
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec as u32,
            micros: d.subsec_micros(),
        }
    }
}

/// One log line's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `I`, `W` or `E`.
    pub severity: char,
    pub v: u32,
    pub file: String,
    pub line: u32,
    pub msg: String,
    /// For an error event: its `err`, written first (text) or last (JSON).
    pub err: Option<String>,
    pub kvs: Vec<(String, Val)>,
}

fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// klog's text line (with its newline).
pub fn format_text(r: &Record, t: LocalTime, pid: u32) -> String {
    let base = r.file.rsplit('/').next().unwrap_or(&r.file);
    let mut out = format!(
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} {}:{}] {}",
        r.severity,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        t.micros,
        pid,
        base,
        r.line,
        go_quote(&r.msg)
    );
    if let Some(e) = &r.err {
        write_kv(&mut out, "err", &Val::Str(e.clone()));
    }
    for (k, v) in &r.kvs {
        write_kv(&mut out, k, v);
    }
    out.push('\n');
    out
}

/// klog's `formatKV`.
fn write_kv(out: &mut String, k: &str, v: &Val) {
    out.push(' ');
    out.push_str(k);
    match v {
        Val::Str(s) => write_string_value(out, s),
        Val::I(n) => out.push_str(&format!("={n}")),
        Val::U(n) => out.push_str(&format!("={n}")),
        Val::F(f) => out.push_str(&format!("={}", go_float(*f))),
        Val::B(b) => out.push_str(&format!("={b}")),
    }
}

/// klog's `writeStringValue` for strings: quoted, or the multi-line block form.
fn write_string_value(out: &mut String, s: &str) {
    if !s.contains('\n') {
        out.push('=');
        out.push_str(&go_quote(s));
        return;
    }
    out.push_str("=<\n");
    let mut rest = s;
    while let Some(i) = rest.find('\n') {
        out.push('\t');
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
    }
    if rest.is_empty() {
        out.push_str(" >");
    } else {
        out.push('\t');
        out.push_str(rest);
        out.push_str("\n >");
    }
}

/// zap's JSON string escaping.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_val(out: &mut String, v: &Val) {
    match v {
        Val::Str(s) => json_str(out, s),
        Val::I(n) => out.push_str(&n.to_string()),
        Val::U(n) => out.push_str(&n.to_string()),
        Val::F(f) if f.is_finite() => out.push_str(&f.to_string()),
        Val::F(f) => json_str(out, &go_float(*f)),
        Val::B(b) => out.push_str(&b.to_string()),
    }
}

/// The short caller, zap's `dir/file:line`: the crate directory and the file's name.
fn caller(file: &str, line: u32) -> String {
    let parts: Vec<&str> = file.split('/').collect();
    let name = parts.last().copied().unwrap_or(file);
    let dir = match parts.iter().rposition(|p| *p == "src") {
        Some(i) if i > 0 => parts[i - 1],
        _ if parts.len() >= 2 => parts[parts.len() - 2],
        _ => "",
    };
    if dir.is_empty() {
        format!("{name}:{line}")
    } else {
        format!("{dir}/{name}:{line}")
    }
}

/// component-base's JSON line (with its newline); `ts_ms`: milliseconds since the epoch.
pub fn format_json(r: &Record, ts_ms: f64) -> String {
    let mut out = String::from("{\"ts\":");
    out.push_str(&ts_ms.to_string());
    out.push_str(",\"caller\":");
    json_str(&mut out, &caller(&r.file, r.line));
    out.push_str(",\"msg\":");
    json_str(&mut out, &r.msg);
    if r.severity != 'E' {
        out.push_str(&format!(",\"v\":{}", r.v));
    }
    for (k, v) in &r.kvs {
        out.push(',');
        json_str(&mut out, k);
        out.push(':');
        json_val(&mut out, v);
    }
    if let Some(e) = &r.err {
        out.push_str(",\"err\":");
        json_str(&mut out, e);
    }
    out.push_str("}\n");
    out
}

/// Collects an event's message and fields.
#[derive(Default)]
struct Fields {
    msg: String,
    kvs: Vec<(String, Val)>,
}

impl Fields {
    fn push(&mut self, field: &Field, v: Val) {
        let name = field.name();
        if name.starts_with("log.") {
            return; // the `log` crate's metadata, carried by tracing-log
        }
        let name = if name == "error" { "err" } else { name };
        self.kvs.push((name.to_string(), v));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.msg = format!("{value:?}");
        } else {
            self.push(field, Val::Str(format!("{value:?}")));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.push(field, Val::Str(value.to_string()));
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Val::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Val::I(value.into()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Val::U(value.into()));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, Val::I(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, Val::U(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Val::F(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Val::B(value));
    }
}

/// The record of a tracing event.
pub fn record(event: &Event<'_>, ours: &[&str]) -> Record {
    let normalized = event.normalized_metadata();
    let meta: &Metadata<'_> = normalized.as_ref().unwrap_or_else(|| event.metadata());
    let mut f = Fields::default();
    event.record(&mut f);
    let sev = severity(meta.level());
    let mut err = None;
    if sev == 'E' {
        if let Some(i) = f.kvs.iter().position(|(k, _)| k == "err") {
            if let (_, Val::Str(s)) = f.kvs.remove(i) {
                err = Some(s);
            }
        }
    }
    Record {
        severity: sev,
        v: verbosity(meta.level(), meta.target(), ours),
        file: meta.file().unwrap_or("???").to_string(),
        line: meta.line().unwrap_or(0),
        msg: f.msg,
        err,
        kvs: f.kvs,
    }
}

/// Where lines go: stderr, or a buffer (tests).
#[derive(Clone)]
pub enum Sink {
    Stderr,
    #[cfg_attr(not(test), allow(dead_code))]
    Buffer(Arc<Mutex<Vec<u8>>>),
}

/// The tracing layer writing klog text or JSON lines.
pub struct KlogLayer {
    pub format: Format,
    pub sink: Sink,
    pub pid: u32,
    /// The clock (fixed in golden tests).
    pub now: fn() -> SystemTime,
    /// Local time of an instant (fixed zone in golden tests).
    pub local: fn(SystemTime) -> LocalTime,
    /// The program's own crates (see [`verbosity`]).
    pub ours: &'static [&'static str],
}

impl KlogLayer {
    pub fn new(format: Format, ours: &'static [&'static str]) -> KlogLayer {
        KlogLayer {
            format,
            ours,
            sink: Sink::Stderr,
            pid: std::process::id(),
            now: SystemTime::now,
            local: LocalTime::of,
        }
    }

    /// The line for `r` at `t`.
    pub fn line(&self, r: &Record, t: SystemTime) -> String {
        match self.format {
            Format::Text => format_text(r, (self.local)(t), self.pid),
            Format::Json => {
                let ns = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
                format_json(r, ns as f64 / 1e6)
            }
        }
    }
}

impl<S: Subscriber> Layer<S> for KlogLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let line = self.line(&record(event, self.ours), (self.now)());
        match &self.sink {
            Sink::Stderr => {
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
            Sink::Buffer(b) => {
                if let Ok(mut b) = b.lock() {
                    b.extend_from_slice(line.as_bytes());
                }
            }
        }
    }
}

/// Changes the verbosity of the installed logger ([`init`]); unset before it, or when
/// `RUST_LOG` chose the filter.
type SetVerbosity = Box<dyn Fn(u32) -> Result<(), String> + Send + Sync>;
static SET_VERBOSITY: std::sync::OnceLock<SetVerbosity> = std::sync::OnceLock::new();

/// Install the logger for the process: `format` at verbosity `v` (`ours`: the program's
/// own crates, by crate name), or the `RUST_LOG` filter when that is set. The
/// verbosity can be changed later ([`set_verbosity`]).
pub fn init(format: Format, v: u32, ours: &'static [&'static str]) {
    use tracing_subscriber::prelude::*;
    let layer = KlogLayer::new(format, ours);
    let registry = tracing_subscriber::registry();
    let result = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(env) => registry.with(layer.with_filter(env)).try_init(),
        Err(_) => {
            let (filter, handle) = tracing_subscriber::reload::Layer::new(targets(v, ours));
            let r = registry.with(layer.with_filter(filter)).try_init();
            if r.is_ok() {
                let _ = SET_VERBOSITY.set(Box::new(move |v| {
                    handle.reload(targets(v, ours)).map_err(|e| e.to_string())
                }));
            }
            r
        }
    };
    if let Err(e) = result {
        eprintln!("klog: logging already initialised: {e}");
    }
}

/// klog's `-v` changed at run time (component-base's `/debug/flags/v`): what is logged
/// from now on is what `init` at verbosity `v` would log. An error when the logger was
/// not installed by [`init`] with its own filter (`RUST_LOG` set).
pub fn set_verbosity(v: u32) -> Result<(), String> {
    match SET_VERBOSITY.get() {
        Some(set) => set(v),
        None => Err("the log filter is RUST_LOG's; -v cannot change it".into()),
    }
}

#[cfg(test)]
mod tests;
