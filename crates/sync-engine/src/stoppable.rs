//! A thread that blocks on a descriptor and is stopped by another one (an eventfd):
//! the nftables watcher and the conntrack event reader. Dropping it wakes the thread
//! (the eventfd becomes readable) and joins it.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A thread running `body`, which must return once `stop` (the descriptor it is given)
/// becomes readable. Stopped and joined when dropped.
pub struct Stoppable {
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stoppable {
    pub fn start(
        name: &str,
        body: impl FnOnce(BorrowedFd<'_>) + Send + 'static,
    ) -> std::io::Result<Stoppable> {
        // SAFETY: eventfd has no memory preconditions; the descriptor is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor this process owns.
        let stop = unsafe { OwnedFd::from_raw_fd(fd) };
        let theirs = stop.try_clone()?;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                use std::os::fd::AsFd;
                body(theirs.as_fd())
            })?;
        Ok(Stoppable {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
