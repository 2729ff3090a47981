//! Encoding of batch operations into one nftables transaction.

use crate::consts::*;
use crate::elements::{element_list, ElementOp};
use crate::expr::encode_expr;
use crate::msg::{nfnl_len, nft_type, push_message};
use crate::nla::{udata, NlaWriter, NLA_MAX_PAYLOAD};
use crate::WireError;
use nft_model::*;

/// A transaction ready to be sent with one `sendmsg`.
#[derive(Debug, Clone)]
pub struct EncodedBatch {
    pub bytes: Vec<u8>,
    /// For each object message: its sequence number and the index of the op it encodes.
    pub seqs: Vec<(u32, usize)>,
    /// Sequence number of the message that asks for the acknowledgement (the last
    /// object message), if the batch has any object message.
    pub ack_seq: Option<u32>,
}

impl EncodedBatch {
    /// The op index behind a sequence number (binary search: `seqs` is ordered).
    pub fn op_of_seq(&self, seq: u32) -> Option<usize> {
        self.seqs
            .binary_search_by_key(&seq, |&(s, _)| s)
            .ok()
            .map(|i| self.seqs[i].1)
    }

    /// The element a refusal blames, as its index in its op's element list: `offset`
    /// is the kernel's extended-ack offset of the refused attribute in message `seq`
    /// (from that message's `nlmsghdr`; nf_tables names the one element it refused in
    /// a set element list). None when it points into no element. (An op's elements may
    /// be split over several messages: those of the op before `seq` are counted.)
    pub fn element_at(&self, seq: u32, offset: u32) -> Option<usize> {
        let op = self.op_of_seq(seq)?;
        let offset = offset as usize;
        let mut before = 0usize;
        for m in nl_core::NlMsgIter::new(&self.bytes) {
            if self.op_of_seq(m.seq) != Some(op) {
                continue;
            }
            let Some(list) = element_list(&m) else {
                continue;
            };
            if m.seq != seq {
                before += nl_core::NlaIter::new(list).count();
                continue;
            }
            let base = m.bytes.as_ptr() as usize;
            return nl_core::NlaIter::new(list)
                .position(|e| {
                    let end = e.data.as_ptr() as usize - base + e.data.len();
                    let start = e.data.as_ptr() as usize - base - nl_core::NLA_HDRLEN;
                    (start..end).contains(&offset)
                })
                .map(|i| before + i);
        }
        None
    }
}

/// Encode `ops` as BATCH_BEGIN, one or more messages per op, BATCH_END. With `genid`,
/// the kernel refuses the batch (ERESTART) if the ruleset generation moved.
pub fn encode_batch(
    ops: &[Op],
    first_seq: u32,
    genid: Option<u32>,
) -> Result<EncodedBatch, WireError> {
    encode(ops, first_seq, genid, true)
}

/// [`encode_batch`] without BATCH_END: the kernel checks every message (and validates
/// the result) as for a commit, reports the errors, then aborts the transaction and
/// changes nothing (what `nft --check` sends).
pub fn encode_check_batch(
    ops: &[Op],
    first_seq: u32,
    genid: Option<u32>,
) -> Result<EncodedBatch, WireError> {
    encode(ops, first_seq, genid, false)
}

