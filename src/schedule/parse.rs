//! The parser: robfig/cron v3.0.1 `ParseStandard`, rule for rule.
//!
//! Accepts and rejects exactly what Kubernetes accepts and rejects, including
//! its oddities (`*-5` is `*`, `0,,5` drops the empty item, `+5` and `-0` are
//! numbers, a field of only commas matches nothing). The one departure: where
//! robfig panics (`TZ=UTC` with no space after it) this returns an error.

use super::compiled::{Fields, Kind, Schedule};
use super::go_duration::{DurationError, parse_go_duration};
use super::zone::{ScheduleZone, ZoneError, load_zone};
use std::fmt;
use thiserror::Error;

/// A cron field, named as in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        })
    }
}

/// Why a schedule was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("empty schedule")]
    Empty,
    #[error("{prefix} must be followed by a space and a schedule")]
    ZoneWithoutSchedule { prefix: &'static str },
    #[error("{prefix}: {reason}")]
    Zone {
        prefix: &'static str,
        reason: ZoneError,
    },
    #[error(
        "expected exactly 5 fields (minute hour day-of-month month day-of-week), found {found}"
    )]
    FieldCount { found: usize },
    #[error("{field}: {reason}")]
    Field { field: Field, reason: FieldError },
    #[error(
        "unrecognized descriptor {0:?} (known: @yearly @annually @monthly @weekly @daily @midnight @hourly @every <duration>)"
    )]
    Descriptor(String),
    #[error("@every: {0}")]
    Every(DurationError),
}

/// Why a field was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FieldError {
    #[error("{0:?} is not a number or a name")]
    NotANumber(String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{value} is below the minimum {min}{}", within(.expr, *.value))]
    BelowMinimum { value: u64, min: u64, expr: String },
    #[error("{value} is above the maximum {max}{}", within(.expr, *.value))]
    AboveMaximum { value: u64, max: u64, expr: String },
    #[error("range {expr:?} starts after it ends")]
    Reversed { expr: String },
    #[error("step in {0:?} must be a positive number")]
    ZeroStep(String),
    #[error("too many hyphens in {0:?}")]
    TooManyHyphens(String),
    #[error("too many slashes in {0:?}")]
    TooManySlashes(String),
}

fn within(expr: &str, value: u64) -> String {
    if expr == value.to_string() {
        String::new()
    } else {
        format!(" in {expr:?}")
    }
}

