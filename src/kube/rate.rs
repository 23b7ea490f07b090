//! A token bucket with client-go's semantics (`--kube-api-qps`,
//! `--kube-api-burst`): up to `burst` requests at once, then `qps` per
//! second. Pure: the caller passes the monotonic time in.

use std::time::{Duration, Instant};

/// Tokens refill continuously at `qps`; at most `burst` are held.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`. `qps` must be positive and `burst` at least 1
    /// (smaller values are raised to those minimums, as a zero rate would
    /// stop every write forever).
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let qps = if qps.is_finite() && qps > 0.0 {
            qps
        } else {
            f64::MIN_POSITIVE
        };
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes a token if one is available at `now`; otherwise says how long
    /// until one will be.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let missing = 1.0 - self.tokens;
            Err(Duration::from_secs_f64((missing / self.qps).min(1e9)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(20.0, 30, t0);
        for _ in 0..30 {
            assert_eq!(bucket.try_take(t0), Ok(()));
        }
        let wait = bucket.try_take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(50));
        assert!(bucket.try_take(t0 + Duration::from_millis(49)).is_err());
        assert_eq!(bucket.try_take(t0 + Duration::from_millis(50)), Ok(()));
        // One second later: 20 more, not 30.
        let t1 = t0 + Duration::from_millis(1050);
        let taken = (0..100).take_while(|_| bucket.try_take(t1).is_ok()).count();
        assert_eq!(taken, 20);
    }

    #[test]
    fn refill_is_capped_at_burst_and_time_never_runs_backwards() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 2, t0);
        let later = t0 + Duration::from_secs(3600);
        assert!(bucket.try_take(later).is_ok());
        assert!(bucket.try_take(later).is_ok());
        assert!(bucket.try_take(later).is_err());
        // An earlier instant (reordered callers) does not add tokens.
        assert!(bucket.try_take(t0).is_err());
    }

    #[test]
    fn degenerate_settings_do_not_panic() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(0.0, 0, t0);
        assert!(bucket.try_take(t0).is_ok());
        assert!(bucket.try_take(t0).is_err());
        let mut bucket = TokenBucket::new(f64::NAN, 1, t0);
        assert!(bucket.try_take(t0).is_ok());
    }
}
