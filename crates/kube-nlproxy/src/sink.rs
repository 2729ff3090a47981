//! Test mode (`--render-to FILE`): a kernel stand-in for the engine. Batches are encoded
//! exactly as for the kernel (to check them and count their bytes), played onto the
//! tables the way the kernel would (`ruleset::apply`), and the resulting ruleset is
//! written to the file as nft text after every commit. The engine's compile, diff and
//! sync path is the same as on a real node; only the socket is replaced.

use std::io::Write;
use std::path::PathBuf;

use nft_model::{Op, Table, TableRef};
use sync_engine::cleanup::{Removal, Scope};
use sync_engine::{CommitStats, ConntrackKernel, EngineError, NftKernel};

pub struct FileSink {
    path: PathBuf,
    tables: Vec<Table>,
    generation: u32,
}

impl FileSink {
    pub fn new(path: impl Into<PathBuf>) -> FileSink {
        FileSink {
            path: path.into(),
            tables: Vec::new(),
            generation: 1,
        }
    }

    fn write(&self, tables: &[Table]) -> std::io::Result<()> {
        let text: String = tables.iter().map(nft_model::render::table).collect();
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)
    }
}

impl NftKernel for FileSink {
    fn generation(&mut self) -> Result<u32, EngineError> {
        Ok(self.generation)
    }

    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        if ops.is_empty() {
            return Ok(CommitStats::default());
        }
        if let Some(g) = genid {
            if g != self.generation {
                return Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged {
                    expected: g,
                }));
            }
        }
        let batch = nft_wire::encode_batch(ops, 0, genid)
            .map_err(|e| EngineError::Nft(nft_netlink::NftError::Encode(e)))?;
        let mut tables = self.tables.clone();
        ruleset::apply(&mut tables, ops).map_err(|e| {
            EngineError::Other(format!("render-to: the batch would be rejected: {e}"))
        })?;
        // Like the kernel, all or nothing: the new state counts only once it is written.
        self.write(&tables)
            .map_err(|e| EngineError::Other(format!("writing {}: {e}", self.path.display())))?;
        self.tables = tables;
        self.generation = self.generation.wrapping_add(1);
        Ok(CommitStats {
            ops: ops.len(),
            bytes: batch.bytes.len(),
        })
    }

    /// (Nobody else writes the file's tables: the generation never moves under.)
    fn dump_table(
        &mut self,
        t: &TableRef,
        _others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError> {
        Ok(self
            .tables
            .iter()
            .find(|x| x.family == t.family && x.name == t.name)
            .cloned())
    }
}

/// No conntrack in test mode: no flow to list or delete.
pub struct NoConntrack;

impl ConntrackKernel for NoConntrack {
    fn list_udp(
        &mut self,
        _family: kube_model::IpFamily,
        _out: &mut Vec<ct_netlink::Flow>,
    ) -> Result<bool, EngineError> {
        Ok(true)
    }

    fn list(
        &mut self,
        scopes: &[Scope],
        _out: &mut Vec<ct_netlink::Flow>,
    ) -> Result<Vec<bool>, EngineError> {
        Ok(vec![true; scopes.len()])
    }

    fn delete(&mut self, flows: &[ct_netlink::Flow]) -> Result<Vec<Removal>, EngineError> {
        Ok(vec![Removal::AlreadyGone; flows.len()])
    }
}
