//! shardcron's opt-in behaviours, each an annotation in the `shardcron.io/`
//! prefix on the CronJob itself (batch/v1's validation leaves no room in
//! the spec: docs/options.md has the table). A CronJob without them behaves
//! as upstream's, byte for byte; an annotation whose value is not one of
//! its own leaves upstream's behaviour in place and is reported on the
//! CronJob, naming the values it takes.

use super::slot_history::{Parsed, SLOT_HISTORY_ANNOTATION, SlotHistory};
use std::collections::BTreeMap;
use thiserror::Error;

/// On a fall-back (the clock set back an hour at the end of daylight
/// saving), the wall-clock times of the repeated hour happen twice.
/// Upstream (robfig's `Next`) runs a slot at both instants
/// (kubernetes#121594); `once` runs it at the first only.
pub const FALL_BACK_ANNOTATION: &str = "shardcron.io/fall-back";

/// After downtime, upstream starts only the most recent missed slot. With a
/// catch-up window (a Go duration, `30m`, `2h`; at most
/// [`MAX_CATCH_UP_SECONDS`]), every missed slot within it runs, oldest
/// first, each once, subject to `concurrencyPolicy` and the starting
/// deadline; slots older than the window do not run.
pub const CATCH_UP_ANNOTATION: &str = "shardcron.io/catch-up-window";

/// A window (a Go duration, `10m`; at most [`MAX_SPREAD_SECONDS`]) within
/// which every slot of the CronJob starts late by the same offset, derived
/// from its namespace and name ([`spread_offset`]): CronJobs written for the
/// same minute start spread over the window instead of in one second. The
/// Job's name and scheduled-timestamp annotation stay the nominal slot's.
pub const SPREAD_ANNOTATION: &str = "shardcron.io/spread";

/// A request to run the CronJob now: an RFC 3339 instant, the request's
/// time (`shardcron trigger` writes its clock's). One Job is started for it
/// (named from it, [`super::run_now_job_name`]) unless a Job of the CronJob
/// was started at or after it (`status.lastScheduleTime`, which the run's
/// own start moves to the request's time), subject to `concurrencyPolicy`;
/// a request not started within [`RUN_NOW_DEADLINE_SECONDS`] lapses.
pub const RUN_NOW_ANNOTATION: &str = "shardcron.io/run-now";

/// How long a run-now request waits to be started (the controller down,
/// or Forbid and a Job still running): five minutes. A request re-applied
/// from a manifest long after is not run again.
pub const RUN_NOW_DEADLINE_SECONDS: i64 = 300;

/// A run-now request starts a Job at least this long after the CronJob's
/// last start (`status.lastScheduleTime`, scheduled or asked for); one
/// that comes sooner waits for it. Whoever may patch a CronJob may write
/// the annotation as often as they like: this bounds the Jobs, and the
/// controller's writes, that one CronJob's requests can make to one per
/// 10 s.
pub const RUN_NOW_MIN_INTERVAL_SECONDS: i64 = 10;

/// How far ahead of the controller's clock a run-now request may be (the
/// requester's clock may run ahead); one further ahead is refused.
pub const RUN_NOW_MAX_AHEAD_SECONDS: i64 = 60;

/// A day: the longest spread window.
pub const MAX_SPREAD_SECONDS: u32 = 24 * 3600;

/// A day: the longest catch-up window (an every-minute CronJob catching up
/// a day makes 1,440 Jobs, one decision each).
pub const MAX_CATCH_UP_SECONDS: u32 = 24 * 3600;

/// The annotations [`Options::from_annotations`] reads: a CronJob decoder
/// that keeps only some of the annotations keeps these.
pub const ANNOTATIONS: [&str; 8] = [
    FALL_BACK_ANNOTATION,
    CATCH_UP_ANNOTATION,
    SPREAD_ANNOTATION,
    RUN_NOW_ANNOTATION,
    PAUSE_AFTER_FAILURES_ANNOTATION,
    FAILED_JOBS_ANNOTATION,
    PAUSED_ANNOTATION,
    SLOT_HISTORY_ANNOTATION,
];

/// What a slot in a fall-back's repeated hour does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FallBack {
    /// Upstream's: at both instants.
    #[default]
    Twice,
    /// At the first instant only.
    Once,
}

