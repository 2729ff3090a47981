//! The C allocator's settings for a daemon whose memory is one big, long-lived model
//! built by one thread from objects other threads decode (see
//! docs/decisions/0006-one-malloc-arena.md).

/// One malloc arena for all threads, and a fixed mmap threshold (large buffers are
/// mapped and unmapped, never left in the heap). Returns whether glibc took both; a
/// no-op (false) on other C libraries.
pub fn tune() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes glibc's allocator parameters; it is called once at
        // start, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1) == 1
                && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// glibc's default; setting it explicitly stops glibc raising it (up to 32 MiB) after a
/// large buffer is freed, which kept the 10k-service batch buffers in the heap.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_settings() {
        assert!(super::tune());
    }
}
