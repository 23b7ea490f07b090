//! How the admin commands print their answers: text for people, one JSON
//! object per answer (or per decision, with `--watch`) for programs.

use crate::admin::json::{decision_json, phase, time};
pub(super) use crate::admin::json::{queues_json, ring_json, status_json};
use crate::admin::proto::{
    Decision, GetCronJobResponse, GetQueuesResponse, GetRingResponse, WatchDecisionsResponse,
};
use serde_json::json;
use std::io::Write;

pub(super) fn write_ring(out: &mut impl Write, ring: &GetRingResponse) -> std::io::Result<()> {
    writeln!(
        out,
        "ring {} as {} sees it: {} (Lease {}), {} CronJobs running here, {} waiting",
        ring.ring,
        ring.replica,
        ring.phase,
        if ring.lease_valid {
            "valid"
        } else {
            "not valid"
        },
        ring.running,
        ring.waiting
    )?;
    writeln!(out, "view: {}", ring.view.join(", "))?;
    for member in &ring.members {
        writeln!(
            out,
            "  {:<32} {:<24} {:<5} renewed {} ms ago",
            member.lease,
            member.holder,
            if member.live { "live" } else { "gone" },
            member.last_renewal_seen_ms
        )?;
    }
    Ok(())
}

pub(super) fn write_status(
    out: &mut impl Write,
    cronjob: &str,
    answer: &GetCronJobResponse,
) -> std::io::Result<()> {
    let none = || "-".to_owned();
    writeln!(
        out,
        "CronJob {cronjob} on {} ({})",
        answer.owner,
        phase(answer)
    )?;
    if !answer.waiting_for.is_empty() {
        writeln!(out, "  waiting for:        {}", answer.waiting_for)?;
    }
    writeln!(
        out,
        "  next wake-up:       {}",
        time(&answer.next_wakeup).unwrap_or_else(none)
    )?;
    writeln!(
        out,
        "  last schedule:      {}",
        time(&answer.last_schedule_time).unwrap_or_else(none)
    )?;
    writeln!(
        out,
        "  last success:       {}",
        time(&answer.last_successful_time).unwrap_or_else(none)
    )?;
    let active = if answer.active_jobs.is_empty() {
        none()
    } else {
        answer.active_jobs.join(", ")
    };
    writeln!(out, "  active Jobs:        {active}")?;
    writeln!(out, "  suspended:          {}", answer.suspended)?;
    writeln!(
        out,
        "  Jobs known:         {}{}",
        answer.children,
        if answer.deciding {
            " (deciding now)"
        } else {
            ""
        }
    )?;
    if let Some(queued) = &answer.queued {
        writeln!(
            out,
            "  queued:             a {} request, {} ahead of it: its turn in about {:.1} s at {:.1} requests/s",
            queued.class, queued.ahead, queued.expected_wait_seconds, queued.rate
        )?;
    }
    writeln!(out, "  would decide now:")?;
    for step in &answer.would_decide {
        writeln!(out, "    - {step}")?;
    }
    write_recent(out, answer, "  ")?;
    Ok(())
}

pub(super) fn watched_json(watched: &WatchDecisionsResponse) -> serde_json::Value {
    let mut answer = watched
        .decision
        .as_ref()
        .map(decision_json)
        .unwrap_or_else(|| json!({}));
    answer["skipped"] = json!(watched.skipped);
    answer
}

/// A decision: its time, outcome, trace and Job, then its steps and events,
/// each line indented by `indent`.
fn write_decision(out: &mut impl Write, decision: &Decision, indent: &str) -> std::io::Result<()> {
    let trace = if decision.trace_id.is_empty() {
        String::new()
    } else {
        format!(" trace {}", decision.trace_id)
    };
    let job = if decision.created_job.is_empty() {
        String::new()
    } else {
        format!(" Job {}", decision.created_job)
    };
    writeln!(
        out,
        "{indent}{} {}{job}{trace}",
        time(&decision.at).unwrap_or_default(),
        decision.outcome
    )?;
    for step in &decision.steps {
        writeln!(out, "{indent}    - {step}")?;
    }
    for event in &decision.events {
        writeln!(out, "{indent}    event: {event}")?;
    }
    Ok(())
}

