//! The health-probe and metrics endpoints: `/healthz` (the process makes
//! progress), `/readyz` (synced, every actor armed, and may act now) and
//! `/metrics` (Prometheus text format).

use super::Metrics;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// What the probes report, fed by the supervisor on every tick.
///
/// - `/readyz`: the first lists are synced and every actor armed (once),
///   and this replica may act now (its Lease is valid by its own clock). A
///   replica cut from the API server, or fenced while it recovers, says so.
/// - `/healthz`: the supervisor has ticked within [`HEARTBEAT_STALE`], and
///   no actor has been stopping for longer than [`STOP_STALL`]. Every
///   request has a deadline, so a decision ends within minutes; an actor
///   that does not stop means the process is wedged, and the kubelet's
///   liveness probe restarts it rather than leave its share unserved.
#[derive(Debug)]
pub struct Readiness {
    synced: AtomicBool,
    may_act: AtomicBool,
    started: std::time::Instant,
    /// Milliseconds since `started` at the last tick.
    heartbeat_ms: AtomicU64,
    /// Milliseconds since `started` when the oldest current stop began;
    /// `u64::MAX` when nothing is stopping.
    stopping_since_ms: AtomicU64,
}

/// A supervisor that has not ticked for this long is wedged (it ticks every second).
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(30);
/// An actor asked to stop finishes at most its decision in flight: a few
/// requests, each with a deadline ([`crate::apiserver::deadline`]) and at most
/// five attempts.
pub const STOP_STALL: Duration = Duration::from_secs(300);

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            synced: AtomicBool::new(false),
            may_act: AtomicBool::new(false),
            started: std::time::Instant::now(),
            heartbeat_ms: AtomicU64::new(0),
            stopping_since_ms: AtomicU64::new(u64::MAX),
        }
    }
}

impl Readiness {
    fn millis(&self, at: std::time::Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    pub fn set_ready(&self) {
        self.synced.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// One supervisor tick at `now`: whether the replica may act, and since
    /// when its oldest stopping actor has been stopping.
    pub fn tick(
        &self,
        now: std::time::Instant,
        may_act: bool,
        stopping_since: Option<std::time::Instant>,
    ) {
        self.may_act.store(may_act, Ordering::Release);
        self.heartbeat_ms.store(self.millis(now), Ordering::Release);
        let since = stopping_since.map_or(u64::MAX, |t| self.millis(t));
        self.stopping_since_ms.store(since, Ordering::Release);
    }

    /// `/readyz` at any moment: `Err` says why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if !self.synced.load(Ordering::Acquire) {
            return Err("not synced yet");
        }
        if !self.may_act.load(Ordering::Acquire) {
            return Err("own Lease not valid: this replica does not act");
        }
        Ok(())
    }

    /// `/healthz` at `now`: `Err` says why the process should be restarted.
    pub fn liveness(&self, now: std::time::Instant) -> Result<(), String> {
        judge_liveness(
            self.millis(now),
            self.heartbeat_ms.load(Ordering::Acquire),
            self.stopping_since_ms.load(Ordering::Acquire),
        )
    }
}

fn judge_liveness(now_ms: u64, heartbeat_ms: u64, stopping_since_ms: u64) -> Result<(), String> {
    let age = Duration::from_millis(now_ms.saturating_sub(heartbeat_ms));
    if age > HEARTBEAT_STALE {
        return Err(format!("the supervisor has not ticked for {age:?}"));
    }
    if stopping_since_ms != u64::MAX {
        let stopping = Duration::from_millis(now_ms.saturating_sub(stopping_since_ms));
        if stopping > STOP_STALL {
            return Err(format!("an actor has been stopping for {stopping:?}"));
        }
    }
    Ok(())
}

/// Binds `addr` (port 0 picks a free port), so that a busy port is an
/// error at start-up, before the routes exist.
pub async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `router` on `listener` until the process ends, each connection
/// bounded ([`super::listener`]).
pub async fn serve(listener: TcpListener, router: Router) {
    super::listener::serve_plain(listener, router).await
}

pub fn health_router(readiness: Arc<Readiness>) -> Router {
    let live = readiness.clone();
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let answer = match live.liveness(std::time::Instant::now()) {
                    Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
                };
                async move { answer }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let answer = match readiness.readiness() {
                    Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
                };
                async move { answer }
            }),
        )
}

pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let body = metrics.encode();
            async move { exposition(body) }
        }),
    )
}

/// `/metrics/cronjobs`: the per-CronJob series, whose labels name tenants'
/// namespaces and CronJobs: served beside `/debug/shards` on the loopback
/// listener, not with `/metrics` (docs/operations.md).
pub fn cronjob_metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics/cronjobs",
        get(move || {
            let body = metrics.encode_cronjobs();
            async move { exposition(body) }
        }),
    )
}

pub fn exposition(body: String) -> axum::response::Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_MS: u64 = 60_000;

    #[test]
    fn alive_while_the_supervisor_ticks_and_stops_complete() {
        assert!(judge_liveness(10 * MINUTE_MS, 10 * MINUTE_MS - 1_000, u64::MAX).is_ok());
        // Stopping for a while is normal: a decision in flight finishes.
        assert!(judge_liveness(10 * MINUTE_MS, 10 * MINUTE_MS, 9 * MINUTE_MS).is_ok());
    }

    #[test]
    fn a_stalled_supervisor_or_a_stop_that_never_ends_fails_the_probe() {
        let stalled = judge_liveness(10 * MINUTE_MS, 9 * MINUTE_MS, u64::MAX);
        assert!(stalled.unwrap_err().contains("not ticked"));
        let wedged = judge_liveness(10 * MINUTE_MS, 10 * MINUTE_MS, 4 * MINUTE_MS);
        assert!(wedged.unwrap_err().contains("stopping"));
    }

    #[test]
    fn ready_only_when_synced_and_allowed_to_act() {
        let readiness = Readiness::default();
        let now = std::time::Instant::now();
        assert_eq!(readiness.readiness(), Err("not synced yet"));
        readiness.set_ready();
        readiness.tick(now, false, None);
        assert!(readiness.readiness().unwrap_err().contains("Lease"));
        readiness.tick(now, true, None);
        assert_eq!(readiness.readiness(), Ok(()));
        assert!(readiness.liveness(now).is_ok());
        readiness.tick(now, true, Some(now));
        assert!(
            readiness
                .liveness(now + STOP_STALL + Duration::from_secs(1))
                .is_err()
        );
    }
}
