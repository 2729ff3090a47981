//! The nftables transport: one batch, one `sendmsg`, one atomic transaction.
//!
//! [`Nft`] owns a netlink socket in the network namespace of the thread that opened
//! it. [`Nft::commit`] sends a whole batch at once, guarded by the ruleset generation
//! when asked; the kernel applies all of it or nothing. Every kernel error is mapped
//! back to the operation that caused it and rendered as nft text. [`Nft::dump_table`]
//! reads one table back into the model, retrying when the ruleset changed meanwhile.

pub mod forward;
pub mod migrate;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use nft_model::{Op, Set, Table, TableRef};
use nft_wire::consts::*;
use nft_wire::encode::{
    counter_dump_request, dump_elements_request, dump_request, get_chain_request,
    get_table_request, getgen_request,
};
use nft_wire::{
    decode_elements, decode_genid, decode_object, encode_batch, encode_check_batch, Object,
    WireError,
};
use nl_core::{Control, NlMsg, NlMsgIter, NlSocket, OnLoss, ReadOpts, SockConfig};

/// A named counter's values as the kernel holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterValue {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
}

/// One kernel error, tied to the operation that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The errno the kernel reported (positive).
    pub errno: i32,
    /// Index of the op in the batch.
    pub op_index: usize,
    /// For a set element op: the element the kernel refused (its index in the op's
    /// elements), when the kernel says (extended acknowledgements).
    pub element: Option<usize>,
    /// The op rendered as an nft command (with the refused element only, when known).
    pub op_text: String,
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on op {}: {}",
            errno_text(self.errno),
            self.op_index,
            self.op_text
        )
    }
}

/// Errors of the transport.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("netlink socket: {context}: {source}")]
    Io {
        context: &'static str,
        source: std::io::Error,
    },
    #[error("the kernel rejected the batch; nothing was changed: {}", list(.0))]
    Rejected(Vec<OpError>),
    #[error("the kernel rejected the batch ({}) without naming an operation; nothing was changed", errno_text(*.0))]
    BatchFailed(i32),
    #[error("the ruleset generation changed since it was read (expected {expected}); nothing was changed")]
    GenerationChanged { expected: u32 },
    #[error(
        "the batch outcome is unknown: the socket overflowed while reading the kernel's answers"
    )]
    OutcomeUnknown,
    #[error("dump of {what}: {errno}", errno = errno_text(*.errno))]
    Dump { what: String, errno: i32 },
    #[error("dump of {what} kept changing under us after {tries} tries")]
    DumpUnstable { what: String, tries: u32 },
    #[error("decoding the kernel's {what}: {source}")]
    Decode { what: String, source: WireError },
    #[error("encoding the batch: {0}")]
    Encode(#[from] WireError),
    #[error("no answer from the kernel within {0:?}")]
    Timeout(Duration),
}

/// Op `i` as an nft command; for a set element op whose refused element is known,
/// with that element only (an op may hold a hundred thousand).
fn op_text(ops: &[Op], i: usize, element: Option<usize>) -> String {
    let one = element.and_then(|k| ops[i].one_element(k));
    nft_model::render::op_with(one.as_ref().unwrap_or(&ops[i]), |name| is_map(ops, name))
}

fn list(e: &[OpError]) -> String {
    e.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `strerror`-like text for an errno, e.g. "ENOENT (2)".
pub fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::ENOMEM => "ENOMEM",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOBUFS => "ENOBUFS",
        libc::ELOOP => "ELOOP",
        libc::ERESTART => "ERESTART",
        libc::E2BIG => "E2BIG",
        _ => "errno",
    };
    format!(
        "{name} ({errno}): {}",
        std::io::Error::from_raw_os_error(errno)
    )
}

/// What a successful commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitReport {
    pub ops: usize,
    pub messages: usize,
    pub bytes: usize,
}

/// Settings of the transport.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long to wait for the kernel's answer to one request or batch.
    pub timeout: Duration,
    /// Receive buffer asked of the kernel (`SO_RCVBUFFORCE`).
    pub rcvbuf: usize,
    /// How often a dump is retried when the ruleset changed while it ran.
    pub dump_tries: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: Duration::from_secs(60),
            rcvbuf: 8 << 20,
            dump_tries: 8,
        }
    }
}

/// A netlink socket speaking nftables.
pub struct Nft {
    sock: NlSocket,
    cfg: Config,
}

const RECV_BUF: usize = 1 << 20;

