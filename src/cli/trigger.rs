//! `shardcron trigger NAMESPACE/NAME`: asks for one run of a CronJob now,
//! by setting its `shardcron.io/run-now` annotation to this instant
//! (docs/options.md). The controller that owns the CronJob starts the Job,
//! subject to its `concurrencyPolicy`; the Job's name is known at once.
//!
//! The patch is sent with the caller's kubeconfig, so RBAC decides who may
//! ask: whoever may patch the CronJob.

use super::arguments::Output;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::clock::Clock;
use crate::reconcile::{RUN_NOW_ANNOTATION, run_now_job_name};
use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    target: super::arguments::CronJobTarget,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// Errors `trigger` reports (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error("{0:?} is not NAMESPACE/NAME")]
    NotAName(String),
    #[error("{0:#}")]
    Client(anyhow::Error),
    #[error("requesting a run of {cronjob}: {source}")]
    Patch {
        cronjob: String,
        source: kube::Error,
    },
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(args: &TriggerArgs, out: &mut impl Write) -> Result<(), TriggerError> {
    let (namespace, name) = super::arguments::namespaced_name(&args.target.cronjob)
        .ok_or_else(|| TriggerError::NotAName(args.target.cronjob.clone()))?;
    // Whole seconds: the request's time names its Job.
    let requested = Timestamp::from_second(Clock::System.now().as_second()).unwrap_or_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(request(args, namespace, name, requested))?;
    let job = run_now_job_name(name, requested);
    match args.output {
        Output::Text => writeln!(
            out,
            "requested a run of {namespace}/{name} at {requested}: its Job will be {namespace}/{job}"
        )?,
        Output::Json => writeln!(
            out,
            "{}",
            json!({
                "cronjob": format!("{namespace}/{name}"),
                "requested": requested.to_string(),
                "job": job,
            })
        )?,
    }
    Ok(())
}

/// Sets the annotation: a JSON merge patch of it alone, so nothing else of
/// the CronJob is read or written.
async fn request(
    args: &TriggerArgs,
    namespace: &str,
    name: &str,
    requested: Timestamp,
) -> Result<(), TriggerError> {
    let agent = format!("shardcron-trigger/{}", env!("CARGO_PKG_VERSION"));
    let client = super::arguments::kube_client(args.target.kubeconfig.as_ref(), &agent)
        .await
        .map_err(TriggerError::Client)?;
    // The CronJob's URL by its kind, as the controller reads it.
    let api: Api<LeanCronJob> = Api::namespaced_with(client, namespace, &args.target.kind);
    let patch = json!({"metadata": {"annotations": {RUN_NOW_ANNOTATION: requested.to_string()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| TriggerError::Patch {
            cronjob: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(())
}
