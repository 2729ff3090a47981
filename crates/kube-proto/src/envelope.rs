//! The envelope of a protobuf object of the Kubernetes API: the 4 bytes `k8s\0`, then a
//! `runtime.Unknown` whose field 1 is the `TypeMeta` (apiVersion, kind) and field 2 the
//! object's own message (apimachinery's protobuf serializer). Borrowed: the object's
//! bytes are a slice of the input, never copied.

use prost::Message;

use crate::messages::TypeMeta;
use crate::wire::{self, Value};
use crate::{Error, FromProto};

/// The magic every enveloped object starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// An enveloped object, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown<'a> {
    pub api_version: String,
    pub kind: String,
    /// The object's message (without envelope).
    pub raw: &'a [u8],
}

/// Open an enveloped object (all of `bytes`).
pub fn open(bytes: &[u8]) -> Result<Unknown<'_>, Error> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let mut out = Unknown {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
    };
    for field in wire::Fields::new(rest) {
        match field? {
            (1, Value::Len(b)) => {
                let t = TypeMeta::decode(b).map_err(|e| Error::wire("Unknown.typeMeta", e))?;
                out.api_version = t.api_version.unwrap_or_default();
                out.kind = t.kind.unwrap_or_default();
            }
            (2, Value::Len(b)) => out.raw = b,
            _ => {}
        }
    }
    Ok(out)
}

/// Check that an opened envelope holds a `K`.
pub fn expect<K: FromProto>(u: &Unknown<'_>) -> Result<(), Error> {
    expect_kind(u, K::API_VERSION, K::KIND)
}

pub(crate) fn expect_kind(
    u: &Unknown<'_>,
    api_version: &str,
    kind: &'static str,
) -> Result<(), Error> {
    if u.kind == kind && u.api_version == api_version {
        Ok(())
    } else {
        Err(Error::WrongKind {
            want: kind,
            api_version: u.api_version.clone(),
            kind: u.kind.clone(),
        })
    }
}

/// A whole enveloped `K` (a GET of one object, a watch event's object).
pub fn object<K: FromProto>(bytes: &[u8]) -> Result<(K, Option<String>), Error> {
    let u = open(bytes)?;
    expect::<K>(&u)?;
    K::from_message(u.raw)
}

/// An enveloped `meta.v1.Status`: the body of a refused request (410 Expired, 403, ...)
/// in protobuf. Its kind is not checked, as a watch's ERROR event's is not.
pub fn status(bytes: &[u8]) -> Result<crate::messages::Status, Error> {
    let u = open(bytes)?;
    crate::messages::Status::decode(u.raw).map_err(|e| Error::wire("Status", e))
}
