//! From `spec.schedule` and `spec.timeZone` to a schedule and zones, as
//! upstream's `formatSchedule`, `time.LoadLocation` and
//! `cron.ParseStandard` do, with upstream's error texts for the events.
//!
//! Done once per spec (see [`SpecView`](super::SpecView)): the outcome only
//! depends on the two strings.

use crate::schedule::{self, Field, FieldError, ParseError, Schedule, load_named_zone};
use jiff::tz::TimeZone;

/// Where the scheduled-timestamp annotation is rendered, and where a
/// `spec.timeZone` puts the schedule.
#[derive(Debug, Clone)]
pub(crate) enum NamedZone {
    /// `""` or `"UTC"` (Go's `LoadLocation` gives UTC for both).
    Utc,
    /// `"Local"`: the controller's own zone (the default zone).
    Local,
    Named(TimeZone),
}

impl NamedZone {
    pub(crate) fn resolve<'a>(&'a self, default_zone: &'a TimeZone) -> &'a TimeZone {
        static UTC: TimeZone = TimeZone::UTC;
        match self {
            NamedZone::Utc => &UTC,
            NamedZone::Local => default_zone,
            NamedZone::Named(tz) => tz,
        }
    }
}

/// The compiled schedule of one spec.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleSetup {
    /// `strings.Contains(spec.schedule, "TZ")`: upstream warns
    /// (`UnsupportedSchedule`) on every sync and ignores `spec.timeZone` for
    /// the schedule.
    pub tz_in_schedule: bool,
    /// `spec.timeZone` loaded, if set; the error is Go's `LoadLocation` text.
    pub time_zone: Option<Result<NamedZone, Box<str>>>,
    /// `ParseStandard(formatSchedule(..))`; the error is robfig's text.
    pub schedule: Result<Schedule, Box<str>>,
}

impl ScheduleSetup {
    pub(crate) fn new(raw: &str, time_zone: Option<&str>) -> Self {
        let tz_in_schedule = raw.contains("TZ");
        let loaded = time_zone.map(|name| go_load_location(name).map_err(String::into_boxed_str));
        let formatted = match (time_zone, &loaded) {
            (Some(name), Some(Ok(_))) if !tz_in_schedule => format!("TZ={name} {raw}"),
            _ => raw.to_owned(),
        };
        let schedule = schedule::parse(&formatted)
            .map_err(|e| robfig_message(&e, &formatted).into_boxed_str());
        Self {
            tz_in_schedule,
            time_zone: loaded,
            schedule,
        }
    }

    /// The zone of the scheduled-timestamp annotation: `spec.timeZone`, or
    /// UTC when it is unset (upstream: `LoadLocation(deref(timeZone, ""))`).
    pub(crate) fn annotation_zone(&self) -> Result<&NamedZone, &str> {
        static UTC: NamedZone = NamedZone::Utc;
        match &self.time_zone {
            None => Ok(&UTC),
            Some(Ok(zone)) => Ok(zone),
            Some(Err(message)) => Err(message),
        }
    }
}

/// Go's `time.LoadLocation`, with its error texts.
pub(crate) fn go_load_location(name: &str) -> Result<NamedZone, String> {
    match name {
        "" | "UTC" => Ok(NamedZone::Utc),
        "Local" => Ok(NamedZone::Local),
        _ if name.contains("..") || name.starts_with('/') || name.starts_with('\\') => {
            Err("time: invalid location name".to_owned())
        }
        _ => load_named_zone(name)
            .map(NamedZone::Named)
            .map_err(|_| format!("unknown time zone {name}")),
    }
}

/// The text robfig/cron v3.0.1 (behind Kubernetes' panic recovery) gives for
/// a rejected schedule, rebuilt from the typed [`ParseError`].
pub(crate) fn robfig_message(err: &ParseError, spec: &str) -> String {
    match err {
        ParseError::Empty => "empty spec string".to_owned(),
        // robfig slices `spec[eq+1:-1]` and panics; Kubernetes recovers it.
        ParseError::ZoneWithoutSchedule { .. } => {
            "invalid schedule format: runtime error: slice bounds out of range [:-1]".to_owned()
        }
        ParseError::Zone { reason, .. } => {
            let name = &reason.0;
            let why = go_load_location(name)
                .err()
                .unwrap_or_else(|| format!("unknown time zone {name}"));
            format!("provided bad location {name}: {why}")
        }
        ParseError::FieldCount { found } => {
            let fields: Vec<&str> = without_zone_prefix(spec).split_whitespace().collect();
            format!(
                "expected exactly 5 fields, found {found}: [{}]",
                fields.join(" ")
            )
        }
        ParseError::Field { field, reason } => field_message(*field, reason),
        ParseError::Descriptor(descriptor) => format!("unrecognized descriptor: {descriptor}"),
        ParseError::Every(reason) => {
            let text = without_zone_prefix(spec);
            format!("failed to parse duration {text}: time: {reason}")
        }
    }
}

fn without_zone_prefix(spec: &str) -> &str {
    if (spec.starts_with("TZ=") || spec.starts_with("CRON_TZ="))
        && let Some(space) = spec.find(' ')
    {
        return spec[space..].trim();
    }
    spec
}

fn field_message(field: Field, reason: &FieldError) -> String {
    match reason {
        FieldError::NotANumber(text) => {
            // Atoi fails on digits only when they overflow an int64.
            let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
            let why = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                "value out of range"
            } else {
                "invalid syntax"
            };
            format!(
                "failed to parse int from {text}: strconv.Atoi: parsing {}: {why}",
                go_quote(text)
            )
        }
        FieldError::Negative(text) => {
            let value: i64 = text.parse().unwrap_or(i64::MIN);
            format!("negative number ({value}) not allowed: {text}")
        }
        FieldError::BelowMinimum { value, min, expr } => {
            format!("beginning of range ({value}) below minimum ({min}): {expr}")
        }
        FieldError::AboveMaximum { value, max, expr } => {
            format!("end of range ({value}) above maximum ({max}): {expr}")
        }
        FieldError::Reversed { expr } => {
            let (start, end) = range_ends(field, expr);
            format!("beginning of range ({start}) beyond end of range ({end}): {expr}")
        }
        FieldError::ZeroStep(expr) => format!("step of range should be a positive number: {expr}"),
        FieldError::TooManyHyphens(expr) => format!("too many hyphens: {expr}"),
        FieldError::TooManySlashes(expr) => format!("too many slashes: {expr}"),
    }
}

/// The two ends of an `a-b[/s]` range that the parser found reversed.
fn range_ends(field: Field, expr: &str) -> (u64, u64) {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let value = |text: &str| -> u64 {
        let lower = text.to_lowercase();
        let named = match field {
            Field::Month => MONTHS
                .iter()
                .position(|m| *m == lower)
                .map(|i| i as u64 + 1),
            Field::DayOfWeek => DAYS.iter().position(|d| *d == lower).map(|i| i as u64),
            _ => None,
        };
        named.unwrap_or_else(|| text.trim_start_matches('+').parse().unwrap_or(0))
    };
    let range = expr.split('/').next().unwrap_or_default();
    let mut ends = range.split('-');
    let start = value(ends.next().unwrap_or_default());
    let end = ends.next().map_or(start, value);
    (start, end)
}

/// Go's `%q` / `strconv.Quote` for the texts that appear in events.
pub(crate) fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
