//! Structured logs through `tracing`: human-readable text by default, one
//! JSON object per line with `--log-format json`. The level comes from
//! `RUST_LOG` (default `info`).

use clap::ValueEnum;
use tracing_subscriber::filter::{FilterExt as _, LevelFilter, filter_fn};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the process-wide subscriber of the log lines (traces do not go
/// through `tracing`: [`super::trace_span`]). Calling it twice is harmless
/// (the second call keeps the first subscriber).
///
/// The log lines carry the decision they happen in (a `tracing` span
/// naming its CronJob, slot and trace id) only when the level goes down to
/// `debug`: at `info` and above, every line a firing logs names its
/// CronJob itself, and a span the log layer takes is formatted as it opens
/// (every field written to a string), whether a line is ever logged inside
/// it or not: 1.6% of a replica's CPU per firing when a firing had 9 such
/// spans, measured side by side (loadtest/report/HISTORY.md, "Spans only
/// for whom reads them"), so at `info` no layer takes a span and
/// `info_span!` makes nothing.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = subscriber(filter, format).try_init();
}

fn subscriber(filter: EnvFilter, format: LogFormat) -> impl tracing::Subscriber + Send + Sync {
    let spans_logged = spans_logged(&filter);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let events_only = filter_fn(move |metadata| spans_logged || metadata.is_event());
    tracing_subscriber::registry().with(logs.with_filter(filter.and(events_only)))
}

/// Whether `filter` lets anything through at `debug` or below.
fn spans_logged(filter: &EnvFilter) -> bool {
    filter
        .max_level_hint()
        .is_none_or(|most| most >= LevelFilter::DEBUG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_logged_only_down_to_debug() {
        assert!(!spans_logged(&EnvFilter::new("info")));
        assert!(!spans_logged(&EnvFilter::new("warn,shardcron=info")));
        assert!(spans_logged(&EnvFilter::new("debug")));
        assert!(spans_logged(&EnvFilter::new("info,shardcron::actor=trace")));
    }

    #[test]
    fn an_info_span_is_not_made_at_info() {
        for (level, disabled) in [("info", true), ("debug", false)] {
            let subscriber = subscriber(EnvFilter::new(level), LogFormat::Text);
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::info_span!("kube.request", k8s.verb = "create");
                assert_eq!(span.is_disabled(), disabled, "at {level}");
                // Events are still logged.
                assert!(tracing::event_enabled!(tracing::Level::INFO));
            });
        }
    }
}
