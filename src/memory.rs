//! Giving the memory of a burst back to the operating system.
//!
//! A (re)list or a bulk load decodes every listed object: for 100,000
//! CronJobs that is several hundred MiB of short-lived allocations, made
//! while the actors' long-lived ones are interleaved with them. glibc's
//! `free` only returns memory at the top of a heap, so after the burst
//! most of it stays resident although free: in S3's short mode
//! (`loadtest/`), a `malloc_trim(0)` called from gdb took a loaded
//! replica's RSS from 134 to 66 MiB.
//! `malloc_trim(0)` hands every whole free page back (`MADV_DONTNEED`).
//! Elsewhere (musl, other systems) this is a no-op.

/// Returns the free pages of every malloc arena to the OS, on a thread of
/// its own: trimming a large heap takes milliseconds and holds each
/// arena's lock in turn, which must not stall an actor's thread.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("malloc-trim".to_owned())
            // SAFETY: malloc_trim takes no pointers and locks each arena
            // itself; it is safe to call at any time from any thread.
            .spawn(|| unsafe {
                libc::malloc_trim(0);
            });
        if let Err(error) = spawned {
            tracing::debug!(%error, "could not start the malloc_trim thread");
        }
    }
}
