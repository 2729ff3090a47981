//! A client of the API-server double's own (no code of the proxy's decoder,
//! `kube-proto`): raw HTTP/1.1 over a TCP stream (from a chosen loopback address), the
//! chunking and the watch's 4-byte big-endian length framing undone by hand, messages
//! decoded by `k8s-pb` with `prost`.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use integration::ApiServer;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use k8s_pb::apimachinery::pkg::runtime as prt;
use prost::Message;
use serde_json::Value;

pub const WAIT: Duration = Duration::from_secs(10);

pub fn addr(server: &ApiServer) -> SocketAddr {
    server.url()["http://".len()..].parse().expect("an address")
}

/// A connection from `from` (a loopback address of its own, a client of its own).
pub fn connect(to: SocketAddr, from: Option<IpAddr>) -> TcpStream {
    let Some(from) = from else {
        return TcpStream::connect(to).expect("connect");
    };
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::new(from, 0).into())
        .expect("bind the client address");
    s.connect(&to.into()).expect("connect");
    s.into()
}

pub fn request(conn: &mut TcpStream, path: &str, accept: Option<&str>) {
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: double\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("send");
}

/// A whole response.
pub struct Response {
    pub code: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    /// Every byte read off the connection.
    pub wire: usize,
}

pub fn get_from(
    server: &ApiServer,
    from: Option<IpAddr>,
    path: &str,
    accept: Option<&str>,
) -> Response {
    let mut conn = connect(addr(server), from);
    conn.set_read_timeout(Some(WAIT)).expect("timeout");
    request(&mut conn, path, accept);
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).expect("read the response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers")
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut body = raw[end..].to_vec();
    if header(&head, "transfer-encoding").as_deref() == Some("chunked") {
        let mut d = Dechunker {
            raw: body,
            ..Dechunker::default()
        };
        d.step();
        assert!(d.ended, "a chunked body without its last chunk");
        body = d.payload;
    }
    Response {
        code: head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code"),
        content_type: header(&head, "content-type").unwrap_or_default(),
        body,
        wire: raw.len(),
    }
}

pub fn get(server: &ApiServer, path: &str, accept: Option<&str>) -> Response {
    get_from(server, None, path, accept)
}

pub fn header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Undoes HTTP/1.1 chunking as bytes arrive.
#[derive(Default)]
pub struct Dechunker {
    pub raw: Vec<u8>,
    pub payload: Vec<u8>,
    /// Payload bytes taken out of chunks so far.
    pub taken: usize,
    pub ended: bool,
}

impl Dechunker {
    /// Move every whole chunk of `raw` to `payload`.
    pub fn step(&mut self) {
        while !self.ended {
            let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size = std::str::from_utf8(&self.raw[..eol]).expect("a chunk size");
            let n = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
            if self.raw.len() < eol + 2 + n + 2 {
                return;
            }
            self.payload
                .extend_from_slice(&self.raw[eol + 2..eol + 2 + n]);
            self.taken += n;
            assert_eq!(
                &self.raw[eol + 2 + n..eol + 4 + n],
                b"\r\n",
                "a chunk's end"
            );
            self.raw.drain(..eol + 4 + n);
            self.ended = n == 0;
        }
    }
}

/// A watch being read.
pub struct Watch {
    pub conn: TcpStream,
    pub content_type: String,
    pub d: Dechunker,
    /// Every byte read off the connection.
    pub wire: usize,
    /// Whether the connection was closed (after the last chunk or without it).
    pub closed: bool,
}

