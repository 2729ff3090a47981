//! The daemon's allocator: jemalloc, for a daemon whose memory is one big, long-lived
//! model built by one thread from objects other threads decode
//! (docs/decisions/0008-jemalloc.md).

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its first allocation (the `_RJEM_MALLOC_CONF`
/// environment variable still overrides them):
/// - `narenas:1`: one arena. Objects are decoded on the source threads and freed on the
///   engine thread; with an arena per thread the slabs they leave half-empty are spread
///   over several arenas (+32 MiB peak at 50,000 services from the API).
/// - `dirty_decay_ms:1000`, `muzzy_decay_ms:0`: pages freed are returned to the kernel
///   (`MADV_DONTNEED`) over the next second of allocations (no background thread: an
///   idle daemon keeps what was not returned yet, +10 MiB of 680 after a 50,000-service
///   production-shaped cold start), never kept `MADV_FREE`d. Not at once: a
///   cold start frees and allocates the same sizes over and over (vectors grown by
///   reallocation, the batch, the list bodies), and pages returned at once are faulted
///   in again (at 50,000 production-shaped services 0.4 s less system time, +1-15 MiB of
///   peak). Not later: a growing buffer's previous copies would stay resident (the API's
///   list bodies: +70 MiB at 10,000 services, +250 MiB at 50,000 with jemalloc's 10 s).
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 47] = b"narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// The process's memory as text, for `/debug/pprof/heap` with `--profiling`: the
/// kernel's view (`/proc/self/status`: `VmRSS`, `VmHWM`, `RssAnon`, ...), then
/// jemalloc's own report (`malloc_stats_print`). jemalloc is built without its
/// statistics counters (tikv-jemalloc-sys' `stats` feature is off: no cost on every
/// allocation), so that report gives its version and options, not allocated bytes.
pub fn stats() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut out: String = status
        .lines()
        .filter(|l| l.starts_with("Vm") || l.starts_with("Rss") || l.starts_with("Threads"))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push('\n');
    out.push_str(&jemalloc_report());
    out
}

fn jemalloc_report() -> String {
    unsafe extern "C" fn write(out: *mut std::ffi::c_void, msg: *const std::ffi::c_char) {
        if out.is_null() || msg.is_null() {
            return;
        }
        // SAFETY: `out` is the `String` passed below, alive for the call; jemalloc
        // passes a NUL-terminated message.
        let (out, msg) = unsafe { (&mut *out.cast::<String>(), std::ffi::CStr::from_ptr(msg)) };
        out.push_str(&msg.to_string_lossy());
    }
    let mut out = String::new();
    // SAFETY: the callback only appends to `out`, which outlives the call; the options
    // string is NUL-terminated.
    unsafe {
        tikv_jemalloc_sys::malloc_stats_print(
            Some(write),
            (&mut out as *mut String).cast(),
            c"blx".as_ptr(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    /// The kernel's memory lines and jemalloc's report.
    #[test]
    fn stats_are_jemallocs() {
        let s = super::stats();
        assert!(s.contains("jemalloc statistics"), "{s}");
        assert!(s.contains("VmRSS:"), "{s}");
    }

    /// jemalloc serves this process and took the options above.
    #[test]
    fn jemalloc_takes_the_options() {
        assert_eq!(read::<isize>(b"opt.dirty_decay_ms\0"), 1000);
        assert_eq!(read::<isize>(b"opt.muzzy_decay_ms\0"), 0);
        assert_eq!(read::<u32>(b"opt.narenas\0"), 1);
    }

    /// One option of jemalloc's, of type `T` (ssize_t for the decay times, unsigned
    /// for narenas).
    fn read<T: Default>(name: &[u8]) -> T {
        let mut v = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `name` is NUL-terminated; `v` and `len` describe a buffer of the
        // option's own type, which mallctl checks against `len`.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr().cast(),
                (&mut v as *mut T).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {}", String::from_utf8_lossy(name));
        v
    }
}