pub(super) fn write_watched(
    out: &mut impl Write,
    watched: &WatchDecisionsResponse,
) -> std::io::Result<()> {
    if watched.skipped > 0 {
        writeln!(
            out,
            "({} decisions of the replica skipped: the watch fell behind)",
            watched.skipped
        )?;
    }
    match &watched.decision {
        Some(decision) => write_decision(out, decision, ""),
        None => Ok(()),
    }
}

pub(super) fn explained_json(cronjob: &str, answer: &GetCronJobResponse) -> serde_json::Value {
    json!({
        "cronjob": cronjob,
        "owner": answer.owner,
        "phase": phase(answer),
        "wouldDecide": answer.would_decide,
        "recentDecisions": answer.recent_decisions.iter().map(decision_json).collect::<Vec<_>>(),
        "decisionsSince": time(&answer.decisions_since),
    })
}

/// `explain --live`: the owner's dry run, then its recent decisions.
pub(super) fn write_explained(
    out: &mut impl Write,
    cronjob: &str,
    answer: &GetCronJobResponse,
) -> std::io::Result<()> {
    writeln!(
        out,
        "CronJob {cronjob} on {} ({})",
        answer.owner,
        phase(answer)
    )?;
    if !answer.waiting_for.is_empty() {
        writeln!(
            out,
            "waiting for {}: it decides nothing yet",
            answer.waiting_for
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "decision now (a dry run on what the owner holds; nothing is written):"
    )?;
    for step in &answer.would_decide {
        writeln!(out, "  - {step}")?;
    }
    write_recent(out, answer, "")
}

fn write_recent(
    out: &mut impl Write,
    answer: &GetCronJobResponse,
    indent: &str,
) -> std::io::Result<()> {
    let since = time(&answer.decisions_since).unwrap_or_default();
    match (&answer.decisions_since, answer.recent_decisions.is_empty()) {
        (None, _) => writeln!(out, "{indent}recent decisions: none on this replica yet"),
        (Some(_), true) => writeln!(
            out,
            "{indent}recent decisions: none since {since} (how far back the replica's journal reaches)"
        ),
        (Some(_), false) => {
            writeln!(
                out,
                "{indent}recent decisions, oldest first (the journal reaches back to {since}):"
            )?;
            for decision in &answer.recent_decisions {
                write_decision(out, decision, &format!("{indent}  "))?;
            }
            Ok(())
        }
    }
}

/// The line `--watch` prints when it follows the CronJob to a new owner.
pub(super) fn write_followed(
    out: &mut impl Write,
    json: bool,
    from: &str,
    to: &str,
) -> std::io::Result<()> {
    if json {
        writeln!(out, "{}", json!({"followed": {"from": from, "to": to}}))
    } else {
        writeln!(out, "(now on {to}: {from} no longer owns it)")
    }
}

pub(super) fn write_queues(
    out: &mut impl Write,
    answer: &GetQueuesResponse,
) -> std::io::Result<()> {
    let waiting: u64 = answer.classes.iter().map(|c| c.waiting).sum();
    writeln!(
        out,
        "write gateway of {}: {waiting} requests waiting, {:.1} requests/s",
        answer.replica, answer.rate
    )?;
    writeln!(
        out,
        "  {:<16} {:>8} {:>8} {:>10}  namespaces (most waiting first)",
        "CLASS", "WAITING", "AHEAD", "DRAINED IN"
    )?;
    for class in &answer.classes {
        let mut lines: Vec<String> = class
            .namespaces
            .iter()
            .map(|n| format!("{} {}", n.namespace, n.waiting))
            .collect();
        if class.other_namespaces > 0 {
            lines.push(format!(
                "{} more namespaces {}",
                class.other_namespaces, class.other_waiting
            ));
        }
        let drained = if class.waiting == 0 {
            "-".to_owned()
        } else {
            format!("{:.1} s", class.drain_seconds)
        };
        writeln!(
            out,
            "  {:<16} {:>8} {:>8} {:>10}  {}",
            class.class,
            class.waiting,
            class.ahead,
            drained,
            if lines.is_empty() {
                "-".to_owned()
            } else {
                lines.join(", ")
            }
        )?;
    }
    Ok(())
}
