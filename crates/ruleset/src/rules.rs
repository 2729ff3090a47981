//! Values and keys the compiler uses with the expression builders of
//! [`nft_model::build`] (the one home of expression builders).

use kube_model::Cidr;
use nft_model::build::{self, KeyField};
use nft_model::*;

pub fn addr_type(family: Family) -> DataType {
    if family == Family::Ip6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    }
}

/// `ip saddr <cidr>` / `ip daddr <cidr>` (`neq`: `!=`).
pub fn cidr_match(family: Family, src: bool, cidr: &Cidr, neq: bool) -> Vec<Expr> {
    build::prefix_match(
        family,
        src,
        &Value::from(cidr.addr),
        u32::from(cidr.prefix),
        neq,
    )
}

/// `ip daddr . meta l4proto . th dport`
pub const DST_KEY: [KeyField; 3] = [KeyField::Daddr, KeyField::L4proto, KeyField::Dport];
/// `meta l4proto . th dport`
pub const PORT_KEY: [KeyField; 2] = [KeyField::L4proto, KeyField::Dport];
