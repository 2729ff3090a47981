//! Tables, chains, sets and elements as `nft list table` prints them.

use std::collections::HashSet;

use super::rule::rule;
use super::text::{duration, quote, value, verdict};
use super::{DYNSET_DEFAULT_SIZE, NUMGEN_TYPEOF};
use crate::expr::*;
use crate::object::*;
use crate::value::*;

/// The full `table <family> <name> { ... }` block as `nft list table` prints it.
pub fn table(t: &Table) -> String {
    let family = t.family;
    let mut out = format!("table {} {} {{\n", family.nft_name(), t.name);
    if let Some(c) = &t.comment {
        out.push_str(&format!("\tcomment {}\n", quote(c)));
    }
    let dynset_targets: HashSet<&str> = t
        .chains
        .iter()
        .flat_map(|c| c.rules.iter())
        .flat_map(|r| r.exprs.iter())
        .filter_map(|e| match e {
            Expr::Dynset { set, .. } => Some(set.as_str()),
            _ => None,
        })
        .collect();
    let mut blocks: Vec<String> = t
        .counters
        .iter()
        .map(|c| format!("\tcounter {c} {{\n\t\tpackets 0 bytes 0\n\t}}\n"))
        .collect();
    for s in &t.sets {
        let size = (s.flags.dynamic && dynset_targets.contains(s.name.as_str()))
            .then_some(DYNSET_DEFAULT_SIZE);
        let mut b = format!("\t{} {} {{\n", set_keyword(s), s.name);
        for line in set_lines(s, size, true) {
            b.push_str(&format!("\t\t{line}\n"));
        }
        b.push_str("\t}\n");
        blocks.push(b);
    }
    for c in &t.chains {
        let mut b = format!("\tchain {} {{\n", c.name);
        if let Some(cm) = &c.comment {
            b.push_str(&format!("\t\tcomment {}\n", quote(cm)));
        }
        if let Some(base) = &c.base {
            b.push_str(&format!("\t\t{}\n", base_hook(family, base)));
        }
        for r in &c.rules {
            b.push_str(&format!("\t\t{}\n", rule(family, r)));
        }
        b.push_str("\t}\n");
        blocks.push(b);
    }
    out.push_str(&blocks.join("\n"));
    out.push_str("}\n");
    out
}

pub(super) fn set_keyword(s: &Set) -> &'static str {
    if s.is_map() {
        "map"
    } else {
        "set"
    }
}

/// `type nat hook prerouting priority dstnat; policy accept;`
pub(super) fn base_hook(family: Family, b: &BaseHook) -> String {
    format!(
        "type {} hook {} priority {}; policy {};",
        b.chain_type.name(),
        b.hook.name(),
        priority(family, b.hook, b.priority),
        policy(b.policy)
    )
}

fn policy(p: Policy) -> &'static str {
    match p {
        Policy::Accept => "accept",
        Policy::Drop => "drop",
    }
}

/// A chain priority as nft prints it: a standard name (with an offset up to 10) where
/// the name is valid for the hook, a number otherwise.
pub fn priority(family: Family, hook: Hook, prio: i32) -> String {
    const STD: [(i32, &str); 6] = [
        (-300, "raw"),
        (-150, "mangle"),
        (-100, "dstnat"),
        (0, "filter"),
        (50, "security"),
        (100, "srcnat"),
    ];
    // the families we model (ip, ip6, inet) share the table
    let _ = family;
    for (p, name) in STD {
        let compatible = match name {
            "dstnat" => hook == Hook::Prerouting,
            "srcnat" => hook == Hook::Postrouting,
            _ => true,
        };
        let off = i64::from(prio) - i64::from(p);
        if compatible && off.abs() <= 10 {
            return match off {
                0 => name.to_string(),
                o if o > 0 => format!("{name} + {o}"),
                o => format!("{name} - {}", -o),
            };
        }
    }
    prio.to_string()
}

