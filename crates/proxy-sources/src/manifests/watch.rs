//! Watching the manifests path over inotify: the directory (the path itself, or a
//! file's directory: a rename over the file, a ConfigMap's `..data` swap, files created
//! and removed), and a file given through a symlink itself (writes to its target). What
//! it sees of each file ([`Writes`]: written and not closed yet, closed by its writer,
//! renamed into place) tells the reader when a new version may be taken
//! ([`super::settle`]); any event but a write makes it look at the files at once.
//! Lost events (`IN_Q_OVERFLOW`) forget what was seen: the files are then taken by the
//! settle window.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::settle::Writes;

/// An inotify instance on the manifests path.
pub struct Watch {
    ino: Inotify,
    /// The directory whose entries are the manifests (`dir.join(name)` is a file's
    /// path as the listing names it), and what is watched for it ("." for "").
    dir: PathBuf,
    dir_watch: PathBuf,
    /// A file given through a symlink: watched itself too.
    link: Option<PathBuf>,
    /// Each watch: None for the directory, else the file it stands for.
    wds: HashMap<WatchDescriptor, Option<PathBuf>>,
    dir_watched: bool,
    writes: HashMap<PathBuf, Writes>,
    buf: Vec<u8>,
}

fn dir_mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

fn file_mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

impl Watch {
    /// Watch `path` (a file or a directory of manifests). Fails when inotify cannot be
    /// set up (no instance or no watch left): the caller polls instead.
    pub fn new(path: &Path) -> io::Result<Watch> {
        let is_dir = std::fs::metadata(path)?.is_dir();
        let dir = if is_dir {
            path.to_path_buf()
        } else {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        let dir_watch = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir.clone()
        };
        let link = (!is_dir
            && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()))
        .then(|| path.to_path_buf());
        let mut w = Watch {
            ino: Inotify::init()?,
            dir,
            dir_watch,
            link,
            wds: HashMap::new(),
            dir_watched: false,
            writes: HashMap::new(),
            buf: vec![0; 16 << 10],
        };
        w.rewatch()?;
        Ok(w)
    }

    /// (Re)add the watches: the directory's if it went (renamed, deleted), the linked
    /// file's on its current target.
    fn rewatch(&mut self) -> io::Result<()> {
        if !self.dir_watched {
            let wd = self.ino.watches().add(&self.dir_watch, dir_mask())?;
            self.wds.insert(wd, None);
            self.dir_watched = true;
        }
        if let Some(link) = &self.link {
            if let Ok(wd) = self.ino.watches().add(link, file_mask()) {
                self.wds.insert(wd, Some(link.clone()));
            }
        }
        Ok(())
    }

    /// What was seen of the file at `p` since its version in use.
    pub fn writes(&self, p: &Path) -> Writes {
        Writes {
            watched: self.dir_watched,
            ..self.writes.get(p).copied().unwrap_or_default()
        }
    }

    /// A version of `p` was taken: what was seen of it before is spent (a writer still
    /// holding it stays known).
    pub fn taken(&mut self, p: &Path) {
        if let Some(w) = self.writes.get_mut(p) {
            w.closed = false;
            w.moved_in = false;
        }
    }

    /// Wait at most `timeout` for events and note them. True when the files should be
    /// looked at now: an event other than a write (which only marks its writer), or
    /// the time ran out.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        if self.rewatch().is_err() {
            // The directory is gone for now: the caller's timeout paces the retries.
            self.dir_watched = false;
        }
        let mut p = libc::pollfd {
            fd: self.ino.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, which poll writes `revents` of.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if rc == 0 {
            return Ok(true);
        }
        let mut look = false;
        loop {
            let events = match self.ino.read_events(&mut self.buf) {
                Ok(ev) => ev,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            let mut noted = Vec::new();
            for ev in events {
                let key = match self.wds.get(&ev.wd) {
                    Some(Some(file)) => Some(file.clone()),
                    Some(None) => ev.name.map(|n| self.dir.join(n)),
                    None => None,
                };
                noted.push((ev.wd.clone(), ev.mask, key));
            }
            for (wd, mask, key) in noted {
                look |= self.note(wd, mask, key);
            }
        }
        Ok(look)
    }

    /// Note one event; whether the files should be looked at.
    fn note(&mut self, wd: WatchDescriptor, mask: EventMask, key: Option<PathBuf>) -> bool {
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.writes.clear();
            return true;
        }
        if mask.intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
            if self.wds.remove(&wd) == Some(None) {
                self.dir_watched = false;
            }
            return true;
        }
        let Some(key) = key else { return true };
        if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
            self.writes.remove(&key);
            return true;
        }
        let w = self.writes.entry(key).or_default();
        if mask.contains(EventMask::MODIFY) {
            *w = Writes {
                open: true,
                ..Writes::default()
            };
            return false;
        }
        if mask.contains(EventMask::CLOSE_WRITE) {
            w.open = false;
            w.closed = true;
        }
        if mask.contains(EventMask::MOVED_TO) {
            *w = Writes {
                moved_in: true,
                ..Writes::default()
            };
        }
        true
    }
}

