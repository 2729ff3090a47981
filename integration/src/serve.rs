//! One connection of the double: a list (pages, selectors) or a watch (resume, initial
//! events, bookmarks, 410 Expired, drops, hangs, silence), in the negotiated encoding:
//! JSON (an object, then one line per event) or protobuf (an enveloped `XList`, then
//! length-delimited `WatchEvent` frames).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http::{negotiate, read_request, Encoding, Meter, Out, Request};
use crate::proto;
use crate::store::{selected, Res, Shared, Stored, WatchEvent};

/// The annotation of the bookmark that ends a watch's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

pub(crate) fn serve(
    conn: std::net::TcpStream,
    st: Shared,
    stop: Arc<AtomicBool>,
    meter: Meter,
) -> std::io::Result<()> {
    let (m, cv) = &*st;
    let epoch = {
        let s = m.lock().unwrap_or_else(|e| e.into_inner());
        if s.down || stop.load(Ordering::SeqCst) {
            return Ok(()); // closed at once
        }
        s.epoch
    };
    let req = read_request(&conn)?;
    let mut out = Out::new(conn, meter)?;
    let (json_only, no_watch_list) = {
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        s.requests.push((out.peer(), req.line.clone()));
        // A dead peer: hold the request unanswered while the hang lasts.
        if s.hang {
            // Held open and unanswered for good, like a connection to a dead peer
            // (until the double stops).
            while !stop.load(Ordering::SeqCst) {
                s = cv
                    .wait_timeout(s, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            return Ok(());
        }
        (s.json_only, s.no_watch_list)
    };
    if req.post {
        // POSTs (events) are JSON both ways.
        let v: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        m.lock()
            .unwrap_or_else(|e| e.into_inner())
            .posts
            .push((req.path.clone(), v.clone()));
        return out.respond(201, "application/json", v.to_string().as_bytes());
    }
    let enc = negotiate(req.accept.as_deref(), json_only);
    let Some(res) = Res::from_path(&req.path) else {
        let msg = format!(
            "the server could not find the requested resource {}",
            req.path
        );
        return error(&mut out, enc, 404, "NotFound", &msg);
    };
    let watch = matches!(req.param("watch"), Some("true" | "1"));
    if watch {
        Watch::new(&req, res, enc, no_watch_list).run(&mut out, &st, &stop, epoch)
    } else {
        list(&mut out, &st, &req, res, enc)
    }
}

/// A failure `Status` as a whole response.
fn error(out: &mut Out, enc: Encoding, code: u16, reason: &str, msg: &str) -> std::io::Result<()> {
    let ct = enc.content_type(false);
    match enc {
        Encoding::Json => out.respond(
            code,
            ct,
            status_json(code, reason, msg).to_string().as_bytes(),
        ),
        Encoding::Protobuf => out.respond(code, ct, &proto::status(code.into(), reason, msg)),
    }
}

fn status_json(code: u16, reason: &str, msg: &str) -> Value {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
           "message": msg,"reason": reason,"code": code})
}

/// Pages of `limit` items, as the API server serves a quorum list (`continue` is the
/// offset of the next page here); only the page's objects are copied. A list at
/// `resourceVersion=0` is served whole, as the API server's watch cache serves it: the
/// cache ignores `limit` for such lists.
fn list(out: &mut Out, st: &Shared, req: &Request, res: Res, enc: Encoding) -> std::io::Result<()> {
    let labels = req.param("labelSelector").unwrap_or("");
    let fields = req.param("fieldSelector").unwrap_or("");
    let from: usize = req
        .param("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let from_cache = req.param("resourceVersion") == Some("0");
    let limit: usize = req
        .param("limit")
        .and_then(|l| l.parse().ok())
        .filter(|_| !from_cache)
        .unwrap_or(usize::MAX);
    let s = st.0.lock().unwrap_or_else(|e| e.into_inner());
    let mut matching = s
        .objects
        .iter()
        .filter(|(k, o)| k.0 == res && selected(&o.value, labels, fields))
        .skip(from);
    let page: Vec<Arc<Stored>> = matching
        .by_ref()
        .take(limit)
        .map(|(_, o)| o.clone())
        .collect();
    let more = matching.next().is_some();
    let rv = s.rv.to_string();
    drop(s);
    let next = more.then(|| (from + limit).to_string());
    let (kind, api) = res.list_kind();
    match enc {
        Encoding::Json => {
            let mut meta = json!({"resourceVersion": rv});
            if let Some(c) = &next {
                meta["continue"] = json!(c);
            }
            let head = json!({"kind": kind, "apiVersion": api, "metadata": meta}).to_string();
            // `{...,"items":[...]}`: the head without its closing brace, then the items.
            let mut body = String::with_capacity(
                head.len() + page.iter().map(|o| o.json.len() + 1).sum::<usize>() + 12,
            );
            body.push_str(&head[..head.len() - 1]);
            body.push_str(",\"items\":[");
            for (i, o) in page.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(&o.json);
            }
            body.push_str("]}");
            out.respond(200, enc.content_type(false), body.as_bytes())
        }
        Encoding::Protobuf => {
            if let Some(bad) = page.iter().find(|o| o.proto.is_none()) {
                let msg = format!("{} has no protobuf encoding", name_of(&bad.value));
                return error(out, enc, 500, "InternalError", &msg);
            }
            let items = page.iter().filter_map(|o| o.proto.as_deref());
            let body = proto::list(api, kind, &rv, next.as_deref(), items);
            out.respond(200, enc.content_type(false), &body)
        }
    }
}

