//! The few pieces of Go's `time` package that robfig/cron's `Next` relies on,
//! reproduced on top of jiff's time zone data.
//!
//! Exactness matters at DST transitions: Go's `time.Date` resolves a local
//! time that does not exist, or exists twice, with its own rule (one offset
//! lookup at the wall clock read as UTC, a second one at the corrected
//! instant). That rule is neither "earlier" nor "later" and differs between
//! zones east and west of Greenwich, so jiff's disambiguation cannot stand in
//! for it. Everything here works in whole Unix seconds: `Next` only ever
//! handles whole seconds after its first step.

use jiff::Timestamp;
use jiff::tz::TimeZone;

const SECS_PER_DAY: i64 = 86_400;

/// Wall-clock fields of an instant, as Go's accessors report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday, as Go's `time.Weekday`.
    pub weekday: u32,
}

/// A time zone prepared for repeated lookups within one computation.
pub struct Zone<'a> {
    tz: &'a TimeZone,
    /// The offset of zones that never change (UTC, fixed offsets), found once.
    fixed: Option<i64>,
    /// The last offset period looked up: `[start, end)` in Unix seconds.
    cached: std::cell::Cell<(i64, i64, i64)>,
}

impl<'a> Zone<'a> {
    pub fn new(tz: &'a TimeZone) -> Self {
        Zone {
            tz,
            fixed: tz.to_fixed_offset().ok().map(|o| i64::from(o.seconds())),
            cached: std::cell::Cell::new((0, 0, 0)),
        }
    }

    /// The zone's UTC offset, in seconds, at the instant `unix`.
    pub fn offset(&self, unix: i64) -> i64 {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        let (start, end, offset) = self.cached.get();
        if start <= unix && unix < end {
            return offset;
        }
        let Ok(ts) = Timestamp::from_second(unix) else {
            return 0;
        };
        let offset = i64::from(self.tz.to_offset(ts).seconds());
        // Cache the period around `unix` so the hour and minute loops of
        // `Next` (which stay inside one period) do a single lookup.
        let start = self
            .tz
            .preceding(
                ts.checked_add(jiff::SignedDuration::from_secs(1))
                    .unwrap_or(ts),
            )
            .next()
            .map_or(i64::MIN, |t| t.timestamp().as_second());
        let end = self
            .tz
            .following(ts)
            .next()
            .map_or(i64::MAX, |t| t.timestamp().as_second());
        self.cached.set((start, end, offset));
        offset
    }

    /// Go's `t.In(zone)` accessors: year, month, day, clock and weekday.
    pub fn civil(&self, unix: i64) -> Civil {
        let local = unix + self.offset(unix);
        let days = local.div_euclid(SECS_PER_DAY);
        let secs = local.rem_euclid(SECS_PER_DAY) as u32;
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }

    /// Go's `time.Date(year, month, day, hour, min, sec, 0, zone)`, in Unix
    /// seconds. Out-of-range fields overflow into the next larger one, as in Go.
    pub fn date(&self, year: i64, month: i64, day: i64, hour: i64, min: i64, sec: i64) -> i64 {
        let year = year + (month - 1).div_euclid(12);
        let month = (month - 1).rem_euclid(12) + 1;
        let wall = (days_from_civil(year, month as u32, 1) + day - 1) * SECS_PER_DAY
            + hour * 3600
            + min * 60
            + sec;
        // Go: look up the offset at the wall clock read as UTC; if the
        // corrected instant falls outside that offset's period, use the
        // offset at the corrected instant. Both cases reduce to this.
        wall - self.offset(wall - self.offset(wall))
    }

    /// Go's `t.AddDate(0, months, days)` for `t` at `at`.
    pub fn add_date(&self, at: Civil, months: i64, days: i64) -> i64 {
        self.date(
            at.year,
            i64::from(at.month) + months,
            i64::from(at.day) + days,
            i64::from(at.hour),
            i64::from(at.minute),
            i64::from(at.second),
        )
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A proleptic Gregorian date to days since 1970-01-01.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats an instant as Go's `t.In(zone).Format(time.RFC3339)` does:
/// whole seconds, `Z` for a zero offset, otherwise `±hh:mm` (offset seconds
/// truncated). This is the format of the scheduled-timestamp annotation.
pub fn format_rfc3339(ts: Timestamp, tz: &TimeZone) -> String {
    let zone = Zone::new(tz);
    let unix = ts.as_second() - i64::from(ts.subsec_nanosecond() < 0);
    let c = zone.civil(unix);
    let offset = zone.offset(unix);
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    if offset == 0 {
        out.push('Z');
    } else {
        let minutes = (offset / 60).abs();
        let sign = if offset < 0 { '-' } else { '+' };
        out.push_str(&format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> TimeZone {
        jiff::tz::db().get(name).unwrap()
    }

    #[test]
    fn civil_round_trip() {
        for days in [-719_468, -1, 0, 1, 11_016, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn date_resolves_gaps_and_folds_like_go() {
        // Values from Go 1.26 time.Date.
        let berlin = zone("Europe/Berlin");
        let z = Zone::new(&berlin);
        // Gap 2024-03-31 02:30 does not exist: Go gives 03:30 CEST (01:30Z).
        assert_eq!(z.date(2024, 3, 31, 2, 30, 0), 1_711_848_600);
        // Fold 2024-10-27 02:30 exists twice: Go gives the later (01:30Z).
        assert_eq!(z.date(2024, 10, 27, 2, 30, 0), 1_729_992_600);
        let ny = zone("America/New_York");
        let z = Zone::new(&ny);
        // Gap 2024-03-10 02:30: Go gives 01:30 EST (06:30Z).
        assert_eq!(z.date(2024, 3, 10, 2, 30, 0), 1_710_052_200);
        // Fold 2024-11-03 01:30: Go gives the earlier, EDT (05:30Z).
        assert_eq!(z.date(2024, 11, 3, 1, 30, 0), 1_730_611_800);
        // Overflowing fields roll over: Feb 30 2024 is Mar 1.
        let utc = TimeZone::UTC;
        let z = Zone::new(&utc);
        assert_eq!(z.date(2024, 2, 30, 0, 0, 0), z.date(2024, 3, 1, 0, 0, 0));
        assert_eq!(z.date(2024, 13, 1, 0, 0, 0), z.date(2025, 1, 1, 0, 0, 0));
    }

    #[test]
    fn rfc3339_like_go() {
        let ts: Timestamp = "2016-05-19T10:00:00Z".parse().unwrap();
        assert_eq!(format_rfc3339(ts, &TimeZone::UTC), "2016-05-19T10:00:00Z");
        assert_eq!(
            format_rfc3339(ts, &zone("Europe/Rome")),
            "2016-05-19T12:00:00+02:00"
        );
        assert_eq!(
            format_rfc3339(ts, &zone("America/St_Johns")),
            "2016-05-19T07:30:00-02:30"
        );
        assert_eq!(
            format_rfc3339(ts, &zone("Europe/London")),
            "2016-05-19T11:00:00+01:00"
        );
    }
}