impl FallBack {
    const VALUES: &'static str = "once, twice";

    fn parse(value: &str) -> Option<Self> {
        match value {
            "once" => Some(Self::Once),
            "twice" => Some(Self::Twice),
            _ => None,
        }
    }
}

/// An opt-in annotation with a value it does not take.
///
/// A tenant may write up to 256 KiB into an annotation, and the error is
/// copied into the decision, its trace, the journal and an Event: only the
/// value's first [`SHOWN_VALUE_CHARS`] characters are kept (escaped once,
/// when shown), with its length.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "annotation {annotation}: {value:?}{cut} is not one of: {allowed}; upstream's behaviour applies",
    cut = self.cut()
)]
pub struct InvalidOption {
    pub annotation: &'static str,
    /// The value's first [`SHOWN_VALUE_CHARS`] characters.
    pub value: String,
    /// The whole value's length in bytes.
    pub bytes: usize,
    pub allowed: &'static str,
}

/// How many characters of an invalid value an [`InvalidOption`] keeps.
pub const SHOWN_VALUE_CHARS: usize = 64;

impl InvalidOption {
    pub fn new(annotation: &'static str, value: &str, allowed: &'static str) -> Self {
        let kept = value
            .char_indices()
            .nth(SHOWN_VALUE_CHARS)
            .map_or(value, |(end, _)| &value[..end]);
        Self {
            annotation,
            value: kept.to_owned(),
            bytes: value.len(),
            allowed,
        }
    }

    /// What follows a value that was cut: its length.
    fn cut(&self) -> String {
        if self.bytes > self.value.len() {
            format!("... ({} bytes)", self.bytes)
        } else {
            String::new()
        }
    }
}

/// The opt-ins of one CronJob. Small: one per actor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    pub fall_back: FallBack,
    /// The catch-up window in seconds; 0: none (upstream's behaviour).
    pub catch_up_seconds: u32,
    /// The spread window in seconds; 0: none (upstream's behaviour).
    pub spread_seconds: u32,
    /// The run-now request's time, if one is set (whole seconds: compact,
    /// 8 bytes instead of an `Option<Timestamp>`'s 24).
    pub run_now: super::CompactTime,
    /// Pausing after repeated failures: the opt-in and the streak it keeps
    /// on the CronJob ([`super::pause`]); boxed, absent for almost all.
    pub pause: Option<Box<PauseState>>,
    /// The first annotation that could not be read, for the warning (boxed:
    /// almost always `None`, and the view is kept per CronJob).
    pub invalid: Option<Box<InvalidOption>>,
    /// The slot history as written ([`super::slot_history`]); boxed, absent
    /// for a CronJob that never skipped a slot nor failed.
    pub history: Option<Box<SlotHistory>>,
    /// The slot history was written by a newer release (a format this
    /// build does not know): nothing is recorded in it.
    pub history_of_a_newer_release: bool,
}

