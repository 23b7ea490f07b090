//! `shardcron next`: when will this schedule run?

use super::arguments::Output;
use crate::clock::Clock;
use crate::reconcile::{Options, SPREAD_ANNOTATION};
use crate::schedule::{self, ScheduleZone, format_rfc3339, load_named_zone};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
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
    /// The CronJob's `shardcron.io/spread` window (a Go duration such as
    /// 10m): the times printed are the slots' delayed starts. Needs
    /// --cronjob, whose identity fixes the offset.
    #[arg(long, requires = "cronjob")]
    spread: Option<String>,
    /// NAMESPACE/NAME of the CronJob, for --spread.
    #[arg(long)]
    cronjob: Option<String>,
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
    #[error("--spread {0:?}: not a duration from 1s to 24h, such as 10m")]
    Spread(String),
    #[error("--cronjob {0:?}: not NAMESPACE/NAME")]
    CronJob(String),
    #[error("--after {0}: too early to start the spread offset before it")]
    After(Timestamp),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

/// `--fall-back`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FallBackArg {
    Twice,
    Once,
}

/// The offset `--spread` and `--cronjob` give, in seconds (0 without).
fn spread_offset(args: &NextArgs) -> Result<i64, NextError> {
    let (Some(spread), Some(cronjob)) = (&args.spread, &args.cronjob) else {
        return Ok(0);
    };
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert(SPREAD_ANNOTATION.to_owned(), spread.clone());
    let options = Options::from_annotations(Some(&annotations));
    if options.invalid.is_some() {
        return Err(NextError::Spread(spread.clone()));
    }
    let (namespace, name) = super::arguments::namespaced_name(cronjob)
        .ok_or_else(|| NextError::CronJob(cronjob.clone()))?;
    Ok(options.spread_offset(namespace, name))
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
    let after = args.after.unwrap_or_else(|| Clock::System.now());
    let once = args.fall_back == FallBackArg::Once;
    let offset = SignedDuration::from_secs(spread_offset(args)?);
    // A slot starts `offset` late: the first printed is the first whose
    // start is after `after`.
    let from = after
        .checked_sub(offset)
        .map_err(|_| NextError::After(after))?;
    let times: Vec<String> = parsed
        .upcoming_slots(from, &zone, once)
        .take(args.count)
        // A slot whose start would fall past the last instant jiff holds
        // ends the list.
        .map_while(|t| t.checked_add(offset).ok())
        .map(|t| format_rfc3339(t, &shown))
        .collect();
    match args.output {
        Output::Text => times.iter().try_for_each(|t| writeln!(out, "{t}"))?,
        Output::Json => writeln!(out, "{}", serde_json::Value::from(times))?,
    }
    Ok(())
}
