//! The ctnetlink socket: `netlink-sys` with large buffers and a receive timeout.

use crate::Error;
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub(crate) const RECV_BUF_LEN: usize = 256 * 1024;

pub(crate) struct NlSock {
    sock: Socket,
    seq: u32,
    pub(crate) rbuf: Vec<u8>,
}

fn setsockopt_int(fd: i32, level: i32, name: i32, v: libc::c_int) -> io::Result<()> {
    // SAFETY: valid fd, pointer to a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl NlSock {
    /// Open a NETLINK_NETFILTER socket in the calling thread's network namespace.
    pub(crate) fn open(rcvbuf: usize, sndbuf: usize, timeout: Duration) -> Result<NlSock, Error> {
        let mut sock = Socket::new(NETLINK_NETFILTER).map_err(|source| Error::Socket {
            op: "create",
            source,
        })?;
        sock.bind_auto()
            .map_err(|source| Error::Socket { op: "bind", source })?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(|source| Error::Socket {
                op: "connect",
                source,
            })?;
        let fd = sock.as_raw_fd();
        let clamp = |n: usize| n.min(i32::MAX as usize / 2) as libc::c_int;
        // FORCE needs CAP_NET_ADMIN (which ctnetlink writes need anyway); fall back
        // to the ordinary option, capped by net.core.[rw]mem_max.
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, clamp(rcvbuf)).is_err() {
            sock.set_rx_buf_sz(clamp(rcvbuf))
                .map_err(|source| Error::Socket {
                    op: "set SO_RCVBUF",
                    source,
                })?;
        }
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, clamp(sndbuf)).is_err() {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, clamp(sndbuf)).map_err(
                |source| Error::Socket {
                    op: "set SO_SNDBUF",
                    source,
                },
            )?;
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: valid fd, pointer to a live timeval of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(Error::Socket {
                op: "set SO_RCVTIMEO",
                source: io::Error::last_os_error(),
            });
        }
        Ok(NlSock {
            sock,
            seq: 1,
            rbuf: Vec::with_capacity(RECV_BUF_LEN),
        })
    }

    pub(crate) fn next_seq(&mut self) -> u32 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1).max(1);
        s
    }

    /// Reserve `n` consecutive sequence numbers; returns the first.
    pub(crate) fn reserve_seqs(&mut self, n: u32) -> u32 {
        if self.seq.checked_add(n).is_none() {
            self.seq = 1;
        }
        let s = self.seq;
        self.seq += n;
        s
    }

    pub(crate) fn send(&self, buf: &[u8]) -> io::Result<()> {
        loop {
            match self.sock.send(buf, 0) {
                Ok(n) if n == buf.len() => return Ok(()),
                Ok(n) => {
                    return Err(io::Error::other(format!(
                        "short netlink send: {n} of {} bytes",
                        buf.len()
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Receive one datagram into `rbuf`. Returns its length; a datagram longer than
    /// the buffer is cut (its tail is treated as malformed by the parser).
    pub(crate) fn recv(&mut self) -> io::Result<usize> {
        self.rbuf.clear();
        if self.rbuf.capacity() < RECV_BUF_LEN {
            self.rbuf.reserve(RECV_BUF_LEN);
        }
        loop {
            match self.sock.recv(&mut self.rbuf, 0) {
                Ok(n) => return Ok(n.min(self.rbuf.len())),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

pub(crate) fn is_enobufs(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
