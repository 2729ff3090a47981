//! The model as nft text: what `nft list table` (nftables 1.0.6) prints for the same
//! objects, and nft commands performing [`Op`]s.
//!
//! Rules are "delinearized" the way nft does it: the renderer follows which symbolic
//! expression (payload field, meta/ct key, numgen, fib, constant, map result) every
//! register holds, joins loads into consecutive registers into concatenations, and
//! prints comparisons, lookups and statements with values formatted by data type.
//!
//! nft quirks reproduced here (all checked against nft 1.0.6):
//! - `meta l4proto tcp` followed by a `th` payload load is printed as `tcp dport`, the
//!   `meta l4proto` match disappearing as an implied dependency; likewise before
//!   `reject with tcp reset`.
//! - `flags` lists `constant,interval,dynamic,timeout` in that order; a set whose only flag
//!   is `timeout` and that has a default timeout prints no `flags` line.
//! - A dynamic set that a rule updates (`dynset`) is listed with `size 65535` when it
//!   was created without a size: the kernel fills that in.
//! - An element's timeout is listed only when it differs from the set's default timeout.
//! - Priorities are printed as `raw`, `mangle`, `dstnat` (prerouting only), `filter`,
//!   `security`, `srcnat` (postrouting only), with an offset of at most 10
//!   (`filter + 10`), otherwise as numbers.
//! - Chain comments come before the `type ... hook ...` line.
//! - `dnat` prints its family (`dnat ip to`) only when address and port both come from a
//!   map lookup (`dnat ip to ip daddr . tcp dport map @m`).
//! - `reject` alone is ICMP port unreachable (ICMPv6 port unreachable in ip6, ICMPX port
//!   unreachable for icmpx).
//! - NAT flags print as `random,fully-random,persistent`.
//! - Protocol numbers print as the names in the Debian `/etc/protocols` nft reads them from.
//!
//! Keys of type [`DataType::HostInt32`] (a `numgen` result) have no `type` spelling nft
//! accepts (`type integer` is refused as unqualified), so such sets are declared with
//! `typeof`, the key written as [`NUMGEN_TYPEOF`] (see there).
//!
//! Files: [`table`] (tables, chains, sets, elements), [`text`] (values, verdicts,
//! durations), [`ops`] (nft commands), `rule` and `statements` (rules delinearized),
//! `format` (register contents by kind).

mod format;
mod ops;
mod rule;
mod statements;
mod table;
mod text;

pub use ops::{op, op_with, script, script_with};
pub use rule::rule;
pub use table::{priority, table};
pub use text::{duration, value, verdict};

/// The `typeof` expression a [`DataType::HostInt32`] key (or data) field is declared and
/// listed with: `typeof numgen random mod 65536 : verdict`.
///
/// The model does not know the modulus of the rules using such a map, and the modulus in a
/// `typeof` only affects how nft prints the set, so one fixed spelling is used for all of
/// them. For `nft list` to print it, the set's userdata must carry nft's typeof TLV next to
/// the byte order TLVs. What nft 1.0.6 itself sends for `typeof numgen random mod 2 : verdict`
/// (TLV = type byte, length byte, value; integers in host byte order):
/// `00 04 01000000` (key byte order: host), `01 04 00000000` (data byte order),
/// `03 1a { 00 04 17000000 (expression: numgen), 01 12 { 00 04 01000000 (random),
/// 01 04 02000000 (modulus), 02 04 00000000 (offset) } }` (key typeof), then the data typeof
/// (`04 ...`) for the verdict. Here the modulus is 65536 (`00000100`).
pub const NUMGEN_TYPEOF: &str = "numgen random mod 65536";

/// The modulus in [`NUMGEN_TYPEOF`].
pub const NUMGEN_TYPEOF_MODULUS: u32 = 65536;

/// The size the kernel gives a dynamic set without one when a `dynset` expression binds it.
pub const DYNSET_DEFAULT_SIZE: u32 = 65535;

#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod test_util;
