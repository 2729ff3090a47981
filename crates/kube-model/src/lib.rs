//! Kubernetes objects (Service, EndpointSlice, Node) converted into kube-nlproxy's
//! internal, validated model.
//!
//! This is the only crate (besides the daemon) that knows the `k8s-openapi` types. Every
//! conversion validates its input: a malformed object yields a [`ModelError`] naming the
//! object and the reason, and is skipped; it never blocks other objects and never panics.
//! Sub-parts that upstream kube-proxy tolerates (one bad external IP, one bad source range,
//! one bad endpoint address) are skipped with a warning (also a [`ModelError`]) while the
//! rest of the object is used.
//!
//! Pure code: no I/O, no clock, no threads.

mod cluster;
mod convert;
mod ip;
pub mod manifest;
mod model;
mod trigger;

pub use cluster::*;
pub use convert::{LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, LABEL_ZONE};
pub use ip::{parse_cidr_sloppy, parse_ip_sloppy, Cidr};
pub use model::*;
pub use trigger::{last_change_trigger_time, ANNOTATION_LAST_CHANGE_TRIGGER_TIME};

use std::fmt;

/// Kind of an object, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    EndpointSlice,
    Node,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "service",
            Kind::EndpointSlice => "endpointslice",
            Kind::Node => "node",
        }
    }
}

/// Names one object: `service default/web`, `node worker-1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind.name(), self.name)
        } else {
            write!(f, "{} {}/{}", self.kind.name(), self.namespace, self.name)
        }
    }
}

/// Why an object (or a part of it) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("{object}: bad ip address {value:?} in {field}")]
    BadIp {
        object: ObjectRef,
        field: &'static str,
        value: String,
    },
    #[error("{object}: bad cidr {value:?} in {field}")]
    BadCidr {
        object: ObjectRef,
        field: &'static str,
        value: String,
    },
    #[error("{object}: bad port {value} in {field}")]
    BadPort {
        object: ObjectRef,
        field: String,
        value: i64,
    },
    #[error("{object}: unknown protocol {value:?} in {field}")]
    UnknownProtocol {
        object: ObjectRef,
        field: String,
        value: String,
    },
    #[error("{object}: duplicate port name {port:?}")]
    DuplicatePortName { object: ObjectRef, port: String },
    #[error("{object}: address {value} in {field} is not of family {family}")]
    WrongFamily {
        object: ObjectRef,
        field: &'static str,
        value: String,
        family: IpFamily,
    },
    #[error("{object}: refers to service {service} which does not exist")]
    MissingService { object: ObjectRef, service: String },
    #[error("{object}: {reason}")]
    Invalid { object: ObjectRef, reason: String },
    #[error("manifest document {index}: {reason}")]
    Manifest { index: usize, reason: String },
}

impl ModelError {
    /// The object this error is about, when there is one.
    pub fn object(&self) -> Option<&ObjectRef> {
        match self {
            ModelError::BadIp { object, .. }
            | ModelError::BadCidr { object, .. }
            | ModelError::BadPort { object, .. }
            | ModelError::UnknownProtocol { object, .. }
            | ModelError::DuplicatePortName { object, .. }
            | ModelError::WrongFamily { object, .. }
            | ModelError::MissingService { object, .. }
            | ModelError::Invalid { object, .. } => Some(object),
            ModelError::Manifest { .. } => None,
        }
    }
}
