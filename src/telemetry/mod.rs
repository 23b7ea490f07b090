//! What the controller tells operators: Prometheus metrics ([`metrics`],
//! and per CronJob [`cronjob_series`]),
//! the health and metrics HTTP endpoints ([`http`]), structured logs
//! ([`logging`]) and OpenTelemetry traces (the export, [`traces`]; a
//! span, [`trace_span`]).

pub mod cronjob_series;
pub mod http;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod trace_span;
pub mod traces;

pub use metrics::Metrics;
