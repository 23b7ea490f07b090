//! `shardcron explain`: what would the controller do with this CronJob now,
//! and why? The same decision code the controller runs, fed from files.
//!
//! The live GETs the decision may ask for are answered from the files
//! themselves: the CronJob file is the live CronJob, and a Job that is not
//! in `--jobs` is taken as gone (the text output says so). Every write is
//! taken as successful.

use super::arguments::Output;
use crate::clock::Clock;
use crate::reconcile::{
    CronJobKind, CronJobView, DeleteReason, Finished, Input, JobLookup, JobSummary, JobTemplate,
    LiveAnswers, LiveJob, Lookup, Plan, Requeue, StatusView, Step, ViewError, is_child_by_name,
    reconcile,
};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobTemplateSpec};
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The CronJob, as `kubectl get cronjob NAME -o yaml` (or `-o json`) prints it.
    #[arg(long, value_name = "FILE", required_unless_present = "live")]
    cronjob: Option<PathBuf>,
    /// Instead of files: ask the replica that owns NAMESPACE/NAME what it
    /// would decide now (a dry run on what it holds) and what it decided
    /// lately, through the admin API (found and reached as `shardcron
    /// status` does; the flags below say how).
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        conflicts_with_all = ["cronjob", "jobs", "now"]
    )]
    live: Option<String>,
    /// With --live: which API serves it, batch (batch/v1) or shardcron.
    #[arg(long, default_value = "batch", value_parser = super::arguments::parse_kind, requires = "live")]
    kind: crate::reconcile::CronJobKind,
    #[command(flatten)]
    target: super::admin::Target,
    /// Its Jobs: a JobList (`kubectl get jobs -o yaml`), a JSON array, or
    /// YAML documents. Jobs not controlled by the CronJob are ignored.
    #[arg(long, value_name = "FILE")]
    jobs: Option<PathBuf>,
    /// Decide as of this instant (RFC 3339; default now).
    #[arg(long)]
    now: Option<Timestamp>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// Errors `explain` reports (exit status 2), each naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not YAML/JSON, or a field of the wrong shape; `message` names the field.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {source}")]
    Incomplete { path: String, source: ViewError },
    #[error("{path}: expected one CronJob, found a list of {count}")]
    NotOneCronJob { path: String, count: usize },
    #[error(transparent)]
    Live(#[from] super::admin::AdminError),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(args: &ExplainArgs, out: &mut impl Write) -> Result<(), ExplainError> {
    let path = match (&args.live, &args.cronjob) {
        (Some(live), _) => {
            return Ok(super::admin::explain_live(
                live,
                args.kind,
                &args.target,
                args.output,
                out,
            )?);
        }
        (None, Some(path)) => path,
        // clap requires one of the two.
        (None, None) => return Ok(()),
    };
    let (cronjob_api, kind) = load_cronjob(path)?;
    let cronjob =
        CronJobView::of_kind(kind, &cronjob_api).map_err(|source| ExplainError::Incomplete {
            path: display(path),
            source,
        })?;
    let jobs = match &args.jobs {
        Some(path) => load_jobs(path)?,
        None => Vec::new(),
    };
    let now = args.now.unwrap_or_else(|| Clock::System.now());
    let template = cronjob_api.spec.job_template.clone();
    let explained = explain(&cronjob, &template, &jobs, now);
    match args.output {
        Output::Text => write_text(out, &cronjob, &explained, args.jobs.is_some())?,
        Output::Json => writeln!(out, "{}", to_json(&explained))?,
    }
    Ok(())
}

/// A decision with the answers it was given.
struct Explained {
    now: Timestamp,
    plan: Plan,
    /// Jobs in `--jobs` that are not this CronJob's children (by upstream's rule).
    ignored: Vec<String>,
    /// Active Jobs a live GET was asked about and that `--jobs` lacks.
    taken_as_gone: Vec<String>,
    /// The opt-ins the timing depends on ([`crate::reconcile::options`]).
    options: crate::reconcile::Options,
    /// How late every slot starts (`shardcron.io/spread`), in seconds.
    spread_offset: i64,
}

