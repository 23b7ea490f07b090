//! The clock the fence judges the own Lease by: time since boot, counting
//! the time the machine was suspended or its VM paused.
//!
//! `std::time::Instant` is CLOCK_MONOTONIC on Linux, which stops while a VM
//! is paused or the host suspends. A replica paused for a minute would wake
//! up believing its Lease still valid while its peers (whose clocks ran on)
//! have taken its CronJobs over. CLOCK_BOOTTIME runs on through the pause,
//! so the fence sees the renew deadline long passed and the replica writes
//! nothing. On other systems the fence falls back to `Instant`.

use std::ops::Add;
use std::time::Duration;

/// A moment on the boot clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// Now, on CLOCK_BOOTTIME.
    #[cfg(target_os = "linux")]
    pub fn now() -> Self {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec for the call to fill in.
        let result = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
        // CLOCK_BOOTTIME exists on every Linux since 2.6.39; a failure
        // would be a broken system, where `Instant` is the best left.
        if result != 0 {
            return Self::from_instant();
        }
        BootInstant(Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
    }

    #[cfg(not(target_os = "linux"))]
    pub fn now() -> Self {
        Self::from_instant()
    }

    /// Process-relative time on `Instant`, for systems without a boot clock.
    fn from_instant() -> Self {
        static ANCHOR: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        BootInstant(ANCHOR.get_or_init(std::time::Instant::now).elapsed())
    }

    /// A moment `since_boot` after boot (tests pass time in).
    pub const fn from_since_boot(since_boot: Duration) -> Self {
        BootInstant(since_boot)
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;

    fn add(self, step: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward_and_at_least_as_fast_as_instant() {
        let (boot, instant) = (BootInstant::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let boot_elapsed = BootInstant::now().saturating_duration_since(boot);
        assert!(boot_elapsed >= Duration::from_millis(20));
        // Both count a running machine alike (a pause only moves the boot clock).
        let difference = boot_elapsed.abs_diff(instant.elapsed());
        assert!(difference < Duration::from_millis(50), "{difference:?}");
    }
}
