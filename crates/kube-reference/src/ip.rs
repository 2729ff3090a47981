//! Addresses and prefixes read as kube-proxy reads them: the model's own lenient parser,
//! written from the rules of upstream's `k8s.io/utils/net` `ParseIPSloppy` and
//! `ParseCIDRSloppy` (a fork of Go 1.16's `net.ParseIP`/`net.ParseCIDR`, kept because
//! the API server stored what those accepted), not shared with `kube-model`.
//!
//! The rules, as read from the fork (`internal/third_party/forked/golang/net`):
//!
//! - the first `.` or `:` of the text decides: a `.` first is dotted IPv4, a `:` first is
//!   IPv6; nothing is trimmed (whitespace fails);
//! - an IPv4 component is one or more decimal digits with a value of at most 255, any
//!   number of leading zeros allowed and read as decimal (`198.018.000.010` is
//!   198.18.0.10; `0000198.18.0.1` too), exactly four components;
//! - an IPv6 group is one or more hex digits of either case with a value of at most
//!   0xffff (so `00db8` is a group), at most one `::`, which must stand for at least one
//!   zero group; a dotted IPv4 tail (parsed by the rule above, leading zeros and all) may
//!   end the text where the last 32 bits start, or anywhere after a `::`;
//! - an IPv6 result whose first 80 bits are zero and the next 16 are ones (IPv4-mapped)
//!   is an IPv4 address (`GetIPFamilyFromIP`/`To4`);
//! - a prefix is `address/length`, split at the first `/`: the address dotted IPv4
//!   (length at most 32) or else IPv6 (length at most 128), the length decimal digits
//!   with any leading zeros; the network is the address masked to the length in its own
//!   width: an IPv4-mapped address with a length of at least 96 is the IPv4 prefix of
//!   length - 96, with a shorter length the masked IPv6 value, which is not IPv4-mapped
//!   any more (`::ffff:198.18.0.0/64` is `::/64`, an IPv6 prefix).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Go's `dtoi` limit ("big"): a number of at least this many fails.
const BIG: u32 = 0xff_ffff;