impl Options {
    /// The opt-ins `annotations` set.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let mut options = Self::default();
        let Some(annotations) = annotations else {
            return options;
        };
        if let Some(value) = annotations.get(FALL_BACK_ANNOTATION) {
            match FallBack::parse(value) {
                Some(fall_back) => options.fall_back = fall_back,
                None => options.note_invalid(FALL_BACK_ANNOTATION, value, FallBack::VALUES),
            }
        }
        if let Some(value) = annotations.get(CATCH_UP_ANNOTATION) {
            match whole_seconds(value, MAX_CATCH_UP_SECONDS) {
                Some(seconds) => options.catch_up_seconds = seconds,
                None => options.note_invalid(
                    CATCH_UP_ANNOTATION,
                    value,
                    "a duration from 1s to 24h, such as 30m or 2h",
                ),
            }
        }
        if let Some(value) = annotations.get(RUN_NOW_ANNOTATION) {
            // To the whole second: the time is the Job's slot and becomes
            // `lastScheduleTime`, which the API keeps to the second, and
            // which must then serve the request.
            let whole = |t: jiff::Timestamp| jiff::Timestamp::from_second(t.as_second()).ok();
            match value.parse::<jiff::Timestamp>().ok().and_then(whole) {
                Some(requested) => options.run_now = requested.into(),
                None => options.note_invalid(
                    RUN_NOW_ANNOTATION,
                    value,
                    "an RFC 3339 instant, such as 2026-11-26T09:30:00Z (shardcron trigger writes it)",
                ),
            }
        }
        if let Some(value) = annotations.get(SPREAD_ANNOTATION) {
            match whole_seconds(value, MAX_SPREAD_SECONDS) {
                Some(seconds) => options.spread_seconds = seconds,
                None => options.note_invalid(
                    SPREAD_ANNOTATION,
                    value,
                    "a duration from 1s to 24h, such as 10m",
                ),
            }
        }
        if let Some(value) = annotations.get(SLOT_HISTORY_ANNOTATION) {
            // One that does not read is replaced at the next write.
            match SlotHistory::parse_versioned(value) {
                Parsed::Read(history) => options.history = Some(Box::new(history)),
                Parsed::Newer(_) => options.history_of_a_newer_release = true,
                Parsed::Unreadable => {}
            }
        }
        if let Some((state, invalid)) = PauseState::from_annotations(annotations) {
            if let Some(value) = invalid {
                options.note_invalid(
                    PAUSE_AFTER_FAILURES_ANNOTATION,
                    &value,
                    "a count from 1 to 100, such as 3",
                );
            }
            options.pause = Some(Box::new(state));
        }
        options
    }

    /// The number of consecutive failed Jobs after which the CronJob is
    /// suspended, if it opted in.
    pub fn pause_after_failures(&self) -> Option<u32> {
        self.pause
            .as_ref()
            .map(|state| state.threshold)
            .filter(|n| *n > 0)
    }

    /// Keeps the first annotation that could not be read.
    fn note_invalid(&mut self, annotation: &'static str, value: &str, allowed: &'static str) {
        self.invalid
            .get_or_insert_with(|| Box::new(InvalidOption::new(annotation, value, allowed)));
    }

    /// The catch-up window in seconds, if any.
    pub fn catch_up_window(&self) -> Option<i64> {
        (self.catch_up_seconds > 0).then_some(i64::from(self.catch_up_seconds))
    }

    /// How late every slot of the CronJob `namespace/name` starts, in
    /// seconds: 0 without a spread window.
    pub fn spread_offset(&self, namespace: &str, name: &str) -> i64 {
        spread_offset(namespace, name, self.spread_seconds)
    }

    /// Whether a wall-clock time repeated by a fall-back runs once.
    pub fn once_per_wall_time(&self) -> bool {
        self.fall_back == FallBack::Once
    }
}

/// A window's whole seconds, if `value` is a Go duration of 1 s to `max`.
fn whole_seconds(value: &str, max: u32) -> Option<u32> {
    let nanos = crate::schedule::parse_go_duration(value).ok()?;
    let seconds = u32::try_from(nanos / 1_000_000_000).ok()?;
    (1..=max).contains(&seconds).then_some(seconds)
}

/// The offset, in whole seconds below `window`, of the CronJob
/// `namespace/name` within a spread window: FNV-1a (64 bits) of
/// `namespace/name`, mixed by MurmurHash3's 64-bit finaliser (FNV-1a alone
/// leaves names that differ in their last characters, `job-1`, `job-2`,
/// close together modulo a window), modulo the window. Only the identity and the window
/// decide it, so every replica and every restart computes the same one,
/// and anyone can (docs/options.md); 0 when `window` is 0.
pub fn spread_offset(namespace: &str, name: &str, window: u32) -> i64 {
    if window == 0 {
        return 0;
    }
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = [namespace.as_bytes(), b"/", name.as_bytes()]
        .into_iter()
        .flatten()
        .fold(FNV_OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
        });
    (fmix64(hash) % u64::from(window)) as i64
}

/// MurmurHash3's 64-bit finaliser: every input bit moves every output bit.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The opt-in: a count of consecutive failed Jobs, 1 to
/// [`MAX_PAUSE_AFTER_FAILURES`], after which the CronJob is suspended.
pub const PAUSE_AFTER_FAILURES_ANNOTATION: &str = "shardcron.io/pause-after-failures";

/// Written by the controller: the failed Jobs of the current streak, oldest
/// first, each `name@failure time` (`nightly-29400120@2026-11-26T10:02:07Z,
/// nightly-29400180@2026-11-26T10:03:05Z`). Absent when there are none.
pub const FAILED_JOBS_ANNOTATION: &str = "shardcron.io/failed-jobs";

