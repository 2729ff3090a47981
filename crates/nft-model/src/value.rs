//! Data types and values of set keys, map data and comparisons.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// nft data types used in set keys and map data.
///
/// Each has the nft datatype id nft uses to print it, and a fixed width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// `ipv4_addr`
    Ipv4Addr,
    /// `ipv6_addr`
    Ipv6Addr,
    /// `inet_proto` (one byte)
    InetProto,
    /// `inet_service` (a port, two bytes, big-endian)
    InetService,
    /// `mark` (four bytes, host-endian, as `meta mark` holds it)
    Mark,
    /// `integer` of 32 bits in host byte order (e.g. a `numgen` result)
    HostInt32,
    /// `ifname` (16 bytes, NUL padded)
    Ifname,
}

impl DataType {
    /// nft's datatype id (libnftables `enum datatypes`).
    pub fn nft_type_id(self) -> u32 {
        match self {
            DataType::Ipv4Addr => 7,
            DataType::Ipv6Addr => 8,
            DataType::InetProto => 12,
            DataType::InetService => 13,
            DataType::Mark => 19,
            DataType::HostInt32 => 4,
            DataType::Ifname => 41,
        }
    }

    /// Width of the value in bytes (unpadded). Never zero.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            DataType::Ipv4Addr => 4,
            DataType::Ipv6Addr => 16,
            DataType::InetProto => 1,
            DataType::InetService => 2,
            DataType::Mark => 4,
            DataType::HostInt32 => 4,
            DataType::Ifname => 16,
        }
    }

    /// Width rounded up to the 4-byte register granularity, as used in concatenations.
    pub fn padded_len(self) -> usize {
        self.len().div_ceil(4) * 4
    }

    /// Whether the kernel holds values of this type in host byte order.
    pub fn host_order(self) -> bool {
        matches!(self, DataType::Mark | DataType::HostInt32)
    }

    /// The name nft prints in `type ...`.
    pub fn nft_name(self) -> &'static str {
        match self {
            DataType::Ipv4Addr => "ipv4_addr",
            DataType::Ipv6Addr => "ipv6_addr",
            DataType::InetProto => "inet_proto",
            DataType::InetService => "inet_service",
            DataType::Mark => "mark",
            DataType::HostInt32 => "integer",
            DataType::Ifname => "ifname",
        }
    }

    pub fn from_nft_type_id(id: u32) -> Option<DataType> {
        Some(match id {
            7 => DataType::Ipv4Addr,
            8 => DataType::Ipv6Addr,
            12 => DataType::InetProto,
            13 => DataType::InetService,
            19 => DataType::Mark,
            4 => DataType::HostInt32,
            41 => DataType::Ifname,
            _ => return None,
        })
    }
}

/// Key type id of a (possibly concatenated) key, the way nft composes it:
/// each field's datatype id in 6 bits, first field most significant.
pub fn concat_type_id(fields: &[DataType]) -> u32 {
    fields
        .iter()
        .fold(0u32, |acc, f| (acc << 6) | f.nft_type_id())
}

/// Split a composed key type id back into its fields (inverse of [`concat_type_id`]).
pub fn split_type_id(mut id: u32, key_len: usize) -> Option<Vec<DataType>> {
    if id == 0 {
        return None;
    }
    let mut out = Vec::new();
    while id != 0 {
        out.push(DataType::from_nft_type_id(id & 0x3f)?);
        id >>= 6;
    }
    out.reverse();
    let total: usize = if out.len() == 1 {
        out[0].len()
    } else {
        out.iter().map(|t| t.padded_len()).sum()
    };
    (total == key_len).then_some(out)
}

/// One typed value of a set key, map data or comparison operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    Proto(u8),
    Port(u16),
    Mark(u32),
    Int(u32),
    /// (Boxed, not a `String`: a `Value` is 24 bytes, and the ruleset holds millions.)
    Ifname(Box<str>),
}

/// An address as the value of its family (the one conversion between addresses and
/// values; back with [`Value::ip`]).
impl From<IpAddr> for Value {
    fn from(a: IpAddr) -> Value {
        match a {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        }
    }
}

