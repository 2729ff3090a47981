//! What the daemon learns from the host, without running a program: its interface
//! addresses (an rtnetlink dump) and the conntrack sysctls (files under /proc/sys).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tracing::{info, warn};

use crate::config::v1alpha1::Conntrack;

const NLMSG_HDR: usize = 16;
const IFADDRMSG: usize = 8;
const RTM_GETADDR: u16 = 22;
const RTM_NEWADDR: u16 = 20;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

struct Fd(i32);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Every address configured on the host's interfaces (both families), via one
/// RTM_GETADDR dump.
pub fn local_addresses() -> io::Result<Vec<IpAddr>> {
    // SAFETY: plain socket call.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = Fd(fd);
    let mut req = Vec::with_capacity(NLMSG_HDR + IFADDRMSG);
    let len = (NLMSG_HDR + IFADDRMSG) as u32;
    req.extend_from_slice(&len.to_ne_bytes());
    req.extend_from_slice(&RTM_GETADDR.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req.extend_from_slice(&flags.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0, 0, 0, 0, 0]);
    // SAFETY: zeroed sockaddr_nl addressed to the kernel.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: valid buffer and address.
    let rc = unsafe {
        libc::sendto(
            fd.0,
            req.as_ptr().cast(),
            req.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    // SAFETY: valid option value.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        )
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let data = &buf[..n as usize];
        let mut off = 0;
        while off + NLMSG_HDR <= data.len() {
            let mlen = u32::from_ne_bytes(word(data, off)) as usize;
            let mtype = u16::from_ne_bytes([data[off + 4], data[off + 5]]);
            if mlen < NLMSG_HDR || off + mlen > data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated rtnetlink message",
                ));
            }
            match mtype {
                NLMSG_DONE => return Ok(out),
                NLMSG_ERROR => {
                    let errno = if mlen >= NLMSG_HDR + 4 {
                        i32::from_ne_bytes(word(data, off + NLMSG_HDR))
                    } else {
                        -libc::EIO
                    };
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                RTM_NEWADDR => parse_addr(&data[off + NLMSG_HDR..off + mlen], &mut out),
                _ => {}
            }
            off += (mlen + 3) & !3;
        }
    }
}

fn word(d: &[u8], off: usize) -> [u8; 4] {
    [d[off], d[off + 1], d[off + 2], d[off + 3]]
}

fn parse_addr(msg: &[u8], out: &mut Vec<IpAddr>) {
    if msg.len() < IFADDRMSG {
        return;
    }
    let family = i32::from(msg[0]);
    let mut off = IFADDRMSG;
    let mut address = None;
    let mut local = None;
    while off + 4 <= msg.len() {
        let alen = usize::from(u16::from_ne_bytes([msg[off], msg[off + 1]]));
        let atype = u16::from_ne_bytes([msg[off + 2], msg[off + 3]]);
        if alen < 4 || off + alen > msg.len() {
            break;
        }
        let payload = &msg[off + 4..off + alen];
        let ip = match (family, payload.len()) {
            (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(
                payload[0], payload[1], payload[2], payload[3],
            ))),
            (libc::AF_INET6, 16) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(payload);
                Some(IpAddr::V6(Ipv6Addr::from(b)))
            }
            _ => None,
        };
        match atype {
            IFA_LOCAL => local = ip,
            IFA_ADDRESS => address = ip,
            _ => {}
        }
        off += (alen + 3) & !3;
    }
    if let Some(ip) = local.or(address) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
}

/// Whether this process shares its network namespace with pid 1 (the host's, for a
/// daemon on the host network). Global conntrack settings are written only then.
fn in_init_netns() -> bool {
    match (
        std::fs::metadata("/proc/self/ns/net"),
        std::fs::metadata("/proc/1/ns/net"),
    ) {
        (Ok(a), Ok(b)) => {
            use std::os::unix::fs::MetadataExt;
            a.ino() == b.ino() && a.dev() == b.dev()
        }
        _ => false,
    }
}

/// Write `value` to `/proc/sys/<key>` when it differs. Errors are warnings: a read-only
/// sysctl (a container, a non-initial namespace) must not stop the proxy.
fn write_sysctl(key: &str, value: u64) {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let current = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if current == Some(value) {
        return;
    }
    match std::fs::write(&path, value.to_string()) {
        Ok(()) => match current {
            Some(from) => info!(sysctl = key, from, to = value, "set sysctl"),
            None => info!(sysctl = key, to = value, "set sysctl"),
        },
        Err(e) => warn!(sysctl = key, to = value, error = %e, "cannot set sysctl"),
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// The conntrack sysctls kube-proxy sets (`--conntrack-*`), written through /proc/sys.
/// Zero or unset values are left alone, as upstream does.
pub fn apply_conntrack(ct: &Conntrack) {
    let per_core = ct.max_per_core.unwrap_or(0).max(0) as u64;
    let min = ct.min.unwrap_or(0).max(0) as u64;
    if per_core > 0 {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let max = (per_core * cpus).max(min);
        if in_init_netns() {
            // The hash table holds max/4 buckets; only ever grown.
            let hs_path = "/sys/module/nf_conntrack/parameters/hashsize";
            let hashsize = std::fs::read_to_string(hs_path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if let Some(h) = hashsize {
                if h < max / 4 {
                    match std::fs::write(hs_path, (max / 4).to_string()) {
                        Ok(()) => info!(from = h, to = max / 4, "set conntrack hashsize"),
                        Err(e) => warn!(error = %e, "cannot set conntrack hashsize"),
                    }
                }
            }
            write_sysctl("net.netfilter.nf_conntrack_max", max);
        } else {
            info!("not in the host's network namespace: nf_conntrack_max (global) left alone");
        }
    }
    if let Some(d) = ct.tcp_established_timeout.filter(|d| d.0 > 0) {
        write_sysctl(
            "net.netfilter.nf_conntrack_tcp_timeout_established",
            secs(d.std()),
        );
    }
    if let Some(d) = ct.tcp_close_wait_timeout.filter(|d| d.0 > 0) {
        write_sysctl(
            "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
            secs(d.std()),
        );
    }
    if ct.tcp_be_liberal {
        write_sysctl("net.netfilter.nf_conntrack_tcp_be_liberal", 1);
    }
    if ct.udp_timeout.0 > 0 {
        write_sysctl(
            "net.netfilter.nf_conntrack_udp_timeout",
            secs(ct.udp_timeout.std()),
        );
    }
    if ct.udp_stream_timeout.0 > 0 {
        write_sysctl(
            "net.netfilter.nf_conntrack_udp_timeout_stream",
            secs(ct.udp_stream_timeout.std()),
        );
    }
}

/// `oom_score_adj` of this process (kube-proxy's `--oom-score-adj`).
pub fn apply_oom_score_adj(v: i32) {
    let path = "/proc/self/oom_score_adj";
    if std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        == Some(v.to_string())
    {
        return;
    }
    if let Err(e) = std::fs::write(path, v.to_string()) {
        warn!(value = v, error = %e, "cannot set oom_score_adj");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_loopback() {
        let addrs = super::local_addresses().unwrap();
        assert!(addrs.iter().any(|a| a.is_loopback()), "{addrs:?}");
    }
}
