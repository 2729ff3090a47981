//! A packet tracer: interprets the compiled tables' expressions (registers, lookups,
//! verdicts) for the first packet of a connection, hook by hook, and reports every
//! possible outcome: one per `numgen` choice, so the set of DNAT targets is exact.
//!
//! Model of the host: a packet from outside traverses prerouting, then input when its
//! (translated) destination is a local address, else forward and postrouting. A packet
//! from a local process traverses output and postrouting, then input when its destination
//! is local. Conntrack state is `new`; dynamic sets (session affinity's pins) hold the
//! elements the table gives them: none in a compiled table (a traced client is pinned to
//! nothing yet, so it may reach every endpoint of its list), the pins a caller adds to
//! trace a pinned client.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use nft_model::*;

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IANA protocol number (6 TCP, 17 UDP, 132 SCTP, 1 ICMP...).
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    /// Input interface (for packets from outside or from pods); `None` for local processes.
    pub iif: Option<String>,
    /// Sent by a process on this host (output path) rather than received.
    pub local_origin: bool,
    pub mark: u32,
}

/// Constructors from address literals, for tests and examples: they panic on an
/// invalid address. Code handling outside input builds a [`Packet`] from parsed
/// addresses (as `explain` does).
impl Packet {
    /// A TCP packet received on `iif` (`eth0` if you do not care).
    pub fn tcp(src: &str, dst: &str, dport: u16) -> Packet {
        Packet {
            src: src.parse().expect("source address"),
            dst: dst.parse().expect("destination address"),
            proto: 6,
            sport: 40000,
            dport,
            iif: Some("eth0".into()),
            local_origin: false,
            mark: 0,
        }
    }
    pub fn udp(src: &str, dst: &str, dport: u16) -> Packet {
        Packet {
            proto: 17,
            ..Packet::tcp(src, dst, dport)
        }
    }
    pub fn sctp(src: &str, dst: &str, dport: u16) -> Packet {
        Packet {
            proto: 132,
            ..Packet::tcp(src, dst, dport)
        }
    }
    /// Arriving on interface `iif`.
    pub fn on(mut self, iif: &str) -> Packet {
        self.iif = Some(iif.into());
        self
    }
    /// Sent by a local process.
    pub fn from_host(mut self) -> Packet {
        self.local_origin = true;
        self.iif = None;
        self
    }
    fn family(&self) -> Family {
        if self.dst.is_ipv4() {
            Family::Ip
        } else {
            Family::Ip6
        }
    }
}

/// How the packet ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fate {
    /// Delivered to a local socket.
    Local,
    /// Forwarded (or, from a local process, sent out).
    Out,
    Drop,
    Reject,
}

/// One possible path of the packet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome {
    /// Chains entered, in order (base chains included).
    pub path: Vec<String>,
    pub fate: Fate,
    /// The DNAT target, when translated.
    pub dnat: Option<(IpAddr, u16)>,
    /// Whether the source is masqueraded.
    pub masquerade: bool,
}

/// Every possible outcome, one per combination of `numgen` choices.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub outcomes: Vec<Outcome>,
}

