//! Kubernetes objects (Service, EndpointSlice, Node, ServiceCIDR) converted into kube-nlproxy's
//! internal, validated model.
//!
//! This is the only crate (besides the daemon) that knows the `k8s-openapi` types. Every
//! conversion validates its input: a malformed object yields an [`ObjectError`] naming the
//! object and the reason, and is skipped; it never blocks other objects and never panics.
//! Sub-parts that upstream kube-proxy tolerates (one bad external IP, one bad source range,
//! one bad endpoint address) are skipped with a warning (also an [`ObjectError`]) while the
//! rest of the object is used.
//!
//! Manifests (JSON or YAML text) are read by the one parser in [`manifest`].
//!
//! Pure code: no I/O, no clock, no threads.

mod cluster;
mod convert;
mod ip;
pub mod lean;
pub mod manifest;
mod model;
mod service_cidrs;
mod trigger;

pub use cluster::*;
pub use convert::{LABEL_HEADLESS, LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME, LABEL_ZONE};
pub use ip::{merge_ranges, outermost, parse_cidr_sloppy, parse_ip_sloppy, Cidr, NotACidr};
pub use model::*;
pub use service_cidrs::{service_cidrs_from_k8s, CidrsUpdate, ServiceCidrs};
pub use trigger::{last_change_trigger_time, ANNOTATION_LAST_CHANGE_TRIGGER_TIME};

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The namespace of a namespaced object that names none (or names ""), as Kubernetes
/// fills it in (kubectl's default context namespace; the API server always sets one).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Namespace and name of a namespaced object, the namespace defaulted to
/// [`DEFAULT_NAMESPACE`]. The one place that decides an object's identity: sources,
/// engine, conversion and tools all key objects with it.
pub fn ns_key(meta: &ObjectMeta) -> ServiceKey {
    ServiceKey::new(
        meta.namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(DEFAULT_NAMESPACE),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// Kind of an object, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    EndpointSlice,
    Node,
    ServiceCidr,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "service",
            Kind::EndpointSlice => "endpointslice",
            Kind::Node => "node",
            Kind::ServiceCidr => "servicecidr",
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
pub enum ObjectError {
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
}

impl ObjectError {
    /// The object this error is about.
    pub fn object(&self) -> &ObjectRef {
        match self {
            ObjectError::BadIp { object, .. }
            | ObjectError::BadCidr { object, .. }
            | ObjectError::BadPort { object, .. }
            | ObjectError::UnknownProtocol { object, .. }
            | ObjectError::DuplicatePortName { object, .. }
            | ObjectError::WrongFamily { object, .. }
            | ObjectError::MissingService { object, .. }
            | ObjectError::Invalid { object, .. } => object,
        }
    }
}