/// Answers are read whole or not at all: a lost or malformed datagram fails the read
/// and the caller retries the whole dump.
const READ: ReadOpts = ReadOpts {
    on_loss: OnLoss::Fail,
    limit: None,
};

impl Nft {
    /// Open a socket in the calling thread's network namespace.
    pub fn open() -> Result<Nft, NftError> {
        Nft::with_config(Config::default())
    }

    pub fn with_config(cfg: Config) -> Result<Nft, NftError> {
        // Extended acks are not needed: errors are mapped back by sequence number.
        let sock = NlSocket::open(
            NETLINK_NETFILTER,
            &SockConfig {
                rcvbuf: Some(cfg.rcvbuf),
                recv_timeout: Some(cfg.timeout),
                first_seq: std::process::id().wrapping_mul(7919) & 0x00ff_ffff,
                recv_buf_len: RECV_BUF,
                ext_ack: true,
                ..SockConfig::default()
            },
        )
        .map_err(|e| NftError::Io {
            context: e.op,
            source: e.source,
        })?;
        Ok(Nft { sock, cfg })
    }

    fn next_seq(&mut self, n: u32) -> u32 {
        self.sock.reserve_seqs(n)
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), NftError> {
        // One sendmsg carries the whole batch: the send buffer must hold it.
        self.sock.grow_sndbuf(bytes.len());
        self.sock.send(bytes).map_err(|source| NftError::Io {
            context: "sendmsg",
            source,
        })
    }

    /// The current ruleset generation id.
    pub fn generation(&mut self) -> Result<u32, NftError> {
        let seq = self.next_seq(1);
        self.send(&getgen_request(seq))?;
        let mut genid = None;
        // A non-dump GET is answered by the object alone, without DONE or ACK.
        self.read_until(seq, true, |m| {
            if m.kind & 0xff == NFT_MSG_NEWGEN {
                genid = m.nfgen().and_then(|(_, _, attrs)| decode_genid(attrs));
            }
        })
        .map_err(|e| e.into_nft("generation"))?;
        genid.ok_or(NftError::Dump {
            what: "generation".into(),
            errno: libc::EPROTO,
        })
    }

    /// Send `ops` as one atomic transaction. With `genid`, the kernel refuses it
    /// ([`NftError::GenerationChanged`]) if anyone changed the ruleset since then.
    /// An empty `ops` sends nothing.
    pub fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitReport, NftError> {
        self.transact(ops, genid, true)
    }

