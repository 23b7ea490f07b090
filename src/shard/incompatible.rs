//! Telling operators about live peers that speak no ring protocol version
//! this replica can share a ring with ([`super::protocol`]): a warning in
//! the log, the gauge `shardcron_ring_incompatible_peers` (alert
//! `ShardcronIncompatiblePeer`) and a Warning Event on each such peer's
//! Lease, which `kubectl describe lease` shows beside its annotations.
//! Shell: the decision is [`super::ownership::Command::PeersIncompatible`].

use super::ownership::IncompatiblePeer;
use crate::clock::Clock;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;

/// The Event's reason.
pub const REASON: &str = "IncompatiblePeer";
/// How long an Event's create may take: a report, never worth waiting on.
const EVENT_DEADLINE: Duration = Duration::from_secs(10);

/// What the log and the Event say of `peer`.
pub fn describe(peer: &IncompatiblePeer) -> String {
    format!(
        "replica {} speaks ring protocol versions {} (build {}), none of which this replica ({}, versions {}) can run with the ring: it is left out of the ring, and no CronJob it might run starts elsewhere until it is gone or upgraded",
        peer.name,
        peer.protocols
            .map_or_else(|| "that do not read".to_owned(), |p| p.encode()),
        peer.build.as_deref().unwrap_or("not stated"),
        crate::release::build(),
        super::protocol::Protocols::THIS_BUILD,
    )
}

/// Records a Warning Event on `lease` (in `namespace`) about `peer`, from
/// replica `me`; a failure is logged, not retried (the metric stays).
pub async fn record_event(
    client: Client,
    namespace: String,
    lease: String,
    me: String,
    peer: IncompatiblePeer,
) {
    let now = Clock::System.now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{lease}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".to_owned()),
        reason: Some(REASON.to_owned()),
        action: Some("LeaveOutOfRing".to_owned()),
        note: Some(describe(&peer)),
        regarding: Some(ObjectReference {
            api_version: Some("coordination.k8s.io/v1".to_owned()),
            kind: Some("Lease".to_owned()),
            namespace: Some(namespace.clone()),
            name: Some(lease),
            ..ObjectReference::default()
        }),
        reporting_controller: Some("shardcron".to_owned()),
        reporting_instance: Some(me),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client, &namespace);
    match tokio::time::timeout(EVENT_DEADLINE, api.create(&PostParams::default(), &event)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(%error, peer = %peer.name, "could not record the IncompatiblePeer event")
        }
        Err(_) => {
            tracing::warn!(peer = %peer.name, "recording the IncompatiblePeer event timed out")
        }
    }
}