impl Trace {
    /// All possible DNAT targets.
    pub fn dnat_targets(&self) -> BTreeSet<(IpAddr, u16)> {
        self.outcomes.iter().filter_map(|o| o.dnat).collect()
    }
    /// DNAT targets as `addr:port` strings (`[v6]:port`).
    pub fn targets(&self) -> BTreeSet<String> {
        self.dnat_targets()
            .iter()
            .map(|(a, p)| std::net::SocketAddr::new(*a, *p).to_string())
            .collect()
    }
    pub fn fates(&self) -> BTreeSet<Fate> {
        self.outcomes.iter().map(|o| o.fate).collect()
    }
    /// The single fate of all outcomes, if they agree.
    pub fn fate(&self) -> Option<Fate> {
        let f = self.fates();
        (f.len() == 1).then(|| *f.iter().next().expect("one"))
    }
    pub fn all_masqueraded(&self) -> bool {
        !self.outcomes.is_empty() && self.outcomes.iter().all(|o| o.masquerade)
    }
    pub fn none_masqueraded(&self) -> bool {
        self.outcomes.iter().all(|o| !o.masquerade)
    }
    /// Whether some path entered `chain`.
    pub fn visits(&self, chain: &str) -> bool {
        self.outcomes
            .iter()
            .any(|o| o.path.iter().any(|c| c == chain))
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for o in &self.outcomes {
            write!(f, "{} -> {:?}", o.path.join(" > "), o.fate)?;
            if let Some((a, p)) = o.dnat {
                write!(f, " dnat {}", std::net::SocketAddr::new(a, p))?;
            }
            if o.masquerade {
                write!(f, " masquerade")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Bound on the explored `numgen` combinations.
const MAX_RUNS: usize = 65536;

/// Trace `pkt` through `tables` (the table of the packet's family is used) on a host whose
/// local addresses are `local_addrs`.
pub fn trace(tables: &[Table], local_addrs: &[IpAddr], pkt: &Packet) -> Trace {
    let fam = pkt.family();
    let Some(table) = tables.iter().find(|t| t.family == fam) else {
        let fate = if local_addrs.contains(&pkt.dst) {
            Fate::Local
        } else {
            Fate::Out
        };
        return Trace {
            outcomes: vec![Outcome {
                path: vec![],
                fate,
                dnat: None,
                masquerade: false,
            }],
        };
    };
    let mut outcomes = BTreeSet::new();
    let mut choices: Vec<u32> = Vec::new();
    for _ in 0..MAX_RUNS {
        let mut run = Run::new(table, local_addrs, pkt.clone(), choices.clone());
        let o = run.run();
        outcomes.insert(o);
        // next combination: bump the last choice point with alternatives left
        let mut next = None;
        for i in (0..run.alts.len()).rev() {
            if run.used[i] + 1 < run.alts[i] {
                let mut c = run.used[..i].to_vec();
                c.push(run.used[i] + 1);
                next = Some(c);
                break;
            }
        }
        match next {
            Some(c) => choices = c,
            None => break,
        }
    }
    Trace {
        outcomes: outcomes.into_iter().collect(),
    }
}

enum Flow {
    /// Fell off the end of the chain or `return`.
    Return,
    Accept,
    Drop,
    Reject,
}

struct Run<'a> {
    table: &'a Table,
    local: &'a [IpAddr],
    pkt: Packet,
    choices: Vec<u32>,
    used: Vec<u32>,
    alts: Vec<u32>,
    regs: [u8; 64],
    path: Vec<String>,
    dnat: Option<(IpAddr, u16)>,
    masquerade: bool,
    depth: usize,
    /// A `numgen` result not looked at yet: its choice is made when it is read, over the
    /// outcomes that differ (see [`Run::resolve_by_lookup`]).
    numgen: Option<PendingNumgen>,
}

/// A `numgen` result waiting to be chosen.
#[derive(Debug, Clone, Copy)]
struct PendingNumgen {
    /// Byte offset in the register file.
    off: usize,
    offset: u32,
    modulus: u32,
}

impl<'a> Run<'a> {
    fn new(table: &'a Table, local: &'a [IpAddr], pkt: Packet, choices: Vec<u32>) -> Run<'a> {
        Run {
            table,
            local,
            pkt,
            choices,
            used: Vec::new(),
            alts: Vec::new(),
            regs: [0; 64],
            path: Vec::new(),
            dnat: None,
            masquerade: false,
            depth: 0,
            numgen: None,
        }
    }

    /// A new choice point with `alts` alternatives: the alternative taken in this run.
    fn choose(&mut self, alts: u32) -> u32 {
        let i = self.used.len();
        let c = self
            .choices
            .get(i)
            .copied()
            .unwrap_or(0)
            .min(alts.saturating_sub(1));
        self.used.push(c);
        self.alts.push(alts.max(1));
        c
    }

    /// Choose a pending `numgen` result among all its values (it is read by something
    /// other than a map lookup).
    fn resolve_by_value(&mut self) {
        if let Some(ng) = self.numgen.take() {
            let c = self.choose(ng.modulus);
            let v = ng.offset.wrapping_add(c);
            self.regs[ng.off..ng.off + 4].copy_from_slice(&v.to_ne_bytes());
        }
    }

    /// Choose a pending `numgen` result read as part of the key `[koff, koff + klen)` of a
    /// lookup in `s`: the alternatives are the elements the lookup can find (the other key
    /// fields as loaded), plus a miss when some value in the range finds none. So the
    /// tracer explores one run per distinct outcome, not one per value (a `numgen random
    /// mod 65536` is 65,536 values, a handful of outcomes).
    fn resolve_by_lookup(&mut self, s: &Set, koff: usize, klen: usize) {
        let Some(ng) = self.numgen else { return };
        if ng.off < koff || ng.off + 4 > koff + klen || s.flags.interval {
            return self.resolve_by_value();
        }
        self.numgen = None;
        let fields = key_fields(s);
        let Some(ng_field) = fields
            .iter()
            .position(|&(o, l)| koff + o == ng.off && l == 4)
        else {
            // the numgen result is not a whole key field: pick by value
            self.numgen = Some(ng);
            return self.resolve_by_value();
        };
        let key = self.regs[koff..(koff + klen).min(64)].to_vec();
        let mut values: Vec<u32> = s
            .elements
            .iter()
            .filter(|e| {
                fields.iter().enumerate().all(|(i, (o, l))| {
                    i == ng_field
                        || key.get(*o..o + l) == e.key.get(i).map(Value::to_bytes).as_deref()
                })
            })
            .filter_map(|e| match e.key.get(ng_field) {
                Some(Value::Int(v)) if v.wrapping_sub(ng.offset) < ng.modulus => Some(*v),
                _ => None,
            })
            .collect();
        values.sort_unstable();
        values.dedup();
        let miss = (values.len() as u64) < u64::from(ng.modulus);
        let c = self.choose(values.len() as u32 + u32::from(miss)) as usize;
        let v = match values.get(c) {
            Some(v) => *v,
            // a value of the range that no element has
            None => (0..ng.modulus)
                .map(|i| ng.offset.wrapping_add(i))
                .find(|v| values.binary_search(v).is_err())
                .unwrap_or(ng.offset),
        };
        self.regs[ng.off..ng.off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// Choose a pending `numgen` result compared whole with `data` (`==` or `!=`): the
    /// alternatives are that value (when in range) and another one (when there is one),
    /// so `numgen random mod k 0` is two outcomes, not k.
    fn resolve_by_cmp(&mut self, off: usize, op: CmpOp, data: &[u8]) {
        let (Some(ng), Ok(want)) = (self.numgen, <[u8; 4]>::try_from(data)) else {
            return;
        };
        if ng.off == off && matches!(op, CmpOp::Eq | CmpOp::Neq) {
            self.numgen = None;
            let want = u32::from_ne_bytes(want);
            let hit = want.wrapping_sub(ng.offset) < ng.modulus;
            let other = (0..ng.modulus.min(2))
                .map(|i| ng.offset.wrapping_add(i))
                .find(|v| *v != want);
            let values: Vec<u32> = hit.then_some(want).into_iter().chain(other).collect();
            let v = values[(self.choose(values.len() as u32) as usize).min(values.len() - 1)];
            self.regs[ng.off..ng.off + 4].copy_from_slice(&v.to_ne_bytes());
        }
    }

    fn outcome(&self, fate: Fate) -> Outcome {
        Outcome {
            path: self.path.clone(),
            fate,
            dnat: self.dnat,
            masquerade: self.masquerade,
        }
    }

    fn is_local(&self, ip: &IpAddr) -> bool {
        self.local.contains(ip) || ip.is_loopback()
    }

    fn run(&mut self) -> Outcome {
        let hooks: Vec<Hook> = if self.pkt.local_origin {
            vec![Hook::Output, Hook::Postrouting]
        } else {
            vec![Hook::Prerouting]
        };
        for h in hooks {
            if let Some(f) = self.hook(h) {
                return self.outcome(f);
            }
        }
        let dst_local = self.is_local(&self.pkt.dst);
        if self.pkt.local_origin {
            if dst_local {
                if let Some(f) = self.hook(Hook::Input) {
                    return self.outcome(f);
                }
                return self.outcome(Fate::Local);
            }
            return self.outcome(Fate::Out);
        }
        if dst_local {
            if let Some(f) = self.hook(Hook::Input) {
                return self.outcome(f);
            }
            return self.outcome(Fate::Local);
        }
        for h in [Hook::Forward, Hook::Postrouting] {
            if let Some(f) = self.hook(h) {
                return self.outcome(f);
            }
        }
        self.outcome(Fate::Out)
    }

    /// Run the base chains of `hook` by priority; `Some` when the packet ends here.
    fn hook(&mut self, hook: Hook) -> Option<Fate> {
        let mut chains: Vec<&Chain> = self
            .table
            .chains
            .iter()
            .filter(|c| c.base.is_some_and(|b| b.hook == hook))
            .collect();
        chains.sort_by_key(|c| c.base.map(|b| b.priority));
        for c in chains {
            let policy = c.base.map(|b| b.policy);
            match self.chain(&c.name) {
                Flow::Drop => return Some(Fate::Drop),
                Flow::Reject => return Some(Fate::Reject),
                Flow::Accept => {}
                Flow::Return => {
                    if policy == Some(Policy::Drop) {
                        return Some(Fate::Drop);
                    }
                }
            }
        }
        None
    }

    fn chain(&mut self, name: &str) -> Flow {
        self.depth += 1;
        if self.depth > 64 {
            return Flow::Drop; // the kernel refuses deeper jump stacks
        }
        self.path.push(name.to_string());
        let table = self.table;
        let Some(c) = table.chain(name) else {
            return Flow::Drop;
        };
        for r in &c.rules {
            match self.rule(r) {
                None => continue,
                Some(Verdict::Continue) => continue,
                Some(Verdict::Accept) => return self.leave(Flow::Accept),
                Some(Verdict::Drop) => return self.leave(Flow::Drop),
                Some(Verdict::Return) => return self.leave(Flow::Return),
                Some(Verdict::Jump(target)) if target == REJECTED => {
                    return self.leave(Flow::Reject)
                }
                Some(Verdict::Jump(target)) => match self.chain(&target) {
                    Flow::Return => continue,
                    f => return self.leave(f),
                },
                Some(Verdict::Goto(target)) => {
                    let f = self.chain(&target);
                    return self.leave(f);
                }
            }
        }
        self.leave(Flow::Return)
    }

    fn leave(&mut self, f: Flow) -> Flow {
        self.depth -= 1;
        f
    }

    fn reg_off(r: Reg) -> usize {
        r.word_index().unwrap_or(0) as usize * 4
    }

    fn write(&mut self, r: Reg, data: &[u8]) {
        let off = Self::reg_off(r);
        if self
            .numgen
            .is_some_and(|ng| ng.off < off + data.len() && off < ng.off + 4)
        {
            // overwritten before being read: it did not matter
            self.numgen = None;
        }
        let end = (off + data.len()).min(64);
        self.regs[off..end].copy_from_slice(&data[..end - off]);
        // registers are zero-padded to whole words
        let pad_end = (off + data.len().div_ceil(4) * 4).min(64);
        for b in &mut self.regs[end..pad_end] {
            *b = 0;
        }
    }

    fn read(&mut self, r: Reg, len: usize) -> Vec<u8> {
        let off = Self::reg_off(r);
        if self
            .numgen
            .is_some_and(|ng| ng.off < off + len && off < ng.off + 4)
        {
            self.resolve_by_value();
        }
        self.regs[off..(off + len).min(64)].to_vec()
    }

    fn network_header(&self) -> Vec<u8> {
        match (self.pkt.src, self.pkt.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = vec![0u8; 20];
                h[0] = 0x45;
                h[8] = 64;
                h[9] = self.pkt.proto;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                h
            }
            (s, d) => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V6(a) => a,
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                };
                let mut h = vec![0u8; 40];
                h[0] = 0x60;
                h[6] = self.pkt.proto;
                h[7] = 64;
                h[8..24].copy_from_slice(&to6(s).octets());
                h[24..40].copy_from_slice(&to6(d).octets());
                h
            }
        }
    }

    fn transport_header(&self) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0..2].copy_from_slice(&self.pkt.sport.to_be_bytes());
        h[2..4].copy_from_slice(&self.pkt.dport.to_be_bytes());
        h
    }

    fn ifname(name: Option<&str>) -> Vec<u8> {
        let mut b = name.unwrap_or("").as_bytes().to_vec();
        b.resize(16, 0);
        b
    }

    /// Evaluate a rule: `None` when a match fails (or the rule has no verdict).
    fn rule(&mut self, r: &Rule) -> Option<Verdict> {
        for e in r.exprs.iter() {
            match e {
                Expr::Payload {
                    base,
                    offset,
                    len,
                    dreg,
                } => {
                    let hdr = match base {
                        PayloadBase::Network => self.network_header(),
                        PayloadBase::Transport => self.transport_header(),
                        PayloadBase::LinkLayer => vec![0; 14],
                    };
                    let (o, l) = (*offset as usize, *len as usize);
                    let mut v = hdr
                        .get(o..o + l)
                        .map(<[u8]>::to_vec)
                        .unwrap_or_else(|| vec![0; l]);
                    v.resize(l, 0);
                    self.write(*dreg, &v);
                }
                Expr::Meta { key, dreg } => {
                    let v = match key {
                        MetaKey::L4proto => vec![self.pkt.proto],
                        MetaKey::Mark => self.pkt.mark.to_ne_bytes().to_vec(),
                        MetaKey::Iifname => Self::ifname(self.pkt.iif.as_deref()),
                        MetaKey::Oifname => Self::ifname(None),
                        MetaKey::Nfproto => vec![self.pkt.family() as u8],
                        MetaKey::Protocol => if self.pkt.family() == Family::Ip6 {
                            0x86ddu16
                        } else {
                            0x0800u16
                        }
                        .to_be_bytes()
                        .to_vec(),
                        _ => 0u32.to_ne_bytes().to_vec(),
                    };
                    self.write(*dreg, &v);
                }
                Expr::MetaSet { key, sreg } => {
                    if *key == MetaKey::Mark {
                        let b = self.read(*sreg, 4);
                        self.pkt.mark = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
                Expr::Cmp { sreg, op, data } => {
                    self.resolve_by_cmp(Self::reg_off(*sreg), *op, data);
                    let v = self.read(*sreg, data.len());
                    let ord = v.as_slice().cmp(data.as_slice());
                    let ok = match op {
                        CmpOp::Eq => ord.is_eq(),
                        CmpOp::Neq => ord.is_ne(),
                        CmpOp::Lt => ord.is_lt(),
                        CmpOp::Lte => ord.is_le(),
                        CmpOp::Gt => ord.is_gt(),
                        CmpOp::Gte => ord.is_ge(),
                    };
                    if !ok {
                        return None;
                    }
                }
                Expr::Bitwise {
                    sreg,
                    dreg,
                    len,
                    mask,
                    xor,
                } => {
                    let v = self.read(*sreg, *len as usize);
                    let out: Vec<u8> = v
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            (b & mask.get(i).copied().unwrap_or(0))
                                ^ xor.get(i).copied().unwrap_or(0)
                        })
                        .collect();
                    self.write(*dreg, &out);
                }
                Expr::Lookup {
                    set,
                    sreg,
                    dreg,
                    invert,
                } => {
                    let table = self.table;
                    let s = table.set(set)?;
                    let klen = concat_len(&s.key);
                    self.resolve_by_lookup(s, Self::reg_off(*sreg), klen);
                    let key = self.read(*sreg, klen);
                    // a dynamic set holds what the table says: nothing in a compiled
                    // table (no client pinned), the pins a caller put there
                    let found = find_element(s, &key);
                    match dreg {
                        None => {
                            if found.is_some() == *invert {
                                return None;
                            }
                        }
                        Some(d) => {
                            let e = found?;
                            match &e.data {
                                Some(ElemData::Verdict(v)) => return Some(v.clone()),
                                Some(ElemData::Values(v)) => {
                                    let b = concat_bytes_padded(v);
                                    if *d == Reg::VERDICT {
                                        return None;
                                    }
                                    self.write(*d, &b);
                                }
                                None => return None,
                            }
                        }
                    }
                }
                Expr::Immediate { dreg, data } => self.write(*dreg, data),
                Expr::Verdict(v) => return Some(v.clone()),
                Expr::Numgen {
                    modulus,
                    offset,
                    dreg,
                    ..
                } => {
                    // an earlier result still pending is chosen by value first
                    self.resolve_by_value();
                    let off = Self::reg_off(*dreg);
                    self.write(*dreg, &offset.to_ne_bytes());
                    if off + 4 <= 64 {
                        self.numgen = Some(PendingNumgen {
                            off,
                            offset: *offset,
                            modulus: (*modulus).max(1),
                        });
                    }
                }
                Expr::Nat {
                    kind, addr, port, ..
                } => {
                    if *kind == NatKind::Dnat {
                        let fam = self.pkt.family();
                        let a = addr.map(|r| {
                            if fam == Family::Ip6 {
                                let b = self.read(r, 16);
                                IpAddr::from(<[u8; 16]>::try_from(b.as_slice()).unwrap_or([0; 16]))
                            } else {
                                let b = self.read(r, 4);
                                IpAddr::from([b[0], b[1], b[2], b[3]])
                            }
                        });
                        let p = port.map(|r| {
                            let b = self.read(r, 2);
                            u16::from_be_bytes([b[0], b[1]])
                        });
                        let a = a.unwrap_or(self.pkt.dst);
                        let p = p.unwrap_or(self.pkt.dport);
                        self.dnat = Some((a, p));
                        self.pkt.dst = a;
                        self.pkt.dport = p;
                    }
                    return Some(Verdict::Accept);
                }
                Expr::Masquerade { .. } => {
                    self.masquerade = true;
                    return Some(Verdict::Accept);
                }
                Expr::Ct { key, dreg } => {
                    let v: u32 = match key {
                        CtKey::State => ct_state::NEW,
                        CtKey::Status if self.dnat.is_some() => ct_status::DNAT,
                        _ => 0,
                    };
                    self.write(*dreg, &v.to_ne_bytes());
                }
                Expr::CtSet { .. } | Expr::Counter | Expr::CounterRef(_) | Expr::Dynset { .. } => {}
                // never in our tables (only in the iptables-nft chain we keep outside
                // them): the tracer cannot evaluate an x_tables match
                Expr::XtMatch { .. } => return None,
                Expr::Fib {
                    flags,
                    result,
                    dreg,
                } => {
                    let v: u32 = match result {
                        FibResult::AddrType => {
                            let ip = if flags & fib_flags::SADDR != 0 {
                                self.pkt.src
                            } else {
                                self.pkt.dst
                            };
                            if self.is_local(&ip) {
                                rtn::LOCAL
                            } else {
                                rtn::UNICAST
                            }
                        }
                        _ => 0,
                    };
                    self.write(*dreg, &v.to_ne_bytes());
                }
                Expr::Reject(_) => {
                    // a reject ends the packet like a drop, reported separately
                    return Some(Verdict::Jump(REJECTED.into()));
                }
            }
        }
        None
    }
}

