//! Legacy spellings of addresses and ranges: what the API server stored before strict IP
//! validation and still hands out for those objects (upstream
//! `apimachinery/pkg/util/validation/ip.go`: the legacy fields, `IsValidIPForLegacyField`
//! and `IsValidCIDRForLegacyField` with `StrictIPCIDRValidation` off, are checked by
//! `ParseIPSloppy`/`ParseCIDRSloppy` alone; with it on, an unchanged old value is kept):
//!
//! - `spec.clusterIP`/`clusterIPs`, `spec.externalIPs`, `status.loadBalancer.ingress[].ip`
//!   (`ValidateService`, `ValidateLoadBalancerStatus`) and the addresses of IPv4 and IPv6
//!   EndpointSlices (`IsValidIPv4Address`: anything the sloppy parser reads as IPv4,
//!   IPv4-mapped IPv6 included; `IsValidIPv6Address`: anything it reads as IPv6): IPv4
//!   octets with leading zeros (read as decimal, any number of them), IPv4-mapped IPv6
//!   (dotted or in hex), IPv6 in upper case, uncompressed, with leading zeros (even past
//!   four digits), with a dotted IPv4 tail;
//! - `spec.loadBalancerSourceRanges` (`IsValidCIDRForLegacyField` after trimming
//!   whitespace, so padded values are stored too): the same address spellings, bits set
//!   past the prefix length, leading zeros in the length, IPv4-mapped prefixes (a length
//!   of 96 + n is the IPv4 /n; a shorter one an IPv6 prefix of `::`).
//!
//! On a few objects only (`respell`): 5 % of the Services (about half of each one's
//! addresses and ranges) and 5 % of the IP EndpointSlices (about half of their
//! endpoints, every address of one). Every address, read leniently, stays what it was
//! (in 198.18.0.0/15 or 2001:db8::/32); a range may change family only by the IPv4-mapped
//! rule above.

use super::*;

/// Respell the addresses of a few of `services` and `slices` (see the module's docs).
pub(crate) fn respell(
    rng: &mut Rng,
    services: &mut [core::Service],
    slices: &mut [discovery::EndpointSlice],
) {
    for svc in services {
        respell_service(rng, svc);
    }
    respell_slices(rng, slices);
}

/// One Service's addresses and ranges, one time in twenty.
pub(crate) fn respell_service(rng: &mut Rng, svc: &mut core::Service) {
    if !rng.chance(5) {
        return;
    }
    let Some(spec) = svc.spec.as_mut() else {
        return;
    };
    if let Some(ips) = spec.cluster_ips.as_mut() {
        for ip in ips.iter_mut() {
            if let (Ok(a), true) = (ip.parse::<IpAddr>(), rng.chance(50)) {
                *ip = spell_ip(rng, a, true);
            }
        }
        // validation: clusterIP is clusterIPs[0], the same text
        if spec.cluster_ip.is_some() {
            spec.cluster_ip = ips.first().cloned();
        }
    }
    for ip in spec.external_ips.iter_mut().flatten() {
        if let (Ok(a), true) = (ip.parse::<IpAddr>(), rng.chance(50)) {
            *ip = spell_ip(rng, a, true);
        }
    }
    for r in spec.load_balancer_source_ranges.iter_mut().flatten() {
        if rng.chance(60) {
            *r = spell_cidr(rng, r);
        }
    }
    let ing = svc
        .status
        .as_mut()
        .and_then(|s| s.load_balancer.as_mut())
        .and_then(|l| l.ingress.as_mut());
    for i in ing.into_iter().flatten() {
        if let Some(ip) = i.ip.as_mut() {
            if let (Ok(a), true) = (ip.parse::<IpAddr>(), rng.chance(50)) {
                *ip = spell_ip(rng, a, true);
            }
        }
    }
}

/// The endpoint addresses of one IP slice in twenty.
pub(crate) fn respell_slices(rng: &mut Rng, slices: &mut [discovery::EndpointSlice]) {
    for sl in slices {
        if sl.address_type == "FQDN" || !rng.chance(5) {
            continue;
        }
        for e in sl.endpoints.iter_mut().flatten() {
            if !rng.chance(50) {
                continue;
            }
            for a in e.addresses.iter_mut() {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    // an IPv4 slice may hold IPv4-mapped IPv6 (it reads as IPv4)
                    *a = spell_ip(rng, ip, true);
                }
            }
        }
    }
}

/// A decimal number with `zeros` leading zeros.
fn padded(n: impl std::fmt::Display, zeros: usize) -> String {
    format!("{}{n}", "0".repeat(zeros))
}

/// Dotted IPv4 with leading zeros on some octets (at least one), a few of them long.
fn dotted_zeros(rng: &mut Rng, o: [u8; 4]) -> String {
    let first = rng.below(4) as usize;
    let parts: Vec<String> = o
        .iter()
        .enumerate()
        .map(|(k, x)| {
            let z = match rng.below(10) {
                0..=4 => 0,
                5..=7 => 1,
                8 => 2,
                _ => rng.range(3, 6) as usize,
            };
            padded(x, if k == first { z.max(1) } else { z })
        })
        .collect();
    parts.join(".")
}

fn maybe_upper(rng: &mut Rng, s: String) -> String {
    if rng.chance(50) {
        s.to_uppercase()
    } else {
        s
    }
}