struct Bounds {
    field: Field,
    min: u64,
    max: u64,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    field: Field::Minute,
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    field: Field::Hour,
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    field: Field::DayOfMonth,
    min: 1,
    max: 31,
    names: &[],
};
/// Index + 1 is the month number.
const MONTH: Bounds = Bounds {
    field: Field::Month,
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Index is the weekday number.
const DOW: Bounds = Bounds {
    field: Field::DayOfWeek,
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// A parsed field: matching bits and robfig's "star bit".
#[derive(Clone, Copy)]
struct Bits {
    bits: u64,
    star: bool,
}

/// Parses `spec` exactly as robfig/cron v3.0.1 `ParseStandard` does.
pub fn parse(spec: &str) -> Result<Schedule, ParseError> {
    if spec.is_empty() {
        return Err(ParseError::Empty);
    }
    let mut zone = ScheduleZone::Caller;
    let mut rest = spec;
    for prefix in ["TZ=", "CRON_TZ="] {
        if let Some(after) = spec.strip_prefix(prefix) {
            let prefix = &prefix[..prefix.len() - 1];
            // robfig slices up to the first space in the whole spec and panics if there is none.
            let space = after
                .find(' ')
                .ok_or(ParseError::ZoneWithoutSchedule { prefix })?;
            zone =
                load_zone(&after[..space]).map_err(|reason| ParseError::Zone { prefix, reason })?;
            rest = after[space..].trim();
            break;
        }
    }
    if rest.starts_with('@') {
        return parse_descriptor(rest, zone);
    }
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = fields[..] else {
        return Err(ParseError::FieldCount {
            found: fields.len(),
        });
    };
    let minute = parse_field(minute, &MINUTE)?;
    let hour = parse_field(hour, &HOUR)?;
    let dom = parse_field(dom, &DOM)?;
    let month = parse_field(month, &MONTH)?;
    let dow = parse_field(dow, &DOW)?;
    Ok(Schedule {
        kind: Kind::Spec(Fields {
            minute: minute.bits,
            hour: low_u32(hour),
            dom: low_u32(dom),
            month: month.bits as u16,
            dow: dow.bits as u8,
            dom_star: dom.star,
            dow_star: dow.star,
        }),
        zone,
    })
}

/// The bits of a field whose values all stay below 32.
fn low_u32(b: Bits) -> u32 {
    b.bits as u32
}

fn parse_descriptor(spec: &str, zone: ScheduleZone) -> Result<Schedule, ParseError> {
    const ALL_HOURS: u32 = (1 << 24) - 1;
    const ALL_DOM: u32 = !1; // 1..=31
    const ALL_MONTHS: u16 = ((1 << 13) - 1) & !1;
    const ALL_DOW: u8 = (1 << 7) - 1;
    let spec_of = |hour, dom, dom_star, month, dow, dow_star| Schedule {
        kind: Kind::Spec(Fields {
            minute: 1,
            hour,
            dom,
            month,
            dow,
            dom_star,
            dow_star,
        }),
        zone: zone.clone(),
    };
    Ok(match spec {
        "@yearly" | "@annually" => spec_of(1, 1 << 1, false, 1 << 1, ALL_DOW, true),
        "@monthly" => spec_of(1, 1 << 1, false, ALL_MONTHS, ALL_DOW, true),
        "@weekly" => spec_of(1, ALL_DOM, true, ALL_MONTHS, 1, false),
        "@daily" | "@midnight" => spec_of(1, ALL_DOM, true, ALL_MONTHS, ALL_DOW, true),
        "@hourly" => spec_of(ALL_HOURS, ALL_DOM, true, ALL_MONTHS, ALL_DOW, true),
        _ => {
            let Some(text) = spec.strip_prefix("@every ") else {
                return Err(ParseError::Descriptor(spec.to_owned()));
            };
            let nanos = parse_go_duration(text).map_err(ParseError::Every)?;
            // robfig: below one second becomes one second; sub-second parts are dropped.
            let secs = (nanos / 1_000_000_000).max(1) as u64;
            // The zone is parsed (a bad one is an error) but @every ignores it.
            Schedule {
                kind: Kind::Every(secs),
                zone: ScheduleZone::Caller,
            }
        }
    })
}

fn parse_field(text: &str, bounds: &Bounds) -> Result<Bits, ParseError> {
    let mut out = Bits {
        bits: 0,
        star: false,
    };
    for expr in text.split(',').filter(|e| !e.is_empty()) {
        let range = parse_range(expr, bounds).map_err(|reason| ParseError::Field {
            field: bounds.field,
            reason,
        })?;
        out.bits |= range.bits;
        out.star |= range.star;
    }
    Ok(out)
}

fn parse_range(expr: &str, bounds: &Bounds) -> Result<Bits, FieldError> {
    let mut slash_parts = expr.split('/');
    let range = slash_parts.next().unwrap_or_default();
    let step_text = slash_parts.next();
    let too_many_slashes = slash_parts.next().is_some();
    let mut ends = range.split('-');
    let low = ends.next().unwrap_or_default();
    let high = ends.next();
    let too_many_hyphens = ends.next().is_some();
    let single = high.is_none();
    let (start, mut end, mut star);
    if low == "*" || low == "?" {
        // Whatever follows a `*` before the slash is ignored, as in robfig.
        (start, end, star) = (bounds.min, bounds.max, true);
    } else {
        start = parse_int_or_name(low, bounds.names)?;
        if too_many_hyphens {
            return Err(FieldError::TooManyHyphens(expr.to_owned()));
        }
        end = match high {
            None => start,
            Some(high) => parse_int_or_name(high, bounds.names)?,
        };
        star = false;
    }
    if too_many_slashes {
        return Err(FieldError::TooManySlashes(expr.to_owned()));
    }
    let step = match step_text {
        None => 1,
        Some(step) => {
            let step = parse_int(step)?;
            // "N/step" means "N-max/step".
            if single {
                end = bounds.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
    };
    let expr = || expr.to_owned();
    if start < bounds.min {
        return Err(FieldError::BelowMinimum {
            value: start,
            min: bounds.min,
            expr: expr(),
        });
    }
    if end > bounds.max {
        return Err(FieldError::AboveMaximum {
            value: end,
            max: bounds.max,
            expr: expr(),
        });
    }
    if start > end {
        return Err(FieldError::Reversed { expr: expr() });
    }
    if step == 0 {
        return Err(FieldError::ZeroStep(expr()));
    }
    let mut bits = 0u64;
    let mut i = start;
    while i <= end {
        bits |= 1 << i;
        i = i.saturating_add(step);
    }
    Ok(Bits { bits, star })
}

fn parse_int_or_name(text: &str, names: &[&str]) -> Result<u64, FieldError> {
    if let Some(index) = names.iter().position(|name| go_lower_eq(text, name)) {
        // Month names start at 1, weekday names at 0.
        return Ok(index as u64 + u64::from(names.len() == 12));
    }
    parse_int(text)
}

/// `strings.ToLower(text) == name` for an ASCII `name`, with Go's per-rune
/// simple case mapping (it maps U+0130 to plain `i`, unlike Rust's full mapping).
fn go_lower_eq(text: &str, name: &str) -> bool {
    let mut lowered = text.chars().map(|c| match c {
        '\u{130}' => 'i',
        c => c.to_lowercase().next().unwrap_or(c),
    });
    name.chars().all(|n| lowered.next() == Some(n)) && lowered.next().is_none()
}

/// Go's `strconv.Atoi` followed by robfig's rejection of negatives.
fn parse_int(text: &str) -> Result<u64, FieldError> {
    let not_a_number = || FieldError::NotANumber(text.to_owned());
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_number());
    }
    let mut value: u64 = 0;
    for b in digits.bytes() {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or_else(not_a_number)?;
    }
    // Atoi's range is that of int64.
    let limit = if negative { 1 << 63 } else { (1 << 63) - 1 };
    if value > limit {
        return Err(not_a_number());
    }
    if negative && value != 0 {
        return Err(FieldError::Negative(text.to_owned()));
    }
    Ok(value)
}
