//! The statements of a rule that need more than a register lookup: payload fields,
//! comparisons (prefixes, ranges, flags), NAT and reject.

use super::format::*;
use super::rule::Delin;
use crate::expr::*;

impl Delin {
    pub(super) fn payload(&mut self, base: PayloadBase, offset: u32, len: u32) -> Sym {
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

    pub(super) fn cmp(&mut self, sreg: Reg, op: CmpOp, data: &[u8]) {
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

    pub(super) fn nat(
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

    pub(super) fn reject(&mut self, r: Reject) -> String {
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
