//! Instants a CronJob's view and actor keep, in 8 bytes each.

use jiff::Timestamp;
use std::cmp::Ordering;
use std::num::NonZeroI64;

/// An `Option<Timestamp>` to the whole second, in 8 bytes (the `Option<Timestamp>`
/// it stands for is 24). What a CronJob's view and actor keep are the
/// API's instants (`metav1.Time` is whole seconds on the wire, so a status
/// read and written back is unchanged) and slots (whole minutes); a
/// fraction of a second is dropped, towards 1970. At 10^6 CronJobs each
/// field held as an `Option<Timestamp>` cost 16 MB more, and four of them
/// put the actor's cell in the allocator's next size class.
///
/// Ordered as the `Option<Timestamp>` it holds: none first.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CompactTime(Option<NonZeroI64>);

impl CompactTime {
    pub const NONE: Self = Self(None);

    /// `t` to the whole second.
    pub fn new(t: Option<Timestamp>) -> Self {
        // The second with its sign bit flipped: zero only for i64::MIN, far
        // outside what a Timestamp holds (about ±10^13 seconds).
        Self(t.and_then(|t| NonZeroI64::new(t.as_second() ^ i64::MIN)))
    }

    pub fn get(self) -> Option<Timestamp> {
        self.0
            .and_then(|second| Timestamp::from_second(second.get() ^ i64::MIN).ok())
    }

    pub fn is_some(self) -> bool {
        self.0.is_some()
    }

    pub fn is_none(self) -> bool {
        self.0.is_none()
    }
}

impl From<Option<Timestamp>> for CompactTime {
    fn from(t: Option<Timestamp>) -> Self {
        Self::new(t)
    }
}

impl From<Timestamp> for CompactTime {
    fn from(t: Timestamp) -> Self {
        Self::new(Some(t))
    }
}

impl PartialOrd for CompactTime {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CompactTime {
    fn cmp(&self, other: &Self) -> Ordering {
        self.get().cmp(&other.get())
    }
}

impl std::fmt::Debug for CompactTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::CompactTime;
    use jiff::Timestamp;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("a test's instant")
    }

    #[test]
    fn holds_an_instant_to_the_second_in_eight_bytes() {
        assert_eq!(std::mem::size_of::<CompactTime>(), 8);
        for t in [
            "2016-05-19T09:00:00Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
            "9999-12-30T00:00:00Z",
        ] {
            assert_eq!(CompactTime::from(ts(t)).get(), Some(ts(t)), "{t}");
        }
        assert_eq!(
            CompactTime::from(Timestamp::MIN).get(),
            Some(Timestamp::from_second(Timestamp::MIN.as_second()).unwrap())
        );
        assert_eq!(
            CompactTime::from(Timestamp::MAX).get(),
            Some(Timestamp::from_second(Timestamp::MAX.as_second()).unwrap())
        );
        assert_eq!(CompactTime::NONE.get(), None);
        assert_eq!(CompactTime::from(None), CompactTime::NONE);
        assert_eq!(
            CompactTime::from(ts("2016-05-19T09:00:00.75Z")).get(),
            Some(ts("2016-05-19T09:00:00Z")),
            "a fraction is dropped"
        );
    }

    #[test]
    fn orders_as_the_option_it_holds() {
        let times = [
            None,
            Some(ts("1969-12-31T23:59:59Z")),
            Some(ts("1970-01-01T00:00:00Z")),
            Some(ts("1970-01-01T00:00:01Z")),
            Some(ts("2016-05-19T09:00:00Z")),
        ];
        for a in times {
            for b in times {
                assert_eq!(
                    CompactTime::from(a).cmp(&CompactTime::from(b)),
                    a.cmp(&b),
                    "{a:?} against {b:?}"
                );
            }
        }
    }
}
