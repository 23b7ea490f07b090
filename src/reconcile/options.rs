//! shardcron's opt-in behaviours, each an annotation in the `shardcron.io/`
//! prefix on the CronJob itself (batch/v1's validation leaves no room in
//! the spec: docs/options.md has the table). A CronJob without them behaves
//! as upstream's, byte for byte; an annotation whose value is not one of
//! its own leaves upstream's behaviour in place and is reported on the
//! CronJob, naming the values it takes.

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

/// A day: the longest catch-up window (an every-minute CronJob catching up
/// a day makes 1,440 Jobs, one decision each).
pub const MAX_CATCH_UP_SECONDS: u32 = 24 * 3600;

/// The annotations [`Options::from_annotations`] reads: a CronJob decoder
/// that keeps only some of the annotations keeps these.
pub const ANNOTATIONS: [&str; 2] = [FALL_BACK_ANNOTATION, CATCH_UP_ANNOTATION];

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
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "annotation {annotation}: {value:?} is not one of: {allowed}; upstream's behaviour applies"
)]
pub struct InvalidOption {
    pub annotation: &'static str,
    pub value: String,
    pub allowed: &'static str,
}

/// The opt-ins of one CronJob. Small: one per actor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    pub fall_back: FallBack,
    /// The catch-up window in seconds; 0: none (upstream's behaviour).
    pub catch_up_seconds: u32,
    /// The first annotation that could not be read, for the warning (boxed:
    /// almost always `None`, and the view is kept per CronJob).
    pub invalid: Option<Box<InvalidOption>>,
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
            match catch_up_seconds(value) {
                Some(seconds) => options.catch_up_seconds = seconds,
                None => options.note_invalid(
                    CATCH_UP_ANNOTATION,
                    value,
                    "a duration from 1s to 24h, such as 30m or 2h",
                ),
            }
        }
        options
    }

    /// Keeps the first annotation that could not be read.
    fn note_invalid(&mut self, annotation: &'static str, value: &str, allowed: &'static str) {
        self.invalid.get_or_insert_with(|| {
            Box::new(InvalidOption {
                annotation,
                value: value.to_owned(),
                allowed,
            })
        });
    }

    /// The catch-up window in seconds, if any.
    pub fn catch_up_window(&self) -> Option<i64> {
        (self.catch_up_seconds > 0).then_some(i64::from(self.catch_up_seconds))
    }

    /// Whether a wall-clock time repeated by a fall-back runs once.
    pub fn once_per_wall_time(&self) -> bool {
        self.fall_back == FallBack::Once
    }
}

/// A catch-up window's whole seconds, if `value` is a Go duration of 1 s
/// to [`MAX_CATCH_UP_SECONDS`].
fn catch_up_seconds(value: &str) -> Option<u32> {
    let nanos = crate::schedule::parse_go_duration(value).ok()?;
    let seconds = u32::try_from(nanos / 1_000_000_000).ok()?;
    (1..=MAX_CATCH_UP_SECONDS)
        .contains(&seconds)
        .then_some(seconds)
}

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
}