fn encode(
    ops: &[Op],
    first_seq: u32,
    genid: Option<u32>,
    end: bool,
) -> Result<EncodedBatch, WireError> {
    // First the size: each op's message written into one scratch buffer and measured
    // (then overwritten by the next op's), element lists' split and exact length. Then
    // one buffer of exactly the batch's size, each message written straight into it: a
    // batch of millions of elements is never grown and copied, nor held twice, and no
    // op's message is kept between the passes (at 50,000 production-shaped services
    // they were 81 MB beside the batch).
    let mut set_id = 1u32;
    let mut planned: Vec<Planned<'_>> = Vec::with_capacity(ops.len());
    let mut size = 0;
    let mut messages = 0;
    let mut scratch = NlaWriter::new();
    for op in ops {
        match ElementOp::of(op) {
            Some(list) => {
                let (chunks, len) = list.size()?;
                size += len;
                messages += chunks.len();
                planned.push(Planned::Elements(list, chunks));
            }
            None => {
                scratch.clear();
                let (kind, flags) = op_attrs(op, &mut set_id, &mut scratch)?;
                size += nfnl_len(scratch.len());
                messages += 1;
                planned.push(Planned::Message { kind, flags });
            }
        }
    }
    drop(scratch);
    let mut begin = NlaWriter::new();
    if let Some(g) = genid {
        begin.be32(NFNL_BATCH_GENID, g);
    }
    size += nfnl_len(begin.len()) + if end { nfnl_len(0) } else { 0 };
    let mut w = NlaWriter::with_capacity(size);
    let mut seq = first_seq;
    push_message(
        &mut w.buf,
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        seq,
        0,
        NFNL_SUBSYS_NFTABLES,
        &begin.buf,
    );
    seq = seq.wrapping_add(1);
    let mut seqs = Vec::with_capacity(messages);
    let mut last_msg_at = None;
    // the same set ids as the first pass gave
    let mut set_id = 1u32;
    for (i, (op, planned)) in ops.iter().zip(planned).enumerate() {
        match planned {
            Planned::Elements(list, chunks) => {
                let (n, last) = list.write(&mut w, seq, &chunks);
                last_msg_at = Some(last);
                for _ in 0..n {
                    seqs.push((seq, i));
                    seq = seq.wrapping_add(1);
                }
            }
            Planned::Message { kind, flags } => {
                last_msg_at = Some(w.len());
                let m = w.begin_nfnl(
                    nft_type(kind),
                    NLM_F_REQUEST | flags,
                    seq,
                    op.table().family as u8,
                );
                op_attrs(op, &mut set_id, &mut w)?;
                w.end_msg(m);
                seqs.push((seq, i));
                seq = seq.wrapping_add(1);
            }
        }
    }
    let mut bytes = w.buf;
    let mut ack_seq = None;
    if let Some(at) = last_msg_at {
        // Ask for one acknowledgement, on the last object message; errors of any
        // message are reported whatever its flags.
        let flags_at = at + 6;
        let flags = u16::from_ne_bytes([bytes[flags_at], bytes[flags_at + 1]]) | NLM_F_ACK;
        bytes[flags_at..flags_at + 2].copy_from_slice(&flags.to_ne_bytes());
        ack_seq = seqs.last().map(|&(s, _)| s);
    }
    if end {
        push_message(
            &mut bytes,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            seq,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
    }
    debug_assert_eq!(bytes.len(), size, "the batch's size was told exactly");
    Ok(EncodedBatch {
        bytes,
        seqs,
        ack_seq,
    })
}

/// What the first pass left of an op: its message's type and flags (the message is
/// written again straight into the batch), or an element list and its split.
enum Planned<'a> {
    Message { kind: u16, flags: u16 },
    Elements(ElementOp<'a>, Vec<usize>),
}

fn table_attrs(w: &mut NlaWriter, kind: u16, t: &TableRef) {
    w.str(kind, &t.name);
}

fn comment_udata(kind: u8, c: Option<&str>) -> Option<Vec<u8>> {
    c.map(|c| {
        let mut u = Vec::new();
        udata::put_str(&mut u, kind, c);
        u
    })
}

/// The attributes of an op's one message, appended to `w`; returns the message's type
/// (NFT_MSG_*) and its flags beyond `NLM_F_REQUEST`. `set_id`: the id the next new set
/// takes in this batch.
fn op_attrs(op: &Op, set_id: &mut u32, w: &mut NlaWriter) -> Result<(u16, u16), WireError> {
    let start = w.len();
    match op {
        Op::AddTable { table, comment } => {
            table_attrs(w, NFTA_TABLE_NAME, table);
            w.be32(NFTA_TABLE_FLAGS, 0);
            if let Some(u) = comment_udata(UDATA_TABLE_COMMENT, comment.as_deref()) {
                w.bytes(NFTA_TABLE_USERDATA, &u);
            }
            Ok((NFT_MSG_NEWTABLE, NLM_F_CREATE))
        }
        Op::DeleteTable { table } => {
            table_attrs(w, NFTA_TABLE_NAME, table);
            Ok((NFT_MSG_DELTABLE, 0))
        }
        Op::AddChain {
            table,
            name,
            base,
            comment,
        } => {
            table_attrs(w, NFTA_CHAIN_TABLE, table);
            w.str(NFTA_CHAIN_NAME, name);
            if let Some(b) = base {
                let h = w.begin(NFTA_CHAIN_HOOK);
                w.be32(NFTA_HOOK_HOOKNUM, b.hook as u32);
                w.be32(NFTA_HOOK_PRIORITY, b.priority as u32);
                w.end(h);
                w.be32(NFTA_CHAIN_POLICY, b.policy as u32);
                w.str(NFTA_CHAIN_TYPE, b.chain_type.name());
            }
            if let Some(u) = comment_udata(UDATA_CHAIN_COMMENT, comment.as_deref()) {
                w.bytes(NFTA_CHAIN_USERDATA, &u);
            }
            Ok((NFT_MSG_NEWCHAIN, NLM_F_CREATE))
        }
        Op::FlushChain { table, chain } => {
            table_attrs(w, NFTA_RULE_TABLE, table);
            w.str(NFTA_RULE_CHAIN, chain);
            Ok((NFT_MSG_DELRULE, 0))
        }
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => {
            table_attrs(w, NFTA_RULE_TABLE, table);
            w.str(NFTA_RULE_CHAIN, chain);
            w.be64(NFTA_RULE_HANDLE, *handle);
            Ok((NFT_MSG_DELRULE, 0))
        }
        Op::DeleteChain { table, chain } => {
            table_attrs(w, NFTA_CHAIN_TABLE, table);
            w.str(NFTA_CHAIN_NAME, chain);
            Ok((NFT_MSG_DELCHAIN, 0))
        }
        Op::AddRule { table, chain, rule } | Op::InsertRule { table, chain, rule } => {
            table_attrs(w, NFTA_RULE_TABLE, table);
            w.str(NFTA_RULE_CHAIN, chain);
            let list = w.begin(NFTA_RULE_EXPRESSIONS);
            for e in rule.exprs.iter() {
                encode_expr(w, e);
            }
            w.end(list);
            if let Some(u) = comment_udata(UDATA_RULE_COMMENT, rule.comment.as_deref()) {
                w.bytes(NFTA_RULE_USERDATA, &u);
            }
            if w.len() - start > NLA_MAX_PAYLOAD {
                return Err(WireError::TooLarge {
                    what: format!("rule in chain {chain}"),
                    len: w.len() - start,
                });
            }
            // without NLM_F_APPEND (and no position) the kernel inserts at the head
            let append = if matches!(op, Op::AddRule { .. }) {
                NLM_F_APPEND
            } else {
                0
            };
            Ok((NFT_MSG_NEWRULE, NLM_F_CREATE | append))
        }
        Op::AddSet { table, set } => {
            encode_set(w, table, set, *set_id);
            *set_id += 1;
            Ok((NFT_MSG_NEWSET, NLM_F_CREATE))
        }
        Op::DeleteSet { table, set } => {
            table_attrs(w, NFTA_SET_TABLE, table);
            w.str(NFTA_SET_NAME, set);
            Ok((NFT_MSG_DELSET, 0))
        }
        Op::FlushSet { table, set } => {
            table_attrs(w, NFTA_SET_ELEM_LIST_TABLE, table);
            w.str(NFTA_SET_ELEM_LIST_SET, set);
            Ok((NFT_MSG_DELSETELEM, 0))
        }
        // written straight into the batch (`elements`)
        Op::AddElements { set, .. }
        | Op::DeleteElements { set, .. }
        | Op::AddPackedElements { set, .. } => Err(WireError::Invalid {
            what: "element list",
            detail: format!("set {set}: not encoded as a message of its own"),
        }),
        // as nft sends them: a new counter with zero values (kept by the kernel when
        // the counter exists), a delete with an empty data nest
        Op::AddCounter { table, name } => {
            counter_attrs(w, table, name);
            let d = w.begin(NFTA_OBJ_DATA);
            w.be64(NFTA_COUNTER_BYTES, 0);
            w.be64(NFTA_COUNTER_PACKETS, 0);
            w.end(d);
            Ok((NFT_MSG_NEWOBJ, NLM_F_CREATE))
        }
        Op::DeleteCounter { table, name } => {
            counter_attrs(w, table, name);
            let d = w.begin(NFTA_OBJ_DATA);
            w.end(d);
            Ok((NFT_MSG_DELOBJ, 0))
        }
    }
}

fn counter_attrs(w: &mut NlaWriter, table: &TableRef, name: &str) {
    table_attrs(w, NFTA_OBJ_TABLE, table);
    w.str(NFTA_OBJ_NAME, name);
    w.be32(NFTA_OBJ_TYPE, NFT_OBJECT_COUNTER);
}

/// Set declaration attributes.
pub fn encode_set(w: &mut NlaWriter, table: &TableRef, s: &Set, id: u32) {
    table_attrs(w, NFTA_SET_TABLE, table);
    w.str(NFTA_SET_NAME, &s.name);
    let mut flags = 0;
    if s.flags.constant {
        flags |= SetFlags::CONSTANT;
    }
    if s.flags.interval {
        flags |= SetFlags::INTERVAL;
    }
    if s.flags.timeout {
        flags |= SetFlags::TIMEOUT;
    }
    if s.flags.dynamic {
        flags |= SetFlags::EVAL;
    }
    if s.data.is_some() {
        flags |= SetFlags::MAP;
    }
    if s.needs_concat_desc() {
        flags |= SetFlags::CONCAT;
    }
    w.be32(NFTA_SET_FLAGS, flags);
    w.be32(NFTA_SET_KEY_TYPE, concat_type_id(&s.key));
    w.be32(NFTA_SET_KEY_LEN, concat_len(&s.key) as u32);
    match &s.data {
        Some(SetData::Verdict) => {
            w.be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT);
            w.be32(NFTA_SET_DATA_LEN, 0);
        }
        Some(SetData::Values(t)) => {
            w.be32(NFTA_SET_DATA_TYPE, concat_type_id(t));
            w.be32(NFTA_SET_DATA_LEN, concat_len(t) as u32);
        }
        None => {}
    }
    if let Some(t) = s.timeout_ms {
        w.be64(NFTA_SET_TIMEOUT, t);
    }
    if s.size.is_some() || s.needs_concat_desc() {
        // as libnftnl writes it: the size, then the field lengths
        let d = w.begin(NFTA_SET_DESC);
        if let Some(n) = s.size {
            w.be32(NFTA_SET_DESC_SIZE, n);
        }
        if s.needs_concat_desc() {
            let c = w.begin(NFTA_SET_DESC_CONCAT);
            for f in &s.key {
                let e = w.begin(NFTA_LIST_ELEM);
                w.be32(NFTA_SET_FIELD_LEN, f.len() as u32);
                w.end(e);
            }
            w.end(c);
        }
        w.end(d);
    }
    w.be32(NFTA_SET_ID, id);
    w.bytes(NFTA_SET_USERDATA, &crate::set_udata::set_udata(s));
}