/// How the manifests thread follows the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follow {
    /// Look at the files at least this often (the fallback when inotify cannot be set
    /// up or misses a change, e.g. a write to a symlink's target elsewhere). None: read
    /// them once (`--once`, `--dry-run`).
    pub poll: Option<Duration>,
    /// Watch them over inotify (off: only the poll, for tests).
    pub inotify: bool,
}

/// How long the initial lists wait for files still being written.
pub const INITIAL_WAIT: Duration = Duration::from_secs(10);

/// Read the manifests, send every object as its file may be taken, then both "listed"
/// markers (once every file was taken, or after [`INITIAL_WAIT`]); then, unless
/// `follow.poll` is None, follow the changes until the engine is gone: woken by inotify,
/// at the moment a waiting file may be taken, or by the poll. Runs on its own thread,
/// so the engine takes the objects while they are read.
pub fn run(mut reader: super::Reader, follow: Follow, tx: crate::events::EventSender) {
    use proxy_events::Event;
    use std::time::Instant;
    use tracing::{info, warn};

    let gone = std::cell::Cell::new(false);
    let mut send = |ev: Event| {
        let ok = tx.send(ev);
        gone.set(gone.get() || !ok);
        ok
    };
    let poll = follow.poll.unwrap_or(INITIAL_WAIT);
    let mut watch = if follow.inotify {
        match Watch::new(reader.path()) {
            Ok(w) => Some(w),
            Err(e) => {
                warn!(error = %e, poll_s = poll.as_secs_f32(),
                    "cannot watch the manifests over inotify; polling them");
                None
            }
        }
    } else {
        None
    };
    let start = Instant::now();
    let mut listed = false;
    loop {
        let looked = match &watch {
            Some(w) => reader.look(&|p| w.writes(p), &mut send),
            None => reader.look(&|_| Writes::default(), &mut send),
        };
        let looked = match looked {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot read the manifests; keeping the rules as they are");
                super::Looked::default()
            }
        };
        if let Some(w) = watch.as_mut() {
            looked.taken.iter().for_each(|p| w.taken(p));
        }
        if listed && looked.events > 0 {
            info!(changes = looked.events, "manifests changed");
        }
        if !listed && (looked.pending == 0 || start.elapsed() >= INITIAL_WAIT) {
            if looked.pending > 0 {
                warn!(
                    files = looked.pending,
                    "manifest files still being written; their objects come once they settle"
                );
            }
            listed = true;
            if !send(Event::ServicesListed) || !send(Event::SlicesListed) {
                return;
            }
            if follow.poll.is_none() {
                return;
            }
        }
        if gone.get() {
            return;
        }
        // Until the next poll, or the moment a waiting file may be taken; inotify
        // events end the wait early.
        let until = looked
            .next
            .map_or(Instant::now() + poll, |n| n.min(Instant::now() + poll));
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match watch.as_mut().map(|w| w.wait(left)) {
                Some(Ok(true)) => break,
                Some(Ok(false)) => continue,
                Some(Err(e)) => {
                    warn!(error = %e, poll_s = poll.as_secs_f32(),
                        "watching the manifests over inotify failed; polling them");
                    watch = None;
                }
                None => {
                    std::thread::sleep(left);
                    break;
                }
            }
        }
    }
}
