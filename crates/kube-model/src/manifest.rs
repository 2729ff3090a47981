//! The one manifest parser: JSON or multi-document YAML text (as `kubectl get -o json|yaml`
//! prints it, or as fixtures hold it) into entries, one per document or `kind: List` item.
//!
//! - A text whose first character (after white space and a byte-order mark) is `{` or `[`
//!   is JSON, as kubectl decides: parsed with `serde_json` into borrowed slices of the
//!   text (`RawValue`), never into `Value` trees; several concatenated JSON objects are
//!   several documents; a top-level array holds documents. Such a text that is not JSON
//!   but has `---` lines is read as YAML (JSON documents separated by `---` are YAML).
//! - Anything else is YAML (`serde-saphyr`, see docs/decisions/0017): each document is
//!   turned into JSON text on the fly (as kubectl turns YAML into JSON before decoding), so
//!   YAML and JSON objects decode the same way, with the same errors.
//!
//! A text that is not JSON/YAML is one [`ManifestError::Syntax`] (nothing of it is used).
//! Inside a syntactically good text, each entry is named (document, list item, kind,
//! namespace/name) and decoded on demand ([`Entry::decode`], [`Entry::object`]): an entry
//! that does not decode is an error of its own and never hides the others.
//!
//! Work is linear in the text: YAML budgets grow with the input, aliases stay capped.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use serde::de::{DeserializeOwned, Error as _, IgnoredAny, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::{lean, ServiceKey, DEFAULT_NAMESPACE};

/// The syntax a text was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Yaml => "YAML",
        })
    }
}

/// Where an entry is: its document (from 0) and, inside a `kind: List`, its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub document: usize,
    pub item: Option<usize>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.item {
            None => write!(f, "document {}", self.document),
            Some(i) => write!(f, "document {} item {i}", self.document),
        }
    }
}

/// What is wrong with a manifest text or one of its entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The text is not JSON/YAML (from this document on): nothing of it is used.
    #[error("document {document}: not {format}: {reason}")]
    Syntax {
        document: usize,
        format: Format,
        reason: String,
    },
    /// A document or list item that is not an object with a readable `kind`.
    #[error("{place}: not a Kubernetes object: {reason}")]
    NotObject { place: Place, reason: String },
    /// An object that does not decode as the kind it declares.
    #[error("{place}: {kind} {}: {reason}", who(.namespace.as_deref(), .name))]
    Decode {
        place: Place,
        kind: String,
        namespace: Option<String>,
        name: String,
        reason: String,
    },
}

fn who(namespace: Option<&str>, name: &str) -> String {
    let name = if name.is_empty() { "(no name)" } else { name };
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// One object of a manifest: a document, or an item of a `kind: List` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    pub place: Place,
    pub kind: String,
    pub api_version: String,
    /// `metadata.namespace` as written (None when absent or empty).
    pub namespace: Option<String>,
    /// `metadata.name` ("" when absent or not a string).
    pub name: String,
    /// The object as JSON text.
    pub raw: &'a str,
}

/// A decoded object of one of the kinds the proxy reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Service(Box<core::Service>),
    EndpointSlice(Box<discovery::EndpointSlice>),
    Node(Box<core::Node>),
    ServiceCidr(Box<networking::ServiceCIDR>),
}

