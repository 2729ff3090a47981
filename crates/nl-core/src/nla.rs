//! Netlink attribute (NLA) writing and bounds-checked reading.
//!
//! The writer sets `NLA_F_NESTED` on every nest it opens (the kernel requires it for
//! some attributes, e.g. ctnetlink's CTA_FILTER). The reader never panics and never
//! fails: a truncated or impossible attribute ends the iteration and is reported by
//! [`NlaIter::malformed`]; callers skip what they do not understand.

use crate::consts::*;
use crate::msg;

/// The largest payload an attribute can carry (`nla_len` is 16 bits).
pub const NLA_MAX_PAYLOAD: usize = u16::MAX as usize - NLA_HDRLEN;

/// The bytes one attribute with `payload` bytes of data takes in a buffer: header,
/// data and padding, what [`NlaWriter::bytes`] writes (and a nest, whose payload is
/// attributes: their lengths summed). For sizing a buffer before writing into it.
pub const fn attr_len(payload: usize) -> usize {
    NLA_HDRLEN + align4(payload)
}

/// The bytes a string attribute takes ([`NlaWriter::str`]: NUL-terminated, padded).
pub const fn str_attr_len(s: &str) -> usize {
    attr_len(s.len() + 1)
}

/// Appends attributes (and whole messages) to a buffer; nests are opened and closed
/// explicitly.
#[derive(Debug, Default, Clone)]
pub struct NlaWriter {
    pub buf: Vec<u8>,
}

impl NlaWriter {
    pub fn new() -> NlaWriter {
        NlaWriter { buf: Vec::new() }
    }

    pub fn with_capacity(n: usize) -> NlaWriter {
        NlaWriter {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Start a netlink message (see [`msg::begin`]); returns its offset for
    /// [`NlaWriter::end_msg`].
    pub fn begin_msg(&mut self, kind: u16, flags: u16, seq: u32) -> usize {
        msg::begin(&mut self.buf, kind, flags, seq)
    }

    /// Start a netfilter message: `nlmsghdr` + `nfgenmsg` (version 0, resource id 0).
    pub fn begin_nfnl(&mut self, kind: u16, flags: u16, seq: u32, family: u8) -> usize {
        let s = msg::begin(&mut self.buf, kind, flags, seq);
        msg::push_nfgenmsg(&mut self.buf, family, 0);
        s
    }

    pub fn end_msg(&mut self, start: usize) {
        msg::end(&mut self.buf, start);
    }

    pub fn bytes(&mut self, kind: u16, data: &[u8]) {
        let len = NLA_HDRLEN + data.len();
        debug_assert!(
            len <= u16::MAX as usize,
            "attribute {kind} too large: {len}"
        );
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    pub fn u8(&mut self, kind: u16, v: u8) {
        self.bytes(kind, &[v]);
    }

    /// A big-endian u16 (ports).
    pub fn be16(&mut self, kind: u16, v: u16) {
        self.bytes(kind, &v.to_be_bytes());
    }

    /// A big-endian u32, as nftables and most ctnetlink attributes carry them.
    pub fn be32(&mut self, kind: u16, v: u32) {
        self.bytes(kind, &v.to_be_bytes());
    }

    pub fn be64(&mut self, kind: u16, v: u64) {
        self.bytes(kind, &v.to_be_bytes());
    }

    /// A host-endian u32 (ctnetlink filter flags, userdata).
    pub fn ne32(&mut self, kind: u16, v: u32) {
        self.bytes(kind, &v.to_ne_bytes());
    }

    /// A NUL-terminated string.
    pub fn str(&mut self, kind: u16, s: &str) {
        let mut b = Vec::with_capacity(s.len() + 1);
        b.extend_from_slice(s.as_bytes());
        b.push(0);
        self.bytes(kind, &b);
    }

    /// Open a nested attribute (`NLA_F_NESTED` set); returns its offset for
    /// [`NlaWriter::end`].
    pub fn begin(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        at
    }

    /// Close the nested attribute opened at `at`.
    pub fn end(&mut self, at: usize) {
        let len = self.buf.len() - at;
        debug_assert!(
            len <= u16::MAX as usize,
            "nested attribute too large: {len}"
        );
        self.buf[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    /// A nested attribute whose payload is given raw (already a list of attributes).
    pub fn nested_raw(&mut self, kind: u16, payload: &[u8]) {
        let at = self.begin(kind);
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        self.end(at);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// One attribute read from a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Nla<'a> {
    /// The attribute type without the nested/byte-order flags.
    pub kind: u16,
    pub data: &'a [u8],
}

impl<'a> Nla<'a> {
    /// Exactly two bytes, big-endian.
    pub fn be16(&self) -> Option<u16> {
        match self.data {
            [a, b] => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }
    /// Exactly four bytes, big-endian (ctnetlink's strict reading).
    pub fn be32_exact(&self) -> Option<u32> {
        match self.data {
            [a, b, c, d] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => None,
        }
    }
    /// The first four bytes, big-endian.
    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.data.get(..4)?.try_into().ok()?))
    }
    pub fn be64(&self) -> Option<u64> {
        Some(u64::from_be_bytes(self.data.get(..8)?.try_into().ok()?))
    }
    pub fn ne32(&self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.data.get(..4)?.try_into().ok()?))
    }
    pub fn u8(&self) -> Option<u8> {
        self.data.first().copied()
    }
    /// A string attribute, without its NUL terminator.
    pub fn str(&self) -> Option<&'a str> {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.data.len());
        std::str::from_utf8(&self.data[..end]).ok()
    }
    /// The attributes nested inside this one.
    pub fn nested(&self) -> NlaIter<'a> {
        NlaIter::new(self.data)
    }
}

