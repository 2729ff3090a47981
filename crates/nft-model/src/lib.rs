//! Typed model of the nftables objects kube-nlproxy programs.
//!
//! Everything here is plain data: no I/O, no clock. Expressions mirror the kernel's
//! expressions one to one (registers included), so that the wire layer encodes and
//! decodes them losslessly; [`build`] offers constructors for the patterns a
//! proxier needs, and [`render`] turns the model into the text `nft list` prints.

pub mod build;
pub mod expr;
pub mod object;
pub mod ops;
pub mod packed;
pub mod render;
pub mod value;

pub use expr::*;
pub use object::*;
pub use ops::*;
pub use packed::*;
pub use value::*;

/// Errors of the model crate (validation of objects before they are used).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("invalid name {name:?} for {what}: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },
    #[error("set {set}: element {index}: {reason}")]
    BadElement {
        set: String,
        index: usize,
        reason: String,
    },
    #[error("{from} refers to {to}, which does not exist")]
    Dangling { from: String, to: String },
    #[error("comment of {what}: {reason}")]
    BadComment { what: String, reason: &'static str },
}
