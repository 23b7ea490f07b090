//! `/debug/shards`: the ring as this replica sees it, as JSON.
//!
//! `GET /debug/shards` reports the members (every Lease of the ring with
//! its holder, whether it is live on this replica's clock and the digest of
//! the view it published), this replica's view, how many CronJobs it owns,
//! runs and waits for, and what it waits for, and its standby entries.
//! `?keys=true` adds the keys of
//! the CronJobs whose actors run here (sorted), which the fault tests use
//! to check that every CronJob runs on exactly one replica.

use actix::prelude::*;
use axum::Json;
use axum::Router;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Asks the supervisor for a [`ShardReport`].
#[derive(Debug, Message)]
#[rtype(result = "ShardReport")]
pub struct DebugShards {
    pub keys: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct MemberReport {
    pub lease: String,
    pub holder: Option<String>,
    /// Renewed within its duration, as this replica's clock judges it.
    pub live: bool,
    /// Deleted; still live until it expires.
    pub deleted: bool,
    pub last_renewal_seen_ms: u64,
    pub view_digest: Option<String>,
    /// The ring protocol versions it speaks (`1`, `1-2`; `None`: they do
    /// not read) and the version of its view.
    #[serde(default)]
    pub protocols: Option<String>,
    #[serde(default)]
    pub view_protocol: Option<String>,
    /// Its release and commit, as its Lease states them.
    #[serde(default)]
    pub build: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ShardReport {
    pub replica: String,
    pub ring: String,
    /// Where it stands in the ownership protocol (see `shard::ownership`).
    pub phase: String,
    /// Its own Lease is valid by its clock: it may write.
    pub lease_valid: bool,
    /// Its fence lapsed; it is stopping every actor before rejoining.
    pub recovering: bool,
    /// The members of the ring it acts on (empty: none yet).
    pub view: Vec<String>,
    pub view_digest: Option<String>,
    /// The ring protocol version of the view (`None`: no ring yet).
    #[serde(default)]
    pub protocol: Option<u16>,
    /// The view has been handed to the Lease keeper.
    pub published: bool,
    pub members: Vec<MemberReport>,
    /// CronJobs owned under the view: running plus waiting.
    pub owned: usize,
    pub running: usize,
    pub waiting: usize,
    /// Waiting CronJobs by what they wait for (a peer's name, or a reason).
    pub waiting_for: HashMap<String, usize>,
    /// Actors of lost keys still finishing a decision.
    pub stopping: usize,
    pub loads_in_flight: usize,
    pub jobs_remembered: usize,
    /// The standby CronJobs kept (see `shard::standby`).
    #[serde(default)]
    pub standby: StandbyReport,
    pub keys: Option<Vec<String>>,
}

/// What a replica keeps of the CronJobs it would gain if a peer died.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StandbyReport {
    /// Standby entries kept.
    pub entries: usize,
    /// Standby buckets whose CronJobs are still to be read, or being read.
    pub buckets_to_read: usize,
    /// A standby load is in flight.
    pub loading: bool,
}

#[derive(Debug, Deserialize)]
struct Params {
    #[serde(default)]
    keys: bool,
}

/// Serves `/debug/shards` from the supervisor (`supervisor`), which only
/// copies its state: sorting the keys happens here, off its mailbox.
pub fn router(supervisor: Recipient<DebugShards>) -> Router {
    Router::new().route(
        "/debug/shards",
        get(move |Query(params): Query<Params>| {
            let supervisor = supervisor.clone();
            async move {
                match supervisor.send(DebugShards { keys: params.keys }).await {
                    Ok(mut report) => {
                        if let Some(keys) = report.keys.as_mut() {
                            keys.sort_unstable();
                        }
                        Json(report).into_response()
                    }
                    Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response(),
                }
            }
        }),
    )
}
