//! echo-server: a pod's TCP and UDP server for the conformance tests.
//!
//! Usage: echo-server NAME PORT [PORT...]
//!
//! `{port}` in NAME is replaced by the port a server listens on (`e1:{port}` answers
//! `e1:80` on port 80), so that a reply tells which port a connection was DNATed to.
//!
//! Listens on `[::]:PORT` (both families) for TCP and UDP on every PORT. Each reply is
//! one line, `NAME PEER-IP PEER-PORT [PAYLOAD]`: the name of the pod and the source
//! address and port the server saw (IPv4 peers are shown as IPv4). TCP: the line is sent
//! as soon as a connection is accepted, then the connection is closed. UDP: every
//! datagram is answered, with its payload (up to 512 bytes) appended, from the address
//! it was sent to (IPV6_PKTINFO: node B's sink answers for a whole `local` route; for
//! IPv6 that needs `net.ipv6.ip_nonlocal_bind=1` in its namespace).
//! Prints `ready` on stdout once every socket is bound. Runs until killed; the tests
//! start it with `ip netns exec` in a pod's namespace and kill it when done.

use std::io::Write;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;

fn canonical(a: SocketAddr) -> (IpAddr, u16) {
    (a.ip().to_canonical(), a.port())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: echo-server NAME PORT [PORT...]");
        std::process::exit(2);
    }
    let name = args[0].clone();
    let mut handles = Vec::new();
    for p in &args[1..] {
        let port: u16 = p.parse().unwrap_or_else(|_| {
            eprintln!("echo-server: bad port {p}");
            std::process::exit(2)
        });
        let tcp = TcpListener::bind(("::", port)).unwrap_or_else(|e| {
            eprintln!("echo-server: tcp [::]:{port}: {e}");
            std::process::exit(1)
        });
        let udp = UdpSocket::bind(("::", port)).unwrap_or_else(|e| {
            eprintln!("echo-server: udp [::]:{port}: {e}");
            std::process::exit(1)
        });
        let n = name.replace("{port}", &port.to_string());
        handles.push(std::thread::spawn(move || {
            for mut conn in tcp.incoming().map_while(Result::ok) {
                if let Ok(peer) = conn.peer_addr() {
                    let (ip, port) = canonical(peer);
                    let _ = writeln!(conn, "{n} {ip} {port}");
                }
            }
        }));
        let n = name.replace("{port}", &port.to_string());
        handles.push(std::thread::spawn(move || udp_loop(&n, udp)));
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    for h in handles {
        let _ = h.join();
    }
}

const CMSG_SPACE: usize = 128;

/// Answer every datagram from the address it was sent to.
fn udp_loop(name: &str, udp: UdpSocket) {
    let fd = udp.as_raw_fd();
    let one: libc::c_int = 1;
    // SAFETY: valid option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVPKTINFO,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "IPV6_RECVPKTINFO: {}",
        std::io::Error::last_os_error()
    );
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: zeroed plain-data structures, filled by recvmsg within their sizes.
        let mut peer: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        let mut ctl = [0u64; CMSG_SPACE / 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut peer as *mut libc::sockaddr_in6).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_SPACE as _;
        // SAFETY: msg points at live buffers of the declared sizes.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        if n < 0 {
            continue;
        }
        let mut local: Option<libc::in6_pktinfo> = None;
        // SAFETY: walking the control messages recvmsg wrote.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_PKTINFO {
                    local = Some(std::ptr::read_unaligned(
                        libc::CMSG_DATA(c) as *const libc::in6_pktinfo
                    ));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let addr = SocketAddrV6::new(
            Ipv6Addr::from(peer.sin6_addr.s6_addr),
            u16::from_be(peer.sin6_port),
            0,
            peer.sin6_scope_id,
        );
        let (ip, port) = canonical(SocketAddr::V6(addr));
        let payload = String::from_utf8_lossy(&buf[..n as usize]);
        let reply = format!("{name} {ip} {port} {}\n", payload.trim_end());
        let mut iov = libc::iovec {
            iov_base: reply.as_ptr() as *mut libc::c_void,
            iov_len: reply.len(),
        };
        let mut ctl = [0u64; CMSG_SPACE / 8];
        // SAFETY: as above; the control buffer holds one in6_pktinfo message.
        unsafe {
            let mut out: libc::msghdr = std::mem::zeroed();
            out.msg_name = (&mut peer as *mut libc::sockaddr_in6).cast();
            out.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            out.msg_iov = &mut iov;
            out.msg_iovlen = 1;
            if let Some(mut info) = local {
                info.ipi6_ifindex = 0;
                let space = libc::CMSG_SPACE(std::mem::size_of::<libc::in6_pktinfo>() as u32);
                out.msg_control = ctl.as_mut_ptr().cast();
                out.msg_controllen = space as _;
                let c = libc::CMSG_FIRSTHDR(&out);
                (*c).cmsg_level = libc::IPPROTO_IPV6;
                (*c).cmsg_type = libc::IPV6_PKTINFO;
                (*c).cmsg_len =
                    libc::CMSG_LEN(std::mem::size_of::<libc::in6_pktinfo>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::in6_pktinfo, info);
            }
            libc::sendmsg(fd, &out, 0);
        }
    }
}
