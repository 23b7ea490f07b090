//! The admin API's answers as JSON, the same for `shardcron ... --output
//! json` and the aggregated API (`kubectl get --raw
//! /apis/admin.shardcron.io/...`): camelCase fields, RFC 3339 times.

use super::proto::{ActorPhase, Decision, GetCronJobResponse, GetQueuesResponse, GetRingResponse};
use serde_json::json;

pub fn ring_json(ring: &GetRingResponse) -> serde_json::Value {
    json!({
        "replica": ring.replica,
        "ring": ring.ring,
        "phase": ring.phase,
        "leaseValid": ring.lease_valid,
        "view": ring.view,
        "members": ring.members.iter().map(|m| json!({
            "lease": m.lease,
            "holder": m.holder,
            "live": m.live,
            "lastRenewalSeenMs": m.last_renewal_seen_ms,
        })).collect::<Vec<_>>(),
        "running": ring.running,
        "waiting": ring.waiting,
    })
}

pub fn time(t: &Option<prost_types::Timestamp>) -> Option<String> {
    t.as_ref()
        .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
        .map(|t| t.to_string())
}

pub fn phase(answer: &GetCronJobResponse) -> &'static str {
    match answer.phase() {
        ActorPhase::Running => "running",
        ActorPhase::Waiting => "waiting",
        ActorPhase::Unspecified => "unknown",
    }
}

pub fn status_json(cronjob: &str, answer: &GetCronJobResponse) -> serde_json::Value {
    json!({
        "cronjob": cronjob,
        "owner": answer.owner,
        "phase": phase(answer),
        "waitingFor": (!answer.waiting_for.is_empty()).then_some(&answer.waiting_for),
        "nextWakeup": time(&answer.next_wakeup),
        "lastScheduleTime": time(&answer.last_schedule_time),
        "lastSuccessfulTime": time(&answer.last_successful_time),
        "activeJobs": answer.active_jobs,
        "suspended": answer.suspended,
        "children": answer.children,
        "deciding": answer.deciding,
        "wouldDecide": answer.would_decide,
        "queued": answer.queued.as_ref().map(|q| json!({
            "class": q.class,
            "ahead": q.ahead,
            "rate": q.rate,
            "expectedWaitSeconds": q.expected_wait_seconds,
        })),
        "recentDecisions": answer.recent_decisions.iter().map(decision_json).collect::<Vec<_>>(),
        "decisionsSince": time(&answer.decisions_since),
    })
}

pub fn decision_json(decision: &Decision) -> serde_json::Value {
    let text = |s: &String| (!s.is_empty()).then(|| s.clone());
    json!({
        "at": time(&decision.at),
        "outcome": decision.outcome,
        "steps": decision.steps,
        "events": decision.events,
        "traceId": text(&decision.trace_id),
        "createdJob": text(&decision.created_job),
    })
}

pub fn queues_json(answer: &GetQueuesResponse) -> serde_json::Value {
    json!({
        "replica": answer.replica,
        "rate": answer.rate,
        "classes": answer.classes.iter().map(|class| json!({
            "class": class.class,
            "waiting": class.waiting,
            "ahead": class.ahead,
            "drainSeconds": class.drain_seconds,
            "namespaces": class.namespaces.iter().map(|n| json!({
                "namespace": n.namespace,
                "waiting": n.waiting,
            })).collect::<Vec<_>>(),
            "otherWaiting": class.other_waiting,
            "otherNamespaces": class.other_namespaces,
        })).collect::<Vec<_>>(),
    })
}