impl Entry<'_> {
    /// The error naming this entry, with `reason`.
    pub fn error(&self, reason: impl Into<String>) -> ManifestError {
        ManifestError::Decode {
            place: self.place,
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Decode as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, ManifestError> {
        serde_json::from_str(self.raw).map_err(|e| self.error(e.to_string()))
    }

    /// Namespace and name, the namespace defaulted as Kubernetes does (see [`crate::ns_key`]).
    pub fn key(&self) -> ServiceKey {
        ServiceKey::new(
            self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
            self.name.clone(),
        )
    }

    /// Decode as one of the kinds the proxy reads, the way it reads them
    /// ([`crate::lean`]: Services and EndpointSlices only as far as they are used).
    pub fn decode_kind<T: lean::Decode>(&self) -> Result<T, ManifestError> {
        lean::from_str(self.raw).map_err(|e| self.error(e.to_string()))
    }

    /// Decode a Service, EndpointSlice, Node or ServiceCIDR (see [`Entry::decode_kind`]);
    /// `Ok(None)` for other kinds.
    pub fn object(&self) -> Result<Option<Object>, ManifestError> {
        Ok(Some(match self.kind.as_str() {
            "Service" => Object::Service(Box::new(self.decode_kind()?)),
            "EndpointSlice" => Object::EndpointSlice(Box::new(self.decode_kind()?)),
            "Node" => Object::Node(Box::new(self.decode_kind()?)),
            "ServiceCIDR" => Object::ServiceCidr(Box::new(self.decode_kind()?)),
            _ => return Ok(None),
        }))
    }
}

/// The documents of a text, each as JSON text (borrowed from a JSON input, converted from
/// a YAML one).
#[derive(Debug, Clone)]
pub struct Documents<'a> {
    pub format: Format,
    docs: Vec<Cow<'a, str>>,
    /// Each document's head, read in the pass that split a JSON text (a concatenation
    /// of objects, the usual shape): the entries are then named without reading the
    /// documents again. None where a document is not such an object (then its head is
    /// read on demand, with its error).
    heads: Vec<Option<Head<'a>>>,
}

/// Whether `text` is read as JSON (kubectl's rule: it starts with `{` or `[`).
pub fn format_of(text: &str) -> Format {
    match text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .as_bytes()
        .first()
    {
        Some(b'{' | b'[') => Format::Json,
        _ => Format::Yaml,
    }
}

/// Split `text` into documents, checking its syntax completely.
pub fn documents(text: &str) -> Result<Documents<'_>, ManifestError> {
    let text = text.trim_start_matches('\u{feff}');
    match format_of(text) {
        // JSON is YAML: a text that starts like JSON but is not, and has YAML document
        // separators (JSON documents between `---` lines), is read as YAML; if that fails
        // too, the JSON error is the one that explains it. (Broken JSON without `---`
        // lines is not parsed a second time.)
        Format::Json => json_documents(text).or_else(|e| {
            if text.starts_with("---") || text.contains("\n---") {
                yaml_documents(text).map_err(|_| e)
            } else {
                Err(e)
            }
        }),
        Format::Yaml => yaml_documents(text),
    }
}

fn json_documents(text: &str) -> Result<Documents<'_>, ManifestError> {
    json_objects(text).map_or_else(|| json_values(text), Ok)
}

/// A concatenation of JSON objects split in one pass that also reads each one's head
/// (for a `kind: List`, the slices of its items): None when the text is anything else
/// (a top-level array, another value, a syntax error), which [`json_values`] reads.
fn json_objects(text: &str) -> Option<Documents<'_>> {
    if text.trim_start().starts_with('[') {
        return None;
    }
    let mut docs = Vec::new();
    let mut heads = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Head<'_>>();
    let mut start = 0;
    while let Some(r) = stream.next() {
        let head = r.ok()?;
        let end = stream.byte_offset();
        let raw = text.get(start..end)?.trim_start();
        if !raw.starts_with('{') {
            return None;
        }
        docs.push(Cow::Borrowed(raw));
        heads.push(Some(head));
        start = end;
    }
    Some(Documents {
        format: Format::Json,
        docs,
        heads,
    })
}