/// The declaration lines of a set (without the enclosing braces). `listing` selects the
/// element spelling of `nft list` (element timeouts equal to the set's default omitted);
/// `size` is the size listed when the set has none of its own (the kernel's default).
pub(super) fn set_lines(s: &Set, size: Option<u32>, listing: bool) -> Vec<String> {
    let mut lines = vec![set_type_line(s)];
    if let Some(n) = s.size.or(size) {
        lines.push(format!("size {n}"));
    }
    let f = s.flags;
    let mut flags = Vec::new();
    if f.constant {
        flags.push("constant");
    }
    if f.interval {
        flags.push("interval");
    }
    if f.dynamic {
        flags.push("dynamic");
    }
    if f.timeout {
        flags.push("timeout");
    }
    let timeout_only = !f.constant && !f.interval && !f.dynamic;
    let implied = timeout_only && s.timeout_ms.is_some();
    if !flags.is_empty() && !implied {
        lines.push(format!("flags {}", flags.join(",")));
    }
    if let Some(t) = s.timeout_ms {
        lines.push(format!("timeout {}", duration(t)));
    }
    if let Some(c) = &s.comment {
        lines.push(format!("comment {}", quote(c)));
    }
    if listing && !s.elements.is_empty() {
        let per_line = elements_per_line(&s.key);
        let mut text = String::from("elements = { ");
        for (i, e) in s.elements.iter().enumerate() {
            if i > 0 {
                text.push_str(if i % per_line == 0 {
                    ",\n\t\t\t     "
                } else {
                    ", "
                });
            }
            text.push_str(&element(s, e, true));
        }
        text.push_str(" }");
        lines.push(text);
    }
    lines
}

/// How many elements nft prints on one line: five integers, two IPv4 addresses, one of
/// anything else (IPv6 addresses, interface names, concatenations).
fn elements_per_line(key: &[DataType]) -> usize {
    match key {
        [DataType::InetService | DataType::InetProto | DataType::Mark | DataType::HostInt32] => 5,
        [DataType::Ipv4Addr] => 2,
        _ => 1,
    }
}

/// `type ipv4_addr . inet_service : verdict`, or `typeof ...` when a field has no `type`
/// spelling nft accepts (host-endian integers).
fn set_type_line(s: &Set) -> String {
    let needs_typeof = s.key.contains(&DataType::HostInt32)
        || matches!(&s.data, Some(SetData::Values(v)) if v.contains(&DataType::HostInt32));
    let spell = |types: &[DataType], saddr: bool| -> String {
        types
            .iter()
            .map(|t| {
                if needs_typeof {
                    typeof_expr(*t, saddr)
                } else {
                    t.nft_name()
                }
            })
            .collect::<Vec<_>>()
            .join(" . ")
    };
    let mut line = format!(
        "{} {}",
        if needs_typeof { "typeof" } else { "type" },
        spell(&s.key, s.saddr_key)
    );
    match &s.data {
        None => {}
        Some(SetData::Verdict) => line.push_str(" : verdict"),
        Some(SetData::Values(v)) => {
            line.push_str(" : ");
            line.push_str(&spell(v, false));
        }
    }
    line
}

/// The expression a field of this type is declared with in a `typeof` declaration
/// (`saddr`: addresses are the packet's source, [`Set::saddr_key`]).
fn typeof_expr(t: DataType, saddr: bool) -> &'static str {
    match t {
        DataType::Ipv4Addr if saddr => "ip saddr",
        DataType::Ipv6Addr if saddr => "ip6 saddr",
        DataType::Ipv4Addr => "ip daddr",
        DataType::Ipv6Addr => "ip6 daddr",
        DataType::InetProto => "meta l4proto",
        DataType::InetService => "th dport",
        DataType::Mark => "meta mark",
        DataType::HostInt32 => NUMGEN_TYPEOF,
        DataType::Ifname => "meta iifname",
    }
}