/// A legacy spelling of `a` (never its canonical text). `mapped`: IPv4 may be written
/// as IPv4-mapped IPv6.
pub(crate) fn spell_ip(rng: &mut Rng, a: IpAddr, mapped: bool) -> String {
    match a {
        IpAddr::V4(v) => {
            let o = v.octets();
            let dotted = |rng: &mut Rng| {
                if rng.chance(50) {
                    dotted_zeros(rng, o)
                } else {
                    v.to_string()
                }
            };
            match if mapped { rng.below(5) } else { 0 } {
                0 | 1 => dotted_zeros(rng, o),
                2 => {
                    let d = dotted(rng);
                    maybe_upper(rng, format!("::ffff:{d}"))
                }
                3 => {
                    let (hi, lo) = (
                        u16::from_be_bytes([o[0], o[1]]),
                        u16::from_be_bytes([o[2], o[3]]),
                    );
                    maybe_upper(rng, format!("::ffff:{hi:x}:{lo:x}"))
                }
                _ => {
                    let d = dotted(rng);
                    maybe_upper(rng, format!("0000:0000:0:0:0:FFFF:{d}"))
                }
            }
        }
        IpAddr::V6(v) => {
            let g = v.segments();
            let s = match rng.below(4) {
                // every group in four digits
                0 => g
                    .iter()
                    .map(|x| format!("{x:04x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
                // uncompressed, no leading zeros
                1 => g
                    .iter()
                    .map(|x| format!("{x:x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
                // leading zeros, some past four digits
                2 => g
                    .iter()
                    .map(|x| format!("{}{x:x}", "0".repeat(rng.below(4) as usize)))
                    .collect::<Vec<_>>()
                    .join(":")
                    .replacen(':', ":0", 1),
                // the last 32 bits as a dotted IPv4 tail
                _ => {
                    let head: Vec<String> = g[..6].iter().map(|x| format!("{x:x}")).collect();
                    let o = v.octets();
                    let tail = if rng.chance(50) {
                        dotted_zeros(rng, [o[12], o[13], o[14], o[15]])
                    } else {
                        format!("{}.{}.{}.{}", o[12], o[13], o[14], o[15])
                    };
                    format!("{}:{tail}", head.join(":"))
                }
            };
            maybe_upper(rng, s)
        }
    }
}

/// A legacy spelling of the canonical range `r` (`a.b.c.d/n` or `x::/n`): host bits set,
/// the address spelled as [`spell_ip`] (IPv4 as an IPv4-mapped prefix of length 96 + n),
/// leading zeros in the length, whitespace around it; once in fifty an IPv4 range
/// written IPv4-mapped with its own length (an IPv6 prefix of `::` upstream).
pub(crate) fn spell_cidr(rng: &mut Rng, r: &str) -> String {
    let Some((a, n)) = r
        .split_once('/')
        .and_then(|(a, n)| Some((a.parse::<IpAddr>().ok()?, n.parse::<u8>().ok()?)))
    else {
        return r.to_string();
    };
    // host bits (the low 16 at most)
    let a = if rng.chance(40) {
        let noise = rng.below(1 << 16);
        match a {
            IpAddr::V4(v) => {
                let host = if n == 0 {
                    u32::MAX
                } else {
                    !(u32::MAX << (32 - n))
                };
                IpAddr::V4(Ipv4Addr::from(u32::from(v) | (noise as u32 & host)))
            }
            IpAddr::V6(v) => {
                let host = if n == 0 {
                    u128::MAX
                } else {
                    !(u128::MAX << (128 - n))
                };
                IpAddr::V6(Ipv6Addr::from(u128::from(v) | (u128::from(noise) & host)))
            }
        }
    } else {
        a
    };
    let (text, len) = match a {
        IpAddr::V4(v) if rng.chance(2) => (format!("::ffff:{v}"), u32::from(n)),
        IpAddr::V4(v) if rng.chance(25) => {
            let d = if rng.chance(50) {
                dotted_zeros(rng, v.octets())
            } else {
                v.to_string()
            };
            (format!("::ffff:{d}"), u32::from(n) + 96)
        }
        IpAddr::V4(v) if rng.chance(50) => (dotted_zeros(rng, v.octets()), u32::from(n)),
        IpAddr::V6(_) if rng.chance(50) => (spell_ip(rng, a, false), u32::from(n)),
        _ => (a.to_string(), u32::from(n)),
    };
    let len = padded(
        len,
        if rng.chance(20) {
            rng.range(1, 3) as usize
        } else {
            0
        },
    );
    let pad = |rng: &mut Rng| if rng.chance(15) { " " } else { "" };
    format!("{}{text}/{len}{}", pad(rng), pad(rng))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{parse_cidr, parse_ip};

    /// Every spelling reads back as the address it spells, in its family.
    #[test]
    fn spellings_read_back() {
        let mut rng = Rng::new(7);
        for k in 0..5000u32 {
            let a = if k % 2 == 0 {
                v4((k % 250) as u8, (k % 199) as u8)
            } else {
                v6((k % 0x300) as u16, (k % 0xffff) as u16)
            };
            let s = spell_ip(&mut rng, a, k % 3 != 0);
            assert_ne!(s, a.to_string());
            assert_eq!(parse_ip(&s), Some(a), "{s}");
        }
        for r in [
            "198.19.0.0/24",
            "0.0.0.0/0",
            "198.18.200.1/32",
            "2001:db8:300::/48",
            "::/0",
        ] {
            let want = parse_cidr(r).unwrap();
            for _ in 0..500 {
                let s = spell_cidr(&mut rng, r);
                let got = parse_cidr(&s).unwrap_or_else(|| panic!("{s:?}"));
                // the one family change: IPv4 written mapped with its own length
                if got.0.is_ipv6() && want.0.is_ipv4() {
                    assert!(s.contains("::ffff:"), "{s}");
                } else {
                    assert_eq!(got, want, "{s:?}");
                }
            }
        }
    }
}
