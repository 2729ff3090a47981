//! Netlink attributes: the shared core's writer and reader, and nftables userdata.

pub use nl_core::consts::{NLA_F_NESTED, NLA_F_NET_BYTEORDER};
pub use nl_core::nla::{attr_len, str_attr_len, Nla, NlaIter, NlaWriter, NLA_MAX_PAYLOAD};

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

    /// Every TLV in order, as (type, value), up to the first truncated one.
    pub fn each(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
        let mut rest = buf;
        std::iter::from_fn(move || {
            let (k, len) = (*rest.first()?, *rest.get(1)? as usize);
            let value = rest.get(2..2 + len)?;
            rest = &rest[2 + len..];
            Some((k, value))
        })
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
    fn udata_round_trip() {
        let mut b = Vec::new();
        udata::put(&mut b, 0, &1u32.to_ne_bytes());
        udata::put_str(&mut b, 7, "mapc");
        assert_eq!(udata::get_str(&b, 7).as_deref(), Some("mapc"));
        assert_eq!(udata::get(&b, 0), Some(&1u32.to_ne_bytes()[..]));
        assert_eq!(udata::get(&b[..3], 0), None);
    }
}
