//! Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`), decoded
//! straight into the lean `k8s-openapi` objects the rest of kube-nlproxy reads (the same
//! objects `kube_model::lean` decodes from JSON), one object at a time. Pure: bytes in,
//! objects out; the API client feeds it what it reads.
//!
//! - [`envelope`]: the `k8s\0` magic and the `runtime.Unknown` wrapper every protobuf
//!   object of the API carries.
//! - [`messages`]: the objects as protobuf messages of only the fields we read (prost
//!   skips the others without building them: no `managedFields`, no status we ignore);
//!   field numbers from upstream's `generated.proto` (checked against `k8s-pb`'s full
//!   types in `tests/`).
//! - [`stream`]: a list response and a watch stream read as they arrive: a list's items
//!   are handed out one by one, never the whole list in memory; watch events are
//!   upstream's length-delimited frames.
//!
//! Why prost messages of our own rather than `k8s-pb`'s: docs/decisions/0011.

pub mod convert;
pub mod envelope;
pub mod messages;
pub mod stream;
mod wire;

pub use convert::FromProto;
pub use stream::{Invalid, ListItem, ListReader, WatchEvent, WatchReader};

/// What does not decode, naming the part of the wire that is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("not a Kubernetes protobuf object: the body does not start with k8s\\0")]
    NoMagic,
    #[error("protobuf: {what}: {msg}")]
    Wire { what: &'static str, msg: String },
    #[error("expected {want}, got apiVersion {api_version:?} kind {kind:?}")]
    WrongKind {
        want: &'static str,
        api_version: String,
        kind: String,
    },
    #[error("{what}: {msg}")]
    Field { what: &'static str, msg: String },
    #[error("a frame of {len} bytes is over the limit of {max}")]
    FrameTooLarge { len: usize, max: usize },
}

impl Error {
    fn wire(what: &'static str, e: impl std::fmt::Display) -> Error {
        Error::Wire {
            what,
            msg: e.to_string(),
        }
    }
}
