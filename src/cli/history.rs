//! `shardcron history NAMESPACE/NAME`: each recent slot's fate, from the
//! API server alone (no replica needs to be up): the CronJob's slot history
//! (`shardcron.io/slot-history`: the slots that did not start and why,
//! failed and replaced Jobs, counters) merged with its Jobs still there
//! (started slots and how they ended). Read with the caller's kubeconfig:
//! whoever may get the CronJob and list Jobs in its namespace (for batch/v1,
//! the built-in `view` role) may read it.

use super::arguments::Output;
use crate::reconcile::{
    CronJobKind, FailureReason, Fate, Finished, JobSummary, SLOT_HISTORY_ANNOTATION, SlotEntry,
    SlotHistory, controller_in, run_now_job_name,
};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde_json::json;
use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    target: super::arguments::CronJobTarget,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// Errors `history` reports (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{0:?} is not NAMESPACE/NAME")]
    NotAName(String),
    #[error("{0:#}")]
    Client(anyhow::Error),
    #[error("reading {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

/// One row: a slot (or a run of skipped ones) and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub slot: Timestamp,
    /// `started`, `run-now`, `failed`, `skipped: forbid`, ...
    pub fate: String,
    pub job: String,
    /// How the Job ended, or why the slot was skipped, in words.
    pub detail: String,
}

/// The rows, newest first, at most `limit`: the history's entries and the
/// Jobs (`jobs`: the CronJob's children) merged by Job name, a Job's own
/// state winning over the entry (the entry's failure reason kept).
pub fn rows(
    cronjob: &str,
    history: Option<&SlotHistory>,
    jobs: &[JobSummary],
    limit: usize,
) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for job in jobs {
        let slot = job.scheduled.or(job.start_time).unwrap_or_default();
        let run_now = run_now_job_name(cronjob, slot) == job.name;
        let (fate, detail) = match job.finished {
            None if job.deleting => ("started", "being deleted".to_owned()),
            None => ("started", "running".to_owned()),
            Some(Finished::Complete) => (
                "started",
                format!(
                    "succeeded{}",
                    job.completion_time
                        .map(|t| format!(" at {t}"))
                        .unwrap_or_default()
                ),
            ),
            Some(Finished::Failed) => (
                "failed",
                failed_detail(
                    job.failed_at,
                    job.failure_reason.map(FailureReason::as_str).unwrap_or(""),
                ),
            ),
        };
        rows.push(Row {
            slot,
            fate: if run_now && fate == "started" {
                "run-now".to_owned()
            } else {
                fate.to_owned()
            },
            job: job.name.clone(),
            detail,
        });
    }
    for entry in history.map(|h| h.slots.as_slice()).unwrap_or_default() {
        if !entry.job.is_empty()
            && !matches!(entry.fate, Fate::Skipped { .. })
            && rows.iter().any(|r| r.job == entry.job)
        {
            continue;
        }
        rows.push(entry_row(entry));
    }
    rows.sort_by(|a, b| b.slot.cmp(&a.slot).then_with(|| a.job.cmp(&b.job)));
    rows.truncate(limit);
    rows
}

fn failed_detail(at: Option<Timestamp>, reason: &str) -> String {
    let mut detail = "failed".to_owned();
    if let Some(at) = at {
        detail.push_str(&format!(" at {at}"));
    }
    if !reason.is_empty() {
        detail.push_str(&format!(" ({reason})"));
    }
    detail
}

fn entry_row(entry: &SlotEntry) -> Row {
    let (fate, detail) = match &entry.fate {
        Fate::Skipped { why, count } => {
            let mut detail = match why.as_str() {
                "forbid" => format!("concurrencyPolicy Forbid: {} was still running", entry.job),
                "deadline" => "past startingDeadlineSeconds".to_owned(),
                "tooManyMissed" => "more than 100 slots missed: only the most recent is considered".to_owned(),
                "suspended" => "the CronJob was suspended".to_owned(),
                "paused" => "paused after consecutive failed Jobs (shardcron.io/pause-after-failures)".to_owned(),
                _ => "not started at its time, and a later slot came first (no controller decided then)".to_owned(),
            };
            if *count > 1 {
                detail = format!("{} slots from this one: {detail}", count_text(*count));
            }
            (format!("skipped: {}", why.as_str()), detail)
        }
        Fate::Failed { at, reason } => ("failed".to_owned(), failed_detail(Some(*at), reason)),
        Fate::Replaced => (
            "replaced".to_owned(),
            "deleted by concurrencyPolicy Replace for a later slot".to_owned(),
        ),
    };
    Row {
        slot: entry.slot,
        fate,
        job: if matches!(entry.fate, Fate::Skipped { .. }) {
            String::new()
        } else {
            entry.job.clone()
        },
        detail,
    }
}

