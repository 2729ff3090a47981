//! Test support for the fuzzer (docs/fuzzing.md), never linked by product crates.
//!
//! - [`gen`]: random *legal* clusters (Services, EndpointSlices, the Node) as the API
//!   server's validation defines them, from a seed ([`rng::Rng`], splitmix64).
//!   Some addresses in legacy texts the API server still serves (leading zeros,
//!   IPv4-mapped, non-canonical IPv6, host bits in ranges); [`generate_large`]: thousands
//!   of services in one case.
//! - [`ip`]: addresses and ranges read as kube-proxy reads them (the model's own
//!   `ParseIPSloppy`/`ParseCIDRSloppy`).
//! - [`changes`]: random change sequences over a generated cluster.
//! - [`model`]: an independent reference of kube-proxy's verdict (nftables or iptables
//!   mode, in the case's environment, [`gen::Env`]) for the
//!   first packet of a connection, written from upstream's proxier, endpoint slice cache
//!   and topology code. It reads the Kubernetes objects itself and shares no code with
//!   `kube-model` or `ruleset`.
//! - [`packets`]: the packets to ask about: every service IP and port, unused ports,
//!   NodePorts, sources inside and outside source ranges, from a pod, the node, outside.
//! - [`cleanup`]: which UDP conntrack entries upstream deletes at a sync (1.32+ stale
//!   endpoints, 1.20's 0 -> N rule for not-NATed entries) and the conntrack table a node
//!   holds before it.
//!
//! Addresses only from 198.18.0.0/15 and 2001:db8::/32.

pub mod changes;
pub mod cleanup;
pub mod gen;
pub mod ip;
pub mod model;
pub mod packets;
pub mod rng;

pub use cleanup::{
    cleanup_required, flows, newly_active, unnated_deletes, upstream_deletes, CleanupModel, CtFlow,
    MapEndpoint, Origin as FlowOrigin, PortRef, Reason, Rule, UdpServicePort,
};
pub use gen::{
    generate, generate_in, generate_large, generate_varied, Case, DetectLocal, Env, Mode,
};
pub use model::{Model, Verdict};
pub use packets::{Origin, Probe};
pub use rng::Rng;
