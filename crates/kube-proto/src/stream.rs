//! A list response and a watch stream, read as their bytes arrive.
//!
//! - [`ListReader`]: an enveloped `XList` (`k8s\0`, `runtime.Unknown` {typeMeta, raw =
//!   the list message {metadata, items...}}). Only the envelope's header is read before
//!   the list's fields; each item is decoded as soon as its last byte arrived and its
//!   bytes dropped, so at most one item (and one network read) is buffered.
//! - [`WatchReader`]: a watch stream as the API server writes it in protobuf: frames of a
//!   4-byte big-endian length and a `meta.v1.WatchEvent` without envelope (apimachinery's
//!   raw serializer and length-delimited framer), whose object is an enveloped object.

use prost::Message;

use crate::envelope::{self, expect_kind, Unknown, MAGIC};
use crate::messages::{self as pb, ListMeta, TypeMeta};
use crate::wire::{self, Value};
use crate::{Error, FromProto};

/// The largest item, list header or watch frame accepted (a hostile or broken length
/// fails the read instead of waiting for gigabytes).
pub const MAX_ITEM: usize = 64 << 20;

/// What a list response yields, in order.
#[derive(Debug)]
pub enum ListItem<K> {
    /// The list's metadata (its resourceVersion, and `continue` of a page).
    Meta {
        resource_version: Option<String>,
        r#continue: Option<String>,
    },
    /// One item, or why it does not decode (the others still do).
    Object(Result<(K, Option<String>), Box<Invalid>>),
}

/// An object that does not decode: who it is (as far as its metadata decodes), and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{error}")]
pub struct Invalid {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub resource_version: Option<String>,
    pub error: Error,
}

impl Invalid {
    /// `error` about the object whose message is `raw` (named from its metadata, which
    /// is read alone: a broken field elsewhere does not hide the name).
    fn of(raw: &[u8], error: Error) -> Box<Invalid> {
        let m = MetaOnly::decode(raw)
            .ok()
            .and_then(|m| m.metadata)
            .unwrap_or_default();
        Box::new(Invalid {
            namespace: m.namespace,
            name: m.name,
            resource_version: m.resource_version,
            error,
        })
    }
}

/// `K` from its message, or what does not decode, named.
fn item<K: FromProto>(raw: &[u8]) -> Result<(K, Option<String>), Box<Invalid>> {
    K::from_message(raw).map_err(|e| Invalid::of(raw, e))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the magic.
    Magic,
    /// Among the envelope's fields.
    Envelope,
    /// Inside the list message (field 2 of the envelope), with this many bytes left.
    List(usize),
}

/// A list response of `K`s, fed as it arrives.
pub struct ListReader<K> {
    buf: Vec<u8>,
    at: At,
    typed: bool,
    items: usize,
    _k: std::marker::PhantomData<K>,
}

impl<K: FromProto> Default for ListReader<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: FromProto> ListReader<K> {
    pub fn new() -> ListReader<K> {
        ListReader {
            buf: Vec::new(),
            at: At::Magic,
            typed: false,
            items: 0,
            _k: std::marker::PhantomData,
        }
    }

    /// The items read so far.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Take the next bytes of the body; what they completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<ListItem<K>>, Error> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut pos = 0;
        let r = self.parse(&mut pos, &mut out);
        self.buf.drain(..pos);
        r.map(|()| out)
    }

    /// The body ended: it must have ended between fields, with the list read.
    pub fn finish(&self) -> Result<(), Error> {
        if !self.buf.is_empty() || self.at != At::Envelope || !self.typed {
            return Err(Error::wire(K::LIST_KIND, "the body ended inside the list"));
        }
        Ok(())
    }

    fn parse(&mut self, pos: &mut usize, out: &mut Vec<ListItem<K>>) -> Result<(), Error> {
        loop {
            let b = &self.buf[*pos..];
            match self.at {
                At::Magic => {
                    if b.len() < MAGIC.len() {
                        return Ok(());
                    }
                    if &b[..MAGIC.len()] != MAGIC {
                        return Err(Error::NoMagic);
                    }
                    *pos += MAGIC.len();
                    self.at = At::Envelope;
                }
                At::Envelope => {
                    // The list (field 2) is entered after its header alone.
                    if let wire::Header::Len {
                        number: 2,
                        len,
                        header,
                    } = wire::len_header(b)?
                    {
                        if !self.typed {
                            return Err(Error::wire(K::LIST_KIND, "the list before its typeMeta"));
                        }
                        *pos += header;
                        self.at = At::List(usize::try_from(len).unwrap_or(usize::MAX));
                        continue;
                    }
                    let Some((n, v, len)) = wire::field(b, MAX_ITEM)? else {
                        return Ok(());
                    };
                    if let (1, Value::Len(t)) = (n, v) {
                        let t =
                            TypeMeta::decode(t).map_err(|e| Error::wire("Unknown.typeMeta", e))?;
                        let u = Unknown {
                            api_version: t.api_version.unwrap_or_default(),
                            kind: t.kind.unwrap_or_default(),
                            raw: &[],
                        };
                        expect_kind(&u, K::API_VERSION, K::LIST_KIND)?;
                        self.typed = true;
                    }
                    *pos += len;
                }
                At::List(0) => self.at = At::Envelope,
                At::List(left) => {
                    let b = &b[..b.len().min(left)];
                    let Some((n, v, len)) = wire::field(b, MAX_ITEM)? else {
                        if b.len() == left {
                            return Err(Error::wire(K::LIST_KIND, "a field runs past the list"));
                        }
                        return Ok(());
                    };
                    match (n, v) {
                        (1, Value::Len(m)) => {
                            let m = ListMeta::decode(m).map_err(|e| Error::wire("ListMeta", e))?;
                            out.push(ListItem::Meta {
                                resource_version: m.resource_version,
                                r#continue: m.r#continue,
                            });
                        }
                        (2, Value::Len(item)) => {
                            self.items += 1;
                            out.push(ListItem::Object(self::item(item)));
                        }
                        _ => {}
                    }
                    *pos += len;
                    self.at = At::List(left - len);
                }
            }
        }
    }
}

