//! kube-proxy's debug paths with `--profiling` / `enableProfiling`, on the metrics
//! server (`cmd/kube-proxy/app/server.go`, `serveMetrics`: component-base's
//! `routes.Profiling` and `routes.DebugFlags` with klog's `v`):
//!
//! - `/debug/flags/v`: `PUT` a number, and `-v` is that from now on (`successfully set
//!   klog.logging.verbosity to N`); another method: 406 `unsupported http method`; a
//!   body that is no number: 400 `failed set klog.logging.verbosity ...`. `/debug/flags`
//!   lists the flags that can be set (`v`).
//! - `/debug/pprof/`: what a Rust process can honestly serve under Go's names, all as
//!   text (none is in pprof's protobuf format): `cmdline` (the command line, NUL
//!   separated, as Go's), `heap` and `allocs` (the process's memory: the kernel's
//!   `VmRSS`, `VmHWM`, `RssAnon`, ... and jemalloc's report; not a sampled heap
//!   profile), `goroutine` and `threadcreate`
//!   (the process's threads from `/proc/self/task`: name and state). `profile`,
//!   `trace`, `symbol`, `block`, `mutex`: 501, with what to use instead (`perf record
//!   -g -p PID`, symbolized with the image's `kube-nlproxy.debug`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderName, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

/// What the debug paths need from the program.
#[derive(Clone, Copy)]
pub struct DebugHandlers {
    /// klog's `-v` changed at run time.
    pub set_verbosity: fn(u32) -> Result<(), String>,
    /// The process's memory (and its allocator's report), as text.
    pub heap_stats: fn() -> String,
}

impl std::fmt::Debug for DebugHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugHandlers").finish_non_exhaustive()
    }
}

/// component-base's `writePlainText`: `text/plain`, nosniff, the text and a newline.
fn plain(code: StatusCode, text: &str) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain"),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

/// klog's `Level.Set`: an unsigned 32-bit number (Go's `strconv.ParseUint(s, 0, 32)`:
/// decimal, `0x` hex, `0o`/`0` octal, `0b` binary).
fn parse_level(s: &str) -> Result<u32, String> {
    let bad = || format!("strconv.ParseUint: parsing {}: invalid syntax", go_quote(s));
    let range = || {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            go_quote(s)
        )
    };
    let t = s.replace('_', "");
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        (b, 2)
    } else if let Some(o) = t.strip_prefix("0o").or_else(|| t.strip_prefix("0O")) {
        (o, 8)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t.as_str(), 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    u32::from_str_radix(digits, radix).map_err(|_| range())
}

fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

/// `/debug/flags/v`: `StringFlagPutHandler(logs.GlogSetter)`.
async fn flag_v(State(h): State<DebugHandlers>, method: Method, body: Bytes) -> Response {
    if method != Method::PUT {
        return plain(StatusCode::NOT_ACCEPTABLE, "unsupported http method");
    }
    let val = String::from_utf8_lossy(&body).into_owned();
    let set = parse_level(&val).and_then(|v| (h.set_verbosity)(v));
    match set {
        Ok(()) => {
            tracing::info!(verbosity = %val, "Log verbosity changed through /debug/flags/v");
            plain(
                StatusCode::OK,
                &format!("successfully set klog.logging.verbosity to {val}"),
            )
        }
        Err(e) => plain(
            StatusCode::BAD_REQUEST,
            &format!("failed set klog.logging.verbosity {val}: {e}"),
        ),
    }
}

async fn flags_index() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<html>\n<head>\n<title>/debug/flags/</title>\n</head>\n<body>\n/debug/flags/<br>\n<br>\nflags:<br>\n<table>\n<tr>\n<td><a href=\"v\">v</a><br>\n</td>\n</tr>\n</table>\n</body>\n</html>\n",
    )
        .into_response()
}

const INDEX: &str = "kube-nlproxy /debug/pprof/ (a Rust process: text, not pprof's protobuf)\n\n\
allocs        as heap\n\
cmdline       the command line, NUL separated\n\
goroutine     the process's threads (name, state)\n\
heap          the process's memory (VmRSS, VmHWM, RssAnon, ...) and jemalloc's report\n\
threadcreate  the process's threads, as goroutine\n\
\n\
Not available (501): profile, trace, symbol, block, mutex. For a CPU profile: perf record -g -p PID,\n\
symbolized with the image binary's debug file (kube-nlproxy.debug, named by its GNU debuglink).\n";

/// The threads of this process: `tid name state`, one per line.
fn threads() -> String {
    let mut rows = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let tid = e.file_name().to_string_lossy().into_owned();
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // the state is the field after the parenthesised name
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            rows.push((
                tid.parse::<u64>().unwrap_or(0),
                comm.trim().to_string(),
                state,
            ));
        }
    }
    rows.sort();
    let mut out = format!("threads: {}\n\n", rows.len());
    for (tid, name, state) in rows {
        out.push_str(&format!("{tid} {name} {state}\n"));
    }
    out
}

async fn pprof(State(h): State<DebugHandlers>, path: Option<Path<String>>) -> Response {
    let name = path.map(|Path(p)| p).unwrap_or_default();
    match name.as_str() {
        "" => plain(StatusCode::OK, INDEX.trim_end()),
        "cmdline" => {
            let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
            let args = raw.strip_suffix(b"\0").unwrap_or(&raw).to_vec();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                args,
            )
                .into_response()
        }
        "heap" | "allocs" => plain(StatusCode::OK, (h.heap_stats)().trim_end()),
        "goroutine" | "threadcreate" => plain(StatusCode::OK, threads().trim_end()),
        "profile" | "trace" | "symbol" | "block" | "mutex" => plain(
            StatusCode::NOT_IMPLEMENTED,
            "not available for a Rust process: for a CPU profile use `perf record -g -p PID`, \
             symbolized with kube-nlproxy.debug (docs/operations.md, \"--profiling\")",
        ),
        _ => plain(StatusCode::NOT_FOUND, "Unknown profile"),
    }
}

/// The debug paths, for the metrics server's router.
pub fn router(h: DebugHandlers) -> Router {
    Router::new()
        .route("/debug/flags", any(flags_index))
        .route("/debug/flags/", any(flags_index))
        .route("/debug/flags/v", any(flag_v))
        .route("/debug/pprof", any(pprof))
        .route("/debug/pprof/", any(pprof))
        .route("/debug/pprof/{name}", any(pprof))
        .with_state(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_as_klog_parses_them() {
        assert_eq!(parse_level("4"), Ok(4));
        assert_eq!(parse_level("0x10"), Ok(16));
        assert_eq!(parse_level("010"), Ok(8));
        assert!(parse_level("x").unwrap_err().contains("invalid syntax"));
        assert!(parse_level("-1").unwrap_err().contains("invalid syntax"));
        assert!(parse_level("99999999999")
            .unwrap_err()
            .contains("out of range"));
    }
}
