//! The double's HTTP/1.1: reading a request, negotiating the response's encoding from
//! its `Accept` (as the API server does), and writing responses while counting what
//! each client receives.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, Mutex};

use crate::proto;

/// A request as the double reads it.
pub(crate) struct Request {
    /// The request line, trimmed (`GET /api/v1/services?watch=true HTTP/1.1`).
    pub line: String,
    pub post: bool,
    pub path: String,
    /// The query's parameters, percent-decoded.
    pub query: BTreeMap<String, String>,
    /// The `Accept` header's value, if any.
    pub accept: Option<String>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

/// Read one request: its line, its headers (`Content-Length` and `Accept` are kept),
/// its body.
pub(crate) fn read_request(conn: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut content_length = 0usize;
    let mut accept = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("accept") {
                accept = Some(v.trim().to_string());
            }
        }
    }
    let mut body = vec![0u8; content_length];
    if content_length > 0 {
        reader.read_exact(&mut body)?;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut q = BTreeMap::new();
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        q.insert(pct_decode(k), pct_decode(v));
    }
    Ok(Request {
        post: line.starts_with("POST "),
        path: path.to_string(),
        query: q,
        accept,
        body,
        line: line.trim().to_string(),
    })
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match h {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The encoding of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    /// The response's `Content-Type`: a JSON watch is `application/json` (the API
    /// server adds `;stream=watch` to every other encoding only).
    pub fn content_type(self, watch: bool) -> &'static str {
        match (self, watch) {
            (Encoding::Json, _) => "application/json",
            (Encoding::Protobuf, false) => proto::CONTENT_TYPE,
            (Encoding::Protobuf, true) => proto::WATCH_CONTENT_TYPE,
        }
    }
}

/// The encoding the API server answers `accept` with, serving JSON and (unless
/// `json_only`) protobuf, in that order: the `Accept` clauses by quality (then the
/// more specific first, as goautoneg sorts them), the first clause that names a served
/// type wins (`*/*` and `application/*` name JSON, the server's first type); a
/// `stream` parameter other than `watch` disqualifies a clause. No header, or no clause
/// that names a served type: JSON.
pub(crate) fn negotiate(accept: Option<&str>, json_only: bool) -> Encoding {
    let offers: &[(Encoding, &str)] = if json_only {
        &[(Encoding::Json, "application/json")]
    } else {
        &[
            (Encoding::Json, "application/json"),
            (Encoding::Protobuf, proto::CONTENT_TYPE),
        ]
    };
    let mut clauses: Vec<(f32, bool, bool, &str, &str)> = Vec::new();
    for clause in accept.unwrap_or("").split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let range = parts.next().unwrap_or("");
        let Some((ty, sub)) = range.split_once('/') else {
            continue;
        };
        let mut q = 1.0f32;
        let mut ok = true;
        for p in parts {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match k.trim() {
                "q" => q = v.trim().parse().unwrap_or(1.0),
                "stream" => ok &= matches!(v.trim(), "" | "watch"),
                _ => {}
            }
        }
        if ok {
            clauses.push((q, ty == "*", sub == "*", ty, sub));
        }
    }
    // stable: equal clauses keep the client's order
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    for (_, _, _, ty, sub) in clauses {
        for (enc, media) in offers {
            let (oty, osub) = media.split_once('/').unwrap_or((media, ""));
            if (ty == oty && (sub == osub || sub == "*")) || (ty == "*" && sub == "*") {
                return *enc;
            }
        }
    }
    Encoding::Json
}

/// What a client received: responses (each request answered counts once, when its
/// headers are written) and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    /// The bytes of the response bodies: what a client's decoder reads (a watch's chunk
    /// payloads: its JSON lines or its protobuf frames).
    pub body_bytes: u64,
    /// Every byte written: status lines, headers, chunk framing and bodies.
    pub wire_bytes: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.body_bytes += o.body_bytes;
        self.wire_bytes += o.wire_bytes;
    }
}

/// What the double answered, per client (its address, as it connected) and the
/// response's `Content-Type`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    pub by_client: BTreeMap<(IpAddr, String), Counts>,
}

