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
/// - `dirty_decay_ms:0`, `muzzy_decay_ms:0`: pages freed are returned to the kernel at
///   once (`MADV_DONTNEED`). Otherwise a growing buffer's previous copies (the API's list
///   bodies, the batch) stay resident until a decay timer, and `MADV_FREE`d pages count
///   in RSS until the kernel needs them (+70 MiB at 10,000 services, +250 MiB at 50,000).
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 44] = b"narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0\0";

#[cfg(test)]
mod tests {
    /// jemalloc serves this process and took the options above.
    #[test]
    fn jemalloc_takes_the_options() {
        assert_eq!(read::<isize>(b"opt.dirty_decay_ms\0"), 0);
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