/// `template`: the CronJob's Job template, for a decision that asks for it
/// again ([`Lookup::JobTemplate`]: one too big for the view to keep).
fn explain(
    cronjob: &CronJobView,
    template: &JobTemplateSpec,
    jobs: &[Job],
    now: Timestamp,
) -> Explained {
    let in_namespace = |job: &&Job| {
        job.metadata
            .namespace
            .as_deref()
            .unwrap_or(cronjob.namespace())
            == cronjob.namespace()
    };
    let (children, ignored): (Vec<&Job>, Vec<&Job>) = jobs
        .iter()
        .filter(in_namespace)
        .partition(|job| is_child_by_name(job, cronjob.name()));
    let summaries: Vec<JobSummary> = children.iter().map(|job| JobSummary::from(*job)).collect();
    let input = Input {
        cronjob,
        children: &summaries,
        // Only the Jobs given are known here.
        known_slot: None,
        now,
        default_zone: &TimeZone::UTC,
    };
    let mut live = LiveAnswers::new();
    let mut taken_as_gone = Vec::new();
    // The decision asks at most three rounds of questions; each answer is final.
    let plan = loop {
        match reconcile(&input, &live) {
            Step::Plan(plan) => break *plan,
            Step::Lookup(lookups) => {
                for lookup in lookups {
                    match lookup {
                        Lookup::CronJob { .. } => live.set_cronjob(Ok(cronjob.clone())),
                        Lookup::JobTemplate { .. } => {
                            live.set_template(Ok(JobTemplate::from(template)))
                        }
                        Lookup::Job { namespace, name } => {
                            let found = jobs
                                .iter()
                                .filter(in_namespace)
                                .find(|job| job.metadata.name.as_deref() == Some(name.as_str()));
                            let answer = match found {
                                Some(job) => JobLookup::Found(LiveJob::from(job)),
                                None => {
                                    taken_as_gone.push(name.clone());
                                    JobLookup::NotFound
                                }
                            };
                            live.set_job(&namespace, &name, answer);
                        }
                    }
                }
            }
        }
    };
    Explained {
        now,
        plan,
        ignored: ignored
            .iter()
            .map(|job| job.metadata.name.clone().unwrap_or_default())
            .collect(),
        taken_as_gone,
        options: cronjob.options.clone(),
        spread_offset: cronjob
            .options
            .spread_offset(cronjob.namespace(), cronjob.name()),
    }
}

fn why(reason: &DeleteReason) -> String {
    match reason {
        DeleteReason::HistoryLimit {
            finished: Finished::Complete,
            limit,
        } => format!("successfulJobsHistoryLimit {limit} exceeded"),
        DeleteReason::HistoryLimit {
            finished: Finished::Failed,
            limit,
        } => format!("failedJobsHistoryLimit {limit} exceeded"),
        DeleteReason::Replace => "concurrencyPolicy Replace".to_owned(),
    }
}

fn to_json(explained: &Explained) -> Value {
    let plan = &explained.plan;
    let outcome = &plan.expected;
    let create: Vec<Value> = plan
        .create
        .iter()
        .map(|create| {
            // The plan carries the Job it would send; show its metadata as is.
            let meta = create.job.as_ref().map(|job| &job.metadata);
            json!({
                "name": create.name,
                "scheduledTime": create.scheduled_time.to_string(),
                "labels": meta.and_then(|m| m.labels.clone()).unwrap_or_default(),
                "annotations": meta.and_then(|m| m.annotations.clone()).unwrap_or_default(),
            })
        })
        .collect();
    let delete: Vec<Value> = plan
        .deletes
        .iter()
        .map(|d| json!({"name": d.name, "why": why(&d.why)}))
        .collect();
    let events: Vec<Value> = outcome
        .events
        .iter()
        .map(|e| {
            json!({
                "type": format!("{:?}", e.event_type),
                "reason": e.reason.as_str(),
                "message": e.message,
            })
        })
        .collect();
    let active = active_names(&outcome.status);
    json!({
        "create": create,
        "delete": delete,
        "events": events,
        "status": {
            "active": active,
            "lastScheduleTime": outcome.status.last_schedule_time.get().map(|t| t.to_string()),
            "lastSuccessfulTime": outcome.status.last_successful_time.get().map(|t| t.to_string()),
        },
        "statusChanged": outcome.status_changed,
        "options": {
            "fallBack": explained.options.fall_back,
            "catchUpWindowSeconds": explained.options.catch_up_window(),
            "spreadSeconds": explained.options.spread_seconds,
            "spreadOffsetSeconds": explained.spread_offset,
            "runNow": explained.options.run_now.get().map(|t| t.to_string()),
            "pauseAfterFailures": explained.options.pause_after_failures(),
            "failedJobs": explained.options.pause.as_ref().map(|p| {
                p.counted.iter().map(|j| json!({"name": j.name, "failedAt": j.failed_at.to_string()})).collect::<Vec<_>>()
            }),
            "pausedAt": explained.options.pause.as_ref().and_then(|p| p.paused_at).map(|t| t.to_string()),
        },
        "nextWakeup": outcome.next_wakeup().map(|t| t.to_string()),
    })
}