fn json_values(text: &str) -> Result<Documents<'_>, ManifestError> {
    let mut docs = Vec::new();
    let stream = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
    for (document, r) in stream.enumerate() {
        let raw = r.map_err(|e| ManifestError::Syntax {
            document,
            format: Format::Json,
            reason: e.to_string(),
        })?;
        docs.push(Cow::Borrowed(raw.get()));
    }
    // A top-level array holds documents.
    if docs.len() == 1 && docs[0].starts_with('[') {
        let Cow::Borrowed(only) = docs[0] else {
            unreachable!("JSON documents are borrowed")
        };
        let items: Vec<&RawValue> =
            serde_json::from_str(only).map_err(|e| ManifestError::Syntax {
                document: 0,
                format: Format::Json,
                reason: e.to_string(),
            })?;
        docs = items.into_iter().map(|r| Cow::Borrowed(r.get())).collect();
    }
    let heads = vec![None; docs.len()];
    Ok(Documents {
        format: Format::Json,
        docs,
        heads,
    })
}

/// One YAML document turned into JSON text while it is parsed (no tree in between).
struct JsonText(String);

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = Vec::new();
        serde_transcode::transcode(d, &mut serde_json::Serializer::new(&mut out))
            .map_err(D::Error::custom)?;
        String::from_utf8(out)
            .map(JsonText)
            .map_err(D::Error::custom)
    }
}

fn yaml_options(len: usize) -> serde_saphyr::Options {
    // Limits that grow with the input (every event, node or scalar byte costs at least
    // one byte of text); aliases keep the crate's caps.
    let n = len.saturating_add(4096);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = None;
    budget.max_events = n;
    budget.max_nodes = n;
    budget.max_documents = n;
    budget.max_total_scalar_bytes = n;
    let mut o = serde_saphyr::Options::default();
    o.budget = Some(budget);
    // YAML 1.2's core schema: only true/false are booleans (`n`, `no`, `off` are strings).
    o.strict_booleans = true;
    o
}

fn yaml_documents(text: &str) -> Result<Documents<'_>, ManifestError> {
    let mut docs = Vec::new();
    let mut input = text.as_bytes();
    for r in serde_saphyr::read_with_options::<_, JsonText>(&mut input, yaml_options(text.len())) {
        let JsonText(json) = r.map_err(|e| ManifestError::Syntax {
            document: docs.len(),
            format: Format::Yaml,
            reason: e.to_string(),
        })?;
        if json != "null" {
            docs.push(Cow::Owned(json));
        }
    }
    let heads = vec![None; docs.len()];
    Ok(Documents {
        format: Format::Yaml,
        docs,
        heads,
    })
}

/// `kind`, `apiVersion`, `metadata` and `items` of an object, the rest skipped.
#[derive(Deserialize, Debug, Clone)]
struct Head<'a> {
    #[serde(default, deserialize_with = "lenient_str")]
    kind: Option<String>,
    #[serde(default, rename = "apiVersion", deserialize_with = "lenient_str")]
    api_version: Option<String>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    items: Option<Items<'a>>,
}

/// `items`: the elements' texts when it is an array (read in the same pass as the
/// head), else nothing (a List whose items are not an array is read again for the
/// error).
#[derive(Debug, Clone)]
enum Items<'a> {
    Array(Vec<&'a RawValue>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Items<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Items<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Items::Other)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(r) = a.next_element::<&'a RawValue>()? {
                    v.push(r);
                }
                Ok(Items::Array(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Items::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The `items` of a List as written (for the error when they are not an array).
#[derive(Deserialize)]
struct RawItems<'a> {
    #[serde(default, borrow)]
    items: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default, deserialize_with = "lenient_str")]
    name: Option<String>,
    #[serde(default, deserialize_with = "lenient_str")]
    namespace: Option<String>,
}

/// A string, or None for any other JSON value (which is skipped).
fn lenient_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

fn entry<'a>(place: Place, raw: &'a str) -> Result<(Entry<'a>, Option<Items<'a>>), ManifestError> {
    let head: Head<'a> = serde_json::from_str(raw).map_err(|e| ManifestError::NotObject {
        place,
        reason: e.to_string(),
    })?;
    entry_of(place, raw, head)
}

