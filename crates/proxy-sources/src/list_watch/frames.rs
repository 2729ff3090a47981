//! A watch response's bytes to events, whichever wire they came on: protobuf frames
//! through `kube-proto`'s [`WatchReader`], or JSON lines.

use kube::core::{Status, WatchEvent as JsonEvent};
use kube::Resource;
use kube_model::lean::Decode;
use kube_proto::{FromProto, WatchEvent, WatchReader};

use super::{ListWatchError, MAX_JSON_LINE};
use crate::lenient::Lenient;

/// How a watch response is read.
pub(super) enum Frames<K> {
    Protobuf(WatchReader<K>),
    /// JSON lines: the bytes of the line not yet ended.
    Json(Vec<u8>),
}

impl<K: FromProto> Frames<K> {
    pub(super) fn of(answer: super::Answer) -> Frames<K> {
        match answer {
            super::Answer::Protobuf => Frames::Protobuf(WatchReader::new()),
            super::Answer::Json => Frames::Json(Vec::new()),
        }
    }
}

/// A watch event, whichever wire it came on (the object inline, as in `watcher::Event`).
#[allow(clippy::large_enum_variant)]
pub(super) enum Decoded<K> {
    Object {
        deleted: bool,
        object: Lenient<K>,
    },
    /// Its resourceVersion; whether it ends a watch's initial events
    /// (`k8s.io/initial-events-end`).
    Bookmark(Option<String>, bool),
    Error(Box<Status>),
}

/// Feed a watch's bytes to its reader: the events they complete.
pub(super) fn frames_fed<K>(
    frames: &mut Frames<K>,
    chunk: &[u8],
    path: &str,
) -> Result<Vec<Decoded<K>>, ListWatchError>
where
    K: FromProto + Resource<DynamicType = ()> + Decode + Clone,
{
    match frames {
        Frames::Protobuf(r) => {
            let events = r.feed(chunk).map_err(|source| ListWatchError::Protobuf {
                path: path.to_string(),
                source,
            })?;
            Ok(events
                .into_iter()
                .map(|e| match e {
                    WatchEvent::Object { deleted, object } => Decoded::Object {
                        deleted,
                        object: Lenient::from_proto(object),
                    },
                    WatchEvent::Bookmark {
                        resource_version,
                        initial_events_end,
                    } => Decoded::Bookmark(resource_version, initial_events_end),
                    WatchEvent::Error {
                        code,
                        reason,
                        message,
                    } => Decoded::Error(
                        Status {
                            code: code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
                            message: message.unwrap_or_default(),
                            reason: reason.unwrap_or_default(),
                            ..Status::failure("", "")
                        }
                        .boxed(),
                    ),
                })
                .collect())
        }
        Frames::Json(line) => {
            let mut out = Vec::new();
            for piece in chunk.split_inclusive(|b| *b == b'\n') {
                line.extend_from_slice(piece);
                if !line.ends_with(b"\n") {
                    if line.len() > MAX_JSON_LINE {
                        return Err(ListWatchError::LineTooLong {
                            path: path.to_string(),
                            max: MAX_JSON_LINE,
                        });
                    }
                    continue;
                }
                let text = std::mem::take(line);
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let ev =
                    serde_json::from_slice::<JsonEvent<Lenient<K>>>(&text).map_err(|source| {
                        ListWatchError::Json {
                            path: path.to_string(),
                            source,
                        }
                    })?;
                out.push(match ev {
                    JsonEvent::Added(o) | JsonEvent::Modified(o) => Decoded::Object {
                        deleted: false,
                        object: o,
                    },
                    JsonEvent::Deleted(o) => Decoded::Object {
                        deleted: true,
                        object: o,
                    },
                    JsonEvent::Bookmark(b) => {
                        let end = b
                            .metadata
                            .annotations
                            .get(kube_proto::stream::INITIAL_EVENTS_END)
                            == Some(&"true".to_string());
                        Decoded::Bookmark(Some(b.metadata.resource_version), end)
                    }
                    JsonEvent::Error(s) => Decoded::Error(s),
                });
            }
            Ok(out)
        }
    }
}
