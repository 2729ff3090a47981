//! Watching the `--config` file as upstream does (`Options.initWatcher`/`eventHandler`
//! over fsnotify): a write to the file, or the file being renamed, ends the process so
//! that it restarts with the new content. Other events (attribute changes, the file
//! being deleted, as when the kubelet swaps a ConfigMap volume's data directory) do not,
//! exactly as upstream: a ConfigMap edit is picked up at the next restart.

use std::path::Path;

use inotify::{EventMask, Inotify, WatchMask};

/// What upstream's fsnotify watch reports for these inotify bits.
pub fn is_change(mask: EventMask) -> bool {
    // fsnotify: IN_MODIFY is Write; IN_MOVE_SELF (and IN_MOVED_FROM) is Rename.
    mask.intersects(EventMask::MODIFY | EventMask::MOVE_SELF | EventMask::MOVED_FROM)
}

/// The text upstream returns when the file changed.
pub const CHANGED: &str = "content of the proxy server's configuration file was updated";

/// Watch `path` on a thread of its own; `on_change` runs once, at the first write or
/// rename. Fails when the watch cannot be set up (as upstream's `Complete` does).
pub fn spawn(path: &Path, on_change: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut ino = Inotify::init()?;
    // fsnotify's mask for a watched file
    ino.watches().add(
        path,
        WatchMask::MODIFY
            | WatchMask::MOVE_SELF
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::CREATE
            | WatchMask::ATTRIB
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF,
    )?;
    std::thread::Builder::new()
        .name("config-watch".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let events = match ino.read_events_blocking(&mut buf) {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::error!(err = %e, "watching the configuration file failed");
                        return;
                    }
                };
                let mut ignored = false;
                for ev in events {
                    if is_change(ev.mask) {
                        on_change();
                        return;
                    }
                    ignored |= ev.mask.contains(EventMask::IGNORED);
                }
                if ignored {
                    // the watch is gone (the file was deleted); upstream's is too
                    return;
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("nlp-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn watched(path: &Path) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = channel();
        spawn(path, move || {
            let _ = tx.send(());
        })
        .unwrap();
        rx
    }

    #[test]
    fn a_write_is_a_change() {
        let d = dir("write");
        let f = d.join("config.conf");
        std::fs::write(&f, "a").unwrap();
        let rx = watched(&f);
        std::fs::write(&f, "b").unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_rename_is_a_change() {
        let d = dir("rename");
        let f = d.join("config.conf");
        std::fs::write(&f, "a").unwrap();
        let rx = watched(&f);
        std::fs::rename(&f, d.join("old")).unwrap();
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Negative control: attribute changes and a ConfigMap-style data swap (the old
    /// file deleted, a new one behind the symlink) are not changes, as upstream.
    #[test]
    fn chmod_and_configmap_swap_are_not() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let d = dir("swap");
        std::fs::create_dir(d.join("..v1")).unwrap();
        std::fs::write(d.join("..v1/config.conf"), "a").unwrap();
        symlink("..v1", d.join("..data")).unwrap();
        symlink("..data/config.conf", d.join("config.conf")).unwrap();
        let rx = watched(&d.join("config.conf"));
        std::fs::set_permissions(
            d.join("..v1/config.conf"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::create_dir(d.join("..v2")).unwrap();
        std::fs::write(d.join("..v2/config.conf"), "b").unwrap();
        symlink("..v2", d.join("..tmp")).unwrap();
        std::fs::rename(d.join("..tmp"), d.join("..data")).unwrap();
        std::fs::remove_dir_all(d.join("..v1")).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