/// A request for the current ruleset generation (`NFT_MSG_GETGEN`).
pub fn getgen_request(seq: u32) -> Vec<u8> {
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(NFT_MSG_GETGEN),
        NLM_F_REQUEST,
        seq,
        0,
        0,
        &[],
    );
    b
}

/// A dump of the tables of one family (filter by name on reading: a non-dump GET is
/// answered without DONE or ACK, which makes its end ambiguous).
pub fn get_table_request(t: &TableRef, seq: u32) -> Vec<u8> {
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(NFT_MSG_GETTABLE),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        t.family as u8,
        0,
        &[],
    );
    b
}

/// `NFT_MSG_GETOBJ` dump of the named counters of one table (answered by one
/// `NEWOBJ` per counter, decoded as [`crate::Object::Counter`] with its values).
pub fn counter_dump_request(t: &TableRef, seq: u32) -> Vec<u8> {
    let mut w = NlaWriter::new();
    table_attrs(&mut w, NFTA_OBJ_TABLE, t);
    w.be32(NFTA_OBJ_TYPE, NFT_OBJECT_COUNTER);
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(NFT_MSG_GETOBJ),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        t.family as u8,
        0,
        &w.buf,
    );
    b
}

/// `NFT_MSG_GETCHAIN` of one chain by name, not a dump, with `NLM_F_ACK`: answered by
/// the chain and an ACK, or by an error (`ENOENT`: no such table or chain). A chain
/// dump cannot be restricted to a table: the kernel walks and sends every chain of
/// the family (ours included, tens of thousands), so asking whether a chain exists
/// goes by name.
pub fn get_chain_request(t: &TableRef, chain: &str, seq: u32) -> Vec<u8> {
    let mut w = NlaWriter::new();
    table_attrs(&mut w, NFTA_CHAIN_TABLE, t);
    w.str(NFTA_CHAIN_NAME, chain);
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(NFT_MSG_GETCHAIN),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        t.family as u8,
        0,
        &w.buf,
    );
    b
}

