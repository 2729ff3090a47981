//! One conntrack entry as the cleanup needs it (stub until the events branch lands).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::Family;

/// One conntrack entry: its original tuple (to delete it by tuple), its reply source
/// (to judge it), its zone and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub reply_src: IpAddr,
    pub reply_sport: u16,
    pub zone: u16,
    pub id: Option<u32>,
}

impl Flow {
    pub fn family(&self) -> Family {
        if self.dst.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }
    /// Not DNAT'ed: the reply comes from the original destination, address and port.
    pub fn is_unnated(&self) -> bool {
        self.reply_src == self.dst && self.reply_sport == self.dport
    }
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.proto {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            132 => "sctp".to_string(),
            n => format!("proto {n}"),
        };
        write!(
            f,
            "{proto} {} -> {} reply from {}",
            SocketAddr::new(self.src, self.sport),
            SocketAddr::new(self.dst, self.dport),
            SocketAddr::new(self.reply_src, self.reply_sport)
        )
    }
}

/// A conntrack event about a flow (NEW or DESTROY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEvent {
    New(Flow),
    Destroy(Flow),
}
