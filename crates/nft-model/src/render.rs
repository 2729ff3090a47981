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

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::expr::*;
use crate::object::*;
use crate::ops::*;
use crate::value::*;

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

// ---------------------------------------------------------------------------------------
// tables, chains, sets

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
    let mut blocks: Vec<String> = Vec::new();
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

fn set_keyword(s: &Set) -> &'static str {
    if s.is_map() {
        "map"
    } else {
        "set"
    }
}

/// `type nat hook prerouting priority dstnat; policy accept;`
fn base_hook(family: Family, b: &BaseHook) -> String {
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
/// element spelling of `nft list` (element timeouts equal to the set's default omitted).
fn set_lines(s: &Set, size: Option<u32>, listing: bool) -> Vec<String> {
    let mut lines = vec![set_type_line(s)];
    if let Some(n) = size {
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
    let spell = |types: &[DataType]| -> String {
        types
            .iter()
            .map(|t| {
                if needs_typeof {
                    typeof_expr(*t)
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
        spell(&s.key)
    );
    match &s.data {
        None => {}
        Some(SetData::Verdict) => line.push_str(" : verdict"),
        Some(SetData::Values(v)) => {
            line.push_str(" : ");
            line.push_str(&spell(v));
        }
    }
    line
}

/// The expression a field of this type is declared with in a `typeof` declaration.
fn typeof_expr(t: DataType) -> &'static str {
    match t {
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
fn element(s: &Set, e: &Element, listing: bool) -> String {
    let mut out = element_key(e);
    if let Some(t) = e.timeout_ms {
        if !listing || Some(t) != s.timeout_ms {
            out.push_str(&format!(" timeout {}", duration(t)));
        }
    }
    if let Some(c) = &e.comment {
        out.push_str(&format!(" comment {}", quote(c)));
    }
    if let Some(d) = &e.data {
        out.push_str(" : ");
        out.push_str(&elem_data(d));
    }
    out
}

/// The key of an element, with intervals as `a-b` or `prefix/len` per field.
fn element_key(e: &Element) -> String {
    match &e.key_end {
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

/// A typed value as nft prints it.
pub fn value(v: &Value) -> String {
    match v {
        Value::Ipv4(a) => a.to_string(),
        Value::Ipv6(a) => a.to_string(),
        Value::Proto(p) => proto_name(*p),
        Value::Port(p) => p.to_string(),
        Value::Mark(m) => format!("0x{m:08x}"),
        Value::Int(i) => i.to_string(),
        Value::Ifname(n) => quote(n),
    }
}

/// A verdict as nft prints it.
pub fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Return => "return".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
    }
}

/// A duration in nft's spelling: `3h`, `1m30s`, `1s500ms`, `1d`.
pub fn duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, name) in [
        (86_400_000u64, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
        (1, "ms"),
    ] {
        let n = rest / unit;
        rest %= unit;
        if n > 0 {
            out.push_str(&format!("{n}{name}"));
        }
    }
    out
}

/// A quoted string (comments, interface names). The model refuses quotes in comments.
fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

/// Protocol names as nft prints them (`getprotobynumber`, Debian's `/etc/protocols`).
fn proto_name(p: u8) -> String {
    let name = match p {
        0 => "ip",
        1 => "icmp",
        2 => "igmp",
        3 => "ggp",
        4 => "ipencap",
        5 => "st",
        6 => "tcp",
        8 => "egp",
        9 => "igp",
        12 => "pup",
        17 => "udp",
        20 => "hmp",
        22 => "xns-idp",
        27 => "rdp",
        29 => "iso-tp4",
        33 => "dccp",
        36 => "xtp",
        37 => "ddp",
        38 => "idpr-cmtp",
        41 => "ipv6",
        43 => "ipv6-route",
        44 => "ipv6-frag",
        45 => "idrp",
        46 => "rsvp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        57 => "skip",
        58 => "ipv6-icmp",
        59 => "ipv6-nonxt",
        60 => "ipv6-opts",
        73 => "rspf",
        81 => "vmtp",
        88 => "eigrp",
        89 => "ospf",
        93 => "ax.25",
        94 => "ipip",
        97 => "etherip",
        98 => "encap",
        103 => "pim",
        108 => "ipcomp",
        112 => "vrrp",
        115 => "l2tp",
        124 => "isis",
        132 => "sctp",
        133 => "fc",
        135 => "mobility-header",
        136 => "udplite",
        137 => "mpls-in-ip",
        138 => "manet",
        139 => "hip",
        140 => "shim6",
        141 => "wesp",
        142 => "rohc",
        143 => "ethernet",
        _ => return p.to_string(),
    };
    name.to_string()
}

// ---------------------------------------------------------------------------------------
// operations

/// One nft command performing `op`. A flush of a set is spelled `flush set`, since the op
/// does not say whether it names a map; see [`op_with`].
pub fn op(op: &Op) -> String {
    op_with(op, |_| false)
}

/// Like [`op`], with `is_map` telling which set names are maps (`flush map` for those).
pub fn op_with(op: &Op, is_map: impl Fn(&str) -> bool) -> String {
    let tref = |t: &TableRef| format!("{} {}", t.family.nft_name(), t.name);
    match op {
        Op::AddTable {
            table,
            comment: None,
        } => format!("add table {}", tref(table)),
        Op::AddTable {
            table,
            comment: Some(c),
        } => {
            format!("add table {} {{ comment {}; }}", tref(table), quote(c))
        }
        Op::DeleteTable { table } => format!("delete table {}", tref(table)),
        Op::AddChain {
            table,
            name,
            base,
            comment,
        } => {
            let mut body = String::new();
            if let Some(b) = base {
                body.push_str(&format!(" {}", base_hook(table.family, b)));
            }
            if let Some(c) = comment {
                body.push_str(&format!(" comment {};", quote(c)));
            }
            if body.is_empty() {
                format!("add chain {} {name}", tref(table))
            } else {
                format!("add chain {} {name} {{{body} }}", tref(table))
            }
        }
        Op::FlushChain { table, chain } => format!("flush chain {} {chain}", tref(table)),
        Op::DeleteChain { table, chain } => format!("delete chain {} {chain}", tref(table)),
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => format!("delete rule {} {chain} handle {handle}", tref(table)),
        Op::AddRule {
            table,
            chain,
            rule: r,
        } => {
            format!("add rule {} {chain} {}", tref(table), rule(table.family, r))
        }
        Op::AddSet { table, set } => {
            let decl: Vec<String> = set_lines(set, None, false)
                .into_iter()
                .map(|l| format!("{l};"))
                .collect();
            format!(
                "add {} {} {} {{ {} }}",
                set_keyword(set),
                tref(table),
                set.name,
                decl.join(" ")
            )
        }
        Op::DeleteSet { table, set } => {
            let kw = if is_map(set) { "map" } else { "set" };
            format!("delete {kw} {} {set}", tref(table))
        }
        Op::FlushSet { table, set } => {
            let kw = if is_map(set) { "map" } else { "set" };
            format!("flush {kw} {} {set}", tref(table))
        }
        Op::AddElements {
            table,
            set,
            elements,
        } => {
            // the set's declaration is not at hand: render every element timeout
            let decl = Set::set(set.clone(), Vec::new());
            let e: Vec<String> = elements.iter().map(|e| element(&decl, e, false)).collect();
            format!("add element {} {set} {{ {} }}", tref(table), e.join(", "))
        }
        Op::DeleteElements {
            table,
            set,
            elements,
        } => {
            let e: Vec<String> = elements.iter().map(element_key).collect();
            format!(
                "delete element {} {set} {{ {} }}",
                tref(table),
                e.join(", ")
            )
        }
    }
}

/// The ops as one `nft -f` script, one command per line. Maps are recognised from the
/// `AddSet` ops of the script (for `flush map`); element ops without elements, which nft
/// cannot spell and which do nothing, are left out.
pub fn script(ops: &[Op]) -> String {
    script_with(ops, |_| false)
}

/// Like [`script`], with `is_map` naming maps the script itself does not declare.
pub fn script_with(ops: &[Op], is_map: impl Fn(&str) -> bool) -> String {
    let maps: HashSet<(&TableRef, &str)> = ops
        .iter()
        .filter_map(|o| match o {
            Op::AddSet { table, set } if set.is_map() => Some((table, set.name.as_str())),
            _ => None,
        })
        .collect();
    let mut out = String::new();
    for o in ops {
        if let Op::AddElements { elements, .. } | Op::DeleteElements { elements, .. } = o {
            if elements.is_empty() {
                continue;
            }
        }
        let t = o.table();
        out.push_str(&op_with(o, |s| maps.contains(&(t, s)) || is_map(s)));
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------
// rules

/// How a value held in a register is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ipv4,
    Ipv6,
    /// big-endian integer printed in decimal (ports, lengths)
    BeInt,
    Proto,
    /// host-endian 32 bits, `0x%08x`
    Mark,
    CtState,
    CtStatus,
    CtDir,
    FibType,
    Ifname,
    /// host-endian integer in decimal (numgen, meta length, interface index)
    HostInt,
    Ethertype,
    Nfproto,
    Pkttype,
    /// unknown: hexadecimal bytes
    Raw,
}

/// What a register holds.
#[derive(Debug, Clone)]
enum Sym {
    /// A loaded field. `full` is the field's width when only its first `len` bytes were
    /// loaded (an address prefix).
    Field {
        text: String,
        kind: Kind,
        len: usize,
        full: Option<usize>,
    },
    /// `(base & mask) ^ xor`
    Bits {
        base: Box<Sym>,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// An immediate value.
    Const(Vec<u8>),
    /// The data of a map lookup: `<key> map @m`.
    MapData(String),
    /// Nothing known.
    Unknown(Reg),
}

impl Sym {
    fn kind(&self) -> Kind {
        match self {
            Sym::Field { kind, .. } => *kind,
            Sym::Bits { base, .. } => base.kind(),
            _ => Kind::Raw,
        }
    }

    fn len(&self) -> usize {
        match self {
            Sym::Field { len, .. } => *len,
            Sym::Bits { mask, .. } => mask.len(),
            Sym::Const(d) => d.len(),
            Sym::MapData(_) | Sym::Unknown(_) => 4,
        }
    }

    /// The expression as an rvalue (`meta mark | 0x00004000`, `ip daddr`, a constant).
    fn text(&self, hint: Kind) -> String {
        match self {
            Sym::Field { text, .. } | Sym::MapData(text) => text.clone(),
            Sym::Bits { base, mask, xor } => bits_text(base, mask, xor),
            Sym::Const(d) => fmt_value(hint, d),
            Sym::Unknown(r) => format!("reg {}", r.0),
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    sym: Sym,
    group: u32,
    words: u32,
}

struct Delin {
    family: Family,
    regs: HashMap<u32, Slot>,
    next_group: u32,
    /// The word after the last load when the previous expression was a load.
    load_end: Option<(u32, u32)>,
    stmts: Vec<Option<String>>,
    /// A `meta l4proto <p>` match that later transport payloads depend on.
    l4dep: Option<(usize, u8)>,
    /// The last `>=` comparison (statement index, register, data) for range merging.
    last_gte: Option<(usize, Reg, String)>,
}

/// The rule as nft prints it inside a chain, comment included.
pub fn rule(family: Family, r: &Rule) -> String {
    let mut d = Delin {
        family,
        regs: HashMap::new(),
        next_group: 0,
        load_end: None,
        stmts: Vec::new(),
        l4dep: None,
        last_gte: None,
    };
    for e in &r.exprs {
        d.expr(e);
    }
    let mut parts: Vec<String> = d.stmts.into_iter().flatten().collect();
    if let Some(c) = &r.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    parts.join(" ")
}

impl Delin {
    fn load(&mut self, dreg: Reg, sym: Sym) {
        let Some(w) = dreg.word_index() else {
            self.load_end = None;
            return;
        };
        let words = sym.len().div_ceil(4).max(1) as u32;
        let group = match self.load_end {
            Some((end, g)) if end == w => g,
            _ => {
                self.next_group += 1;
                self.next_group
            }
        };
        for i in w..w + words {
            self.regs.remove(&i);
        }
        self.regs.insert(w, Slot { sym, group, words });
        self.load_end = Some((w + words, group));
    }

    /// The symbol in one register.
    fn slot(&self, r: Reg) -> Sym {
        r.word_index()
            .and_then(|w| self.regs.get(&w))
            .map(|s| s.sym.clone())
            .unwrap_or(Sym::Unknown(r))
    }

    /// The symbols of the concatenation starting at `r`.
    fn group(&self, r: Reg) -> Vec<Sym> {
        let Some(mut w) = r.word_index() else {
            return vec![Sym::Unknown(r)];
        };
        let Some(first) = self.regs.get(&w) else {
            return vec![Sym::Unknown(r)];
        };
        let mut out = vec![first.sym.clone()];
        let g = first.group;
        w += first.words;
        while let Some(s) = self.regs.get(&w).filter(|s| s.group == g) {
            out.push(s.sym.clone());
            w += s.words;
        }
        out
    }

    fn key_text(&self, r: Reg) -> String {
        self.group(r)
            .iter()
            .map(|s| s.text(Kind::Raw))
            .collect::<Vec<_>>()
            .join(" . ")
    }

    fn push(&mut self, s: String) -> usize {
        self.stmts.push(Some(s));
        self.stmts.len() - 1
    }

    fn expr(&mut self, e: &Expr) {
        let was_load = matches!(
            e,
            Expr::Payload { .. }
                | Expr::Meta { .. }
                | Expr::Ct { .. }
                | Expr::Numgen { .. }
                | Expr::Fib { .. }
                | Expr::Immediate { .. }
        );
        if !was_load {
            self.load_end = None;
        }
        if !matches!(e, Expr::Cmp { op: CmpOp::Lte, .. }) {
            // a range is a `>=` immediately followed by a `<=`
            if !matches!(e, Expr::Cmp { op: CmpOp::Gte, .. }) {
                self.last_gte = None;
            }
        }
        match e {
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                let sym = self.payload(*base, *offset, *len);
                self.load(*dreg, sym);
            }
            Expr::Meta { key, dreg } => {
                let (text, kind, len) = meta_field(*key);
                self.load(
                    *dreg,
                    Sym::Field {
                        text: text.into(),
                        kind,
                        len,
                        full: None,
                    },
                );
            }
            Expr::Ct { key, dreg } => {
                let (text, kind, len) = ct_field(*key);
                self.load(
                    *dreg,
                    Sym::Field {
                        text: text.into(),
                        kind,
                        len,
                        full: None,
                    },
                );
            }
            Expr::Numgen {
                kind,
                modulus,
                offset,
                dreg,
            } => {
                let k = match kind {
                    NumgenKind::Random => "random",
                    NumgenKind::Incremental => "inc",
                };
                let mut text = format!("numgen {k} mod {modulus}");
                if *offset != 0 {
                    text.push_str(&format!(" offset {offset}"));
                }
                self.load(
                    *dreg,
                    Sym::Field {
                        text,
                        kind: Kind::HostInt,
                        len: 4,
                        full: None,
                    },
                );
            }
            Expr::Fib {
                flags,
                result,
                dreg,
            } => {
                let mut f = Vec::new();
                for (bit, name) in [
                    (fib_flags::SADDR, "saddr"),
                    (fib_flags::DADDR, "daddr"),
                    (fib_flags::MARK, "mark"),
                    (fib_flags::IIF, "iif"),
                    (fib_flags::OIF, "oif"),
                ] {
                    if flags & bit != 0 {
                        f.push(name);
                    }
                }
                let (res, kind, len) = match result {
                    FibResult::Oif => ("oif", Kind::HostInt, 4),
                    FibResult::Oifname => ("oifname", Kind::Ifname, 16),
                    FibResult::AddrType => ("type", Kind::FibType, 4),
                };
                let text = format!("fib {} {res}", f.join(" . "));
                self.load(
                    *dreg,
                    Sym::Field {
                        text,
                        kind,
                        len,
                        full: None,
                    },
                );
            }
            Expr::Immediate { dreg, data } => {
                self.load(*dreg, Sym::Const(data.clone()));
            }
            Expr::Cmp { sreg, op, data } => self.cmp(*sreg, *op, data),
            Expr::Bitwise {
                sreg,
                dreg,
                len: _,
                mask,
                xor,
            } => {
                let base = self.slot(*sreg);
                let sym = Sym::Bits {
                    base: Box::new(base),
                    mask: mask.clone(),
                    xor: xor.clone(),
                };
                self.load(*dreg, sym);
                self.load_end = None;
            }
            Expr::MetaSet { key, sreg } => {
                let (text, kind, _) = meta_field(*key);
                let name = text.strip_prefix("meta ").unwrap_or(text);
                let v = self.slot(*sreg).text(kind);
                self.push(format!("meta {name} set {v}"));
            }
            Expr::CtSet { key, sreg } => {
                let (text, kind, _) = ct_field(*key);
                let v = self.slot(*sreg).text(kind);
                self.push(format!("{text} set {v}"));
            }
            Expr::Lookup {
                set,
                sreg,
                dreg,
                invert,
            } => {
                let key = self.key_text(*sreg);
                match dreg {
                    None if *invert => {
                        self.push(format!("{key} != @{set}"));
                    }
                    None => {
                        self.push(format!("{key} @{set}"));
                    }
                    Some(Reg::VERDICT) => {
                        self.push(format!("{key} vmap @{set}"));
                    }
                    Some(r) => {
                        let sym = Sym::MapData(format!("{key} map @{set}"));
                        self.load(*r, sym);
                        self.load_end = None;
                    }
                }
            }
            Expr::Verdict(v) => {
                self.push(verdict(v));
            }
            Expr::Nat {
                kind,
                family,
                addr,
                port,
                flags,
            } => {
                let s = self.nat(*kind, *family, *addr, *port, *flags);
                self.push(s);
            }
            Expr::Masquerade { flags } => {
                let f = nat_flag_names(*flags);
                self.push(if f.is_empty() {
                    "masquerade".into()
                } else {
                    format!("masquerade {f}")
                });
            }
            Expr::Reject(r) => {
                let s = self.reject(*r);
                self.push(s);
            }
            Expr::Counter => {
                self.push("counter packets 0 bytes 0".into());
            }
            Expr::Dynset {
                op,
                set,
                key,
                data,
                timeout_ms,
            } => {
                let mut inner = self.key_text(*key);
                if let Some(t) = timeout_ms {
                    inner.push_str(&format!(" timeout {}", duration(*t)));
                }
                if let Some(d) = data {
                    inner.push_str(&format!(" : {}", self.key_text(*d)));
                }
                let o = match op {
                    DynsetOp::Add => "add",
                    DynsetOp::Update => "update",
                };
                self.push(format!("{o} @{set} {{ {inner} }}"));
            }
        }
    }

    fn payload(&mut self, base: PayloadBase, offset: u32, len: u32) -> Sym {
        let l = len as usize;
        let field = |text: &str, kind: Kind, full: usize| {
            let partial = l < full && matches!(kind, Kind::Ipv4 | Kind::Ipv6);
            Sym::Field {
                text: text.into(),
                kind,
                len: l,
                full: partial.then_some(full),
            }
        };
        let v6 = match self.family {
            Family::Ip => false,
            Family::Ip6 => true,
            Family::Inet => len == 16,
        };
        match (base, v6, offset, len) {
            (PayloadBase::Network, false, 12, 1..=4) => field("ip saddr", Kind::Ipv4, 4),
            (PayloadBase::Network, false, 16, 1..=4) => field("ip daddr", Kind::Ipv4, 4),
            (PayloadBase::Network, false, 9, 1) => field("ip protocol", Kind::Proto, 1),
            (PayloadBase::Network, false, 8, 1) => field("ip ttl", Kind::BeInt, 1),
            (PayloadBase::Network, false, 2, 2) => field("ip length", Kind::BeInt, 2),
            (PayloadBase::Network, false, 4, 2) => field("ip id", Kind::BeInt, 2),
            (PayloadBase::Network, true, 8, 1..=16) => field("ip6 saddr", Kind::Ipv6, 16),
            (PayloadBase::Network, true, 24, 1..=16) => field("ip6 daddr", Kind::Ipv6, 16),
            (PayloadBase::Network, true, 6, 1) => field("ip6 nexthdr", Kind::Proto, 1),
            (PayloadBase::Network, true, 7, 1) => field("ip6 hoplimit", Kind::BeInt, 1),
            (PayloadBase::Network, true, 4, 2) => field("ip6 length", Kind::BeInt, 2),
            (PayloadBase::Transport, _, 0 | 2, 2) => {
                let port = if offset == 0 { "sport" } else { "dport" };
                let mut proto = "th";
                if let Some((idx, p)) = self.l4dep {
                    if let Some(name) = transport_name(p) {
                        proto = name;
                        if let Some(s) = self.stmts.get_mut(idx) {
                            *s = None;
                        }
                    }
                }
                field(&format!("{proto} {port}"), Kind::BeInt, 2)
            }
            _ => {
                let b = match base {
                    PayloadBase::LinkLayer => "ll",
                    PayloadBase::Network => "nh",
                    PayloadBase::Transport => "th",
                };
                let text = format!("@{b},{},{}", offset * 8, len * 8);
                Sym::Field {
                    text,
                    kind: Kind::Raw,
                    len: l,
                    full: None,
                }
            }
        }
    }

    fn cmp(&mut self, sreg: Reg, op: CmpOp, data: &[u8]) {
        let group = self.group(sreg);
        let opt = match op {
            CmpOp::Eq => "",
            CmpOp::Neq => "!= ",
            CmpOp::Lt => "< ",
            CmpOp::Lte => "<= ",
            CmpOp::Gt => "> ",
            CmpOp::Gte => ">= ",
        };
        let stmt = match group.as_slice() {
            [Sym::Bits { base, mask, xor }] => {
                let kind = base.kind();
                let zero = |b: &[u8]| b.iter().all(|&x| x == 0);
                let flags = matches!(kind, Kind::CtState | Kind::CtStatus);
                if flags && zero(xor) && zero(data) && matches!(op, CmpOp::Eq | CmpOp::Neq) {
                    let names = fmt_value(kind, mask);
                    let neg = if op == CmpOp::Eq { "! " } else { "" };
                    format!("{} {neg}{names}", base.text(kind))
                } else if let (Some(plen), true, true) = (
                    prefix_len(mask),
                    matches!(kind, Kind::Ipv4 | Kind::Ipv6),
                    zero(xor),
                ) {
                    format!("{} {opt}{}/{plen}", base.text(kind), fmt_value(kind, data))
                } else {
                    let opx = if op == CmpOp::Eq { "== " } else { opt };
                    format!(
                        "{} {opx}{}",
                        bits_text(base, mask, xor),
                        fmt_value(kind, data)
                    )
                }
            }
            [Sym::Field {
                text,
                kind,
                full: Some(full),
                ..
            }] => {
                let mut padded = data.to_vec();
                let plen = padded.len() * 8;
                padded.resize(*full, 0);
                format!("{text} {opt}{}/{plen}", fmt_value(*kind, &padded))
            }
            [one] => format!(
                "{} {opt}{}",
                one.text(Kind::Raw),
                fmt_value(one.kind(), data)
            ),
            many => {
                let left = many
                    .iter()
                    .map(|s| s.text(Kind::Raw))
                    .collect::<Vec<_>>()
                    .join(" . ");
                let mut off = 0;
                let mut vals = Vec::new();
                for s in many {
                    let n = s.len();
                    let v = data.get(off..(off + n).min(data.len())).unwrap_or(&[]);
                    vals.push(fmt_value(s.kind(), v));
                    off += n.div_ceil(4) * 4;
                }
                format!("{left} {opt}{}", vals.join(" . "))
            }
        };
        // `>= a` then `<= b` on the same register: `a-b`
        if op == CmpOp::Lte {
            if let Some((idx, r, low)) = self.last_gte.take() {
                if r == sreg && group.len() == 1 {
                    let left = group[0].text(Kind::Raw);
                    let high = fmt_value(group[0].kind(), data);
                    self.stmts[idx] = Some(format!("{left} {low}-{high}"));
                    return;
                }
            }
        }
        let idx = self.push(stmt);
        if op == CmpOp::Gte && group.len() == 1 {
            self.last_gte = Some((idx, sreg, fmt_value(group[0].kind(), data)));
        }
        if op == CmpOp::Eq && data.len() == 1 {
            if let [Sym::Field { text, .. }] = group.as_slice() {
                if text == "meta l4proto" {
                    self.l4dep = Some((idx, data[0]));
                }
            }
        }
    }

    fn nat(
        &mut self,
        kind: NatKind,
        family: Family,
        addr: Option<Reg>,
        port: Option<Reg>,
        flags: u32,
    ) -> String {
        let k = match kind {
            NatKind::Snat => "snat",
            NatKind::Dnat => "dnat",
        };
        let v6 = family == Family::Ip6 || (family == Family::Inet && self.family == Family::Ip6);
        let addr_kind = if v6 { Kind::Ipv6 } else { Kind::Ipv4 };
        let mut out = k.to_string();
        let a = addr.map(|r| self.slot(r));
        match (a, port) {
            (Some(Sym::MapData(m)), p) => {
                if p.is_some() {
                    out.push_str(if v6 { " ip6" } else { " ip" });
                }
                out.push_str(&format!(" to {m}"));
            }
            (a, p) => {
                let at = a.map(|s| s.text(addr_kind));
                let pt = p.map(|r| self.slot(r).text(Kind::BeInt));
                match (at, pt) {
                    (Some(a), Some(p)) if v6 => out.push_str(&format!(" to [{a}]:{p}")),
                    (Some(a), Some(p)) => out.push_str(&format!(" to {a}:{p}")),
                    (Some(a), None) => out.push_str(&format!(" to {a}")),
                    (None, Some(p)) => out.push_str(&format!(" to :{p}")),
                    (None, None) => {}
                }
            }
        }
        let f = nat_flag_names(flags);
        if !f.is_empty() {
            out.push(' ');
            out.push_str(&f);
        }
        out
    }

    fn reject(&mut self, r: Reject) -> String {
        match r {
            Reject::TcpRst => {
                if let Some((idx, 6)) = self.l4dep {
                    if let Some(s) = self.stmts.get_mut(idx) {
                        *s = None;
                    }
                }
                "reject with tcp reset".into()
            }
            Reject::IcmpUnreach(code) => {
                if self.family == Family::Ip6 {
                    if code == 4 {
                        return "reject".into();
                    }
                    let name = match code {
                        0 => "no-route".to_string(),
                        1 => "admin-prohibited".into(),
                        3 => "addr-unreachable".into(),
                        5 => "policy-fail".into(),
                        6 => "reject-route".into(),
                        c => c.to_string(),
                    };
                    format!("reject with icmpv6 {name}")
                } else {
                    if code == 3 {
                        return "reject".into();
                    }
                    let name = match code {
                        0 => "net-unreachable".to_string(),
                        1 => "host-unreachable".into(),
                        2 => "prot-unreachable".into(),
                        9 => "net-prohibited".into(),
                        10 => "host-prohibited".into(),
                        13 => "admin-prohibited".into(),
                        c => c.to_string(),
                    };
                    format!("reject with icmp {name}")
                }
            }
            Reject::IcmpxUnreach(code) => {
                let name = match code {
                    1 => return "reject".into(),
                    0 => "no-route".to_string(),
                    2 => "host-unreachable".into(),
                    3 => "admin-prohibited".into(),
                    c => c.to_string(),
                };
                format!("reject with icmpx {name}")
            }
        }
    }
}

fn transport_name(p: u8) -> Option<&'static str> {
    Some(match p {
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// `random,fully-random,persistent` (the masquerade/nat flags nft prints).
fn nat_flag_names(flags: u32) -> String {
    let mut f = Vec::new();
    if flags & nat_flags::PROTO_RANDOM != 0 {
        f.push("random");
    }
    if flags & nat_flags::PROTO_RANDOM_FULLY != 0 {
        f.push("fully-random");
    }
    if flags & nat_flags::PERSISTENT != 0 {
        f.push("persistent");
    }
    f.join(",")
}

fn meta_field(key: MetaKey) -> (&'static str, Kind, usize) {
    match key {
        MetaKey::Len => ("meta length", Kind::HostInt, 4),
        MetaKey::Protocol => ("meta protocol", Kind::Ethertype, 2),
        MetaKey::Mark => ("meta mark", Kind::Mark, 4),
        MetaKey::Iif => ("iif", Kind::HostInt, 4),
        MetaKey::Oif => ("oif", Kind::HostInt, 4),
        MetaKey::Iifname => ("iifname", Kind::Ifname, 16),
        MetaKey::Oifname => ("oifname", Kind::Ifname, 16),
        MetaKey::Nfproto => ("meta nfproto", Kind::Nfproto, 1),
        MetaKey::L4proto => ("meta l4proto", Kind::Proto, 1),
        MetaKey::Pkttype => ("meta pkttype", Kind::Pkttype, 1),
    }
}

fn ct_field(key: CtKey) -> (&'static str, Kind, usize) {
    match key {
        CtKey::State => ("ct state", Kind::CtState, 4),
        CtKey::Direction => ("ct direction", Kind::CtDir, 1),
        CtKey::Status => ("ct status", Kind::CtStatus, 4),
        CtKey::Mark => ("ct mark", Kind::Mark, 4),
    }
}

/// The number of leading one bits of a mask made of leading ones only.
fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut n = 0u32;
    let mut seen_zero = false;
    for b in mask {
        for i in 0..8 {
            if b & (0x80 >> i) != 0 {
                if seen_zero {
                    return None;
                }
                n += 1;
            } else {
                seen_zero = true;
            }
        }
    }
    Some(n)
}

/// `base & mask`, `base | bits`, `base ^ bits` (the forms nft prints for bitwise).
fn bits_text(base: &Sym, mask: &[u8], xor: &[u8]) -> String {
    let kind = base.kind();
    let b = base.text(kind);
    let zero = xor.iter().all(|&x| x == 0);
    let ones = mask.iter().all(|&x| x == 0xff);
    let complement = mask.len() == xor.len() && mask.iter().zip(xor).all(|(m, x)| m ^ x == 0xff);
    let v = |bytes: &[u8]| match kind {
        Kind::Ipv4 | Kind::Ipv6 | Kind::Mark | Kind::HostInt | Kind::Raw => fmt_value(kind, bytes),
        _ => fmt_value(Kind::Raw, bytes),
    };
    if zero {
        format!("{b} & {}", v(mask))
    } else if ones {
        format!("{b} ^ {}", v(xor))
    } else if complement {
        format!("{b} | {}", v(xor))
    } else {
        format!("{b} & {} ^ {}", v(mask), v(xor))
    }
}

fn host_u32(d: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(d).ok().map(u32::from_ne_bytes)
}

fn be_uint(d: &[u8]) -> Option<u64> {
    (!d.is_empty() && d.len() <= 8).then(|| d.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
}

/// Format register bytes as a value of `kind`; bytes of an unexpected width as hex.
fn fmt_value(kind: Kind, d: &[u8]) -> String {
    let raw = || {
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    };
    let names = |v: u32, table: &[(u32, &str)]| -> String {
        let mut out: Vec<String> = Vec::new();
        let mut rest = v;
        for (bit, name) in table {
            if v & bit != 0 {
                out.push((*name).into());
                rest &= !bit;
            }
        }
        if rest != 0 || out.is_empty() {
            out.push(format!("0x{rest:x}"));
        }
        out.join(",")
    };
    match kind {
        Kind::Ipv4 => match <[u8; 4]>::try_from(d) {
            Ok(a) => Ipv4Addr::from(a).to_string(),
            Err(_) => raw(),
        },
        Kind::Ipv6 => match <[u8; 16]>::try_from(d) {
            Ok(a) => Ipv6Addr::from(a).to_string(),
            Err(_) => raw(),
        },
        Kind::BeInt => be_uint(d).map(|v| v.to_string()).unwrap_or_else(raw),
        Kind::Proto => match d {
            [p] => proto_name(*p),
            _ => raw(),
        },
        Kind::Mark => host_u32(d)
            .map(|v| format!("0x{v:08x}"))
            .unwrap_or_else(raw),
        Kind::HostInt => host_u32(d).map(|v| v.to_string()).unwrap_or_else(raw),
        Kind::CtState => host_u32(d)
            .map(|v| {
                names(
                    v,
                    &[
                        (ct_state::INVALID, "invalid"),
                        (ct_state::ESTABLISHED, "established"),
                        (ct_state::RELATED, "related"),
                        (ct_state::NEW, "new"),
                        (ct_state::UNTRACKED, "untracked"),
                    ],
                )
            })
            .unwrap_or_else(raw),
        Kind::CtStatus => host_u32(d)
            .map(|v| {
                names(
                    v,
                    &[
                        (ct_status::EXPECTED, "expected"),
                        (ct_status::SEEN_REPLY, "seen-reply"),
                        (ct_status::ASSURED, "assured"),
                        (ct_status::CONFIRMED, "confirmed"),
                        (ct_status::SNAT, "snat"),
                        (ct_status::DNAT, "dnat"),
                        (ct_status::DYING, "dying"),
                    ],
                )
            })
            .unwrap_or_else(raw),
        Kind::CtDir => match d {
            [0] => "original".into(),
            [1] => "reply".into(),
            _ => raw(),
        },
        Kind::FibType => host_u32(d)
            .map(|v| match v {
                0 => "unspec".to_string(),
                rtn::UNICAST => "unicast".into(),
                rtn::LOCAL => "local".into(),
                rtn::BROADCAST => "broadcast".into(),
                rtn::ANYCAST => "anycast".into(),
                rtn::MULTICAST => "multicast".into(),
                6 => "blackhole".into(),
                7 => "unreachable".into(),
                8 => "prohibit".into(),
                other => other.to_string(),
            })
            .unwrap_or_else(raw),
        Kind::Ifname => {
            let (name, full) = match d.iter().position(|&c| c == 0) {
                Some(end) => (&d[..end], true),
                None => (d, false),
            };
            let s = String::from_utf8_lossy(name);
            if full {
                quote(&s)
            } else {
                quote(&format!("{s}*"))
            }
        }
        Kind::Ethertype => match be_uint(d) {
            Some(0x0800) => "ip".into(),
            Some(0x86dd) => "ip6".into(),
            Some(0x0806) => "arp".into(),
            Some(v) if d.len() == 2 => format!("0x{v:04x}"),
            _ => raw(),
        },
        Kind::Nfproto => match d {
            [2] => "ipv4".into(),
            [10] => "ipv6".into(),
            [v] => v.to_string(),
            _ => raw(),
        },
        Kind::Pkttype => match d {
            [0] => "host".into(),
            [1] => "broadcast".into(),
            [2] => "multicast".into(),
            [3] => "other".into(),
            [v] => v.to_string(),
            _ => raw(),
        },
        Kind::Raw => raw(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, KeyField};

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Value {
        Value::Ipv4(Ipv4Addr::new(a, b, c, d))
    }

    fn rule_of(family: Family, parts: Vec<Vec<Expr>>) -> String {
        rule(family, &Rule::new(parts.into_iter().flatten().collect()))
    }

    fn verdict_expr(v: Verdict) -> Vec<Expr> {
        vec![Expr::Verdict(v)]
    }

    #[test]
    fn concatenated_vmap_lookup() {
        let r = Rule::new(build::vmap_lookup(
            Family::Ip,
            &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
            "service-ips",
        ))
        .with_comment("dispatch");
        assert_eq!(
            rule(Family::Ip, &r),
            r#"ip daddr . meta l4proto . th dport vmap @service-ips comment "dispatch""#
        );
        let r6 = build::vmap_lookup(Family::Ip6, &[KeyField::Saddr, KeyField::Dport], "m");
        assert_eq!(
            rule(Family::Ip6, &Rule::new(r6)),
            "ip6 saddr . th dport vmap @m"
        );
    }

    #[test]
    fn concatenation_in_legacy_32bit_registers() {
        // the same key loaded from NFT_REG32_00 instead of NFT_REG_1
        let e = vec![
            build::load_addr(Family::Ip, false, Reg::r32(0)),
            Expr::Meta {
                key: MetaKey::L4proto,
                dreg: Reg::r32(1),
            },
            build::load_port(false, Reg::r32(2)),
            Expr::Lookup {
                set: "s".into(),
                sreg: Reg::r32(0),
                dreg: None,
                invert: true,
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(e)),
            "ip daddr . meta l4proto . th dport != @s"
        );
    }

    #[test]
    fn l4proto_dependency_is_folded_into_transport_fields() {
        let s = rule_of(
            Family::Ip,
            vec![
                build::l4proto_eq(6),
                build::dnat_map(Family::Ip, &[KeyField::Daddr, KeyField::Dport], "eps"),
            ],
        );
        assert_eq!(s, "dnat ip to ip daddr . tcp dport map @eps");
        // without a transport field the match stays
        let s = rule_of(
            Family::Ip,
            vec![
                build::l4proto_eq(6),
                build::dnat_to(Family::Ip, &v4(198, 18, 2, 2), 8080),
            ],
        );
        assert_eq!(s, "meta l4proto tcp dnat to 198.18.2.2:8080");
        let s = rule_of(
            Family::Ip,
            vec![build::l4proto_eq(17), verdict_expr(Verdict::Accept)],
        );
        assert_eq!(s, "meta l4proto udp accept");
        let s = rule_of(
            Family::Ip,
            vec![build::l4proto_eq(6), vec![Expr::Reject(Reject::TcpRst)]],
        );
        assert_eq!(s, "reject with tcp reset");
    }

    #[test]
    fn ip6_nat() {
        let a = Value::Ipv6("2001:db8::2".parse().unwrap());
        let s = rule_of(
            Family::Ip6,
            vec![build::l4proto_eq(6), build::dnat_to(Family::Ip6, &a, 80)],
        );
        assert_eq!(s, "meta l4proto tcp dnat to [2001:db8::2]:80");
        let s = rule_of(
            Family::Ip6,
            vec![
                build::l4proto_eq(17),
                build::dnat_map(Family::Ip6, &[KeyField::NumgenRandom(3)], "m"),
            ],
        );
        assert_eq!(s, "meta l4proto udp dnat ip6 to numgen random mod 3 map @m");
    }

    #[test]
    fn marks_and_bitwise() {
        assert_eq!(
            rule_of(Family::Ip, vec![build::mark_or(0x4000)]),
            "meta mark set meta mark | 0x00004000"
        );
        assert_eq!(
            rule_of(
                Family::Ip,
                vec![
                    build::mark_test(0x4000, false),
                    verdict_expr(Verdict::Return)
                ]
            ),
            "meta mark & 0x00004000 == 0x00000000 return"
        );
        assert_eq!(
            rule_of(Family::Ip, vec![build::mark_test(0x4000, true)]),
            "meta mark & 0x00004000 != 0x00000000"
        );
        let xor = vec![
            Expr::Meta {
                key: MetaKey::Mark,
                dreg: Reg::R1,
            },
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: 4,
                mask: vec![0xff; 4],
                xor: 1u32.to_ne_bytes().to_vec(),
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: Reg::R1,
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(xor)),
            "meta mark set meta mark ^ 0x00000001"
        );
        let imm = vec![
            Expr::Immediate {
                dreg: Reg::R1,
                data: 0x10u32.to_ne_bytes().to_vec(),
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: Reg::R1,
            },
            Expr::Meta {
                key: MetaKey::Mark,
                dreg: Reg::R1,
            },
            Expr::CtSet {
                key: CtKey::Mark,
                sreg: Reg::R1,
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(imm)),
            "meta mark set 0x00000010 ct mark set meta mark"
        );
    }

    #[test]
    fn ct_state_flags() {
        let est = build::ct_state_any(ct_state::ESTABLISHED | ct_state::RELATED);
        assert_eq!(
            rule_of(Family::Ip, vec![est, verdict_expr(Verdict::Accept)]),
            "ct state established,related accept"
        );
        let not_new = vec![
            Expr::Ct {
                key: CtKey::State,
                dreg: Reg::R1,
            },
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: 4,
                mask: ct_state::NEW.to_ne_bytes().to_vec(),
                xor: vec![0; 4],
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: vec![0; 4],
            },
        ];
        assert_eq!(rule(Family::Ip, &Rule::new(not_new)), "ct state ! new");
        let plain = vec![
            Expr::Ct {
                key: CtKey::State,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Neq,
                data: ct_state::ESTABLISHED.to_ne_bytes().to_vec(),
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(plain)),
            "ct state != established"
        );
    }

    #[test]
    fn comparisons_prefixes_and_ranges() {
        let s = rule_of(
            Family::Ip,
            vec![
                build::addr_cmp(Family::Ip, false, CmpOp::Neq, &v4(198, 18, 0, 1)),
                verdict_expr(Verdict::Drop),
            ],
        );
        assert_eq!(s, "ip daddr != 198.18.0.1 drop");
        let prefix = vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset: 16,
                len: 2,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: vec![198, 18],
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(prefix)),
            "ip daddr 198.18.0.0/16"
        );
        let masked = vec![
            build::load_addr(Family::Ip, true, Reg::R1),
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: 4,
                mask: vec![255, 255, 240, 0],
                xor: vec![0; 4],
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Neq,
                data: vec![198, 18, 16, 0],
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(masked)),
            "ip saddr != 198.18.16.0/20"
        );
        let range = vec![
            build::load_port(true, Reg::R1),
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Gte,
                data: 80u16.to_be_bytes().to_vec(),
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Lte,
                data: 90u16.to_be_bytes().to_vec(),
            },
        ];
        assert_eq!(rule(Family::Ip, &Rule::new(range)), "th sport 80-90");
        let lt = vec![
            build::load_port(false, Reg::R1),
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Lt,
                data: 1024u16.to_be_bytes().to_vec(),
            },
        ];
        assert_eq!(rule(Family::Ip, &Rule::new(lt)), "th dport < 1024");
        assert_eq!(
            rule_of(Family::Ip, vec![build::iifname_eq("eth0", false)]),
            r#"iifname "eth0""#
        );
        assert_eq!(
            rule_of(Family::Ip, vec![build::iifname_eq("veth", true)]),
            r#"iifname "veth*""#
        );
    }

    #[test]
    fn sets_fib_numgen_dynset() {
        let s = rule_of(
            Family::Ip,
            vec![
                build::addr_in_set(Family::Ip, true, "cluster", true),
                verdict_expr(Verdict::Jump("mark".into())),
            ],
        );
        assert_eq!(s, "ip saddr != @cluster jump mark");
        let s = rule_of(
            Family::Ip,
            vec![
                build::fib_daddr_local(),
                verdict_expr(Verdict::Goto("np".into())),
            ],
        );
        assert_eq!(s, "fib daddr type local goto np");
        let s = rule_of(
            Family::Ip,
            vec![build::vmap_lookup(
                Family::Ip,
                &[KeyField::NumgenRandom(2)],
                "eps",
            )],
        );
        assert_eq!(s, "numgen random mod 2 vmap @eps");
        let s = rule_of(
            Family::Ip,
            vec![build::set_update(Family::Ip, &[KeyField::Saddr], "aff")],
        );
        assert_eq!(s, "update @aff { ip saddr }");
        let add = vec![
            build::load_addr(Family::Ip6, true, Reg::R1),
            Expr::Dynset {
                op: DynsetOp::Add,
                set: "aff".into(),
                key: Reg::R1,
                data: None,
                timeout_ms: Some(10_000),
            },
        ];
        assert_eq!(
            rule(Family::Ip6, &Rule::new(add)),
            "add @aff { ip6 saddr timeout 10s }"
        );
        let ng = vec![
            Expr::Numgen {
                kind: NumgenKind::Incremental,
                modulus: 3,
                offset: 1,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: 2u32.to_ne_bytes().to_vec(),
            },
        ];
        assert_eq!(
            rule(Family::Ip, &Rule::new(ng)),
            "numgen inc mod 3 offset 1 2"
        );
    }

    #[test]
    fn terminal_statements() {
        let one = |e: Expr| rule(Family::Ip, &Rule::new(vec![e]));
        assert_eq!(
            one(Expr::Masquerade {
                flags: nat_flags::PROTO_RANDOM_FULLY
            }),
            "masquerade fully-random"
        );
        assert_eq!(one(Expr::Masquerade { flags: 0 }), "masquerade");
        assert_eq!(
            one(Expr::Masquerade {
                flags: nat_flags::PERSISTENT | nat_flags::PROTO_RANDOM
            }),
            "masquerade random,persistent"
        );
        assert_eq!(one(Expr::Reject(Reject::IcmpUnreach(3))), "reject");
        assert_eq!(
            one(Expr::Reject(Reject::IcmpUnreach(1))),
            "reject with icmp host-unreachable"
        );
        assert_eq!(one(Expr::Reject(Reject::IcmpxUnreach(1))), "reject");
        assert_eq!(
            one(Expr::Reject(Reject::IcmpxUnreach(3))),
            "reject with icmpx admin-prohibited"
        );
        let r6 = |c| {
            rule(
                Family::Ip6,
                &Rule::new(vec![Expr::Reject(Reject::IcmpUnreach(c))]),
            )
        };
        assert_eq!(r6(4), "reject");
        assert_eq!(r6(1), "reject with icmpv6 admin-prohibited");
        assert_eq!(one(Expr::Counter), "counter packets 0 bytes 0");
        assert_eq!(one(Expr::Verdict(Verdict::Continue)), "continue");
        let c = Rule::new(vec![Expr::Counter]).with_comment("x");
        assert_eq!(
            rule(Family::Ip, &c),
            r#"counter packets 0 bytes 0 comment "x""#
        );
    }

    #[test]
    fn odd_sequences_do_not_panic() {
        let odd = vec![
            Expr::Cmp {
                sreg: Reg::R3,
                op: CmpOp::Eq,
                data: vec![1, 2, 3],
            },
            Expr::Lookup {
                set: "s".into(),
                sreg: Reg(77),
                dreg: Some(Reg(99)),
                invert: false,
            },
            Expr::Bitwise {
                sreg: Reg::R4,
                dreg: Reg::R4,
                len: 2,
                mask: vec![1],
                xor: vec![],
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: Reg::R2,
            },
            Expr::Nat {
                kind: NatKind::Snat,
                family: Family::Inet,
                addr: None,
                port: Some(Reg::R4),
                flags: 0,
            },
            Expr::Payload {
                base: PayloadBase::LinkLayer,
                offset: 6,
                len: 6,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Gt,
                data: vec![0; 6],
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Lte,
                data: vec![],
            },
            Expr::Dynset {
                op: DynsetOp::Update,
                set: "d".into(),
                key: Reg(50),
                data: Some(Reg::R2),
                timeout_ms: None,
            },
        ];
        let s = rule(Family::Inet, &Rule::new(odd));
        assert!(s.contains("@ll,48,48 > 0x000000000000"), "{s}");
    }

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

    #[test]
    fn durations() {
        assert_eq!(duration(10_800_000), "3h");
        assert_eq!(duration(90_000), "1m30s");
        assert_eq!(duration(1500), "1s500ms");
        assert_eq!(duration(86_400_000 + 3_723_004), "1d1h2m3s4ms");
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
            Element {
                timeout_ms: Some(10_000),
                ..Element::key(vec![v4(198, 18, 0, 3)])
            },
            Element {
                timeout_ms: Some(60_000),
                ..Element::key(vec![v4(198, 18, 0, 4)])
            },
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
        iv.elements = vec![Element {
            key: vec![v4(198, 18, 0, 0), Value::Port(1024)],
            key_end: Some(vec![v4(198, 18, 255, 255), Value::Port(2047)]),
            ..Element::key(vec![])
        }];
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

    #[test]
    fn ops_and_scripts() {
        let t = TableRef::new(Family::Ip, "t");
        assert_eq!(
            op(&Op::AddTable {
                table: t.clone(),
                comment: None
            }),
            "add table ip t"
        );
        assert_eq!(
            op(&Op::AddTable {
                table: t.clone(),
                comment: Some("x".into())
            }),
            r#"add table ip t { comment "x"; }"#
        );
        let base = BaseHook {
            chain_type: ChainType::Filter,
            hook: Hook::Forward,
            priority: 0,
            policy: Policy::Drop,
        };
        assert_eq!(
            op(&Op::AddChain {
                table: t.clone(),
                name: "f".into(),
                base: Some(base),
                comment: Some("c".into())
            }),
            r#"add chain ip t f { type filter hook forward priority filter; policy drop; comment "c"; }"#
        );
        assert_eq!(
            op(&Op::AddChain {
                table: t.clone(),
                name: "r".into(),
                base: None,
                comment: None
            }),
            "add chain ip t r"
        );
        let mut set = sample_set();
        set.flags.timeout = true;
        set.timeout_ms = Some(10_000);
        set.comment = Some("m".into());
        assert_eq!(
            op(&Op::AddSet {
                table: t.clone(),
                set: set.clone()
            }),
            "add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; \
             timeout 10s; comment \"m\"; }"
        );
        assert_eq!(
            op(&Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.clone()
            }),
            "add element ip t service-ips { 198.18.0.1 . tcp . 80 comment \"web\" : goto svc, \
             198.18.0.2 . sctp . 9 : accept }"
        );
        assert_eq!(
            op(&Op::DeleteElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.clone()
            }),
            "delete element ip t service-ips { 198.18.0.1 . tcp . 80, 198.18.0.2 . sctp . 9 }"
        );
        assert_eq!(
            op(&Op::FlushSet {
                table: t.clone(),
                set: "s".into()
            }),
            "flush set ip t s"
        );
        assert_eq!(
            op_with(
                &Op::FlushSet {
                    table: t.clone(),
                    set: "m".into()
                },
                |_| true
            ),
            "flush map ip t m"
        );
        assert_eq!(
            op(&Op::DeleteChain {
                table: t.clone(),
                chain: "c".into()
            }),
            "delete chain ip t c"
        );
        assert_eq!(
            op(&Op::FlushChain {
                table: t.clone(),
                chain: "c".into()
            }),
            "flush chain ip t c"
        );
        let ops = vec![
            Op::AddSet {
                table: t.clone(),
                set: set.clone(),
            },
            Op::FlushSet {
                table: t.clone(),
                set: "service-ips".into(),
            },
            Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: vec![],
            },
            Op::DeleteSet {
                table: t.clone(),
                set: "service-ips".into(),
            },
            Op::DeleteTable { table: t },
        ];
        let s = script(&ops);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], "flush map ip t service-ips");
        assert_eq!(lines[2], "delete map ip t service-ips");
        assert_eq!(lines[3], "delete table ip t");
    }
}
