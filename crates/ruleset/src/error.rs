//! The compiler's one error type, below every file that returns it (re-exported as
//! [`crate::RulesetError`]).

/// Errors of the compiler: a bad configuration (fatal), or a problem with one object
/// (that object, or the part named, is skipped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesetError {
    #[error("config: {field} {value:?}: {reason}")]
    Config {
        field: String,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Model(#[from] kube_model::ObjectError),
    #[error(transparent)]
    Manifest(#[from] kube_model::manifest::ManifestError),
    #[error("service {service} port {port:?}: {what} is already used by service {other}; skipped")]
    Conflict {
        service: String,
        port: String,
        other: String,
        what: String,
    },
    #[error("service {service} port {port:?}: {endpoints} endpoints are more than a list can hold; skipped")]
    Capacity {
        service: String,
        port: String,
        endpoints: usize,
    },
}