/// Written by the controller when it pauses the CronJob, and left as the
/// record of the last pause: `<time> after N consecutive failed Jobs:
/// a, b, c`. Failures before its time never count again.
pub const PAUSED_ANNOTATION: &str = "shardcron.io/paused";

/// The largest N: the list of failures on the CronJob stays below 10 KB.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 100;

/// What the CronJob's annotations say about pausing; boxed in
/// [`super::Options`], absent for a CronJob without any of the three.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseState {
    /// N; 0: the opt-in is off (absent or invalid).
    pub threshold: u32,
    /// The streak as last written ([`FAILED_JOBS_ANNOTATION`]); entries it
    /// cannot read are dropped (and the next write leaves them out).
    pub counted: Vec<FailedJob>,
    /// The time of the last pause ([`PAUSED_ANNOTATION`]).
    pub paused_at: Option<jiff::Timestamp>,
}

/// One failed Job of a streak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedJob {
    pub name: String,
    pub failed_at: jiff::Timestamp,
}

impl PauseState {
    /// Reads the three annotations: `None` when none is set; with the
    /// opt-in's value when it is not a count from 1 to the maximum (the
    /// opt-in is then off).
    pub(super) fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Option<(Self, Option<String>)> {
        let threshold = annotations.get(PAUSE_AFTER_FAILURES_ANNOTATION);
        let counted = annotations.get(FAILED_JOBS_ANNOTATION);
        let paused = annotations.get(PAUSED_ANNOTATION);
        if threshold.is_none() && counted.is_none() && paused.is_none() {
            return None;
        }
        let mut invalid = None;
        let threshold = match threshold {
            None => 0,
            Some(value) => match value.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_PAUSE_AFTER_FAILURES).contains(&n) => n,
                _ => {
                    invalid = Some(value.clone());
                    0
                }
            },
        };
        let state = Self {
            threshold,
            counted: counted.map(|v| parse_failed_jobs(v)).unwrap_or_default(),
            paused_at: paused.and_then(|record| {
                record
                    .split_whitespace()
                    .next()
                    .and_then(|t| t.parse().ok())
            }),
        };
        Some((state, invalid))
    }
}

/// The entries of [`FAILED_JOBS_ANNOTATION`] that read as `name@time`, the
/// last [`MAX_PAUSE_AFTER_FAILURES`] of them: the annotation is the
/// tenant's to write too, and a longer streak is never needed (nor a name
/// longer than a Job's can be).
fn parse_failed_jobs(value: &str) -> Vec<FailedJob> {
    let mut entries: Vec<FailedJob> = value
        .rsplit(',')
        .filter_map(|entry| {
            let (name, time) = entry.trim().rsplit_once('@')?;
            let failed_at = time.parse().ok()?;
            (!name.is_empty() && name.len() <= MAX_JOB_NAME_BYTES).then(|| FailedJob {
                name: name.to_owned(),
                failed_at,
            })
        })
        .take(MAX_PAUSE_AFTER_FAILURES as usize)
        .collect();
    entries.reverse();
    entries
}