fn write_text(
    out: &mut impl Write,
    cronjob: &CronJobView,
    explained: &Explained,
    jobs_given: bool,
) -> std::io::Result<()> {
    let plan = &explained.plan;
    let outcome = &plan.expected;
    let spec = &cronjob.spec;
    let zone = spec.time_zone.as_deref().unwrap_or("UTC (default)");
    writeln!(
        out,
        "CronJob {}/{} at {}: schedule {:?} in {zone}, concurrencyPolicy {}",
        cronjob.namespace(),
        cronjob.name(),
        explained.now,
        spec.schedule,
        spec.concurrency_policy.as_str()
    )?;
    if let Some(seconds) = cronjob.options.catch_up_window() {
        writeln!(
            out,
            "  {}: {seconds}s (every missed slot within it runs, oldest first)",
            crate::reconcile::CATCH_UP_ANNOTATION
        )?;
    }
    if cronjob.options.spread_seconds > 0 {
        writeln!(
            out,
            "  {}: {}s (every slot starts {}s late, under its own name)",
            crate::reconcile::SPREAD_ANNOTATION,
            cronjob.options.spread_seconds,
            explained.spread_offset,
        )?;
    }
    if let Some(requested) = cronjob.options.run_now.get() {
        writeln!(
            out,
            "  {}: {requested} (a request for one run; served once a Job starts at or after it)",
            crate::reconcile::RUN_NOW_ANNOTATION
        )?;
    }
    if let Some(threshold) = cronjob.options.pause_after_failures() {
        let counted = cronjob
            .options
            .pause
            .as_ref()
            .map_or(0, |p| p.counted.len());
        writeln!(
            out,
            "  {}: {threshold} (failed Jobs in a row so far: {counted}; spec.suspend is set at {threshold})",
            crate::reconcile::PAUSE_AFTER_FAILURES_ANNOTATION
        )?;
    }
    if cronjob.options.once_per_wall_time() {
        writeln!(
            out,
            "  {}: once (a fall-back's repeated wall-clock times run at their first instant only)",
            crate::reconcile::FALL_BACK_ANNOTATION
        )?;
    }
    if !jobs_given {
        writeln!(out, "  (no --jobs: the CronJob is taken to have no Jobs)")?;
    }
    if !explained.ignored.is_empty() {
        writeln!(
            out,
            "  ignored, not controlled by this CronJob: {}",
            explained.ignored.join(", ")
        )?;
    }
    for name in &explained.taken_as_gone {
        writeln!(
            out,
            "  {name} is not in --jobs: treated as gone (a live GET would answer NotFound)"
        )?;
    }
    writeln!(out, "decisions:")?;
    for decision in &plan.decisions {
        writeln!(out, "  - {decision}")?;
    }
    if plan.decisions.is_empty() {
        writeln!(out, "  - nothing to do")?;
    }
    if !outcome.events.is_empty() {
        writeln!(out, "events:")?;
        for e in &outcome.events {
            writeln!(out, "  {:?} {}: {}", e.event_type, e.reason, e.message)?;
        }
    }
    let show = |t: Option<Timestamp>| t.map_or_else(|| "none".to_owned(), |t| t.to_string());
    let active = active_names(&outcome.status);
    writeln!(
        out,
        "status ({}): active [{}], lastScheduleTime {}, lastSuccessfulTime {}",
        if outcome.status_changed {
            "written"
        } else {
            "unchanged"
        },
        active.join(", "),
        show(outcome.status.last_schedule_time.get()),
        show(outcome.status.last_successful_time.get()),
    )?;
    match &outcome.requeue {
        Requeue::At(t) => writeln!(out, "next wake-up: {t}"),
        Requeue::Backoff(error) => writeln!(out, "next wake-up: retry with backoff ({error})"),
        Requeue::Never => writeln!(
            out,
            "next wake-up: none until the CronJob or its Jobs change"
        ),
    }
}