impl Watch {
    pub fn open_from(
        server: &ApiServer,
        from: Option<IpAddr>,
        path: &str,
        accept: Option<&str>,
    ) -> Watch {
        let mut conn = connect(addr(server), from);
        conn.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        request(&mut conn, path, accept);
        let mut w = Watch {
            conn,
            content_type: String::new(),
            d: Dechunker::default(),
            wire: 0,
            closed: false,
        };
        let deadline = Instant::now() + WAIT;
        let end = loop {
            if let Some(p) = w.d.raw.windows(4).position(|x| x == b"\r\n\r\n") {
                break p + 4;
            }
            assert!(Instant::now() < deadline && !w.closed, "no watch headers");
            w.fill();
        };
        let head = String::from_utf8_lossy(&w.d.raw[..end]).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        w.content_type = header(&head, "content-type").unwrap_or_default();
        w.d.raw.drain(..end);
        w
    }

    pub fn open(server: &ApiServer, path: &str, accept: Option<&str>) -> Watch {
        Watch::open_from(server, None, path, accept)
    }

    pub fn read_some(&mut self) {
        self.fill();
        self.d.step();
    }

    /// Whatever the connection has (up to 50 ms).
    pub fn fill(&mut self) {
        let mut buf = [0u8; 65536];
        match self.conn.read(&mut buf) {
            Ok(0) => self.closed = true,
            Ok(n) => {
                self.wire += n;
                self.d.raw.extend_from_slice(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => self.closed = true,
        }
    }

    /// The next protobuf frame: a WatchEvent after its 4-byte big-endian length; None
    /// when the stream ended or nothing came within `timeout`.
    pub fn frame(&mut self, timeout: Duration) -> Option<pmeta::WatchEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let p = &self.d.payload;
            if p.len() >= 4 {
                let n = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize;
                if p.len() >= 4 + n {
                    let e = pmeta::WatchEvent::decode(&p[4..4 + n]).expect("a WatchEvent");
                    self.d.payload.drain(..4 + n);
                    return Some(e);
                }
            }
            if self.d.ended || self.closed || Instant::now() >= deadline {
                return None;
            }
            self.read_some();
        }
    }

    /// The next JSON event (one line).
    pub fn line(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(nl) = self.d.payload.iter().position(|b| *b == b'\n') {
                let v = serde_json::from_slice(&self.d.payload[..nl]).expect("a JSON event");
                self.d.payload.drain(..=nl);
                return Some(v);
            }
            if self.d.ended || self.closed || Instant::now() >= deadline {
                return None;
            }
            self.read_some();
        }
    }

    /// Read until the connection closes; whether the stream ended with its last chunk.
    pub fn until_closed(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        while !self.closed && Instant::now() < deadline {
            self.read_some();
        }
        assert!(self.closed, "the watch never closed");
        self.d.ended
    }
}

/// `k8s\0` + runtime.Unknown.
pub fn unknown(b: &[u8]) -> prt::Unknown {
    assert_eq!(&b[..4], b"k8s\0", "the protobuf magic");
    prt::Unknown::decode(&b[4..]).expect("a runtime.Unknown")
}

pub fn type_of(u: &prt::Unknown) -> (String, String) {
    let t = u.type_meta.clone().unwrap_or_default();
    (
        t.api_version.unwrap_or_default(),
        t.kind.unwrap_or_default(),
    )
}

pub fn raw(u: &prt::Unknown) -> &[u8] {
    u.raw.as_deref().unwrap_or_default()
}

/// The event's type and its object's envelope.
pub fn event(e: &pmeta::WatchEvent) -> (String, prt::Unknown) {
    let object = e
        .object
        .as_ref()
        .and_then(|o| o.raw.as_deref())
        .expect("an object");
    (e.r#type.clone().unwrap_or_default(), unknown(object))
}

pub fn status(u: &prt::Unknown) -> pmeta::Status {
    assert_eq!(type_of(u), ("v1".into(), "Status".into()));
    pmeta::Status::decode(raw(u)).expect("a Status")
}

pub fn meta_of(m: &Option<pmeta::ObjectMeta>) -> (String, String, String) {
    let m = m.clone().unwrap_or_default();
    (
        m.namespace.unwrap_or_default(),
        m.name.unwrap_or_default(),
        m.resource_version.unwrap_or_default(),
    )
}