impl Value {
    /// The address this value is, if it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Value::Ipv4(a) => Some(IpAddr::V4(*a)),
            Value::Ipv6(a) => Some(IpAddr::V6(*a)),
            _ => None,
        }
    }

    pub fn data_type(&self) -> DataType {
        match self {
            Value::Ipv4(_) => DataType::Ipv4Addr,
            Value::Ipv6(_) => DataType::Ipv6Addr,
            Value::Proto(_) => DataType::InetProto,
            Value::Port(_) => DataType::InetService,
            Value::Mark(_) => DataType::Mark,
            Value::Int(_) => DataType::HostInt32,
            Value::Ifname(_) => DataType::Ifname,
        }
    }

    /// The value's bytes as the kernel holds them in a register (unpadded).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        self.put_bytes(&mut b);
        b
    }

    /// Append [`Value::to_bytes`] to `out` (no allocation: batches encode millions).
    pub fn put_bytes(&self, out: &mut Vec<u8>) {
        match self {
            Value::Ipv4(a) => out.extend_from_slice(&a.octets()),
            Value::Ipv6(a) => out.extend_from_slice(&a.octets()),
            Value::Proto(p) => out.push(*p),
            Value::Port(p) => out.extend_from_slice(&p.to_be_bytes()),
            Value::Mark(m) => out.extend_from_slice(&m.to_ne_bytes()),
            Value::Int(i) => out.extend_from_slice(&i.to_ne_bytes()),
            Value::Ifname(n) => {
                let start = out.len();
                let b = n.as_bytes();
                out.extend_from_slice(&b[..b.len().min(16)]);
                out.resize(start + 16, 0);
            }
        }
    }

    /// Parse a value of type `t` from exactly `t.len()` bytes.
    pub fn from_bytes(t: DataType, b: &[u8]) -> Option<Value> {
        if b.len() != t.len() {
            return None;
        }
        Some(match t {
            DataType::Ipv4Addr => Value::Ipv4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            DataType::Ipv6Addr => Value::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?)),
            DataType::InetProto => Value::Proto(b[0]),
            DataType::InetService => Value::Port(u16::from_be_bytes([b[0], b[1]])),
            DataType::Mark => Value::Mark(u32::from_ne_bytes(b.try_into().ok()?)),
            DataType::HostInt32 => Value::Int(u32::from_ne_bytes(b.try_into().ok()?)),
            DataType::Ifname => {
                let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                Value::Ifname(String::from_utf8_lossy(&b[..end]).into())
            }
        })
    }
}

/// Encode a concatenation of values the way the kernel lays it out: a single value
/// unpadded, several values each padded to 4 bytes.
pub fn concat_bytes(values: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    concat_into(values, &mut out);
    out
}

/// Append [`concat_bytes`] of `values` to `out`.
pub fn concat_into(values: &[Value], out: &mut Vec<u8>) {
    if let [v] = values {
        v.put_bytes(out);
        return;
    }
    for v in values {
        let start = out.len();
        v.put_bytes(out);
        out.resize(start + v.data_type().padded_len(), 0);
    }
}

/// Decode a concatenation laid out by [`concat_bytes`].
pub fn split_concat(types: &[DataType], b: &[u8]) -> Option<Vec<Value>> {
    if types.len() == 1 {
        return Some(vec![Value::from_bytes(types[0], b)?]);
    }
    let mut out = Vec::with_capacity(types.len());
    let mut off = 0;
    for t in types {
        let end = off + t.padded_len();
        let field = b.get(off..end)?;
        out.push(Value::from_bytes(*t, &field[..t.len()])?);
        off = end;
    }
    (off == b.len()).then_some(out)
}

/// Length of a concatenated key of these types.
pub fn concat_len(types: &[DataType]) -> usize {
    if types.len() == 1 {
        types[0].len()
    } else {
        types.iter().map(|t| t.padded_len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_type_id_matches_nft() {
        // ipv4_addr . inet_proto . inet_service, as nft composes it
        let t = [
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ];
        assert_eq!(concat_type_id(&t), 0x730d);
        assert_eq!(split_type_id(0x730d, 12), Some(t.to_vec()));
        assert_eq!(split_type_id(0x730d, 11), None);
    }

    /// Appending (the encoder reuses one buffer) keeps what is there, pads each field
    /// from where it starts, and an interface name takes exactly 16 bytes.
    #[test]
    fn concat_appends_after_what_is_there() {
        let mut out = vec![9];
        concat_into(&[Value::Port(1), Value::Proto(6)], &mut out);
        assert_eq!(out, [9, 0, 1, 0, 0, 6, 0, 0, 0]);
        let long = Value::Ifname("a".repeat(20).into());
        assert_eq!(long.to_bytes(), [b'a'; 16]);
        let mut out = vec![9];
        concat_into(&[Value::Ifname("eth0".into())], &mut out);
        assert_eq!(out.len(), 17);
        assert_eq!(&out[..5], &[9, b'e', b't', b'h', b'0']);
    }

    #[test]
    fn concat_layout_pads_fields() {
        let v = [
            Value::Ipv4(Ipv4Addr::new(198, 18, 0, 1)),
            Value::Proto(17),
            Value::Port(53),
        ];
        let b = concat_bytes(&v);
        assert_eq!(b, [198, 18, 0, 1, 17, 0, 0, 0, 0, 53, 0, 0]);
        let t = [
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ];
        assert_eq!(split_concat(&t, &b).unwrap(), v.to_vec());
        assert_eq!(split_concat(&t, &b[..11]), None);
    }
}

#[cfg(test)]
mod size_tests {
    /// Rulesets hold millions of values: keep them small.
    #[test]
    fn a_value_is_24_bytes() {
        assert_eq!(std::mem::size_of::<super::Value>(), 24);
    }
}
