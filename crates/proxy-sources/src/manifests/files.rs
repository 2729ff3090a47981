//! The files of the manifests path: which are read, which are skipped and why, their
//! versions as `stat` shows them, and reading one without ever blocking on a FIFO.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A version of a file: identity (device, inode) and what changes when it is written,
/// replaced, truncated or has its permissions changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether `other` is a version of the same inode (not a file renamed over it).
    pub fn same_file(&self, other: &Stamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }

    /// How long ago it was last modified (None: in the future).
    pub fn age(&self) -> Option<std::time::Duration> {
        let (s, ns) = self.mtime;
        let mtime = std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(
            u64::try_from(s).ok()?,
            u32::try_from(ns).ok()?,
        ))?;
        std::time::SystemTime::now().duration_since(mtime).ok()
    }
}

/// Why a path is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error("a symlink loop")]
    SymlinkLoop,
    #[error("a dangling symlink")]
    Dangling,
    #[error("a directory")]
    Directory,
    #[error("a FIFO")]
    Fifo,
    #[error("a socket")]
    Socket,
    #[error("a device")]
    Device,
    #[error("cannot be examined: {0}")]
    Stat(String),
}

/// What the manifests path holds now: readable files with their versions, and skipped
/// paths with the reason.
#[derive(Debug, Default)]
pub struct Listing {
    pub files: Vec<(PathBuf, Stamp)>,
    pub skipped: Vec<(PathBuf, Skip)>,
}

fn examine(p: &Path) -> Result<Stamp, Skip> {
    match std::fs::metadata(p) {
        Ok(m) => {
            let t = m.file_type();
            if t.is_file() {
                Ok(Stamp::of(&m))
            } else if t.is_dir() {
                Err(Skip::Directory)
            } else if t.is_fifo() {
                Err(Skip::Fifo)
            } else if t.is_socket() {
                Err(Skip::Socket)
            } else {
                Err(Skip::Device)
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Skip::SymlinkLoop),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(p).is_ok() {
                Err(Skip::Dangling)
            } else {
                Err(Skip::Stat(e.to_string())) // gone meanwhile
            }
        }
        Err(e) => Err(Skip::Stat(e.to_string())),
    }
}

/// Whether a directory entry's name makes it a manifest: `.yaml`, `.yml` or `.json`, not
/// hidden (a ConfigMap volume's `..data` links and editors' swap files are hidden).
fn is_manifest_name(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    !name.starts_with('.') && matches!(ext, "yaml" | "yml" | "json")
}

/// The files under `path`: the path itself when it is not a directory, else the
/// manifests of the directory (not recursive), sorted. Fails only when `path` itself
/// cannot be examined or listed.
pub fn list(path: &Path) -> std::io::Result<Listing> {
    let mut out = Listing::default();
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        match examine(path) {
            Ok(s) => out.files.push((path.to_path_buf(), s)),
            Err(why) => out.skipped.push((path.to_path_buf(), why)),
        }
        return Ok(out);
    }
    for e in std::fs::read_dir(path)? {
        let p = e?.path();
        if !is_manifest_name(&p) {
            continue;
        }
        match examine(&p) {
            Ok(s) => out.files.push((p, s)),
            Err(why) => out.skipped.push((p, why)),
        }
    }
    out.files.sort_by(|a, b| a.0.cmp(&b.0));
    out.skipped.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("no longer a regular file")]
    NotRegular,
    #[error("not UTF-8 text: {0}")]
    NotText(#[from] std::string::FromUtf8Error),
}

/// Read a regular file as text with the version read. Opened non-blocking and checked
/// after opening, so a path replaced by a FIFO meanwhile cannot block the reader.
pub fn read(p: &Path) -> Result<(String, Stamp), ReadError> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(ReadError::NotRegular);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(m.len()).unwrap_or(0));
    f.read_to_end(&mut bytes)?;
    Ok((String::from_utf8(bytes)?, Stamp::of(&m)))
}

/// The version of `p` now, if it is still a regular file.
pub fn stamp(p: &Path) -> Option<Stamp> {
    examine(p).ok()
}
