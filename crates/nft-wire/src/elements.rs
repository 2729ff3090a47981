//! Set element lists: their messages, written straight into the batch, and their exact
//! size, known before a byte is written (so that a batch of millions of elements is
//! one buffer of exactly its size, never grown and copied).
//!
//! An element list is [`nft_model::Op::AddElements`], [`nft_model::Op::DeleteElements`]
//! or [`nft_model::Op::AddPackedElements`]; packed elements are encoded from their
//! bytes, into exactly the bytes their unpacked form gives.

use crate::consts::*;
use crate::expr::{put_value, put_verdict};
use crate::msg::{nfnl_len, nft_type};
use crate::nla::{attr_len, str_attr_len, udata, NlaWriter, NLA_MAX_PAYLOAD};
use crate::WireError;
use nft_model::*;
use nl_core::NLA_HDRLEN;

/// Keep element lists comfortably below the 64 KiB attribute limit.
pub(crate) const ELEMENTS_BUDGET: usize = NLA_MAX_PAYLOAD - 4096;

/// The length of a value nest (`NFTA_DATA_VALUE` of `n` bytes inside).
fn value_len(n: usize) -> usize {
    attr_len(attr_len(n))
}

/// The length of a verdict nest (`NFTA_DATA_VERDICT`: the code, and the chain it names).
fn verdict_len(v: &Verdict) -> usize {
    attr_len(attr_len(attr_len(4) + v.chain().map_or(0, str_attr_len)))
}

/// The length of a comment's userdata attribute.
fn comment_len(c: &str) -> usize {
    attr_len(2 + (c.len() + 1).min(255))
}

/// The kernel length of a concatenation of values ([`nft_model::concat_into`]).
fn concat_len(values: &[Value]) -> usize {
    match values {
        [one] => one.data_type().len(),
        _ => values.iter().map(|v| v.data_type().padded_len()).sum(),
    }
}

fn comment_udata(c: &str) -> Vec<u8> {
    let mut u = Vec::new();
    udata::put_str(&mut u, UDATA_SET_ELEM_COMMENT, c);
    u
}

/// The elements of one element op.
#[derive(Clone, Copy)]
pub(crate) enum List<'a> {
    Plain(&'a [Element]),
    Packed(&'a [PackedElement]),
}

/// One element op as messages: `NFT_MSG_NEWSETELEM` or `DELSETELEM` (keys only).
pub(crate) struct ElementOp<'a> {
    kind: u16,
    flags: u16,
    family: u8,
    table: &'a str,
    set: &'a str,
    list: List<'a>,
    with_data: bool,
}

impl<'a> ElementOp<'a> {
    /// The element op `op` is, if it is one.
    pub(crate) fn of(op: &'a Op) -> Option<ElementOp<'a>> {
        let family = op.table().family as u8;
        let (kind, flags, table, set, list, with_data) = match op {
            Op::AddElements {
                table,
                set,
                elements,
            } => (
                NFT_MSG_NEWSETELEM,
                NLM_F_CREATE,
                table,
                set,
                List::Plain(elements),
                true,
            ),
            Op::AddPackedElements {
                table,
                set,
                elements,
            } => (
                NFT_MSG_NEWSETELEM,
                NLM_F_CREATE,
                table,
                set,
                List::Packed(elements),
                true,
            ),
            Op::DeleteElements {
                table,
                set,
                elements,
            } => (
                NFT_MSG_DELSETELEM,
                0,
                table,
                set,
                List::Plain(elements),
                false,
            ),
            _ => return None,
        };
        Some(ElementOp {
            kind,
            flags,
            family,
            table: &table.name,
            set,
            list,
            with_data,
        })
    }

    fn count(&self) -> usize {
        match self.list {
            List::Plain(e) => e.len(),
            List::Packed(e) => e.len(),
        }
    }

    /// The encoded length of element `i` (what [`ElementOp::encode`] writes for it).
    fn len_of(&self, i: usize) -> usize {
        let body = match self.list {
            List::Plain(es) => {
                let e = &es[i];
                let mut n = value_len(concat_len(&e.key));
                n += e.key_end().map_or(0, |end| value_len(concat_len(end)));
                if self.with_data {
                    n += match &e.data {
                        Some(ElemData::Verdict(v)) => verdict_len(v),
                        Some(ElemData::Values(v)) => value_len(concat_len(v)),
                        None => 0,
                    };
                    n += e.timeout_ms().map_or(0, |_| attr_len(8));
                    n += e.comment().map_or(0, comment_len);
                }
                n
            }
            List::Packed(es) => {
                let e = es[i].parts();
                let mut n = value_len(e.key.concat_len());
                n += e.key_end.map_or(0, |end| value_len(end.concat_len()));
                if self.with_data {
                    n += match &e.data {
                        Some(PackedData::Verdict(v)) => verdict_len(v),
                        Some(PackedData::Values(v)) => value_len(v.concat_len()),
                        None => 0,
                    };
                    n += e.timeout_ms.map_or(0, |_| attr_len(8));
                    n += e.comment.as_deref().map_or(0, comment_len);
                }
                n
            }
        };
        attr_len(body)
    }

    /// Element `i` as one `NFTA_LIST_ELEM` (`scratch`: reused for the values' bytes).
    fn encode(&self, i: usize, w: &mut NlaWriter, scratch: &mut Vec<u8>) {
        let n = w.begin(NFTA_LIST_ELEM);
        match self.list {
            List::Plain(es) => {
                let e = &es[i];
                let mut value = |w: &mut NlaWriter, kind: u16, values: &[Value]| {
                    scratch.clear();
                    concat_into(values, scratch);
                    put_value(w, kind, scratch);
                };
                value(w, NFTA_SET_ELEM_KEY, &e.key);
                if let Some(end) = e.key_end() {
                    value(w, NFTA_SET_ELEM_KEY_END, end);
                }
                if self.with_data {
                    match &e.data {
                        Some(ElemData::Verdict(v)) => put_verdict(w, NFTA_SET_ELEM_DATA, v),
                        Some(ElemData::Values(v)) => value(w, NFTA_SET_ELEM_DATA, v),
                        None => {}
                    }
                    if let Some(t) = e.timeout_ms() {
                        w.be64(NFTA_SET_ELEM_TIMEOUT, t);
                    }
                    if let Some(c) = e.comment() {
                        w.bytes(NFTA_SET_ELEM_USERDATA, &comment_udata(c));
                    }
                }
            }
            List::Packed(es) => {
                let e = es[i].parts();
                let mut value = |w: &mut NlaWriter, kind: u16, values: PackedValues<'_>| {
                    scratch.clear();
                    values.put_concat(scratch);
                    put_value(w, kind, scratch);
                };
                value(w, NFTA_SET_ELEM_KEY, e.key);
                if let Some(end) = e.key_end {
                    value(w, NFTA_SET_ELEM_KEY_END, end);
                }
                if self.with_data {
                    match &e.data {
                        Some(PackedData::Verdict(v)) => put_verdict(w, NFTA_SET_ELEM_DATA, v),
                        Some(PackedData::Values(v)) => value(w, NFTA_SET_ELEM_DATA, *v),
                        None => {}
                    }
                    if let Some(t) = e.timeout_ms {
                        w.be64(NFTA_SET_ELEM_TIMEOUT, t);
                    }
                    if let Some(c) = &e.comment {
                        w.bytes(NFTA_SET_ELEM_USERDATA, &comment_udata(c));
                    }
                }
            }
        }
        w.end(n);
    }