/// An entry and its object read in one pass ([`lean::one_pass`]): a Service or an
/// EndpointSlice that [`entry`] and then [`Entry::object`] read the same way, without
/// error. None otherwise.
fn decoded_entry(place: Place, raw: &str) -> Option<(Entry<'_>, Object)> {
    let one = lean::one_pass(raw)?;
    let meta: HeadMeta = one
        .metadata
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .unwrap_or_default();
    let (kind, object) = match one.object {
        lean::Known::Service(s) => (
            <core::Service as k8s_openapi::Resource>::KIND,
            Object::Service(s),
        ),
        lean::Known::Slice(s) => (
            <discovery::EndpointSlice as k8s_openapi::Resource>::KIND,
            Object::EndpointSlice(s),
        ),
    };
    let entry = Entry {
        place,
        kind: kind.to_string(),
        api_version: one.api_version.unwrap_or_default(),
        namespace: meta.namespace.filter(|n| !n.is_empty()),
        name: meta.name.unwrap_or_default(),
        raw,
    };
    Some((entry, object))
}

/// A list item as [`Documents::each_object`] gives it: in one pass when `decode` is set
/// and [`decoded_entry`] takes it, else named by its head (its object left to
/// [`Entry::object`]).
fn list_item(place: Place, raw: &str, decode: bool) -> Given<'_> {
    match decode.then(|| decoded_entry(place, raw)) {
        Some(Some((e, o))) => (Ok(e), Some(o)),
        _ => (entry(place, raw).map(|(e, _)| e), None),
    }
}

/// An entry (or why it cannot be named) and its object when it was decoded in the pass
/// that named it.
type Given<'a> = (Result<Entry<'a>, ManifestError>, Option<Object>);

fn entry_of<'a>(
    place: Place,
    raw: &'a str,
    head: Head<'a>,
) -> Result<(Entry<'a>, Option<Items<'a>>), ManifestError> {
    let meta: HeadMeta = head
        .metadata
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .unwrap_or_default();
    let kind = head.kind.unwrap_or_default();
    if kind.is_empty() {
        return Err(ManifestError::NotObject {
            place,
            reason: "no kind".into(),
        });
    }
    let items = if kind == "List" { head.items } else { None };
    Ok((
        Entry {
            place,
            kind,
            api_version: head.api_version.unwrap_or_default(),
            namespace: meta.namespace.filter(|n| !n.is_empty()),
            name: meta.name.unwrap_or_default(),
            raw,
        },
        items,
    ))
}

impl<'t> Documents<'t> {
    /// How many documents the text has (empty ones not counted).
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Every object, in order: documents, with the items of a `kind: List` in place of
    /// the list. An entry whose head cannot be read is an error in its place.
    pub fn entries(&self) -> Vec<Result<Entry<'_>, ManifestError>> {
        let mut out = Vec::new();
        self.each_entry(|e| {
            out.push(e);
            true
        });
        out
    }

    /// [`Documents::entries`] one at a time, each named when it is reached (a list's
    /// items one by one), until `f` returns false.
    pub fn each_entry<'s>(&'s self, mut f: impl FnMut(Result<Entry<'s>, ManifestError>) -> bool) {
        self.each_object(false, |e, _| f(e));
    }

    /// [`Documents::each_entry`], with the object of each list item decoded in the pass
    /// that names it when `decode` is set and the item is a Service or an EndpointSlice
    /// read the same way in one pass as by [`Entry::object`] (Some: what `object()`
    /// returns for it; None: call it).
    pub fn each_object<'s>(
        &'s self,
        decode: bool,
        mut f: impl FnMut(Result<Entry<'s>, ManifestError>, Option<Object>) -> bool,
    ) {
        let mut out = Out {
            f: &mut f,
            more: true,
        };
        for (document, doc) in self.docs.iter().enumerate() {
            if !out.more {
                return;
            }
            let place = Place {
                document,
                item: None,
            };
            let head = match self.heads.get(document) {
                Some(Some(h)) => entry_of(place, doc, h.clone()),
                _ => entry(place, doc),
            };
            match head {
                Err(e) => out.push(Err(e), None),
                Ok((list, Some(items))) => {
                    let items = match items {
                        Items::Array(v) => Ok(v),
                        // Not an array: the error as the items' own text gives it.
                        Items::Other => serde_json::from_str::<RawItems>(doc)
                            .ok()
                            .and_then(|r| r.items)
                            .map_or_else(
                                || serde_json::from_str::<Vec<&RawValue>>("null"),
                                |r| serde_json::from_str::<Vec<&RawValue>>(r.get()),
                            ),
                    };
                    match items {
                        Err(e) => out.push(Err(list.error(format!("items: {e}"))), None),
                        Ok(items) => {
                            for (i, raw) in items.into_iter().enumerate() {
                                if !out.more {
                                    return;
                                }
                                let place = Place {
                                    document,
                                    item: Some(i),
                                };
                                let (e, o) = list_item(place, raw.get(), decode);
                                out.push(e, o);
                            }
                        }
                    }
                }
                Ok((e, None)) => out.push(Ok(e), None),
            }
        }
    }
}