/// Iterates over the attributes in a buffer. A truncated or malformed trailing
/// attribute ends the iteration and is reported by [`NlaIter::malformed`].
#[derive(Debug, Clone)]
pub struct NlaIter<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl<'a> NlaIter<'a> {
    pub fn new(buf: &'a [u8]) -> NlaIter<'a> {
        NlaIter {
            rest: buf,
            malformed: false,
        }
    }
    pub fn malformed(&self) -> bool {
        self.malformed
    }
}

impl<'a> Iterator for NlaIter<'a> {
    type Item = Nla<'a>;
    fn next(&mut self) -> Option<Nla<'a>> {
        if self.rest.len() < NLA_HDRLEN {
            if !self.rest.is_empty() {
                self.malformed = true;
                self.rest = &[];
            }
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > self.rest.len() {
            self.malformed = true;
            self.rest = &[];
            return None;
        }
        let data = &self.rest[NLA_HDRLEN..len];
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        Some(Nla { kind, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_padded_and_nested_attributes() {
        let mut w = NlaWriter::new();
        w.str(1, "t");
        let n = w.begin(4);
        w.be32(1, 0);
        w.be32(2, (-100i32) as u32);
        w.end(n);
        assert_eq!(
            w.buf,
            [
                6, 0, 1, 0, b't', 0, 0, 0, // name, padded
                20, 0, 4, 0x80, // nested hook
                8, 0, 1, 0, 0, 0, 0, 0, // hooknum
                8, 0, 2, 0, 0xff, 0xff, 0xff, 0x9c, // priority -100
            ]
        );
        let attrs: Vec<_> = NlaIter::new(&w.buf).collect();
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].str(), Some("t"));
        let inner: Vec<_> = attrs[1].nested().collect();
        assert_eq!(attrs[1].kind, 4);
        assert_eq!(inner[1].be32(), Some((-100i32) as u32));
    }

    #[test]
    fn raw_nests_are_padded_and_flagged() {
        let mut w = NlaWriter::new();
        w.nested_raw(1, &[5, 0, 1, 0, 17]);
        w.be16(3, 53);
        assert_eq!(
            w.buf,
            [12, 0, 1, 0x80, 5, 0, 1, 0, 17, 0, 0, 0, 6, 0, 3, 0, 0, 53, 0, 0]
        );
        let a: Vec<_> = NlaIter::new(&w.buf).collect();
        assert_eq!(a[1].be16(), Some(53));
        assert_eq!(a[0].be16(), None);
        assert_eq!(a[0].nested().next().and_then(|n| n.u8()), Some(17));
    }

    /// The sizes agree with the writer, byte for byte, padding included.
    #[test]
    fn sizes_are_what_the_writer_writes() {
        let data = [0xaau8; 9];
        for n in 0..=data.len() {
            let mut w = NlaWriter::new();
            w.bytes(1, &data[..n]);
            assert_eq!(w.len(), attr_len(n), "{n} bytes");
        }
        for s in ["", "a", "abc", "abcd", "kube-nlproxy"] {
            let mut w = NlaWriter::new();
            w.str(1, s);
            assert_eq!(w.len(), str_attr_len(s), "{s:?}");
        }
        // a nest: its attributes' lengths summed
        let mut w = NlaWriter::new();
        let n = w.begin(2);
        w.bytes(1, &data[..5]);
        w.be32(3, 7);
        w.end(n);
        assert_eq!(w.len(), attr_len(attr_len(5) + attr_len(4)));
        assert_eq!(
            (attr_len(0), attr_len(1), attr_len(4), attr_len(5)),
            (4, 8, 8, 12)
        );
    }

    #[test]
    fn truncated_attributes_end_iteration_without_panic() {
        for cut in 0..12 {
            let buf = [8u8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0];
            let mut it = NlaIter::new(&buf[..cut]);
            let n = it.by_ref().count();
            assert!(n <= 1);
            assert_eq!(it.malformed(), cut != 0 && cut != 8, "cut {cut}");
        }
    }

    proptest::proptest! {
        /// Any bytes: iteration ends, every attribute lies inside the buffer, and the
        /// readers answer without panicking.
        #[test]
        fn random_bytes_never_panic(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let mut total = 0usize;
            for a in NlaIter::new(&buf) {
                total += a.data.len();
                let _ = (a.be16(), a.be32(), a.be32_exact(), a.be64(), a.ne32(), a.u8(), a.str());
                for inner in a.nested() {
                    let _ = inner.str();
                }
            }
            proptest::prop_assert!(total <= buf.len());
            for m in crate::msg::NlMsgIter::new(&buf) {
                let _ = (m.error(), m.errno(), m.nfgen());
                proptest::prop_assert!(m.bytes.len() <= buf.len());
            }
        }
    }
}
