//! A set's userdata as nft writes and reads it: key and data byte order, nft's `typeof`
//! declaration for keys nft has no `type` for (a `numgen` result), the comment; and the
//! one thing read back from it that the kernel does not hold (`Set::saddr_key`).

use crate::consts::*;
use crate::nla::udata;
use nft_model::*;

/// nft's userdata TLVs for a set declared with `typeof`, as nft 1.0.6 writes them (key
/// and data byte order, key typeof, data typeof, data interval; see the byte tests,
/// captured with `nft --debug=mnl`). A field of type [`DataType::HostInt32`] (a `numgen`
/// result) has no `type` spelling nft accepts, so nft prints and reloads such a set only
/// with these TLVs; the renderer declares it the same way (`nft_model::render`). Each
/// field is described by the expression nft would load it with: `ip daddr`, `ip6 daddr`,
/// `meta l4proto`, `th dport`, `meta mark`, `meta iifname`, `numgen random mod 65536`.
fn typeof_udata(s: &Set) -> Vec<u8> {
    let mut u = byte_orders(s, false);
    udata::put(
        &mut u,
        UDATA_SET_KEY_TYPEOF,
        &typeof_tlv(&s.key, s.saddr_key),
    );
    match &s.data {
        Some(SetData::Values(t)) => {
            udata::put(&mut u, UDATA_SET_DATA_TYPEOF, &typeof_tlv(t, false))
        }
        Some(SetData::Verdict) => {
            // the verdict "expression", without data
            let mut v = Vec::new();
            udata::put(&mut v, 0, &TYPEOF_EXPR_VERDICT.to_ne_bytes());
            udata::put(&mut v, 1, &[]);
            udata::put(&mut u, UDATA_SET_DATA_TYPEOF, &v);
        }
        None => {}
    }
    if s.data.is_some() {
        udata::put(&mut u, UDATA_SET_DATA_INTERVAL, &0u32.to_ne_bytes());
    }
    u
}

/// The typeof TLV of one field or of a concatenation of fields (`saddr`: addresses are
/// source addresses, `Set::saddr_key`).
fn typeof_tlv(fields: &[DataType], saddr: bool) -> Vec<u8> {
    if let [one] = fields {
        return typeof_field(*one, saddr);
    }
    let mut members = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        udata::put(&mut members, i as u8, &typeof_field(*f, saddr));
    }
    let mut v = Vec::new();
    udata::put(&mut v, 0, &TYPEOF_EXPR_CONCAT.to_ne_bytes());
    udata::put(&mut v, 1, &members);
    v
}

fn typeof_field(t: DataType, saddr: bool) -> Vec<u8> {
    let u32s = |vals: &[u32]| {
        let mut d = Vec::new();
        for (i, x) in vals.iter().enumerate() {
            udata::put(&mut d, i as u8, &x.to_ne_bytes());
        }
        d
    };
    let (expr, data) = match t {
        DataType::Ipv4Addr => (
            TYPEOF_EXPR_PAYLOAD,
            u32s(&[PROTO_DESC_IP, if saddr { IPHDR_SADDR } else { IPHDR_DADDR }]),
        ),
        DataType::Ipv6Addr => (
            TYPEOF_EXPR_PAYLOAD,
            u32s(&[
                PROTO_DESC_IP6,
                if saddr { IP6HDR_SADDR } else { IP6HDR_DADDR },
            ]),
        ),
        DataType::InetService => (TYPEOF_EXPR_PAYLOAD, u32s(&[PROTO_DESC_TH, THDR_DPORT])),
        DataType::InetProto => (TYPEOF_EXPR_META, u32s(&[MetaKey::L4proto as u32])),
        DataType::Mark => (TYPEOF_EXPR_META, u32s(&[MetaKey::Mark as u32])),
        DataType::Ifname => (TYPEOF_EXPR_META, u32s(&[MetaKey::Iifname as u32])),
        DataType::HostInt32 => (
            TYPEOF_EXPR_NUMGEN,
            u32s(&[
                NumgenKind::Random as u32,
                nft_model::render::NUMGEN_TYPEOF_MODULUS,
                0,
            ]),
        ),
    };
    let mut v = Vec::new();
    udata::put(&mut v, 0, &expr.to_ne_bytes());
    udata::put(&mut v, 1, &data);
    v
}

