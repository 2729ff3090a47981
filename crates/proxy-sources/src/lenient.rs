//! An object as it came from the API ([`Lenient`]), decoded one by one from a list's
//! item or a watch event, in protobuf or JSON: one that does not decode is kept with its
//! identity and why, so that it never fails its list or watch. Made by `list_watch`,
//! read by `kube_source`.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube_model::lean::Decode;
use serde::{Deserialize, Deserializer};

/// An object as it came from the API: its identity, and the object or why it does not
/// decode. Decoding never fails, so one bad object cannot fail a list or a watch.
#[derive(Debug, Clone)]
pub struct Lenient<K> {
    pub(crate) meta: ObjectMeta,
    pub(crate) decoded: Result<K, DecodeError>,
}

/// Why an object from the API does not decode.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Json(Arc<serde_json::Error>),
    #[error("{0}")]
    Protobuf(Arc<kube_proto::Error>),
}

impl<K> Lenient<K> {
    /// The object, or why it does not decode.
    pub fn object(&self) -> Result<&K, &DecodeError> {
        self.decoded.as_ref()
    }
}

impl<K: Resource> Lenient<K> {
    /// An object as `kube_proto` decoded it (its resourceVersion apart), or why it does
    /// not decode with who it is.
    pub(crate) fn from_proto(o: Result<(K, Option<String>), Box<kube_proto::Invalid>>) -> Self {
        match o {
            Ok((obj, resource_version)) => {
                let m = obj.meta();
                let meta = ObjectMeta {
                    name: m.name.clone(),
                    namespace: m.namespace.clone(),
                    resource_version,
                    ..ObjectMeta::default()
                };
                Lenient {
                    meta,
                    decoded: Ok(obj),
                }
            }
            Err(bad) => {
                let bad = *bad;
                Lenient {
                    meta: ObjectMeta {
                        name: bad.name,
                        namespace: bad.namespace,
                        resource_version: bad.resource_version,
                        ..ObjectMeta::default()
                    },
                    decoded: Err(DecodeError::Protobuf(Arc::new(bad.error))),
                }
            }
        }
    }
}

#[derive(Deserialize, Default)]
struct Head {
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl Head {
    fn meta(self) -> ObjectMeta {
        ObjectMeta {
            name: self.metadata.name,
            namespace: self.metadata.namespace,
            resource_version: self.metadata.resource_version,
            ..ObjectMeta::default()
        }
    }
}

impl<'de, K: Decode> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A watch event's object reaches us through serde's buffered content (the event
        // is an adjacently tagged enum), so the object is read as a JSON value first:
        // transient, one object at a time.
        let v = serde_json::Value::deserialize(d)?;
        let meta = Head::deserialize(&v).unwrap_or_default().meta();
        // Services and EndpointSlices only as far as they are read (kube_model::lean).
        let decoded = K::decode(v).map_err(|e| DecodeError::Json(Arc::new(e)));
        Ok(Lenient { meta, decoded })
    }
}

impl<K: Decode> Lenient<K> {
    /// An object from its JSON text alone (a list's item), read without building a JSON
    /// value: its metadata, then the object by the lean decoder. As [`Deserialize`] makes
    /// it, a type error is the object's (unnamed when it is in the metadata); text that
    /// is no JSON is an error.
    pub(crate) fn from_json(text: &[u8]) -> Result<Self, serde_json::Error> {
        let not_json = |e: &serde_json::Error| e.is_syntax() || e.is_eof();
        let head = match serde_json::from_slice::<Head>(text) {
            Ok(h) => h,
            Err(e) if not_json(&e) => return Err(e),
            Err(_) => Head::default(),
        };
        let mut de = serde_json::Deserializer::from_slice(text);
        let decoded = match K::decode(&mut de).and_then(|k| de.end().map(|()| k)) {
            Ok(k) => Ok(k),
            Err(e) if not_json(&e) => return Err(e),
            Err(e) => Err(DecodeError::Json(Arc::new(e))),
        };
        Ok(Lenient {
            meta: head.meta(),
            decoded,
        })
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;
    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}