/// `NFT_MSG_GETCHAIN`, `GETSET` or `GETRULE` dump restricted to one table.
pub fn dump_request(kind: u16, t: &TableRef, seq: u32) -> Vec<u8> {
    let mut w = NlaWriter::new();
    // NFTA_{CHAIN,SET,RULE}_TABLE are all attribute 1
    w.str(1, &t.name);
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(kind),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        t.family as u8,
        0,
        &w.buf,
    );
    b
}

/// `NFT_MSG_GETSETELEM` dump of one set.
pub fn dump_elements_request(t: &TableRef, set: &str, seq: u32) -> Vec<u8> {
    let mut w = NlaWriter::new();
    w.str(NFTA_SET_ELEM_LIST_TABLE, &t.name);
    w.str(NFTA_SET_ELEM_LIST_SET, set);
    let mut b = Vec::new();
    push_message(
        &mut b,
        nft_type(NFT_MSG_GETSETELEM),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        t.family as u8,
        0,
        &w.buf,
    );
    b
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bytes from hexadecimal text (these tests' and `set_udata`'s expectations).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()
    }

    /// A GET of one chain: nlmsghdr (len 44, NFT_MSG_GETCHAIN of subsystem 10,
    /// REQUEST|ACK, seq 7), nfgenmsg (family ip, version 0, res_id 0), then the table
    /// name (attribute 1, "filter\0" padded to 8) and the chain name (attribute 3,
    /// "FORWARD\0"): the kernel's `nf_tables_getchain` looks a chain up by these two.
    #[test]
    fn get_chain_is_a_non_dump_get_by_table_and_name() {
        let b = get_chain_request(&TableRef::new(Family::Ip, "filter"), "FORWARD", 7);
        let want = hex(concat!(
            "2c000000",
            "040a",
            "0500",
            "07000000",
            "00000000",
            "02",
            "00",
            "0000",
            "0b00",
            "0100",
            "66696c7465720000",
            "0c00",
            "0300",
            "464f525741524400",
        ));
        assert_eq!(b, want);
    }

    /// The extended-ack offset of an element (where the kernel points when it refuses
    /// it: its list attribute's header) maps back to its index in the op, across the
    /// messages an element list is split into; offsets elsewhere map to nothing.
    #[test]
    fn a_refused_element_maps_back_to_its_index() {
        let t = TableRef::new(Family::Ip, "t");
        let elements: Vec<Element> = (0..6000u32)
            .map(|i| Element::key(vec![Value::Port(i as u16)]))
            .collect();
        let ops = vec![
            Op::AddTable {
                table: t.clone(),
                comment: None,
            },
            Op::AddElements {
                table: t.clone(),
                set: "s".into(),
                elements,
            },
        ];
        let b = encode_batch(&ops, 100, None).unwrap();
        let element_msgs: Vec<u32> = b.seqs.iter().filter(|s| s.1 == 1).map(|s| s.0).collect();
        assert!(element_msgs.len() >= 2, "the list is split");
        // every element attribute, from its message's start, in order
        let mut want = 0usize;
        for m in nl_core::NlMsgIter::new(&b.bytes) {
            let Some(list) = element_list(&m) else {
                continue;
            };
            let base = m.bytes.as_ptr() as usize;
            for e in nl_core::NlaIter::new(list) {
                let header = (e.data.as_ptr() as usize - base - nl_core::NLA_HDRLEN) as u32;
                assert_eq!(b.element_at(m.seq, header), Some(want));
                let last = header + (nl_core::NLA_HDRLEN + e.data.len()) as u32 - 1;
                assert_eq!(b.element_at(m.seq, last), Some(want));
                want += 1;
            }
            // the table and set names, before the list, are no element
            assert_eq!(b.element_at(m.seq, 20), None);
        }
        assert_eq!(want, 6000);
        assert_eq!(
            b.element_at(101, 20),
            None,
            "the table's message has no elements"
        );
        assert_eq!(b.element_at(9999, 20), None, "no such message");
    }
}