/// The key's and a map's data byte order as nft writes them (none for a set's data): host
/// order for a single host-order field (and for a string, `ifname_host`, outside a typeof
/// declaration), big endian for another single field, 0 for a concatenation.
fn byte_orders(s: &Set, ifname_host: bool) -> Vec<u8> {
    let order = |t: &[DataType]| -> u32 {
        match t {
            [one] if one.host_order() || (ifname_host && *one == DataType::Ifname) => {
                BYTEORDER_HOST
            }
            [_] => BYTEORDER_BIG,
            _ => 0,
        }
    };
    let mut u = Vec::new();
    udata::put(&mut u, UDATA_SET_KEYBYTEORDER, &order(&s.key).to_ne_bytes());
    match &s.data {
        Some(SetData::Values(t)) => {
            udata::put(&mut u, UDATA_SET_DATABYTEORDER, &order(t).to_ne_bytes())
        }
        Some(SetData::Verdict) => udata::put(&mut u, UDATA_SET_DATABYTEORDER, &0u32.to_ne_bytes()),
        None => {}
    }
    u
}

/// The userdata nft reads to print a set: key and data byte order (or nft's typeof
/// declaration when a field is a `numgen` result), and the comment.
pub(crate) fn set_udata(s: &Set) -> Vec<u8> {
    let needs_typeof = s.key.contains(&DataType::HostInt32)
        || matches!(&s.data, Some(SetData::Values(v)) if v.contains(&DataType::HostInt32));
    if needs_typeof {
        let mut u = typeof_udata(s);
        if let Some(c) = &s.comment {
            udata::put_str(&mut u, UDATA_SET_COMMENT, c);
        }
        return u;
    }
    let mut u = byte_orders(s, true);
    if let Some(c) = &s.comment {
        udata::put_str(&mut u, UDATA_SET_COMMENT, c);
    }
    u
}

