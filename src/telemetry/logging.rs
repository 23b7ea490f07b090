//! Structured logs through `tracing`: human-readable text by default, one
//! JSON object per line with `--log-format json`. The level comes from
//! `RUST_LOG` (default `info`).

use super::traces::TraceLayer;
use clap::ValueEnum;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the process-wide subscriber: the log lines, and the trace
/// export if `traces` is given (see [`super::traces`]). Calling it twice is
/// harmless (the second call keeps the first subscriber).
pub fn init(format: LogFormat, traces: Option<TraceLayer>) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(traces)
        .with(logs.with_filter(filter))
        .try_init();
}