fn count_text(count: u32) -> String {
    if count > 100 {
        "more than 100".to_owned()
    } else {
        count.to_string()
    }
}

/// The rows a terminal shows.
const SHOWN: usize = 30;

pub fn run(args: &HistoryArgs, out: &mut impl Write) -> Result<(), HistoryError> {
    let (namespace, name) = super::arguments::namespaced_name(&args.target.cronjob)
        .ok_or_else(|| HistoryError::NotAName(args.target.cronjob.clone()))?;
    let (cronjob, jobs) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(read(args, namespace, name))?;
    let annotation = cronjob
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SLOT_HISTORY_ANNOTATION));
    let history = annotation.and_then(|value| SlotHistory::parse(value));
    let unreadable = annotation.is_some() && history.is_none();
    let status = &cronjob.data["status"];
    let rows = rows(name, history.as_ref(), &jobs, SHOWN);
    match args.output {
        Output::Json => {
            let rows: Vec<_> = rows
                .iter()
                .map(|r| json!({"slot": r.slot.to_string(), "fate": r.fate, "job": r.job, "detail": r.detail}))
                .collect();
            writeln!(
                out,
                "{}",
                json!({
                    "cronjob": format!("{namespace}/{name}"),
                    "lastScheduleTime": status["lastScheduleTime"],
                    "lastSuccessfulTime": status["lastSuccessfulTime"],
                    "history": history.as_ref().map(|h| serde_json::to_value(h).unwrap_or_default()),
                    "historyUnreadable": unreadable,
                    "slots": rows,
                })
            )?;
        }
        Output::Text => {
            writeln!(
                out,
                "CronJob {namespace}/{name}: schedule {:?}{}",
                cronjob.data["spec"]["schedule"]
                    .as_str()
                    .unwrap_or_default(),
                if cronjob.data["spec"]["suspend"].as_bool() == Some(true) {
                    ", suspended"
                } else {
                    ""
                }
            )?;
            writeln!(
                out,
                "last scheduled {}, last successful {}",
                status["lastScheduleTime"].as_str().unwrap_or("never"),
                status["lastSuccessfulTime"].as_str().unwrap_or("never")
            )?;
            match &history {
                Some(h) => {
                    let s = &h.skipped;
                    writeln!(
                        out,
                        "since {}: {} skipped (forbid {}, deadline {}, more than 100 missed {}, suspended {}, paused {}, missed {}), {} failed, {} replaced",
                        h.since,
                        s.forbid
                            + s.deadline
                            + s.too_many_missed
                            + s.suspended
                            + s.paused
                            + s.missed,
                        s.forbid,
                        s.deadline,
                        s.too_many_missed,
                        s.suspended,
                        s.paused,
                        s.missed,
                        h.failed,
                        h.replaced
                    )?;
                    if let Some(last) = &h.last_failure {
                        writeln!(
                            out,
                            "last failure: {} {}",
                            last.job,
                            failed_detail(Some(last.at), &last.reason)
                        )?;
                    }
                }
                None if unreadable => writeln!(
                    out,
                    "its {SLOT_HISTORY_ANNOTATION} annotation does not read (edited by hand?): the controller starts it anew at its next entry"
                )?,
                None => writeln!(
                    out,
                    "no slot skipped and no Job failed or replaced since the controller began keeping its history"
                )?,
            }
            writeln!(out)?;
            writeln!(out, "{:<22} {:<22} {:<40} DETAIL", "SLOT", "FATE", "JOB")?;
            for row in &rows {
                writeln!(
                    out,
                    "{:<22} {:<22} {:<40} {}",
                    row.slot.to_string(),
                    row.fate,
                    row.job,
                    row.detail
                )?;
            }
            writeln!(out)?;
            writeln!(
                out,
                "A slot not listed started and did not fail (the history records every slot that did not start, and every failed Job); its Job may be gone (history limits, TTL)."
            )?;
        }
    }
    Ok(())
}