/// One event of a watch.
#[derive(Debug)]
pub enum WatchEvent<K> {
    /// ADDED or MODIFIED (`deleted` false), DELETED (true): the object, or why it does
    /// not decode.
    Object {
        deleted: bool,
        object: Result<(K, Option<String>), Box<Invalid>>,
    },
    /// BOOKMARK: a resourceVersion, and whether it ends a streaming list's initial
    /// events (annotation `k8s.io/initial-events-end: "true"`).
    Bookmark {
        resource_version: Option<String>,
        initial_events_end: bool,
    },
    /// ERROR: the Status (e.g. 410 Expired).
    Error {
        code: Option<i32>,
        reason: Option<String>,
        message: Option<String>,
    },
}

/// The annotation that marks the end of a streaming list's initial events (KEP-3157).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Any object's metadata (field 1 of every kind read).
#[derive(Clone, PartialEq, prost::Message)]
struct MetaOnly {
    #[prost(message, optional, tag = "1")]
    metadata: Option<pb::ObjectMeta>,
}

/// A watch stream of `K`s, fed as it arrives.
pub struct WatchReader<K> {
    buf: Vec<u8>,
    _k: std::marker::PhantomData<K>,
}

impl<K: FromProto> Default for WatchReader<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: FromProto> WatchReader<K> {
    pub fn new() -> WatchReader<K> {
        WatchReader {
            buf: Vec::new(),
            _k: std::marker::PhantomData,
        }
    }

    /// Bytes received and not yet a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Take the next bytes of the stream; the events they completed. A frame that is not
    /// a watch event fails the stream (it cannot be resynchronised); an object that does
    /// not decode is an event with its error.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<WatchEvent<K>>, Error> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut pos = 0;
        let r = loop {
            let b = &self.buf[pos..];
            if b.len() < 4 {
                break Ok(());
            }
            let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if len > MAX_ITEM {
                break Err(Error::FrameTooLarge { len, max: MAX_ITEM });
            }
            if b.len() < 4 + len {
                break Ok(());
            }
            match event::<K>(&b[4..4 + len]) {
                Ok(e) => out.push(e),
                Err(e) => break Err(e),
            }
            pos += 4 + len;
        };
        self.buf.drain(..pos);
        r.map(|()| out)
    }
}

fn event<K: FromProto>(frame: &[u8]) -> Result<WatchEvent<K>, Error> {
    let e = pb::WatchEvent::decode(frame).map_err(|e| Error::wire("WatchEvent", e))?;
    let raw = e.object.and_then(|o| o.raw).unwrap_or_default();
    let u = envelope::open(&raw)?;
    let kind = e.r#type.unwrap_or_default();
    match kind.as_str() {
        "ADDED" | "MODIFIED" | "DELETED" => {
            let object = envelope::expect::<K>(&u)
                .map_err(|e| Invalid::of(u.raw, e))
                .and_then(|()| item(u.raw));
            Ok(WatchEvent::Object {
                deleted: kind == "DELETED",
                object,
            })
        }
        "BOOKMARK" => {
            envelope::expect::<K>(&u)?;
            let m = MetaOnly::decode(u.raw)
                .map_err(|e| Error::wire("BOOKMARK metadata", e))?
                .metadata
                .unwrap_or_default();
            Ok(WatchEvent::Bookmark {
                initial_events_end: m.annotations.get(INITIAL_EVENTS_END).map(String::as_str)
                    == Some("true"),
                resource_version: m.resource_version,
            })
        }
        "ERROR" => {
            let s = pb::Status::decode(u.raw).map_err(|e| Error::wire("Status", e))?;
            Ok(WatchEvent::Error {
                code: s.code,
                reason: s.reason,
                message: s.message,
            })
        }
        other => Err(Error::wire(
            "WatchEvent.type",
            format!("unknown type {other:?}"),
        )),
    }
}