/// The longest name a Job can have (a DNS subdomain).
const MAX_JOB_NAME_BYTES: usize = 253;

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> Options {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Options::from_annotations(Some(&map))
    }

    #[test]
    fn without_annotations_every_option_is_upstreams() {
        assert_eq!(Options::from_annotations(None), Options::default());
        assert_eq!(of(&[("other.io/fall-back", "once")]), Options::default());
        assert!(!Options::default().once_per_wall_time());
        assert_eq!(Options::default().catch_up_window(), None);
    }

    #[test]
    fn a_catch_up_window_is_a_duration_of_a_second_to_a_day() {
        for (value, seconds) in [("30m", Some(1800)), ("1s", Some(1)), ("24h", Some(86_400))] {
            assert_eq!(
                of(&[(CATCH_UP_ANNOTATION, value)]).catch_up_window(),
                seconds,
                "{value}"
            );
        }
        for value in ["0s", "25h", "-5m", "500ms", "soon", ""] {
            let options = of(&[(CATCH_UP_ANNOTATION, value)]);
            assert_eq!(options.catch_up_window(), None, "{value}");
            assert!(
                options
                    .invalid
                    .is_some_and(|e| e.allowed.contains("1s to 24h")),
                "{value}"
            );
        }
        // Two bad annotations: the first read is named.
        let both = of(&[(FALL_BACK_ANNOTATION, "x"), (CATCH_UP_ANNOTATION, "y")]);
        assert_eq!(
            both.invalid.map(|e| e.annotation),
            Some(FALL_BACK_ANNOTATION)
        );
    }

    #[test]
    fn a_spread_offset_is_fixed_by_the_identity_and_within_the_window() {
        let options = of(&[(SPREAD_ANNOTATION, "10m")]);
        assert_eq!(options.spread_seconds, 600);
        let offset = options.spread_offset("team-a", "nightly");
        assert!((0..600).contains(&offset));
        // The same on every call (replica, restart), and FNV-1a's known
        // value, so that the docs' recipe gives it too.
        assert_eq!(offset, options.spread_offset("team-a", "nightly"));
        // FNV-1a 64 of "team-a/nightly", fmix64, modulo 600 (computed apart).
        assert_eq!(offset, 347);
        // Namesakes elsewhere and neighbours differ (not all: a hash).
        let offsets: std::collections::HashSet<i64> = (0..100)
            .map(|i| spread_offset("team-a", &format!("job-{i}"), 600))
            .collect();
        assert!(offsets.len() > 80, "{}", offsets.len());
        assert_eq!(Options::default().spread_offset("team-a", "nightly"), 0);
        for value in ["0s", "25h", "later"] {
            let options = of(&[(SPREAD_ANNOTATION, value)]);
            assert_eq!(options.spread_seconds, 0, "{value}");
            assert!(options.invalid.is_some(), "{value}");
        }
    }

    #[test]
    fn each_value_is_read_and_a_bad_one_is_named_with_the_values_it_takes() {
        assert!(of(&[(FALL_BACK_ANNOTATION, "once")]).once_per_wall_time());
        assert_eq!(
            of(&[(FALL_BACK_ANNOTATION, "twice")]).fall_back,
            FallBack::Twice
        );
        let bad = of(&[(FALL_BACK_ANNOTATION, "Once")]);
        assert_eq!(bad.fall_back, FallBack::Twice);
        assert_eq!(
            bad.invalid.map(|e| e.to_string()).as_deref(),
            Some(
                "annotation shardcron.io/fall-back: \"Once\" is not one of: once, twice; upstream's behaviour applies"
            )
        );
    }

    #[test]
    fn an_invalid_value_is_kept_and_shown_by_a_bounded_prefix() {
        let huge = "\u{1}".repeat(200_000);
        let options = of(&[(FALL_BACK_ANNOTATION, &huge)]);
        let invalid = options.invalid.expect("invalid");
        assert_eq!(invalid.value.chars().count(), SHOWN_VALUE_CHARS);
        assert_eq!(invalid.bytes, 200_000);
        let shown = invalid.to_string();
        assert!(shown.len() < 1024, "{} bytes", shown.len());
        assert!(
            shown.contains("\\u{1}\"... (200000 bytes) is not one of"),
            "{shown}"
        );
        // A short one is shown whole, without a length.
        let short = of(&[(FALL_BACK_ANNOTATION, "thrice")])
            .invalid
            .expect("invalid");
        assert_eq!(
            short.to_string(),
            "annotation shardcron.io/fall-back: \"thrice\" is not one of: once, twice; upstream's behaviour applies"
        );
    }

    #[test]
    fn a_streak_written_by_hand_keeps_its_last_hundred_entries_only() {
        let entries: Vec<String> = (0..5_000)
            .map(|i| format!("job-{i}@2026-11-26T10:00:00Z"))
            .chain([format!("{}@2026-11-26T10:00:00Z", "x".repeat(300))])
            .collect();
        let counted = parse_failed_jobs(&entries.join(","));
        assert_eq!(counted.len(), MAX_PAUSE_AFTER_FAILURES as usize);
        // The name too long for a Job is dropped.
        assert_eq!(counted[0].name, "job-4900");
        assert_eq!(counted[99].name, "job-4999");
    }
}