/// The receiver of [`Documents::each_entry`] and whether it wants more.
struct Out<'f, F> {
    f: &'f mut F,
    more: bool,
}

impl<F> Out<'_, F> {
    fn push<'s>(&mut self, e: Result<Entry<'s>, ManifestError>, o: Option<Object>)
    where
        F: FnMut(Result<Entry<'s>, ManifestError>, Option<Object>) -> bool,
    {
        if self.more {
            self.more = (self.f)(e, o);
        }
    }
}

/// The objects of a manifest by kind (the fixtures' and tools' view); documents of other
/// kinds are kept as JSON values, in order.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    pub services: Vec<core::Service>,
    pub slices: Vec<discovery::EndpointSlice>,
    pub nodes: Vec<core::Node>,
    pub service_cidrs: Vec<networking::ServiceCIDR>,
    /// Objects of other kinds (e.g. a proxier configuration), in order.
    pub other: Vec<serde_json::Value>,
}

impl Manifest {
    /// The first object of `kind` among the other kinds.
    pub fn other_of_kind(&self, kind: &str) -> Option<&serde_json::Value> {
        self.other.iter().find(|v| v["kind"] == kind)
    }
}

/// A text of at most one YAML or JSON document (a configuration file) as a JSON value,
/// read as manifests are (YAML 1.2's core schema, budgets that grow with the text):
/// `Null` for an empty text; more than one document is a syntax error.
pub fn single_document(text: &str) -> Result<serde_json::Value, ManifestError> {
    let docs = documents(text)?;
    match docs.docs.as_slice() {
        [] => Ok(serde_json::Value::Null),
        [one] => serde_json::from_str(one).map_err(|e| ManifestError::Syntax {
            document: 0,
            format: docs.format,
            reason: e.to_string(),
        }),
        [_, ..] => Err(ManifestError::Syntax {
            document: 1,
            format: docs.format,
            reason: "more than one document".into(),
        }),
    }
}

/// Parse a whole manifest strictly: the first problem (syntax, an unreadable entry, an
/// object that does not decode) is the error. For tools and fixtures; the daemon reads
/// [`documents`] entry by entry and skips what does not decode.
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let docs = documents(text)?;
    let mut m = Manifest::default();
    for e in docs.entries() {
        let e = e?;
        match e.object()? {
            Some(Object::Service(o)) => m.services.push(*o),
            Some(Object::EndpointSlice(o)) => m.slices.push(*o),
            Some(Object::Node(o)) => m.nodes.push(*o),
            Some(Object::ServiceCidr(o)) => m.service_cidrs.push(*o),
            None => m.other.push(e.decode()?),
        }
    }
    Ok(m)
}

mod stream;
pub use stream::{stream_list, Streamed};

#[cfg(test)]
mod tests;