/// One element: `key [timeout T] [comment "c"] [: data]`.
pub(super) fn element(s: &Set, e: &Element, listing: bool) -> String {
    let mut out = element_key(e);
    if let Some(t) = e.timeout_ms() {
        if !listing || Some(t) != s.timeout_ms {
            out.push_str(&format!(" timeout {}", duration(t)));
        }
    }
    if let Some(c) = e.comment() {
        out.push_str(&format!(" comment {}", quote(c)));
    }
    if let Some(d) = &e.data {
        out.push_str(" : ");
        out.push_str(&elem_data(d));
    }
    out
}

/// The key of an element, with intervals as `a-b` or `prefix/len` per field.
pub(super) fn element_key(e: &Element) -> String {
    match e.key_end() {
        None => values(&e.key),
        Some(end) => {
            let fields: Vec<String> = e
                .key
                .iter()
                .enumerate()
                .map(|(i, start)| match end.get(i) {
                    Some(stop) => interval(start, stop),
                    None => value(start),
                })
                .collect();
            fields.join(" . ")
        }
    }
}

fn elem_data(d: &ElemData) -> String {
    match d {
        ElemData::Verdict(v) => verdict(v),
        ElemData::Values(v) => values(&v[..]),
    }
}

/// One field of an interval: a value, an address prefix or a range.
fn interval(start: &Value, end: &Value) -> String {
    if start == end {
        return value(start);
    }
    let prefix = |a: &[u8], b: &[u8]| -> Option<u32> {
        // a/len: a has zeros and b ones in the host bits
        let bits = a.len() * 8;
        let mut plen = bits;
        for i in (0..bits).rev() {
            let byte = i / 8;
            let mask = 0x80u8 >> (i % 8);
            let (x, y) = (a[byte] & mask != 0, b[byte] & mask != 0);
            if !x && y {
                plen = i;
            } else {
                break;
            }
        }
        let same = (0..plen).all(|i| (a[i / 8] ^ b[i / 8]) & (0x80u8 >> (i % 8)) == 0);
        (same && plen < bits).then_some(plen as u32)
    };
    match (start, end) {
        (Value::Ipv4(a), Value::Ipv4(b)) => match prefix(&a.octets(), &b.octets()) {
            Some(l) => format!("{a}/{l}"),
            None => format!("{a}-{b}"),
        },
        (Value::Ipv6(a), Value::Ipv6(b)) => match prefix(&a.octets(), &b.octets()) {
            Some(l) => format!("{a}/{l}"),
            None => format!("{a}-{b}"),
        },
        _ => format!("{}-{}", value(start), value(end)),
    }
}

