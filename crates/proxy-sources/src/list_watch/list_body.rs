//! A list response's body read as it arrives, whichever wire it came on: protobuf
//! through `kube-proto`'s [`ListReader`], JSON through the [`Scanner`] of `json_list`,
//! each item decoded alone (JSON: by the lean decoder, [`Lenient::from_json`]) and handed
//! on as soon as its last byte arrived.

use kube::Resource;
use kube_model::lean::Decode;
use kube_proto::{FromProto, ListItem, ListReader};
use serde::Deserialize;

use super::json_list::{JsonListError, Part, Scanner};
use super::{Answer, ListWatchError};
use crate::lenient::Lenient;

/// What a list body yields, in order.
#[allow(clippy::large_enum_variant)]
pub(super) enum Listed<K> {
    /// The list's metadata (JSON: wherever it comes in the object).
    Meta {
        resource_version: Option<String>,
        r#continue: Option<String>,
    },
    /// One item, or why it does not decode, named (the others still do).
    Object(Lenient<K>),
}

/// How a list response is read.
pub(super) enum ListBody<K> {
    Protobuf(ListReader<K>),
    Json(Scanner),
}

/// A JSON list's `metadata`, as far as it is read.
#[derive(Deserialize)]
struct JsonListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    r#continue: Option<String>,
}

/// What stops a JSON list: the body is no list, or a part of it no JSON.
enum Stop {
    List(JsonListError),
    Json(serde_json::Error),
}

impl From<JsonListError> for Stop {
    fn from(e: JsonListError) -> Stop {
        Stop::List(e)
    }
}

impl<K> ListBody<K>
where
    K: FromProto + Resource<DynamicType = ()> + Decode,
{
    pub(super) fn of(answer: Answer) -> ListBody<K> {
        match answer {
            Answer::Protobuf => ListBody::Protobuf(ListReader::new()),
            Answer::Json => ListBody::Json(Scanner::default()),
        }
    }

    /// Take the body's next bytes: what they completed, in order.
    pub(super) fn feed(
        &mut self,
        chunk: &[u8],
        path: &str,
    ) -> Result<Vec<Listed<K>>, ListWatchError> {
        match self {
            ListBody::Protobuf(reader) => {
                let items = reader
                    .feed(chunk)
                    .map_err(|source| ListWatchError::Protobuf {
                        path: path.to_string(),
                        source,
                    })?;
                Ok(items
                    .into_iter()
                    .map(|item| match item {
                        ListItem::Meta {
                            resource_version,
                            r#continue,
                        } => Listed::Meta {
                            resource_version,
                            r#continue,
                        },
                        ListItem::Object(o) => Listed::Object(Lenient::from_proto(o)),
                    })
                    .collect())
            }
            ListBody::Json(scanner) => {
                let mut out = Vec::new();
                scanner
                    .feed(chunk, |part| {
                        out.push(match part {
                            Part::Item(text) => {
                                Listed::Object(Lenient::from_json(text).map_err(Stop::Json)?)
                            }
                            Part::Meta(text) => {
                                let m: JsonListMeta =
                                    serde_json::from_slice(text).map_err(Stop::Json)?;
                                Listed::Meta {
                                    resource_version: m.resource_version,
                                    r#continue: m.r#continue,
                                }
                            }
                        });
                        Ok::<(), Stop>(())
                    })
                    .map_err(|stop| match stop {
                        Stop::List(source) => ListWatchError::JsonList {
                            path: path.to_string(),
                            source,
                        },
                        Stop::Json(source) => ListWatchError::Json {
                            path: path.to_string(),
                            source,
                        },
                    })?;
                Ok(out)
            }
        }
    }

    /// The body ended: it must have ended with the list.
    pub(super) fn finish(&self, path: &str) -> Result<(), ListWatchError> {
        match self {
            ListBody::Protobuf(reader) => {
                reader.finish().map_err(|source| ListWatchError::Protobuf {
                    path: path.to_string(),
                    source,
                })
            }
            ListBody::Json(scanner) => {
                scanner.finish().map_err(|source| ListWatchError::JsonList {
                    path: path.to_string(),
                    source,
                })
            }
        }
    }
}
