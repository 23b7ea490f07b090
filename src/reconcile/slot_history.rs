//! Each slot's fate, kept on the CronJob (`shardcron.io/slot-history`):
//! the slots that did not start and why, the Jobs that failed or were
//! replaced, and counters since the history began, so that "why didn't it
//! run last night?" is answered by `kubectl get cronjob -o yaml` long after
//! the Events' hour, across restarts and hand-offs, with no replica up.
//!
//! # What is written, and when
//! Only what went wrong: a slot that ran on time and whose Job succeeded
//! costs no write (its Job, `status.lastScheduleTime` and
//! `lastSuccessfulTime` tell it; a slot between two recorded ones that is
//! not listed started and did not fail). At most one write for each slot
//! that did not start, and for each failed or replaced Job; one when a
//! CronJob is suspended (so that the slots it then skips are told as
//! suspended, not missed). The write is the merge patch that also carries
//! the failed-Job streak (`super::pause`), with the resourceVersion as a
//! precondition: a stale copy gets 409, never a lost entry.
//!
//! This module is the record and its JSON; `super::slot_fates` decides
//! what a decision adds to it.
//!
//! # Bounds
//! The newest [`MAX_SLOT_ENTRIES`] entries; text fields cut to
//! [`MAX_TEXT_BYTES`]; a value the controller writes stays under
//! [`MAX_SLOT_HISTORY_BYTES`]. The annotation is the tenant's to edit too:
//! one longer than that, or that does not read, is not parsed (the history
//! starts anew at the next write); a tenant can only fake its own
//! CronJob's history.
//!
//! # Versions
//! The JSON carries its format's version (`"v"`, last, so that `kubectl
//! describe` still shows the summary; absent: 1, as release zero wrote it).
//! Any change to what is written takes a new version. A history of a
//! version newer than [`FORMAT`] (written by a newer release, before a
//! rollback) is left as it is: this build records nothing in it rather
//! than overwrite it with less ([`Parsed::Newer`]).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The version of the format this build writes and reads.
pub const FORMAT: u32 = 1;

/// The annotation that holds a CronJob's [`SlotHistory`], as JSON.
pub const SLOT_HISTORY_ANNOTATION: &str = "shardcron.io/slot-history";
/// The entries kept, newest first.
pub const MAX_SLOT_ENTRIES: usize = 20;
/// The longest text kept in a field (a Job's name is at most 63 bytes in
/// practice, 253 by the API; a failure's reason is a CamelCase word).
pub const MAX_TEXT_BYTES: usize = 128;
/// The longest value read; the controller's own stay well under it
/// (20 entries of at most ~400 bytes).
pub const MAX_SLOT_HISTORY_BYTES: usize = 16 * 1024;

/// Why a slot did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SkipWhy {
    /// `concurrencyPolicy: Forbid` held it behind a running Job until a
    /// later slot came (`job` names that Job).
    Forbid,
    /// Past `startingDeadlineSeconds`.
    Deadline,
    /// More than 100 slots were missed: only the most recent is considered.
    TooManyMissed,
    /// `spec.suspend` was true at its time.
    Suspended,
    /// Suspended by `shardcron.io/pause-after-failures`.
    Paused,
    /// Not started at its time and a later slot came first: no controller
    /// decided at its time (all replicas down, the CronJob just created or
    /// taken over), and upstream starts only the most recent slot.
    Missed,
}

impl SkipWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbid => "forbid",
            Self::Deadline => "deadline",
            Self::TooManyMissed => "tooManyMissed",
            Self::Suspended => "suspended",
            Self::Paused => "paused",
            Self::Missed => "missed",
        }
    }
}

/// What became of one slot (or a run of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "fate")]
pub enum Fate {
    /// Did not start; `count` slots from this one (1 unless a run).
    Skipped {
        why: SkipWhy,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        count: u32,
    },
    /// Its Job failed, at `at`, for `reason` (its `Failed` condition's).
    Failed {
        #[serde(with = "instant")]
        at: Timestamp,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reason: String,
    },
    /// Its Job was deleted by `concurrencyPolicy: Replace` for a later one.
    Replaced,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// One entry: a slot, its fate, and the Job concerned (the failed or
/// replaced one; for a Forbid skip, the running Job that held it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotEntry {
    #[serde(with = "instant")]
    pub slot: Timestamp,
    #[serde(flatten)]
    pub fate: Fate,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job: String,
}

/// Slots skipped since the history began, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SkipCounts {
    #[serde(skip_serializing_if = "is_zero")]
    pub forbid: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub deadline: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub too_many_missed: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub suspended: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub paused: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub missed: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl SkipCounts {
    pub(super) fn add(&mut self, why: SkipWhy, count: u32) {
        let counter = match why {
            SkipWhy::Forbid => &mut self.forbid,
            SkipWhy::Deadline => &mut self.deadline,
            SkipWhy::TooManyMissed => &mut self.too_many_missed,
            SkipWhy::Suspended => &mut self.suspended,
            SkipWhy::Paused => &mut self.paused,
            SkipWhy::Missed => &mut self.missed,
        };
        *counter = counter.saturating_add(count);
    }
}

