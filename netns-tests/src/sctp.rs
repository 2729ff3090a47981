//! SCTP probes without SCTP sockets (docs/fuzzing.md, the packet sample): the host
//! kernel may have no SCTP protocol at all (`socket(AF_INET, SOCK_STREAM, 132)` gives
//! EPROTONOSUPPORT) while netfilter's conntrack and NAT of SCTP are built in. A probe is
//! then one hand-built SCTP INIT chunk (CRC32c checksum) sent over a raw IP socket of
//! protocol 132; the receivers are raw sockets of protocol 132 in the namespaces where
//! it may arrive, noting where it arrived (address and port after any DNAT) and the
//! source it saw (masquerade), keyed by the INIT's initiate tag; a reject is the ICMP
//! (v6) port unreachable that quotes the probe. Nothing answers the INIT: the reply
//! path (un-NAT) is the TCP and UDP probes' to show.

use std::collections::BTreeMap;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cluster::Outcome;
use crate::Netns;

pub const IPPROTO_SCTP: i32 = 132;

/// What the receivers saw, by initiate tag: the receiver's label and the source.
pub type Seen = Arc<Mutex<BTreeMap<u32, (String, IpAddr)>>>;

/// CRC32c (Castagnoli, reflected 0x82F63B78), as SCTP's checksum (RFC 9260 appendix A).
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// An SCTP packet of one INIT chunk from `sport` to `dport` with initiate tag `tag`
/// (verification tag 0, as an INIT must have), its checksum filled in.
pub fn init_packet(sport: u16, dport: u16, tag: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes()); // verification tag
    p.extend_from_slice(&0u32.to_be_bytes()); // checksum, below
    p.push(1); // INIT
    p.push(0); // flags
    p.extend_from_slice(&20u16.to_be_bytes()); // chunk length
    p.extend_from_slice(&tag.to_be_bytes()); // initiate tag
    p.extend_from_slice(&65535u32.to_be_bytes()); // a_rwnd
    p.extend_from_slice(&1u16.to_be_bytes()); // outbound streams
    p.extend_from_slice(&1u16.to_be_bytes()); // inbound streams
    p.extend_from_slice(&tag.to_be_bytes()); // initial TSN
    let c = crc32c(&p);
    // the checksum is stored in network byte order of the CRC's little-endian value
    p[8..12].copy_from_slice(&c.to_le_bytes());
    p
}

/// (source port, destination port, initiate tag) of an SCTP packet whose first chunk
/// is an INIT.
fn parse_init(p: &[u8]) -> Option<(u16, u16, u32)> {
    if p.len() < 20 || p[12] != 1 {
        return None;
    }
    Some((
        u16::from_be_bytes([p[0], p[1]]),
        u16::from_be_bytes([p[2], p[3]]),
        u32::from_be_bytes([p[16], p[17], p[18], p[19]]),
    ))
}

