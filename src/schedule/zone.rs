//! Where a schedule's times are evaluated: a `TZ=` prefix's zone, loaded as
//! Go's `time.LoadLocation` loads it, or the caller's.

use jiff::tz::TimeZone;
use thiserror::Error;

/// Why a time zone name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown time zone {0:?}")]
pub struct ZoneError(pub String);

/// Where a schedule's times are evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleZone {
    /// No `TZ=` prefix (or `TZ=Local`): the zone the caller evaluates in.
    Caller,
    /// A `TZ=`/`CRON_TZ=` prefix named this zone.
    Fixed(TimeZone),
}

/// Loads a zone as Go's `time.LoadLocation` does: `""` and `UTC` are UTC,
/// `Local` defers to the caller, names are case-sensitive IANA names.
pub fn load_zone(name: &str) -> Result<ScheduleZone, ZoneError> {
    match name {
        "" | "UTC" => Ok(ScheduleZone::Fixed(TimeZone::UTC)),
        "Local" => Ok(ScheduleZone::Caller),
        _ => load_named_zone(name).map(ScheduleZone::Fixed),
    }
}

/// An IANA zone by its exact name (Go's file lookup is case-sensitive; jiff's is not).
pub fn load_named_zone(name: &str) -> Result<TimeZone, ZoneError> {
    let err = || ZoneError(name.to_owned());
    if name.contains("..") || name.starts_with('/') || name.starts_with('\\') {
        return Err(err());
    }
    let tz = jiff::tz::db().get(name).map_err(|_| err())?;
    if tz.iana_name() != Some(name) {
        return Err(err());
    }
    Ok(tz)
}