/// Whether a key's typeof userdata (nft's TLVs, [`typeof_udata`]) loads a source
/// address (`ip saddr`, `ip6 saddr`) in one of its fields.
pub(crate) fn typeof_saddr(key: &[u8]) -> bool {
    let field = |tlv: &[u8]| {
        let expr = udata::get(tlv, 0).and_then(|v| <[u8; 4]>::try_from(v).ok());
        let data = udata::get(tlv, 1).unwrap_or(&[]);
        let num = |k| udata::get(data, k).and_then(|v| <[u8; 4]>::try_from(v).ok());
        let (Some(e), Some(p), Some(f)) = (expr, num(0), num(1)) else {
            return false;
        };
        let (e, p, f) = (
            u32::from_ne_bytes(e),
            u32::from_ne_bytes(p),
            u32::from_ne_bytes(f),
        );
        e == TYPEOF_EXPR_PAYLOAD
            && ((p == PROTO_DESC_IP && f == IPHDR_SADDR)
                || (p == PROTO_DESC_IP6 && f == IP6HDR_SADDR))
    };
    let concat =
        udata::get(key, 0).is_some_and(|v| v == TYPEOF_EXPR_CONCAT.to_ne_bytes().as_slice());
    if !concat {
        return field(key);
    }
    udata::get(key, 1).is_some_and(|members| udata::each(members).any(|(_, m)| field(m)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::tests::hex;

    /// Set userdata as `nft --debug=mnl` shows nft 1.0.6 sending it for the same
    /// `typeof` declarations (`add map ip t m { typeof ...; }`, the `NFTA_SET_USERDATA`
    /// of its NEWSET).
    #[test]
    fn typeof_userdata_is_what_nft_sends() {
        use DataType::*;
        let v4_port = Some(SetData::Values(vec![Ipv4Addr, InetService]));
        let v6_port = Some(SetData::Values(vec![Ipv6Addr, InetService]));
        // (declaration, key, data, saddr_key, userdata)
        type Case = (
            &'static str,
            Vec<DataType>,
            Option<SetData>,
            bool,
            &'static str,
        );
        let cases: [Case; 8] = [
            (
                "typeof numgen random mod 65536 : verdict",
                vec![HostInt32],
                Some(SetData::Verdict),
                false,
                "000401000000010400000000031a000417000000011200040100000001040000010002040000000004080004010000000100060400000000",
            ),
            (
                "typeof numgen random mod 65536 : ip daddr . th dport",
                vec![HostInt32],
                v4_port.clone(),
                false,
                "000401000000010400000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b000000010402000000060400000000",
            ),
            (
                "typeof numgen random mod 65536 : ip6 daddr . th dport",
                vec![HostInt32],
                v6_port.clone(),
                false,
                "000401000000010400000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c00040b000000010402000000060400000000",
            ),
            (
                "typeof ip6 daddr . meta l4proto . th dport . numgen random mod 65536 : ip6 daddr . th dport",
                vec![Ipv6Addr, InetProto, InetService, HostInt32],
                v6_port.clone(),
                false,
                "000400000000010400000000036000040d00000001580014000407000000010c00040d000000010409000000010e00040900000001060004100000000214000407000000010c00040b000000010402000000031a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c00040b000000010402000000060400000000",
            ),
            (
                "typeof meta l4proto . th dport . numgen random mod 65536 : ip6 daddr . th dport",
                vec![InetProto, InetService, HostInt32],
                v6_port,
                false,
                "000400000000010400000000034a00040d0000000142000e00040900000001060004100000000114000407000000010c00040b000000010402000000021a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c00040b000000010402000000060400000000",
            ),
            (
                "typeof meta l4proto . th dport . numgen random mod 65536 : ip daddr . th dport",
                vec![InetProto, InetService, HostInt32],
                v4_port,
                false,
                "000400000000010400000000034a00040d0000000142000e00040900000001060004100000000114000407000000010c00040b000000010402000000021a0004170000000112000401000000010400000100020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b000000010402000000060400000000",
            ),
            // session affinity's pins (a set: no data byte order, no data typeof)
            (
                "typeof ip saddr . numgen random mod 65536 . numgen random mod 65536",
                vec![Ipv4Addr, HostInt32, HostInt32],
                None,
                true,
                "000400000000035600040d000000014e0014000407000000010c00040c00000001040b000000011a0004170000000112000401000000010400000100020400000000021a0004170000000112000401000000010400000100020400000000",
            ),
            (
                "typeof ip6 saddr . numgen random mod 65536 . numgen random mod 65536",
                vec![Ipv6Addr, HostInt32, HostInt32],
                None,
                true,
                "000400000000035600040d000000014e0014000407000000010c00040d000000010408000000011a0004170000000112000401000000010400000100020400000000021a0004170000000112000401000000010400000100020400000000",
            ),
        ];
        for (decl, key, data, saddr, want) in cases {
            let mut s = Set::set("m", key);
            s.data = data;
            s.saddr_key = saddr;
            assert_eq!(set_udata(&s), hex(want), "{decl}");
        }
    }

    #[test]
    fn a_source_address_key_reads_back() {
        let mut s = Set::set("m", vec![DataType::Ipv4Addr, DataType::HostInt32]);
        for saddr in [false, true] {
            s.saddr_key = saddr;
            let u = set_udata(&s);
            let key = udata::get(&u, UDATA_SET_KEY_TYPEOF).unwrap();
            assert_eq!(typeof_saddr(key), saddr);
        }
    }
}
