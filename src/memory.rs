//! The replica's allocator, giving the memory of a burst back, transparent
//! huge pages turned off, and (profiling only) timed heap profiles.
//!
//! The replica runs on mimalloc (v3), not glibc's malloc. Measured with
//! `cargo bench --bench actors` (100,000 idle CronJob actors, same live
//! heap of 1,171 bytes each): resident 1,511-1,532 bytes per CronJob with
//! mimalloc, 1,569-1,649 with jemalloc, 1,628-1,693 with glibc. glibc also
//! keeps the memory of a burst (a relist or a bulk load decodes several
//! hundred MiB of short-lived objects between the actors' long-lived ones)
//! resident until `malloc_trim` is called; mimalloc purges free pages by
//! itself after 10 ms (its `purge_delay`).
//!
//! The replica runs without transparent huge pages. With them (mimalloc
//! allows them by default, its `allow_thp`; its memory got them even where
//! the kernel gives them only on request, `madvise`), the kernel's
//! khugepaged merges the replica's pages into 2 MiB ones in the
//! background, a few minutes after its start, one process at a time, and
//! every merge makes resident the 4 KiB pages of the range that no block
//! used: at 10^6 CronJobs one replica of four grew by 70-140 MiB in a few
//! minutes of its steady state with nothing allocated, its
//! `AnonHugePages` growing with its RSS (docs/performance.md, S7, "The
//! fourth replica's growth was huge pages"). An idle actor's few hundred
//! bytes gain nothing from a 2 MiB page, and the CPU per firing was the
//! same with them and without (+0.3%, two side-by-side runs,
//! docs/performance.md, "Huge pages off cost no CPU").

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

/// Turns transparent huge pages off for this process (and the children it
/// would start), before the allocator has mapped much: see the module's
/// docs. Where the kernel refuses (not Linux, or no such prctl), the
/// process runs as before, with the kernel's setting.
pub fn no_transparent_huge_pages() {
    set_transparent_huge_pages_disabled(true);
}

/// `run --transparent-huge-pages`: gives the kernel's setting back (more
/// resident memory at 10^6, see the module's docs), so that the two can
/// be measured side by side.
pub fn allow_transparent_huge_pages() {
    set_transparent_huge_pages_disabled(false);
}

fn set_transparent_huge_pages_disabled(disabled: bool) {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes integers only and sets a flag of
    // the calling process.
    unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            libc::c_ulong::from(disabled),
            0,
            0,
            0,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = disabled;
}

/// With `--features heap-profiling` (profiling only: the replica runs on
/// jemalloc) and `SHARDCRON_HEAP_DUMP_EVERY=<seconds>`, a heap profile
/// every so many seconds (jemalloc's `prof.dump`, to the files its
/// `prof_prefix` names; profiling itself is turned on by
/// `_RJEM_MALLOC_CONF=prof:true,...`), so that a profile can be compared
/// with an earlier one of the same process: what grew in between.
/// docs/performance.md, "Heap profiles at 10^6".
#[cfg(feature = "heap-profiling")]
pub fn start_heap_dumps() {
    let Ok(value) = std::env::var("SHARDCRON_HEAP_DUMP_EVERY") else {
        return;
    };
    let Some(every) = value.parse::<u64>().ok().filter(|s| *s > 0) else {
        eprintln!(
            "heap profile: SHARDCRON_HEAP_DUMP_EVERY={value:?} is not a number of seconds above 0; no dumps"
        );
        return;
    };
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(every));
            // SAFETY: the name is NUL-terminated; "prof.dump" with null
            // old and new values dumps to the next file of `prof_prefix`.
            let code = unsafe {
                tikv_jemalloc_sys::mallctl(
                    c"prof.dump".as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            };
            if code != 0 {
                eprintln!("heap profile: prof.dump failed ({code}); is prof:true set?");
                return;
            }
        }
    });
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn transparent_huge_pages_are_off_after_the_call_and_back_on_request() {
        // SAFETY: PR_GET_THP_DISABLE takes integers only.
        let disabled = || unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        super::no_transparent_huge_pages();
        assert_eq!(disabled(), 1);
        super::allow_transparent_huge_pages();
        assert_eq!(disabled(), 0);
        super::no_transparent_huge_pages();
    }
}