/// The names of the Jobs in `status.active`.
fn active_names(status: &StatusView) -> Vec<&str> {
    status
        .active
        .iter()
        .map(|r| r.name.as_deref().unwrap_or(""))
        .collect()
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn read(path: &Path) -> Result<String, ExplainError> {
    std::fs::read_to_string(path).map_err(|source| ExplainError::Read {
        path: display(path),
        source,
    })
}

/// A parse error on one line: serde_yaml_ng's text names the field path
/// (`spec.schedule: invalid type ...`) and the position.
fn parse_error(path: &Path, document: Option<usize>, err: impl std::fmt::Display) -> ExplainError {
    let message = err.to_string().replace('\n', " ");
    ExplainError::Parse {
        path: display(path),
        message: match document {
            Some(n) => format!("document {n}: {message}"),
            None => message,
        },
    }
}

/// `kind: List` (or `<Kind>List`) as kubectl prints several objects.
#[derive(Deserialize)]
struct ListOf<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

/// The shape of one YAML/JSON document.
enum Shape {
    Empty,
    Sequence,
    List,
    Object,
}

/// `kind` and `apiVersion`, when present, must be the expected ones (the
/// API types check them too, but their error cannot name the field).
fn check_kind(
    value: &serde_yaml_ng::Value,
    kind: &str,
    path: &Path,
    document: Option<usize>,
) -> Result<(), ExplainError> {
    // A CronJob may be batch/v1's or the shardcron.io CRD's; a Job is batch/v1's.
    let api_versions: &[&str] = if kind == CronJobKind::KIND {
        &["batch/v1", "shardcron.io/v1"]
    } else {
        &["batch/v1"]
    };
    for (field, wants) in [("kind", &[kind][..]), ("apiVersion", api_versions)] {
        let want = wants
            .iter()
            .map(|w| format!("{w:?}"))
            .collect::<Vec<_>>()
            .join(" or ");
        match value.get(field) {
            None => {}
            Some(serde_yaml_ng::Value::String(found)) if wants.contains(&found.as_str()) => {}
            Some(found) => {
                let found = match found {
                    serde_yaml_ng::Value::String(s) => format!("{s:?}"),
                    other => format!("{other:?}"),
                };
                return Err(parse_error(
                    path,
                    document,
                    format!("{field}: expected {want}, found {found}"),
                ));
            }
        }
    }
    Ok(())
}

fn shape(value: &serde_yaml_ng::Value) -> Shape {
    match value {
        serde_yaml_ng::Value::Null => Shape::Empty,
        serde_yaml_ng::Value::Sequence(_) => Shape::Sequence,
        serde_yaml_ng::Value::Mapping(m) if m.contains_key("items") => Shape::List,
        _ => Shape::Object,
    }
}

/// The CronJob in `path` and the API it is of. A shardcron.io CronJob has
/// batch/v1's spec and status: it is read as batch/v1's.
fn load_cronjob(path: &Path) -> Result<(CronJob, CronJobKind), ExplainError> {
    let text = read(path)?;
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| parse_error(path, None, e))?;
    let kind = as_batch_v1(&mut value);
    // Parsed from the text where nothing was rewritten: its errors say where.
    fn parse<T: serde::de::DeserializeOwned>(
        kind: CronJobKind,
        text: &str,
        value: serde_yaml_ng::Value,
    ) -> Result<T, serde_yaml_ng::Error> {
        match kind {
            CronJobKind::Batch => serde_yaml_ng::from_str(text),
            CronJobKind::Shardcron => serde_yaml_ng::from_value(value),
        }
    }
    match shape(&value) {
        Shape::Empty => Err(ExplainError::Parse {
            path: display(path),
            message: "empty file, expected a CronJob".to_owned(),
        }),
        Shape::Sequence => Err(ExplainError::Parse {
            path: display(path),
            message: "expected a CronJob, found a list".to_owned(),
        }),
        // `kubectl get cronjobs -o yaml` prints a List: accept one item.
        Shape::List => {
            let list: ListOf<CronJob> =
                parse(kind, &text, value).map_err(|e| parse_error(path, None, e))?;
            let count = list.items.len();
            let mut items = list.items.into_iter();
            match (items.next(), items.next()) {
                (Some(cronjob), None) => Ok((cronjob, kind)),
                _ => Err(ExplainError::NotOneCronJob {
                    path: display(path),
                    count,
                }),
            }
        }
        Shape::Object => {
            check_kind(&value, CronJobKind::KIND, path, None)?;
            let cronjob = parse(kind, &text, value).map_err(|e| parse_error(path, None, e))?;
            Ok((cronjob, kind))
        }
    }
}

