//! `shardcron next`: when will this schedule run?

use super::Output;
use crate::schedule::{self, ScheduleZone, format_rfc3339, load_named_zone};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct NextArgs {
    /// The schedule, as in a CronJob's spec.schedule (a TZ= prefix is honoured).
    schedule: String,
    /// IANA time zone, as spec.timeZone (default UTC; a TZ= prefix in the schedule wins).
    #[arg(long)]
    time_zone: Option<String>,
    /// Start after this instant (RFC 3339; default now).
    #[arg(long)]
    after: Option<Timestamp>,
    /// What a fall-back's repeated wall-clock times do, as the CronJob's
    /// annotation shardcron.io/fall-back says: `twice` (upstream's), `once`.
    #[arg(long, value_enum, default_value = "twice")]
    fall_back: FallBackArg,
    /// How many activations to print.
    #[arg(long, default_value_t = 5)]
    count: usize,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// Errors `next` reports (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum NextError {
    #[error("invalid schedule {schedule:?}: {source}")]
    Schedule {
        schedule: String,
        source: schedule::ParseError,
    },
    #[error("--time-zone: {0}")]
    Zone(schedule::ZoneError),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

/// `--fall-back`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FallBackArg {
    Twice,
    Once,
}

pub fn run(args: &NextArgs, out: &mut impl Write) -> Result<(), NextError> {
    let parsed = schedule::parse(&args.schedule).map_err(|source| NextError::Schedule {
        schedule: args.schedule.clone(),
        source,
    })?;
    let zone = match &args.time_zone {
        Some(name) => load_named_zone(name).map_err(NextError::Zone)?,
        None => TimeZone::UTC,
    };
    // Times print in the zone the schedule is evaluated in.
    let shown = match parsed.zone() {
        ScheduleZone::Fixed(own) if !parsed.is_every() => own.clone(),
        _ => zone.clone(),
    };
    let after = args.after.unwrap_or_else(Timestamp::now);
    let once = args.fall_back == FallBackArg::Once;
    let times: Vec<String> = parsed
        .upcoming_slots(after, &zone, once)
        .take(args.count)
        .map(|t| format_rfc3339(t, &shown))
        .collect();
    match args.output {
        Output::Text => times.iter().try_for_each(|t| writeln!(out, "{t}"))?,
        Output::Json => writeln!(out, "{}", serde_json::Value::from(times))?,
    }
    Ok(())
}