/// The last failure: its Job, time and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    pub job: String,
    #[serde(with = "instant")]
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A CronJob's slot history, as the annotation holds it. The field order
/// is the JSON's: the summary first, so that `kubectl describe`, which
/// shows an annotation's first 140 characters, shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotHistory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
    /// Failed Jobs since `since`.
    #[serde(default)]
    pub failed: u32,
    /// Skipped slots since `since`.
    #[serde(default)]
    pub skipped: SkipCounts,
    /// Replaced Jobs since `since`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replaced: u32,
    /// When the history began (its first entry).
    #[serde(with = "instant")]
    pub since: Timestamp,
    /// Every skipped slot up to this one is recorded.
    #[serde(with = "instant")]
    pub recorded_to: Timestamp,
    /// Since when the CronJob has been suspended (and whether by a pause),
    /// while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<Suspension>,
    /// The newest entries first, at most [`MAX_SLOT_ENTRIES`].
    #[serde(default)]
    pub slots: Vec<SlotEntry>,
    /// The format's version ([`FORMAT`]).
    #[serde(rename = "v", default = "one")]
    pub format: u32,
}

/// What the annotation's value reads as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Read(SlotHistory),
    /// Written by a newer release in format `v`: left as it is.
    Newer(u32),
    /// Too long, or not a history: replaced at the next write.
    Unreadable,
}

/// Only the version, read before the rest (a newer format may not read
/// as this one).
#[derive(Deserialize)]
struct Version {
    #[serde(default = "one")]
    v: u32,
}

/// A suspension in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    #[serde(with = "instant")]
    pub since: Timestamp,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

impl SlotHistory {
    /// Reads the annotation's value: `None` unless it is a history of a
    /// format this build knows ([`Self::parse_versioned`] tells which).
    pub fn parse(value: &str) -> Option<Self> {
        match Self::parse_versioned(value) {
            Parsed::Read(history) => Some(history),
            Parsed::Newer(_) | Parsed::Unreadable => None,
        }
    }

    /// Reads the annotation's value.
    pub fn parse_versioned(value: &str) -> Parsed {
        if value.len() > MAX_SLOT_HISTORY_BYTES {
            return Parsed::Unreadable;
        }
        match serde_json::from_str::<Version>(value) {
            Ok(Version { v }) if v > FORMAT => return Parsed::Newer(v),
            Ok(_) => {}
            Err(_) => return Parsed::Unreadable,
        }
        match Self::read(value) {
            Some(history) => Parsed::Read(history),
            None => Parsed::Unreadable,
        }
    }

    fn read(value: &str) -> Option<Self> {
        let mut history: Self = serde_json::from_str(value).ok()?;
        history.format = FORMAT;
        history.slots.truncate(MAX_SLOT_ENTRIES);
        for entry in &mut history.slots {
            cut(&mut entry.job);
            if let Fate::Failed { reason, .. } = &mut entry.fate {
                cut(reason);
            }
        }
        if let Some(last) = &mut history.last_failure {
            cut(&mut last.job);
            cut(&mut last.reason);
        }
        Some(history)
    }

    /// The annotation's value.
    pub fn to_json(&self) -> String {
        // Plain strings, numbers and enums: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub(super) fn new(now: Timestamp) -> Self {
        Self {
            last_failure: None,
            failed: 0,
            skipped: SkipCounts::default(),
            replaced: 0,
            since: now,
            recorded_to: Timestamp::UNIX_EPOCH,
            suspended: None,
            slots: Vec::new(),
            format: FORMAT,
        }
    }

    pub(super) fn push(&mut self, entry: SlotEntry) {
        self.slots.insert(0, entry);
        self.slots.truncate(MAX_SLOT_ENTRIES);
    }

    pub(super) fn has_failure(&self, job: &str, at: Timestamp) -> bool {
        self.last_failure
            .as_ref()
            .is_some_and(|last| at < last.at || (at == last.at && last.job == job))
            || self
                .slots
                .iter()
                .any(|e| e.job == job && matches!(e.fate, Fate::Failed { .. }))
    }
}

/// Cuts `text` to [`MAX_TEXT_BYTES`] at a character boundary.
fn cut(text: &mut String) {
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

pub(super) fn cut_owned(text: &str) -> String {
    let mut text = text.to_owned();
    cut(&mut text);
    text
}

/// RFC 3339 instants in the JSON.
mod instant {
    use jiff::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(t)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