impl Traffic {
    /// Everything.
    pub fn total(&self) -> Counts {
        self.sum(|_, _| true)
    }
    /// Of one client, every content type.
    pub fn of_client(&self, ip: IpAddr) -> Counts {
        self.sum(|i, _| *i == ip)
    }
    /// Of one content type, every client.
    pub fn of_content_type(&self, content_type: &str) -> Counts {
        self.sum(|_, c| c == content_type)
    }
    /// Of one client and one content type.
    pub fn get(&self, ip: IpAddr, content_type: &str) -> Counts {
        self.sum(|i, c| *i == ip && c == content_type)
    }
    fn sum(&self, keep: impl Fn(&IpAddr, &str) -> bool) -> Counts {
        let mut total = Counts::default();
        for ((ip, ct), c) in &self.by_client {
            if keep(ip, ct) {
                total.add(c);
            }
        }
        total
    }
}

/// The traffic counters, shared by every connection.
#[derive(Clone, Default)]
pub(crate) struct Meter(Arc<Mutex<Traffic>>);

impl Meter {
    pub fn snapshot(&self) -> Traffic {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn count(&self, ip: IpAddr, content_type: &str, c: Counts) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match t.by_client.get_mut(&(ip, content_type.to_string())) {
            Some(n) => n.add(&c),
            None => {
                t.by_client.insert((ip, content_type.to_string()), c);
            }
        }
    }
}

/// A connection's response side: every write is counted for the peer.
pub(crate) struct Out {
    pub conn: TcpStream,
    peer: IpAddr,
    meter: Meter,
    content_type: &'static str,
}

impl Out {
    pub fn new(conn: TcpStream, meter: Meter) -> std::io::Result<Out> {
        let peer = conn.peer_addr()?.ip();
        Ok(Out {
            conn,
            peer,
            meter,
            content_type: "",
        })
    }

    /// The client's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    fn write(&mut self, bytes: &[u8], body: usize, requests: u64) -> std::io::Result<()> {
        // counted before the write: a client may read the bytes and look at the counts
        // before this thread runs again
        self.meter.count(
            self.peer,
            self.content_type,
            Counts {
                requests,
                body_bytes: body as u64,
                wire_bytes: bytes.len() as u64,
            },
        );
        // one write: the piece leaves in one segment (no Nagle wait between its parts)
        self.conn.write_all(bytes)?;
        self.conn.flush()
    }

    /// A whole response.
    pub fn respond(
        &mut self,
        code: u16,
        content_type: &'static str,
        body: &[u8],
    ) -> std::io::Result<()> {
        self.content_type = content_type;
        let mut all = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            reason(code),
            body.len()
        )
        .into_bytes();
        all.extend_from_slice(body);
        self.write(&all, body.len(), 1)
    }

    /// The headers of a chunked 200 response (a watch).
    pub fn start_stream(&mut self, content_type: &'static str) -> std::io::Result<()> {
        self.content_type = content_type;
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        self.write(head.as_bytes(), 0, 1)
    }

    /// One chunk of a stream.
    pub fn chunk(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let mut all = format!("{:x}\r\n", payload.len()).into_bytes();
        all.extend_from_slice(payload);
        all.extend_from_slice(b"\r\n");
        self.write(&all, payload.len(), 0)
    }

    /// The last chunk: the stream ends cleanly.
    pub fn end_stream(&mut self) -> std::io::Result<()> {
        self.write(b"0\r\n\r\n", 0, 0)
    }

    /// Drop the connection abruptly (no last chunk).
    pub fn abort(&mut self) {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        404 => "Not Found",
        410 => "Gone",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_negotiate_as_the_api_server() {
        let pb = Encoding::Protobuf;
        let js = Encoding::Json;
        for (accept, want) in [
            // client-go with contentType protobuf
            (Some("application/vnd.kubernetes.protobuf, */*"), pb),
            (Some("application/vnd.kubernetes.protobuf"), pb),
            (Some("application/vnd.kubernetes.protobuf;stream=watch"), pb),
            (
                Some("application/json, application/vnd.kubernetes.protobuf"),
                js,
            ),
            (Some("*/*, application/vnd.kubernetes.protobuf"), pb), // the specific first
            (
                Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
                pb,
            ),
            (
                Some("application/vnd.kubernetes.protobuf;stream=other, */*"),
                js,
            ),
            (Some("application/*"), js),
            (Some("text/html"), js),
            (Some("*/*"), js),
            (Some(""), js),
            (None, js),
        ] {
            assert_eq!(negotiate(accept, false), want, "Accept: {accept:?}");
        }
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), true),
            js
        );
    }
}