    /// Have the kernel check `ops` as [`Nft::commit`] would (every message, then the
    /// validation of the result) and abort: nothing changes. The same errors as a
    /// commit, or Ok when a commit of `ops` would be accepted now.
    pub fn check(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitReport, NftError> {
        self.transact(ops, genid, false)
    }

    fn transact(
        &mut self,
        ops: &[Op],
        genid: Option<u32>,
        apply: bool,
    ) -> Result<CommitReport, NftError> {
        if ops.is_empty() {
            return Ok(CommitReport::default());
        }
        let first = self.sock.peek_seq();
        let batch = if apply {
            encode_batch(ops, first, genid)?
        } else {
            encode_check_batch(ops, first, genid)?
        };
        let messages = batch.seqs.len();
        if self.next_seq(messages as u32 + 2) != first {
            // The sequence numbers wrapped: encode again from the new start.
            return self.transact(ops, genid, apply);
        }
        let end_seq = first.wrapping_add(messages as u32 + 1);
        self.send(&batch.bytes)?;
        let ack_seq = batch.ack_seq.unwrap_or(end_seq);
        // per refused message: its errno and, when the kernel names it, the offset of
        // the attribute it refused
        let mut errors: BTreeMap<u32, (i32, Option<u32>)> = BTreeMap::new();
        let mut done = false;
        while !done {
            match self.sock.recv() {
                Ok(_) => {}
                Err(e) if nl_core::is_enobufs(&e) => return Err(NftError::OutcomeUnknown),
                Err(e) if nl_core::is_timeout(&e) => {
                    return Err(NftError::Timeout(self.cfg.timeout))
                }
                Err(source) => {
                    return Err(NftError::Io {
                        context: "recv",
                        source,
                    })
                }
            }
            for m in NlMsgIter::new(self.sock.data()) {
                let Some((code, seq)) = m.error() else {
                    continue;
                };
                if code != 0 {
                    errors.insert(seq, (-code, m.error_offset()));
                }
                // The answer to the acknowledged message, or an error about the batch
                // itself (its BEGIN or END), is the last thing the kernel sends.
                if seq == ack_seq || seq == first || seq == end_seq {
                    done = true;
                }
            }
        }
        if errors.is_empty() {
            return Ok(CommitReport {
                ops: ops.len(),
                messages,
                bytes: batch.bytes.len(),
            });
        }
        if let Some(&(errno, _)) = errors.get(&first) {
            if errno == libc::ERESTART {
                if let Some(expected) = genid {
                    return Err(NftError::GenerationChanged { expected });
                }
            }
        }
        let mut per_op: Vec<OpError> = Vec::new();
        let mut unattributed = None;
        for (seq, (errno, offset)) in errors {
            let element = offset.and_then(|o| batch.element_at(seq, o));
            match batch.op_of_seq(seq) {
                Some(i)
                    if !per_op
                        .iter()
                        .any(|e| e.op_index == i && e.errno == errno && e.element == element) =>
                {
                    per_op.push(OpError {
                        errno,
                        op_index: i,
                        element,
                        op_text: op_text(ops, i, element),
                    })
                }
                Some(_) => {}
                None => unattributed = Some(errno),
            }
        }
        if per_op.is_empty() {
            return Err(NftError::BatchFailed(unattributed.unwrap_or(libc::EPROTO)));
        }
        Err(NftError::Rejected(per_op))
    }

    /// Commit with the generation guard, rebuilding the batch when someone else
    /// changed the ruleset in between: `build` gets this transport (to read what it
    /// needs) and returns the ops; at most `tries` attempts.
    pub fn commit_guarded<F>(&mut self, tries: u32, mut build: F) -> Result<CommitReport, NftError>
    where
        F: FnMut(&mut Nft) -> Result<Vec<Op>, NftError>,
    {
        let mut last = None;
        for _ in 0..tries.max(1) {
            let genid = self.generation()?;
            let ops = build(self)?;
            match self.commit(&ops, Some(genid)) {
                Err(NftError::GenerationChanged { expected }) => {
                    tracing::debug!(expected, "ruleset generation moved; rebuilding the batch");
                    last = Some(NftError::GenerationChanged { expected });
                }
                other => return other,
            }
        }
        Err(last.unwrap_or(NftError::GenerationChanged { expected: 0 }))
    }

    /// Read messages until the answer to `seq` ends (DONE, or an ACK/error for it,
    /// or with `single` the first data message). Calls `each` for every data message
    /// with that sequence number.
    fn read_until<F>(
        &mut self,
        seq: u32,
        single: bool,
        mut each: F,
    ) -> Result<ReadOutcome, ReadError>
    where
        F: FnMut(&NlMsg<'_>),
    {
        let ans = self.sock.read_answer(seq, &READ, |m| {
            each(m);
            if single {
                Control::Stop
            } else {
                Control::Continue
            }
        });
        match ans {
            Ok(a) => Ok(ReadOutcome {
                interrupted: a.interrupted,
            }),
            Err(e) => Err(match e {
                nl_core::ReadError::Kernel(errno) => ReadError::Errno(errno),
                nl_core::ReadError::Overrun => ReadError::Overrun,
                nl_core::ReadError::Malformed => ReadError::Errno(libc::EPROTO),
                nl_core::ReadError::Timeout | nl_core::ReadError::Deadline => {
                    ReadError::Timeout(self.cfg.timeout)
                }
                nl_core::ReadError::Send(e) | nl_core::ReadError::Io(e) => ReadError::Io(e),
            }),
        }
    }

    /// Run one dump request and collect the decoded objects.
    fn dump(
        &mut self,
        what: &str,
        req: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<(Vec<Object>, bool), ReadError> {
        self.dump_with(what, req, |kind, family, attrs| {
            decode_object(kind, family, attrs)
        })
    }

    /// Run one dump request and decode every nftables message with `decode`
    /// (`NFT_MSG_*` type, family, attributes).
    pub(crate) fn dump_with<T>(
        &mut self,
        what: &str,
        req: impl FnOnce(u32) -> Vec<u8>,
        decode: impl Fn(u16, u8, &[u8]) -> Result<T, WireError>,
    ) -> Result<(Vec<T>, bool), ReadError> {
        let seq = self.next_seq(1);
        self.send(&req(seq)).map_err(|e| match e {
            NftError::Io { source, .. } => ReadError::Io(source),
            _ => ReadError::Errno(libc::EIO),
        })?;
        let mut objects = Vec::new();
        let mut decode_err = None;
        let outcome = self.read_until(seq, false, |m| {
            if m.kind >> 8 != NFNL_SUBSYS_NFTABLES {
                return;
            }
            let Some((family, _, attrs)) = m.nfgen() else {
                return;
            };
            match decode(m.kind & 0xff, family, attrs) {
                Ok(o) => objects.push(o),
                Err(e) => {
                    decode_err.get_or_insert(e);
                }
            }
        })?;
        if let Some(e) = decode_err {
            return Err(ReadError::Decode(what.to_string(), e));
        }
        Ok((objects, outcome.interrupted))
    }

    /// Read one table back from the kernel into the model; `None` if it does not
    /// exist. Elements of dynamic sets are runtime state and are not read.
    pub fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, NftError> {
        self.dump_table_judged(t, &mut |_, _| false)
    }

    /// [`Nft::dump_table`], where a dump during which the generation moved (from
    /// `before` to `after`) is still taken when `others_only(before, after)` says every
    /// transaction in between touched other tables than this one (another program
    /// committing to its own tables all the time would otherwise interrupt every dump of
    /// a large table). A dump that read a rule of a chain it did not list is retried
    /// whatever the judge says.
    pub fn dump_table_judged(
        &mut self,
        t: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, NftError> {
        let what = format!("table {} {}", t.family.nft_name(), t.name);
        for _ in 0..self.cfg.dump_tries {
            let before = self.generation()?;
            match self.dump_table_once(t) {
                Ok((table, interrupted)) => {
                    let after = self.generation()?;
                    if (after == before && !interrupted) || others_only(before, after) {
                        return Ok(table);
                    }
                }
                Err(ReadError::Overrun) | Err(ReadError::Interrupted) => {}
                Err(e) => return Err(e.into_nft(&what)),
            }
        }
        Err(NftError::DumpUnstable {
            what,
            tries: self.cfg.dump_tries,
        })
    }

    /// One read of the table (None: it does not exist), and whether a dump was
    /// interrupted (the generation moved meanwhile).
    fn dump_table_once(&mut self, t: &TableRef) -> Result<(Option<Table>, bool), ReadError> {
        let (tables, _) = self.dump("tables", |seq| get_table_request(t, seq))?;
        let Some(comment) = tables.into_iter().find_map(|o| match o {
            Object::Table { table, comment } if &table == t => Some(comment),
            _ => None,
        }) else {
            return Ok((None, false));
        };
        let mut table = Table::new(t.family, t.name.clone());
        table.comment = comment;
        let mut interrupted = false;
        let (sets, i1) = self.dump("sets", |seq| dump_request(NFT_MSG_GETSET, t, seq))?;
        let (chains, i2) = self.dump("chains", |seq| dump_request(NFT_MSG_GETCHAIN, t, seq))?;
        let (rules, i3) = self.dump("rules", |seq| dump_request(NFT_MSG_GETRULE, t, seq))?;
        let (counters, i4) = self.dump("counters", |seq| counter_dump_request(t, seq))?;
        interrupted |= i1 | i2 | i3 | i4;
        for o in counters {
            if let Object::Counter {
                table: tr, name, ..
            } = o
            {
                if &tr == t {
                    table.counters.push(name);
                }
            }
        }
        for o in sets {
            if let Object::Set { table: tr, set } = o {
                if &tr == t {
                    table.sets.push(set);
                }
            }
        }
        for i in 0..table.sets.len() {
            if table.sets[i].flags.dynamic {
                continue;
            }
            let name = table.sets[i].name.clone();
            let (objs, intr) = self.dump("elements", |seq| dump_elements_request(t, &name, seq))?;
            interrupted |= intr;
            let set: &mut Set = &mut table.sets[i];
            for o in objs {
                if let Object::Elements { raw, .. } = o {
                    let els = decode_elements(set, &raw)
                        .map_err(|e| ReadError::Decode(format!("set {name}"), e))?;
                    set.elements.extend(els);
                }
            }
        }
        let mut index: HashMap<String, usize> = HashMap::new();
        for o in chains {
            if let Object::Chain { table: tr, chain } = o {
                if &tr == t {
                    index.insert(chain.name.clone(), table.chains.len());
                    table.chains.push(chain);
                }
            }
        }
        for o in rules {
            if let Object::Rule {
                table: tr,
                chain,
                rule,
                ..
            } = o
            {
                if &tr != t {
                    continue;
                }
                match index.get(&chain) {
                    Some(&i) => table.chains[i].rules.push(rule),
                    None => return Err(ReadError::Interrupted),
                }
            }
        }
        Ok((Some(table), interrupted))
    }

    /// The named counters of a table with their values (packets, bytes), by name;
    /// empty when the table does not exist.
    pub fn read_counters(&mut self, t: &TableRef) -> Result<Vec<CounterValue>, NftError> {
        let what = format!("counters of table {} {}", t.family.nft_name(), t.name);
        let objs = match self.dump("counters", |seq| counter_dump_request(t, seq)) {
            Ok((objs, _)) => objs,
            Err(ReadError::Errno(libc::ENOENT)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into_nft(&what)),
        };
        let mut out: Vec<CounterValue> = objs
            .into_iter()
            .filter_map(|o| match o {
                Object::Counter {
                    table,
                    name,
                    packets,
                    bytes,
                } if &table == t => Some(CounterValue {
                    name,
                    packets,
                    bytes,
                }),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The chains of a table as the kernel lists them: each name, and whether it is a
    /// base chain. Chains of other tables in the dump (a table of the same name in
    /// another family) are left out.
    pub(crate) fn table_chains(&mut self, t: &TableRef) -> Result<Vec<(String, bool)>, NftError> {
        let chain_of =
            |kind: u16, fam: u8, attrs: &[u8]| -> Result<Option<(String, bool)>, WireError> {
                if kind != NFT_MSG_NEWCHAIN {
                    return Ok(None);
                }
                match decode_object(kind, fam, attrs)? {
                    Object::Chain { table, chain } if table == *t => {
                        Ok(Some((chain.name, chain.base.is_some())))
                    }
                    _ => Ok(None),
                }
            };
        let (chains, _) = self
            .dump_with(
                "chains",
                |seq| dump_request(NFT_MSG_GETCHAIN, t, seq),
                chain_of,
            )
            .map_err(|e| e.into_nft(&t.name))?;
        Ok(chains.into_iter().flatten().collect())
    }

    /// Whether a chain exists, asked by name (a GET, not a dump: a chain dump sends
    /// every chain of the family, tens of thousands when our table is large).
    pub(crate) fn chain_exists(&mut self, t: &TableRef, chain: &str) -> Result<bool, NftError> {
        let found = self.dump_with(
            "chain",
            |seq| get_chain_request(t, chain, seq),
            |kind, fam, attrs| -> Result<bool, WireError> {
                Ok(kind == NFT_MSG_NEWCHAIN
                    && matches!(decode_object(kind, fam, attrs)?,
                        Object::Chain { table, chain: c } if table == *t && c.name == chain))
            },
        );
        match found {
            Ok((answers, _)) => Ok(answers.into_iter().any(|a| a)),
            Err(ReadError::Errno(libc::ENOENT)) => Ok(false),
            Err(e) => Err(e.into_nft(&format!("chain {} {} {chain}", t.family.nft_name(), t.name))),
        }
    }

    /// Whether a table exists.
    pub fn table_exists(&mut self, t: &TableRef) -> Result<bool, NftError> {
        let (tables, _) = self
            .dump("tables", |seq| get_table_request(t, seq))
            .map_err(|e| e.into_nft("tables"))?;
        Ok(tables
            .iter()
            .any(|o| matches!(o, Object::Table { table, .. } if table == t)))
    }
}

#[derive(Debug)]
struct ReadOutcome {
    interrupted: bool,
}

#[derive(Debug)]
pub(crate) enum ReadError {
    Errno(i32),
    Overrun,
    Interrupted,
    Timeout(Duration),
    Io(std::io::Error),
    Decode(String, WireError),
}

impl ReadError {
    pub(crate) fn into_nft(self, what: &str) -> NftError {
        match self {
            ReadError::Errno(errno) => NftError::Dump {
                what: what.to_string(),
                errno,
            },
            ReadError::Overrun => NftError::Dump {
                what: what.to_string(),
                errno: libc::ENOBUFS,
            },
            ReadError::Interrupted => NftError::DumpUnstable {
                what: what.to_string(),
                tries: 1,
            },
            ReadError::Timeout(d) => NftError::Timeout(d),
            ReadError::Io(source) => NftError::Io {
                context: "recv",
                source,
            },
            ReadError::Decode(w, source) => NftError::Decode {
                what: format!("{what}: {w}"),
                source,
            },
        }
    }
}

/// Whether `name` is declared as a map by an `AddSet` in `ops` (for `flush map` vs `flush set`).
fn is_map(ops: &[Op], name: &str) -> bool {
    ops.iter()
        .any(|o| matches!(o, Op::AddSet { set, .. } if set.name == name && set.is_map()))
}
