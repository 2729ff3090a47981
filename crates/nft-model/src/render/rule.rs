//! Rules "delinearized" the way nft does it: which symbolic expression every register
//! holds, loads into consecutive registers joined into concatenations, statements
//! printed with values formatted by data type. The statements that need more than a
//! register lookup (payload fields, comparisons, NAT, reject) are in `statements`.

use std::collections::HashMap;

use super::format::*;
use super::text::{duration, quote, verdict};
use crate::expr::*;
use crate::object::*;

impl Sym {
    pub(super) fn kind(&self) -> Kind {
        match self {
            Sym::Field { kind, .. } => *kind,
            Sym::Bits { base, .. } => base.kind(),
            _ => Kind::Raw,
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Sym::Field { len, .. } => *len,
            Sym::Bits { mask, .. } => mask.len(),
            Sym::Const(d) => d.len(),
            Sym::MapData(_) | Sym::Unknown(_) => 4,
        }
    }

    /// The expression as an rvalue (`meta mark | 0x00004000`, `ip daddr`, a constant).
    pub(super) fn text(&self, hint: Kind) -> String {
        match self {
            Sym::Field { text, .. } | Sym::MapData(text) => text.clone(),
            Sym::Bits { base, mask, xor } => bits_text(base, mask, xor),
            Sym::Const(d) => fmt_value(hint, d),
            Sym::Unknown(r) => format!("reg {}", r.0),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) sym: Sym,
    pub(super) group: u32,
    pub(super) words: u32,
}

pub(super) struct Delin {
    pub(super) family: Family,
    pub(super) regs: HashMap<u32, Slot>,
    pub(super) next_group: u32,
    /// The word after the last load when the previous expression was a load.
    pub(super) load_end: Option<(u32, u32)>,
    pub(super) stmts: Vec<Option<String>>,
    /// A `meta l4proto <p>` match that later transport payloads depend on.
    pub(super) l4dep: Option<(usize, u8)>,
    /// The last `>=` comparison (statement index, register, data) for range merging.
    pub(super) last_gte: Option<(usize, Reg, String)>,
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
    for e in r.exprs.iter() {
        d.expr(e);
    }
    let mut parts: Vec<String> = d.stmts.into_iter().flatten().collect();
    if let Some(c) = &r.comment {
        parts.push(format!("comment {}", quote(c)));
    }
    parts.join(" ")
}

impl Delin {
    pub(super) fn load(&mut self, dreg: Reg, sym: Sym) {
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
    pub(super) fn slot(&self, r: Reg) -> Sym {
        r.word_index()
            .and_then(|w| self.regs.get(&w))
            .map(|s| s.sym.clone())
            .unwrap_or(Sym::Unknown(r))
    }

    /// The symbols of the concatenation starting at `r`.
    pub(super) fn group(&self, r: Reg) -> Vec<Sym> {
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

    pub(super) fn key_text(&self, r: Reg) -> String {
        self.group(r)
            .iter()
            .map(|s| s.text(Kind::Raw))
            .collect::<Vec<_>>()
            .join(" . ")
    }

    pub(super) fn push(&mut self, s: String) -> usize {
        self.stmts.push(Some(s));
        self.stmts.len() - 1
    }

    pub(super) fn expr(&mut self, e: &Expr) {
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
            Expr::CounterRef(name) => {
                self.push(format!("counter name {}", quote(name)));
            }
            // nft's notation for a compat match it cannot translate
            Expr::XtMatch { name, .. } => {
                self.push(format!("xt match {name:?}"));
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
}