/// Leading decimal digits of `s`: (value, digits read); `None` when there is none or the
/// value reaches the limit.
fn decimal(s: &[u8]) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        n = n * 10 + u32::from(s[i] - b'0');
        if n >= BIG {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Leading hex digits of `s`, as [`decimal`].
fn hex(s: &[u8]) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut i = 0;
    while i < s.len() {
        let d = match s[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        n = n * 16 + u32::from(d);
        if n >= BIG {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Dotted IPv4, the whole text.
fn v4(s: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut rest = s;
    for (k, o) in out.iter_mut().enumerate() {
        if k > 0 {
            rest = rest.strip_prefix(b".")?;
        }
        let (n, used) = decimal(rest)?;
        *o = u8::try_from(n).ok()?;
        rest = &rest[used..];
    }
    rest.is_empty().then_some(out)
}

/// IPv6, the whole text: the 16 bytes.
fn v6(s: &[u8]) -> Option<[u8; 16]> {
    let mut ip = [0u8; 16];
    let mut gap: Option<usize> = None;
    let mut rest = s;
    if rest.starts_with(b"::") {
        gap = Some(0);
        rest = &rest[2..];
        if rest.is_empty() {
            return Some(ip);
        }
    }
    let mut i = 0;
    while i < 16 {
        let (n, used) = hex(rest)?;
        if n > 0xffff {
            return None;
        }
        if rest.get(used) == Some(&b'.') {
            // a dotted IPv4 tail: at the last 32 bits, or anywhere after a "::"
            if (gap.is_none() && i != 12) || i + 4 > 16 {
                return None;
            }
            ip[i..i + 4].copy_from_slice(&v4(rest)?);
            rest = &[];
            i += 4;
            break;
        }
        ip[i] = (n >> 8) as u8;
        ip[i + 1] = n as u8;
        i += 2;
        rest = &rest[used..];
        if rest.is_empty() {
            break;
        }
        if rest[0] != b':' || rest.len() == 1 {
            return None;
        }
        rest = &rest[1..];
        if rest[0] == b':' {
            if gap.is_some() {
                return None;
            }
            gap = Some(i);
            rest = &rest[1..];
            if rest.is_empty() {
                break;
            }
        }
    }
    if !rest.is_empty() {
        return None;
    }
    match gap {
        // the groups after the gap move to the end, zeros fill the gap
        Some(g) if i < 16 => {
            let shift = 16 - i;
            ip.copy_within(g..i, g + shift);
            ip[g..g + shift].fill(0);
        }
        // "::" must stand for at least one group
        Some(_) => return None,
        None if i < 16 => return None,
        None => {}
    }
    Some(ip)
}

fn mapped(b: &[u8; 16]) -> Option<Ipv4Addr> {
    (b[..10].iter().all(|x| *x == 0) && b[10] == 0xff && b[11] == 0xff)
        .then(|| Ipv4Addr::new(b[12], b[13], b[14], b[15]))
}

fn from16(b: [u8; 16]) -> IpAddr {
    match mapped(&b) {
        Some(a) => IpAddr::V4(a),
        None => IpAddr::V6(Ipv6Addr::from(b)),
    }
}

/// An address as kube-proxy reads it (`ParseIPSloppy`, then its family by `To4`):
/// `None` when upstream's parser refuses the text.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    let b = s.as_bytes();
    match b.iter().find(|c| **c == b'.' || **c == b':') {
        Some(b'.') => v4(b).map(|o| IpAddr::V4(Ipv4Addr::from(o))),
        Some(_) => v6(b).map(from16),
        None => None,
    }
}

/// A prefix as kube-proxy reads a source range (`ParseCIDRSloppy` after trimming
/// whitespace, `MapCIDRsByIPFamily`): the network address (host bits cleared) and the
/// length, of the family upstream gives it; `None` when the parser refuses the text.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let b = s.trim().as_bytes();
    let slash = b.iter().position(|c| *c == b'/')?;
    let (a, m) = (&b[..slash], &b[slash + 1..]);
    let (n, used) = decimal(m)?;
    if used != m.len() {
        return None;
    }
    if let Some(o) = v4(a) {
        let len = u8::try_from(n).ok().filter(|l| *l <= 32)?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        return Some((
            IpAddr::V4(Ipv4Addr::from(u32::from_be_bytes(o) & mask)),
            len,
        ));
    }
    let b16 = v6(a)?;
    let len = u8::try_from(n).ok().filter(|l| *l <= 128)?;
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    let net = (u128::from_be_bytes(b16) & mask).to_be_bytes();
    Some(match mapped(&net) {
        // only a length of 96 or more keeps the mapping bits
        Some(a) => (IpAddr::V4(a), len - 96),
        None => (IpAddr::V6(Ipv6Addr::from(net)), len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_as_upstream_reads_them() {
        for (text, want) in [
            ("198.18.0.10", "198.18.0.10"),
            ("198.018.000.010", "198.18.0.10"),
            ("0000198.18.0.00001", "198.18.0.1"),
            ("::ffff:198.18.1.5", "198.18.1.5"),
            ("::FFFF:198.018.001.005", "198.18.1.5"),
            ("0:0:0:0:0:ffff:c612:105", "198.18.1.5"),
            ("2001:DB8::5", "2001:db8::5"),
            ("2001:0db8:0000:0000:0000:0000:0000:0005", "2001:db8::5"),
            ("2001:00db8:0::5", "2001:db8::5"),
            ("2001:db8:251::0.0.1.5", "2001:db8:251::105"),
            ("2001:db8:251:0:0:0:000.000.001.005", "2001:db8:251::105"),
            ("2001:db8::", "2001:db8::"),
            ("::", "::"),
        ] {
            assert_eq!(parse_ip(text), Some(a(want)), "{text}");
        }
        for bad in [
            "",
            " 198.18.0.1",
            "198.18.0.1 ",
            "198.18.0",
            "198.18.0.256",
            "198.18.0.1.1",
            "198.18.0.0x1",
            "2001:db8::5::1",
            "2001:db8:1:2:3:4:5:6::",
            "1:2:3:4:5:6:7",
            "2001:db8:10000::1",
            "2001:db8::1.2.3.4.5",
            "2001:db8:1:2:3:4.5.6.7",
            "2001:db8::1%eth0",
            "db8",
        ] {
            assert_eq!(parse_ip(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prefixes_as_upstream_reads_them() {
        for (text, want, len) in [
            ("198.19.0.0/24", "198.19.0.0", 24),
            ("198.19.7.9/16", "198.19.0.0", 16),
            (" 198.19.0.0/24 ", "198.19.0.0", 24),
            ("198.019.000.000/0024", "198.19.0.0", 24),
            ("198.19.5.5/0", "0.0.0.0", 0),
            ("::ffff:198.19.0.0/120", "198.19.0.0", 24),
            ("::ffff:198.19.0.9/96", "0.0.0.0", 0),
            ("::ffff:198.19.0.0/64", "::", 64),
            ("::ffff:198.19.0.0/95", "::fffe:0:0", 95),
            ("2001:DB8:300:0:0:0:0:1/48", "2001:db8:300::", 48),
            ("2001:0db8::/032", "2001:db8::", 32),
        ] {
            assert_eq!(parse_cidr(text), Some((a(want), len)), "{text}");
        }
        for bad in [
            "198.19.0.0",
            "198.19.0.0/33",
            "2001:db8::/129",
            "198.19.0.0/",
            "198.19.0.0/2 4",
            "198.19.0.0/-1",
            "::ffff:198.19.0.0/129",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad:?}");
        }
    }
}