fn raw_socket(v6: bool, proto: i32) -> io::Result<OwnedFd> {
    let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe { libc::socket(fam, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(a: IpAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    match a {
        IpAddr::V4(v) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(v.octets());
            (ss, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        IpAddr::V6(v) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v.octets();
            (ss, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

fn set_int(fd: &OwnedFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: setsockopt with a valid int.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One datagram from a raw socket: the bytes, the source and (IPv6: from IPV6_PKTINFO)
/// the destination address.
fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, Option<IpAddr>, Option<IpAddr>)> {
    // SAFETY: recvmsg into buffers that outlive the call; the control buffer is aligned
    // for cmsghdr and its cmsgs are read with the libc macros within msg_controllen.
    unsafe {
        let mut ss: libc::sockaddr_storage = zeroed();
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut ctl = [0u64; 16];
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = size_of::<[u64; 16]>();
        let n = libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let src = match i32::from(ss.ss_family) {
            libc::AF_INET => {
                let sin = &*(&ss as *const _ as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(
                    sin.sin_addr.s_addr.to_ne_bytes(),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = &*(&ss as *const _ as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        };
        let mut dst = None;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        let mut left = 8; // a bound on the walk
        while !c.is_null() && left > 0 {
            left -= 1;
            if (*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_PKTINFO {
                let info = &*(libc::CMSG_DATA(c) as *const libc::in6_pktinfo);
                dst = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        Ok((n as usize, src, dst))
    }
}

fn v4_at(b: &[u8], i: usize) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(i..i + 4)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

fn v6_at(b: &[u8], i: usize) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(i..i + 16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(o)))
}

/// Note every SCTP INIT that arrives in `ns` (delivered locally: to one of its
/// addresses) in `seen`, labelled by `label(destination after NAT)`, until `stop`
/// (or `lifetime`).
pub fn receive(
    ns: &Netns,
    label: impl Fn(SocketAddr) -> String + Send + 'static,
    seen: Seen,
    stop: Arc<AtomicBool>,
    lifetime: Duration,
) -> JoinHandle<()> {
    let (s4, s6) = ns.run(|| {
        let s4 = raw_socket(false, IPPROTO_SCTP).expect("raw SCTP socket (IPv4)");
        let s6 = raw_socket(true, IPPROTO_SCTP).expect("raw SCTP socket (IPv6)");
        set_int(&s6, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1).expect("IPV6_RECVPKTINFO");
        (s4, s6)
    });
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::SeqCst) && started.elapsed() < lifetime {
            let mut fds = [
                libc::pollfd {
                    fd: s4.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: s6.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: a valid array of two pollfd.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 50) };
            if n <= 0 {
                continue;
            }
            for (i, pfd) in fds.iter().enumerate() {
                if pfd.revents == 0 {
                    continue;
                }
                let fd = if i == 0 { &s4 } else { &s6 };
                // a bound on one wake-up's reads
                for _ in 0..64 {
                    let Ok((n, src, dst)) = recv(fd, &mut buf) else {
                        break;
                    };
                    let b = &buf[..n];
                    let hit = if i == 0 {
                        // IPv4 raw sockets see the IP header
                        let ihl = usize::from(b.first().copied().unwrap_or(0) & 0xf) * 4;
                        match (
                            v4_at(b, 12),
                            v4_at(b, 16),
                            b.get(ihl..).and_then(parse_init),
                        ) {
                            (Some(s), Some(d), Some((_, dport, tag))) => Some((s, d, dport, tag)),
                            _ => None,
                        }
                    } else {
                        match (src, dst, parse_init(b)) {
                            (Some(s), Some(d), Some((_, dport, tag))) => Some((s, d, dport, tag)),
                            _ => None,
                        }
                    };
                    if let Some((s, d, dport, tag)) = hit {
                        let l = label(SocketAddr::new(d, dport));
                        if let Ok(mut m) = seen.lock() {
                            m.insert(tag, (l, s));
                        }
                    }
                }
            }
        }
    })
}

/// A distinct initiate tag (never 0) per probe of this process.
fn next_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(0x9e37_79b9);
    loop {
        let t = base.wrapping_add(NEXT.fetch_add(1, Ordering::SeqCst));
        if t != 0 {
            return t;
        }
    }
}

/// The (type, code) of an ICMP(v6) destination unreachable in `b` that quotes the probe
/// from `sport` to `dst` (`None`: not one, or about another packet).
fn icmp_about(b: &[u8], v6: bool, dst: IpAddr, sport: u16) -> Option<(u8, u8)> {
    if v6 {
        // no IPv6 header on an ICMPv6 raw socket: type, code, checksum, unused; then
        // the quoted IPv6 header (next header at 6, destination at 24) and SCTP
        let (ty, code) = (*b.first()?, *b.get(1)?);
        if ty != 1 || *b.get(8 + 6)? != 132 || v6_at(b, 8 + 24)? != dst {
            return None;
        }
        let sp = u16::from_be_bytes([*b.get(48)?, *b.get(49)?]);
        (sp == sport).then_some((ty, code))
    } else {
        let ihl = usize::from(b.first()? & 0xf) * 4;
        let (ty, code) = (*b.get(ihl)?, *b.get(ihl + 1)?);
        let inner = ihl + 8;
        if ty != 3 || *b.get(inner + 9)? != 132 || v4_at(b, inner + 16)? != dst {
            return None;
        }
        let ihl2 = usize::from(b.get(inner)? & 0xf) * 4;
        let sp = u16::from_be_bytes([*b.get(inner + ihl2)?, *b.get(inner + ihl2 + 1)?]);
        (sp == sport).then_some((ty, code))
    }
}

/// Send one SCTP INIT from `src` to `dst` in the calling thread's namespace and wait up
/// to `timeout` for a receiver to note it (`Reply` with its label and the source it
/// saw) or for an ICMP error quoting it (port unreachable: `Refused`; another: `Error`).
/// A send refused with EPERM (netfilter took it on the output path) waits all the
/// same, as the node's UDP probe does.
pub fn probe_here(src: IpAddr, dst: SocketAddr, seen: &Seen, timeout: Duration) -> Outcome {
    let v6 = dst.is_ipv6();
    let tag = next_tag();
    let sport = 10000 + (tag % 50000) as u16;
    let (sock, icmp) = match (
        raw_socket(v6, IPPROTO_SCTP),
        raw_socket(
            v6,
            if v6 {
                libc::IPPROTO_ICMPV6
            } else {
                libc::IPPROTO_ICMP
            },
        ),
    ) {
        (Ok(s), Ok(i)) => (s, i),
        (Err(e), _) | (_, Err(e)) => return Outcome::Error(format!("raw socket: {e}")),
    };
    let (sa, len) = sockaddr(src);
    // SAFETY: bind to a valid sockaddr of length `len`.
    if unsafe {
        libc::bind(
            sock.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            len,
        )
    } < 0
    {
        return Outcome::Error(format!("bind {src}: {}", io::Error::last_os_error()));
    }
    let pkt = init_packet(sport, dst.port(), tag);
    let (da, dlen) = sockaddr(dst.ip());
    // SAFETY: sendto with a valid buffer and sockaddr.
    let rc = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            pkt.as_ptr() as *const libc::c_void,
            pkt.len(),
            0,
            &da as *const _ as *const libc::sockaddr,
            dlen,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Outcome::Error(format!("send {dst}: {e}"));
        }
    }
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        if let Some((label, from)) = seen.lock().ok().and_then(|mut m| m.remove(&tag)) {
            return Outcome::Reply {
                pod: label,
                seen: from,
            };
        }
        let mut pfd = libc::pollfd {
            fd: icmp.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 20) } <= 0 {
            continue;
        }
        for _ in 0..64 {
            let Ok((n, _, _)) = recv(&icmp, &mut buf) else {
                break;
            };
            match icmp_about(&buf[..n], v6, dst.ip(), sport) {
                // port unreachable, as `reject` sends it
                Some((3, 3)) | Some((1, 4)) => return Outcome::Refused,
                Some((ty, code)) => {
                    return Outcome::Error(format!(
                        "ICMP destination unreachable type {ty} code {code}"
                    ))
                }
                None => {}
            }
        }
    }
    Outcome::Timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_of_the_standard_check_string() {
        // the CRC-32C check value (RFC 3720 B.4 / the catalogue's "123456789")
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn an_init_parses_back() {
        let p = init_packet(40001, 80, 0x1234_5678);
        assert_eq!(parse_init(&p), Some((40001, 80, 0x1234_5678)));
        let mut zeroed = p.clone();
        zeroed[8..12].fill(0);
        assert_eq!(crc32c(&zeroed).to_le_bytes(), p[8..12]);
    }
}