    /// The bytes of a message before its elements: the headers, the table's and the
    /// set's names, the element list's header.
    fn head_len(&self) -> usize {
        nfnl_len(str_attr_len(self.table) + str_attr_len(self.set) + NLA_HDRLEN)
    }

    /// The messages' lengths, in order: the elements split so that no element list
    /// exceeds [`ELEMENTS_BUDGET`] (an empty list is one message without elements).
    fn split(&self) -> Result<Vec<usize>, WireError> {
        let mut out = Vec::new();
        let mut chunk = 0usize;
        for i in 0..self.count() {
            let one = self.len_of(i);
            if one > ELEMENTS_BUDGET {
                return Err(WireError::TooLarge {
                    what: format!("element of set {}", self.set),
                    len: one,
                });
            }
            if chunk + one > ELEMENTS_BUDGET {
                out.push(chunk);
                chunk = 0;
            }
            chunk += one;
        }
        if chunk > 0 || out.is_empty() {
            out.push(chunk);
        }
        Ok(out)
    }

    /// The messages' lengths (their elements' part, in order: see [`ElementOp::write`])
    /// and their total length.
    pub(crate) fn size(&self) -> Result<(Vec<usize>, usize), WireError> {
        let chunks = self.split()?;
        let head = self.head_len();
        let total = chunks.iter().map(|c| head + c).sum();
        Ok((chunks, total))
    }

    /// Write the messages into `w` (the batch), numbered from `seq`, split as
    /// [`ElementOp::size`] told; returns how many, and where the last one starts.
    pub(crate) fn write(&self, w: &mut NlaWriter, seq: u32, chunks: &[usize]) -> (u32, usize) {
        let mut scratch = Vec::new();
        let mut i = 0;
        let mut seq = seq;
        let mut last = w.len();
        for chunk in chunks {
            last = w.len();
            let m = w.begin_nfnl(
                nft_type(self.kind),
                NLM_F_REQUEST | self.flags,
                seq,
                self.family,
            );
            w.str(NFTA_SET_ELEM_LIST_TABLE, self.table);
            w.str(NFTA_SET_ELEM_LIST_SET, self.set);
            let l = w.begin(NFTA_SET_ELEM_LIST_ELEMENTS);
            let start = w.len();
            while i < self.count() && w.len() - start < *chunk {
                self.encode(i, w, &mut scratch);
                i += 1;
            }
            w.end(l);
            w.end_msg(m);
            seq = seq.wrapping_add(1);
        }
        (chunks.len() as u32, last)
    }
}

/// The element list attribute of a set element message.
pub(crate) fn element_list<'a>(m: &nl_core::NlMsg<'a>) -> Option<&'a [u8]> {
    let (_, _, attrs) = m.nfgen()?;
    nl_core::NlaIter::new(attrs)
        .find(|a| a.kind == NFTA_SET_ELEM_LIST_ELEMENTS)
        .map(|a| a.data)
}

#[cfg(test)]
mod tests;
