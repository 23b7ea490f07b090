//! The replica's allocator, and giving the memory of a burst back.
//!
//! The replica runs on mimalloc (v3), not glibc's malloc. Measured with
//! `cargo bench --bench actors` (100,000 idle CronJob actors, same live
//! heap of 1,171 bytes each): resident 1,511-1,532 bytes per CronJob with
//! mimalloc, 1,569-1,649 with jemalloc, 1,628-1,693 with glibc. glibc also
//! keeps the memory of a burst (a relist or a bulk load decodes several
//! hundred MiB of short-lived objects between the actors' long-lived ones)
//! resident until `malloc_trim` is called; mimalloc purges free pages by
//! itself after 10 ms (its `purge_delay`).

/// The allocator the replica runs on (`src/main.rs` installs it; the
/// actor bench counts through it).
pub type Allocator = mimalloc::MiMalloc;
/// The one instance of [`Allocator`].
pub const ALLOCATOR: Allocator = mimalloc::MiMalloc;

/// Called after a burst (a relist, the last bulk load, readiness): returns
/// the free pages of the calling thread's heap (the supervisor's, which
/// took the burst's objects) and of threads that ended, without waiting
/// for the next allocation there to purge them.
pub fn release_free_pages() {
    // SAFETY: mi_collect takes no pointers; it only touches the calling
    // thread's heap and mimalloc's shared, internally locked state.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