fn name_of(v: &Value) -> String {
    let m = &v["metadata"];
    match m["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap_or("")),
        None => m["name"].as_str().unwrap_or("").to_string(),
    }
}

/// A watch's request.
struct Watch {
    res: Res,
    enc: Encoding,
    labels: String,
    fields: String,
    from: u64,
    bookmarks: bool,
    timeout: Duration,
    /// `sendInitialEvents=true`: every object as ADDED first, then a bookmark.
    initial: bool,
    /// Why the request is invalid (422), if it is.
    invalid: Option<String>,
}

impl Watch {
    fn new(req: &Request, res: Res, enc: Encoding, no_watch_list: bool) -> Watch {
        let bookmarks = req.param("allowWatchBookmarks") == Some("true");
        let initial = req.param("sendInitialEvents") == Some("true");
        // as apimachinery's ListOptions validation
        let invalid = if initial && no_watch_list {
            Some("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
        } else if initial && req.param("resourceVersionMatch") != Some("NotOlderThan") {
            Some("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        } else if initial && !bookmarks {
            Some("sendInitialEvents requires setting allowWatchBookmarks to true")
        } else {
            None
        };
        Watch {
            res,
            enc,
            labels: req.param("labelSelector").unwrap_or("").to_string(),
            fields: req.param("fieldSelector").unwrap_or("").to_string(),
            from: req
                .param("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            bookmarks,
            timeout: req
                .param("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(300)),
            initial,
            invalid: invalid.map(str::to_string),
        }
    }

    /// One event in the stream's encoding; Err: the object has no protobuf encoding.
    fn event(&self, kind: &str, o: &Stored) -> Result<Vec<u8>, String> {
        match self.enc {
            Encoding::Json => {
                let mut line =
                    format!("{{\"type\":\"{kind}\",\"object\":{}}}", o.json).into_bytes();
                line.push(b'\n');
                Ok(line)
            }
            Encoding::Protobuf => {
                let raw = o.proto.as_deref().ok_or_else(|| name_of(&o.value))?;
                let object = proto::envelope(self.res.list_kind().1, self.res.kind(), raw);
                Ok(proto::watch_frame(kind, &object))
            }
        }
    }

    /// A bookmark at `rv`: an object with only its resourceVersion (and the annotation
    /// that ends the initial events).
    fn bookmark(&self, rv: u64, initial_end: bool) -> Vec<u8> {
        let (api, kind) = (self.res.list_kind().1, self.res.kind());
        match self.enc {
            Encoding::Json => {
                let mut meta = json!({"resourceVersion": rv.to_string()});
                if initial_end {
                    meta["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
                }
                let mut line = json!({"type":"BOOKMARK","object":{"kind": kind,
                    "apiVersion": api, "metadata": meta}})
                .to_string()
                .into_bytes();
                line.push(b'\n');
                line
            }
            Encoding::Protobuf => {
                let object = proto::bookmark(api, kind, &rv.to_string(), initial_end);
                proto::watch_frame("BOOKMARK", &object)
            }
        }
    }

    /// An ERROR event with a failure Status.
    fn error_event(&self, code: u16, reason: &str, msg: &str) -> Vec<u8> {
        match self.enc {
            Encoding::Json => {
                let mut line = json!({"type":"ERROR","object": status_json(code, reason, msg)})
                    .to_string()
                    .into_bytes();
                line.push(b'\n');
                line
            }
            Encoding::Protobuf => {
                proto::watch_frame("ERROR", &proto::status(code.into(), reason, msg))
            }
        }
    }

    /// The stream ends with an ERROR event.
    fn fail(&self, out: &mut Out, code: u16, reason: &str, msg: &str) -> std::io::Result<()> {
        out.chunk(&self.error_event(code, reason, msg))?;
        out.end_stream()
    }

    fn run(
        &self,
        out: &mut Out,
        st: &Shared,
        stop: &AtomicBool,
        epoch: u64,
    ) -> std::io::Result<()> {
        if let Some(why) = &self.invalid {
            return error(out, self.enc, 422, "Invalid", why);
        }
        let (m, cv) = &**st;
        out.start_stream(self.enc.content_type(true))?;
        let mut last = self.from;
        if self.initial {
            // The current state as ADDED events, then the bookmark that ends them.
            let (objects, rv) = {
                let s = m.lock().unwrap_or_else(|e| e.into_inner());
                let objects: Vec<Arc<Stored>> = s
                    .objects
                    .iter()
                    .filter(|(k, o)| {
                        k.0 == self.res && selected(&o.value, &self.labels, &self.fields)
                    })
                    .map(|(_, o)| o.clone())
                    .collect();
                (objects, s.rv)
            };
            for o in objects {
                match self.event("ADDED", &o) {
                    Ok(bytes) => out.chunk(&bytes)?,
                    Err(name) => return self.fail(out, 500, "InternalError", &no_protobuf(&name)),
                }
            }
            out.chunk(&self.bookmark(rv, true))?;
            last = rv;
        } else {
            let s = m.lock().unwrap_or_else(|e| e.into_inner());
            if self.from < s.compacted {
                let msg = format!("too old resource version: {} ({})", self.from, s.compacted);
                drop(s);
                return self.fail(out, 410, "Expired", &msg);
            }
        }
        let start = Instant::now();
        let mut last_bookmark = Instant::now();
        let mut dead = false; // saw a hang: silent for good
        loop {
            let (pending, bm, gone) = {
                let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    dead |= s.hang;
                    let gone = !dead && (s.epoch != epoch || s.down) || stop.load(Ordering::SeqCst);
                    let mute = dead || s.silent_watches;
                    // events are kept in resourceVersion order: skip the old ones by search
                    let newer = s.events.partition_point(|e| e.rv <= last);
                    let pending: Vec<WatchEvent> = s.events[newer..]
                        .iter()
                        .filter(|e| e.res == self.res && !mute)
                        .cloned()
                        .collect();
                    let bm_due = self.bookmarks
                        && !mute
                        && s.bookmark_every
                            .is_some_and(|d| last_bookmark.elapsed() >= d);
                    let ends = start.elapsed() >= self.timeout && !mute;
                    if gone || !pending.is_empty() || bm_due || ends {
                        let rv = s.rv;
                        break (pending, if bm_due { Some(rv) } else { None }, gone);
                    }
                    s = cv
                        .wait_timeout(s, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            if gone {
                // Abrupt drop: no terminating chunk.
                out.abort();
                return Ok(());
            }
            for e in pending {
                last = e.rv;
                if selected(&e.object.value, &self.labels, &self.fields) {
                    let bytes = match self.event(e.kind, &e.object) {
                        Ok(bytes) => bytes,
                        Err(name) => {
                            return self.fail(out, 500, "InternalError", &no_protobuf(&name))
                        }
                    };
                    // taken before the write: the daemon may read the event before this
                    // thread runs again
                    let at = Instant::now();
                    out.chunk(&bytes)?;
                    let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
                    s.sent.entry(e.rv).or_insert(at);
                    drop(s);
                    cv.notify_all();
                }
            }
            if let Some(rv) = bm {
                last_bookmark = Instant::now();
                last = last.max(rv);
                out.chunk(&self.bookmark(rv, false))?;
            }
            let mute = dead || m.lock().unwrap_or_else(|e| e.into_inner()).silent_watches;
            if start.elapsed() >= self.timeout && !mute {
                return out.end_stream();
            }
        }
    }
}

fn no_protobuf(name: &str) -> String {
    format!("{name} has no protobuf encoding")
}
