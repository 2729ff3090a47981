//! Helpers shared by the renderer's unit tests.

use std::net::Ipv4Addr;

use super::rule;
use crate::expr::*;
use crate::object::*;
use crate::value::*;

pub fn v4(a: u8, b: u8, c: u8, d: u8) -> Value {
    Value::Ipv4(Ipv4Addr::new(a, b, c, d))
}

pub fn rule_of(family: Family, parts: Vec<Vec<Expr>>) -> String {
    rule(family, &Rule::new(parts.into_iter().flatten().collect()))
}

pub fn verdict_expr(v: Verdict) -> Vec<Expr> {
    vec![Expr::Verdict(v)]
}

pub fn sample_set() -> Set {
    let mut s = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    );
    s.elements = vec![
        Element::map(
            vec![v4(198, 18, 0, 1), Value::Proto(6), Value::Port(80)],
            ElemData::Verdict(Verdict::Goto("svc".into())),
        )
        .with_comment("web"),
        Element::map(
            vec![v4(198, 18, 0, 2), Value::Proto(132), Value::Port(9)],
            ElemData::Verdict(Verdict::Accept),
        ),
    ];
    s
}