/// Pseudo chain a `reject` jumps to (see [`Run::chain`]).
const REJECTED: &str = "\0reject";

fn concat_bytes_padded(v: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for x in v {
        let mut b = x.to_bytes();
        b.resize(x.data_type().padded_len(), 0);
        out.extend(b);
    }
    out
}

/// (offset, length) of each key field in the register layout: fields padded to words
/// when concatenated.
fn key_fields(s: &Set) -> Vec<(usize, usize)> {
    let mut off = 0;
    s.key
        .iter()
        .map(|t| {
            let f = (off, t.len());
            off += if s.key.len() == 1 {
                t.len()
            } else {
                t.padded_len()
            };
            f
        })
        .collect()
}

/// Find the element matching `key`, with intervals per field.
fn find_element<'s>(s: &'s Set, key: &[u8]) -> Option<&'s Element> {
    let fields = key_fields(s);
    s.elements.iter().find(|e| {
        fields.iter().enumerate().all(|(i, (off, len))| {
            let v = key.get(*off..off + len).unwrap_or(&[]);
            let start = e.key.get(i).map(Value::to_bytes).unwrap_or_default();
            match e.key_end() {
                None => v == start.as_slice(),
                Some(end) => {
                    let end = end.get(i).map(Value::to_bytes).unwrap_or_default();
                    v >= start.as_slice() && v <= end.as_slice()
                }
            }
        })
    })
}
