//! The engine's view of the kernel (nftables and conntrack) and of time: traits, so that
//! the deterministic tests drive a fake kernel and a fake clock.

use std::time::Instant;

use nft_model::{Op, Table, TableRef};

use crate::EngineError;

/// What a successful commit did (the kernel-facing part of a sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitStats {
    pub ops: usize,
    pub bytes: usize,
}

/// The nftables side of the kernel (fakeable in tests).
pub trait NftKernel {
    fn generation(&mut self) -> Result<u32, EngineError>;
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError>;
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError>;
}

impl NftKernel for nft_netlink::Nft {
    fn generation(&mut self) -> Result<u32, EngineError> {
        Ok(nft_netlink::Nft::generation(self)?)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        let r = nft_netlink::Nft::commit(self, ops, genid)?;
        Ok(CommitStats {
            ops: r.ops,
            bytes: r.bytes,
        })
    }
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError> {
        Ok(nft_netlink::Nft::dump_table(self, t)?)
    }
}

/// The conntrack side of the kernel (fakeable in tests). Returns the entries deleted.
pub trait ConntrackKernel {
    fn delete(&mut self, filters: &[ct_netlink::Filter]) -> Result<u64, EngineError>;
}

impl ConntrackKernel for ct_netlink::Conntrack {
    fn delete(&mut self, filters: &[ct_netlink::Filter]) -> Result<u64, EngineError> {
        Ok(ct_netlink::Conntrack::delete(self, filters)?.deleted)
    }
}

/// A source of time (injectable for tests).
pub trait Clock {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}