fn values(v: &[Value]) -> String {
    v.iter().map(value).collect::<Vec<_>>().join(" . ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, KeyField};
    use crate::render::test_util::*;

    #[test]
    fn priorities() {
        assert_eq!(priority(Family::Ip, Hook::Prerouting, -100), "dstnat");
        assert_eq!(priority(Family::Ip, Hook::Output, -100), "-100");
        assert_eq!(priority(Family::Ip, Hook::Postrouting, 110), "srcnat + 10");
        assert_eq!(priority(Family::Ip, Hook::Postrouting, 111), "111");
        assert_eq!(priority(Family::Ip, Hook::Forward, -10), "filter - 10");
        assert_eq!(priority(Family::Ip, Hook::Input, -150), "mangle");
        assert_eq!(priority(Family::Ip, Hook::Input, -289), "-289");
        assert_eq!(priority(Family::Ip, Hook::Input, 55), "security + 5");
    }

    fn sample_set() -> Set {
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

    #[test]
    fn table_listing() {
        let mut t = Table::new(Family::Ip, "t").with_comment("c");
        t.sets.push(sample_set());
        let mut aff = Set::set("aff", vec![DataType::Ipv4Addr]);
        aff.flags = SetFlags {
            dynamic: true,
            timeout: true,
            ..SetFlags::default()
        };
        aff.timeout_ms = Some(3 * 3_600_000);
        t.sets.push(aff);
        let mut tm = Set::set("tm", vec![DataType::Ipv4Addr]).with_comment("x");
        tm.flags.timeout = true;
        tm.timeout_ms = Some(60_000);
        tm.elements = vec![
            Element::key(vec![v4(198, 18, 0, 3)]).with_timeout_ms(10_000),
            Element::key(vec![v4(198, 18, 0, 4)]).with_timeout_ms(60_000),
            Element::key(vec![v4(198, 18, 0, 5)]),
        ];
        t.sets.push(tm);
        let base = BaseHook {
            chain_type: ChainType::Nat,
            hook: Hook::Prerouting,
            priority: -100,
            policy: Policy::Accept,
        };
        t.chains.push(
            Chain::base("pre", base)
                .with_comment("entry")
                .with_rules(vec![Rule::new(build::set_update(
                    Family::Ip,
                    &[KeyField::Saddr],
                    "aff",
                ))]),
        );
        t.chains.push(Chain::regular("svc"));
        let want = "table ip t {\n\tcomment \"c\"\n\tmap service-ips {\n\
             \t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\
             \t\telements = { 198.18.0.1 . tcp . 80 comment \"web\" : goto svc,\n\
             \t\t\t     198.18.0.2 . sctp . 9 : accept }\n\t}\n\n\
             \tset aff {\n\t\ttype ipv4_addr\n\t\tsize 65535\n\t\tflags dynamic,timeout\n\t\ttimeout 3h\n\t}\n\n\
             \tset tm {\n\t\ttype ipv4_addr\n\t\ttimeout 1m\n\t\tcomment \"x\"\n\
             \t\telements = { 198.18.0.3 timeout 10s, 198.18.0.4,\n\t\t\t     198.18.0.5 }\n\t}\n\n\
             \tchain pre {\n\t\tcomment \"entry\"\n\
             \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
             \t\tupdate @aff { ip saddr }\n\t}\n\n\
             \tchain svc {\n\t}\n}\n";
        assert_eq!(table(&t), want);
        assert_eq!(table(&Table::new(Family::Ip6, "e")), "table ip6 e {\n}\n");
    }

    #[test]
    fn set_declarations() {
        let mut ng = Set::map(
            "eps",
            vec![DataType::HostInt32],
            SetData::Values(vec![DataType::Ipv4Addr, DataType::InetService]),
        );
        ng.elements = vec![Element::map(
            vec![Value::Int(0)],
            ElemData::Values(vec![v4(198, 18, 2, 2), Value::Port(8080)]),
        )];
        assert_eq!(
            set_lines(&ng, None, true),
            [
                "typeof numgen random mod 65536 : ip daddr . th dport",
                "elements = { 0 : 198.18.2.2 . 8080 }"
            ]
        );
        let mut iv = Set::set("r", vec![DataType::Ipv4Addr, DataType::InetService]);
        iv.flags.interval = true;
        iv.elements = vec![Element::key(vec![v4(198, 18, 0, 0), Value::Port(1024)])
            .with_key_end(vec![v4(198, 18, 255, 255), Value::Port(2047)])];
        assert_eq!(
            set_lines(&iv, None, true),
            [
                "type ipv4_addr . inet_service",
                "flags interval",
                "elements = { 198.18.0.0/16 . 1024-2047 }"
            ]
        );
        let mut c = Set::set("c", vec![DataType::Ifname, DataType::Mark]);
        c.flags = SetFlags {
            constant: true,
            interval: true,
            ..SetFlags::default()
        };
        assert_eq!(
            set_lines(&c, None, true),
            ["type ifname . mark", "flags constant,interval"]
        );
        let mut t = Set::set("t", vec![DataType::Ipv6Addr]);
        t.flags.timeout = true;
        assert_eq!(
            set_lines(&t, None, true),
            ["type ipv6_addr", "flags timeout"]
        );
        assert_eq!(
            interval(&v4(198, 18, 0, 2), &v4(198, 18, 0, 5)),
            "198.18.0.2-198.18.0.5"
        );
        let a6 = |s: &str| Value::Ipv6(s.parse().unwrap());
        assert_eq!(
            interval(&a6("2001:db8::"), &a6("2001:db8::ffff")),
            "2001:db8::/112"
        );
    }
}
