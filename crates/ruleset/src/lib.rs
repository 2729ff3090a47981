//! kube-nlproxy's ruleset compiler.
//!
//! - [`compile`]: the internal cluster model ([`kube_model::Cluster`]) and the node's
//!   [`Config`] to one [`nft_model::Table`] per family (`ip kube-nlproxy`, `ip6 kube-nlproxy`).
//! - [`diff`]: the last committed table and the desired one to the minimal batch of
//!   [`nft_model::Op`]s; [`apply`] plays a batch onto a table the way the kernel would.
//! - [`incremental`]: the same compilation kept up to date change by change, with the
//!   batch of each change computed from what changed only.
//! - [`trace`]: a packet tracer over the compiled tables.
//!
//! Pure code: no I/O, no clock, no threads. The shape of the ruleset and its reasons are
//! in docs/ruleset.md.

pub mod apply;
pub mod compile;
pub mod config;
pub mod diff;
pub mod error;
pub mod explain;
pub mod fixture;
pub mod incremental;
pub mod names;
pub mod rules;
pub mod trace;

pub use apply::{apply, ApplyError};
pub use compile::mirror::Conflict;
pub use compile::nft_family;
pub use config::{Config, DetectLocalMode, NodePortAddrs, ParsedConfig, Proxier};
pub use diff::{diff, diff_packed_into, diff_tables, diff_tables_into};
pub use error::RulesetError;
pub use explain::{explain, Explanation};
pub use incremental::{
    compile, compile_parsed, Build, Changes, Compiled, Compiler, PortTargets, Served, UdpDest,
    Update,
};
pub use trace::{trace, Packet, Trace};
