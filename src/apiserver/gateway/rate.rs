//! A token bucket with client-go's semantics (`--kube-api-qps`,
//! `--kube-api-burst`): up to `burst` requests at once, then `qps` per
//! second; and the [`AdaptiveRate`] that lowers that rate while the API
//! server turns requests away. Pure: the caller passes the monotonic time in.

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

    /// Changes the refill rate from `now` on (tokens held are kept).
    pub fn set_qps(&mut self, qps: f64, now: Instant) {
        self.refill(now);
        if qps.is_finite() && qps > 0.0 {
            self.qps = qps;
        }
    }

    /// Takes a token if one is available at `now`; otherwise says how long
    /// until one will be.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.try_take_keeping(0, now)
    }

    /// Takes a token only if `reserve` more would still be held (at most
    /// `burst - 1` are kept back); otherwise says how long until then.
    pub fn try_take_keeping(&mut self, reserve: u32, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        let needed = (f64::from(reserve) + 1.0).min(self.burst);
        if self.tokens >= needed {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let missing = needed - self.tokens;
            Err(Duration::from_secs_f64((missing / self.qps).min(1e9)))
        }
    }
}

/// Additive increase, multiplicative decrease of the client's rate on the
/// API server's 429s (APF turning requests away), as TCP does on loss.
///
/// `--kube-api-qps` is a ceiling per replica; N replicas share one APF
/// priority level, which they overdrive at a high setting (S2 at QPS 200:
/// three replicas did worse than one, 8,082 requests turned away). Each
/// throttled answer halves the rate (at most once per [`Self::HOLD`], since
/// a herd's requests in flight all come back 429 together), down to
/// [`Self::FLOOR_SHARE`] of the ceiling; without 429s the rate climbs back
/// linearly to the ceiling in [`Self::RECOVERY`].
#[derive(Debug, Clone)]
pub struct AdaptiveRate {
    ceiling: f64,
    /// The rate just after the last decrease, and when that was.
    base: f64,
    decreased_at: Option<Instant>,
}

impl AdaptiveRate {
    /// 429s within this long of a decrease answer requests sent before it.
    pub const HOLD: Duration = Duration::from_secs(1);
    /// From the floor back to the ceiling without a 429.
    pub const RECOVERY: Duration = Duration::from_secs(30);
    /// The lowest rate, as a share of the ceiling.
    pub const FLOOR_SHARE: f64 = 0.05;

    pub fn new(ceiling: f64) -> Self {
        AdaptiveRate {
            ceiling,
            base: ceiling,
            decreased_at: None,
        }
    }

    /// The rate at `now`.
    pub fn qps(&self, now: Instant) -> f64 {
        match self.decreased_at {
            None => self.ceiling,
            Some(at) => {
                let climbed = now.saturating_duration_since(at).as_secs_f64()
                    / Self::RECOVERY.as_secs_f64()
                    * self.ceiling;
                (self.base + climbed).min(self.ceiling)
            }
        }
    }

    /// The API server turned a request away at `now`.
    pub fn throttled(&mut self, now: Instant) {
        if self
            .decreased_at
            .is_some_and(|at| now.saturating_duration_since(at) < Self::HOLD)
        {
            return;
        }
        self.base = (self.qps(now) / 2.0).max(self.ceiling * Self::FLOOR_SHARE);
        self.decreased_at = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_halves_the_rate_once_per_hold_down_to_the_floor() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut rate = AdaptiveRate::new(200.0);
        assert_eq!(rate.qps(t0), 200.0);
        rate.throttled(at(0));
        assert_eq!(rate.qps(at(0)), 100.0);
        // The rest of the same burst of 429s: no further cut.
        rate.throttled(at(500));
        assert_eq!(rate.base, 100.0);
        let mut last = rate.qps(at(1_000));
        for step in 1..10u64 {
            rate.throttled(at(1_000 * step));
            let now = rate.qps(at(1_000 * step));
            assert!(now < last || now == 10.0, "{now} after {last}");
            last = now;
        }
        assert_eq!(rate.qps(at(9_000)), 10.0, "the floor: 5% of the ceiling");
    }

    #[test]
    fn without_throttling_the_rate_climbs_back_linearly_to_the_ceiling() {
        let t0 = Instant::now();
        let mut rate = AdaptiveRate::new(20.0);
        rate.throttled(t0);
        assert_eq!(rate.qps(t0), 10.0);
        // 20 qps per 30 s: +10 in 15 s.
        assert_eq!(rate.qps(t0 + Duration::from_secs(15)), 20.0);
        let climbed = rate.qps(t0 + Duration::from_secs(7));
        assert!(
            (climbed - (10.0 + 20.0 * 7.0 / 30.0)).abs() < 1e-9,
            "{climbed}"
        );
        assert_eq!(rate.qps(t0 + Duration::from_secs(3600)), 20.0);
    }

    #[test]
    fn a_new_rate_applies_from_now_and_keeps_the_tokens() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 1, t0);
        assert!(bucket.try_take(t0).is_ok());
        bucket.set_qps(1.0, t0 + Duration::from_millis(50));
        // Half a token from the old rate, the other half at 1/s.
        let wait = bucket.try_take(t0 + Duration::from_millis(50)).unwrap_err();
        assert!(wait.abs_diff(Duration::from_millis(500)) < Duration::from_millis(1));
        bucket.set_qps(f64::NAN, t0);
        assert!(bucket.try_take(t0 + Duration::from_millis(550)).is_ok());
    }

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
    fn a_reserve_is_kept_back_from_some_takers_and_refills_at_the_same_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(20.0, 30, t0);
        let low = (0..100)
            .take_while(|_| bucket.try_take_keeping(15, t0).is_ok())
            .count();
        assert_eq!(low, 15, "the last 15 of the burst are kept back");
        assert_eq!(
            bucket.try_take_keeping(15, t0),
            Err(Duration::from_millis(50))
        );
        // Who may use the reserve finds it there at once.
        let urgent = (0..100).take_while(|_| bucket.try_take(t0).is_ok()).count();
        assert_eq!(urgent, 15);
        // Kept back from an empty bucket, the others wait for the reserve to
        // refill first, then get the full rate again.
        let t1 = t0 + Duration::from_millis(750);
        assert!(bucket.try_take_keeping(15, t1).is_err());
        for quarter in 1..=2 {
            let t2 = t1 + Duration::from_millis(250 * quarter);
            let low = (0..100)
                .take_while(|_| bucket.try_take_keeping(15, t2).is_ok())
                .count();
            assert_eq!(low, 5, "20 per second");
        }
        // A reserve larger than the burst keeps back all but one token.
        let mut small = TokenBucket::new(1.0, 2, t0);
        assert!(small.try_take_keeping(5, t0).is_ok());
        assert!(small.try_take_keeping(5, t0).is_err());
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