/// The CronJob (as it is stored, every field) and its Jobs: those in its
/// namespace whose controller is it (by UID).
async fn read(
    args: &HistoryArgs,
    namespace: &str,
    name: &str,
) -> Result<(DynamicObject, Vec<JobSummary>), HistoryError> {
    let agent = format!("shardcron-history/{}", env!("CARGO_PKG_VERSION"));
    let client = super::arguments::kube_client(args.target.kubeconfig.as_ref(), &agent)
        .await
        .map_err(HistoryError::Client)?;
    let gvk = GroupVersionKind::gvk(
        args.target.kind.group(),
        args.target.kind.version(),
        CronJobKind::KIND,
    );
    let resource = ApiResource::from_gvk_with_plural(&gvk, CronJobKind::PLURAL);
    let cronjobs: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let cronjob = cronjobs
        .get(name)
        .await
        .map_err(|source| HistoryError::Read {
            what: format!("CronJob {namespace}/{name}"),
            source,
        })?;
    let uid = cronjob.metadata.uid.clone().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(client, namespace);
    let mut children = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = jobs
            .list(&params)
            .await
            .map_err(|source| HistoryError::Read {
                what: format!("Jobs in {namespace}"),
                source,
            })?;
        children.extend(
            page.items
                .iter()
                .filter(|job| controller_in(&job.metadata).is_some_and(|c| c.uid == uid))
                .map(JobSummary::from),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok((cronjob, children))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    fn job(name: &str, slot: &str, finished: Option<Finished>) -> JobSummary {
        JobSummary {
            name: name.into(),
            uid: String::new(),
            start_time: Some(at(slot)),
            completion_time: (finished == Some(Finished::Complete)).then(|| at(slot)),
            finished,
            failed_at: (finished == Some(Finished::Failed)).then(|| at(slot)),
            failure_reason: (finished == Some(Finished::Failed))
                .then_some(FailureReason::DeadlineExceeded),
            succeeded: finished == Some(Finished::Complete),
            scheduled: Some(at(slot)),
            deleting: false,
            held: false,
        }
    }

    #[test]
    fn jobs_and_entries_merge_newest_first_a_jobs_own_state_winning() {
        let history = SlotHistory::parse(
            r#"{"failed":1,"since":"2026-11-28T10:00:00Z","recordedTo":"2026-11-28T10:02:00Z",
                "slots":[{"slot":"2026-11-28T10:03:00Z","fate":"failed","at":"2026-11-28T10:03:30Z","reason":"DeadlineExceeded","job":"a-3"},
                         {"slot":"2026-11-28T10:02:00Z","fate":"skipped","why":"forbid","job":"a-1"},
                         {"slot":"2026-11-28T10:00:00Z","fate":"failed","at":"2026-11-28T10:00:40Z","job":"a-0"}]}"#,
        )
        .expect("a history");
        let jobs = [
            job("a-1", "2026-11-28T10:01:00Z", Some(Finished::Complete)),
            job("a-3", "2026-11-28T10:03:00Z", Some(Finished::Failed)),
            job("a-4", "2026-11-28T10:04:00Z", None),
        ];
        let merged = rows("a", Some(&history), &jobs, 10);
        let fates: Vec<(&str, &str)> = merged
            .iter()
            .map(|r| (r.fate.as_str(), r.job.as_str()))
            .collect();
        assert_eq!(
            fates,
            [
                ("started", "a-4"),
                ("failed", "a-3"),
                ("skipped: forbid", ""),
                ("started", "a-1"),
                ("failed", "a-0"),
            ]
        );
        assert!(
            merged[2].detail.contains("a-1 was still running"),
            "{:?}",
            merged[2]
        );
        assert!(
            merged[1].detail.contains("DeadlineExceeded"),
            "{:?}",
            merged[1]
        );
        assert_eq!(rows("a", Some(&history), &jobs, 2).len(), 2);
    }
}
