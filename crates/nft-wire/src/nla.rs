//! Netlink attribute (NLA) writing and bounds-checked reading.

/// `NLA_F_NESTED`
pub const NLA_F_NESTED: u16 = 0x8000;
/// `NLA_F_NET_BYTEORDER`
pub const NLA_F_NET_BYTEORDER: u16 = 0x4000;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

/// The largest payload an attribute can carry (`nla_len` is 16 bits).
pub const NLA_MAX_PAYLOAD: usize = u16::MAX as usize - 4;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends attributes to a buffer; nests are opened and closed explicitly.
#[derive(Debug, Default, Clone)]
pub struct NlaWriter {
    pub buf: Vec<u8>,
}

impl NlaWriter {
    pub fn new() -> NlaWriter {
        NlaWriter { buf: Vec::new() }
    }

    pub fn bytes(&mut self, kind: u16, data: &[u8]) {
        let len = 4 + data.len();
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

    /// A big-endian u32, as nftables attributes carry them.
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

    /// Open a nested attribute; returns its offset for [`NlaWriter::end`].
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
        if self.rest.len() < 4 {
            if !self.rest.is_empty() {
                self.malformed = true;
                self.rest = &[];
            }
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let kind = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > self.rest.len() {
            self.malformed = true;
            self.rest = &[];
            return None;
        }
        let data = &self.rest[4..len];
        self.rest = &self.rest[align4(len).min(self.rest.len())..];
        Some(Nla { kind, data })
    }
}

/// Userdata TLVs (libnftnl's format: type u8, length u8, value), used for comments
/// and set byte-order hints that `nft` reads to print objects.
pub mod udata {
    pub fn put(buf: &mut Vec<u8>, kind: u8, value: &[u8]) {
        // Values longer than 255 bytes cannot be expressed; callers validate comments.
        let len = value.len().min(255);
        buf.push(kind);
        buf.push(len as u8);
        buf.extend_from_slice(&value[..len]);
    }

    pub fn put_str(buf: &mut Vec<u8>, kind: u8, s: &str) {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        put(buf, kind, &v);
    }

    /// Find the TLV of type `kind`.
    pub fn get(buf: &[u8], kind: u8) -> Option<&[u8]> {
        let mut rest = buf;
        while rest.len() >= 2 {
            let (k, len) = (rest[0], rest[1] as usize);
            let value = rest.get(2..2 + len)?;
            if k == kind {
                return Some(value);
            }
            rest = &rest[2 + len..];
        }
        None
    }

    pub fn get_str(buf: &[u8], kind: u8) -> Option<String> {
        let v = get(buf, kind)?;
        let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
        Some(String::from_utf8_lossy(&v[..end]).into_owned())
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
    fn truncated_attributes_end_iteration_without_panic() {
        for cut in 0..12 {
            let buf = [8u8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0];
            let mut it = NlaIter::new(&buf[..cut]);
            let n = it.by_ref().count();
            assert!(n <= 1);
            assert_eq!(it.malformed(), cut != 0 && cut != 8, "cut {cut}");
        }
    }

    #[test]
    fn udata_round_trip() {
        let mut b = Vec::new();
        udata::put(&mut b, 0, &1u32.to_ne_bytes());
        udata::put_str(&mut b, 7, "mapc");
        assert_eq!(udata::get_str(&b, 7).as_deref(), Some("mapc"));
        assert_eq!(udata::get(&b, 0), Some(&1u32.to_ne_bytes()[..]));
        assert_eq!(udata::get(&b[..3], 0), None);
    }
}
