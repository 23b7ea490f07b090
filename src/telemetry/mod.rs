//! What the controller tells operators: Prometheus metrics ([`metrics`]),
//! the health and metrics HTTP endpoints ([`http`]) and structured logs
//! ([`logging`]).

pub mod http;
pub mod logging;
pub mod metrics;

pub use metrics::Metrics;