/// Rewrites a shardcron.io CronJob (or a list's items) as batch/v1's and
/// says which it was.
fn as_batch_v1(value: &mut serde_yaml_ng::Value) -> CronJobKind {
    let shardcron = CronJobKind::Shardcron.api_version();
    let mut kind = CronJobKind::Batch;
    let mut rewrite = |object: &mut serde_yaml_ng::Value| {
        if let Some(api_version) = object.get_mut("apiVersion")
            && api_version.as_str() == Some(shardcron)
        {
            *api_version = CronJobKind::Batch.api_version().into();
            kind = CronJobKind::Shardcron;
        }
    };
    match value
        .get_mut("items")
        .and_then(|items| items.as_sequence_mut())
    {
        Some(items) => items.iter_mut().for_each(&mut rewrite),
        None => rewrite(value),
    }
    kind
}

fn load_jobs(path: &Path) -> Result<Vec<Job>, ExplainError> {
    let text = read(path)?;
    // First the shape of each document, then each document as that shape
    // (parsing straight into the API types keeps field paths in errors).
    let mut shapes = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_yaml_ng::Value::deserialize(document)
            .map_err(|e| parse_error(path, Some(shapes.len() + 1), e))?;
        shapes.push((shape(&value), value));
    }
    let several = shapes.len() > 1;
    for (index, (shape, value)) in shapes.iter().enumerate() {
        let document = several.then_some(index + 1);
        match (shape, value) {
            (Shape::Object, value) => check_kind(value, "Job", path, document)?,
            (Shape::Sequence, serde_yaml_ng::Value::Sequence(items)) => {
                for item in items {
                    check_kind(item, "Job", path, document)?;
                }
            }
            (Shape::List, value) => {
                if let Some(serde_yaml_ng::Value::Sequence(items)) = value.get("items") {
                    for item in items {
                        check_kind(item, "Job", path, document)?;
                    }
                }
            }
            _ => {}
        }
    }
    let mut jobs = Vec::new();
    for (index, (document, (shape, _))) in serde_yaml_ng::Deserializer::from_str(&text)
        .zip(&shapes)
        .enumerate()
    {
        let err = |e| parse_error(path, several.then_some(index + 1), e);
        match shape {
            Shape::Empty => {}
            Shape::Sequence => jobs.extend(Vec::<Job>::deserialize(document).map_err(err)?),
            Shape::List => jobs.extend(ListOf::<Job>::deserialize(document).map_err(err)?.items),
            Shape::Object => jobs.push(Job::deserialize(document).map_err(err)?),
        }
    }
    Ok(jobs)
}
