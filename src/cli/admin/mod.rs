//! `shardcron status`, `explain --live`, `ring` and `queues`: the admin
//! API's answers (docs/admin-api.md), asked with the caller's kubeconfig:
//! through the API server where it serves the aggregated API
//! ([`through_api`], any credential), else from the replicas directly,
//! the kubeconfig user's bearer token authenticating each call ([`reach`]
//! finds and reaches them: the ring's Leases, their certificates, pods and
//! addresses); [`output`] prints the answers as text or JSON.

mod error;
mod output;
mod reach;
mod target;
mod through_api;

pub use error::AdminError;
pub use target::{Connect, Target};

use crate::admin::proto::{
    ActorPhase, CronJobKind as ProtoKind, GetCronJobRequest, GetCronJobResponse, GetQueuesRequest,
    GetRingRequest, GetRingResponse, WatchDecisionsRequest,
};
use crate::admin::service::NOT_OWNER;
use crate::cli::arguments::Output;
use crate::reconcile::CronJobKind;
use reach::{Reach, Route, discover};
use std::io::Write;
use std::time::Duration;
use tonic_types::StatusExt as _;

/// How many replicas `status` asks before it gives up following owners.
const MAX_HOPS: usize = 3;

/// How long one call may take, connection included.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct RingArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct QueuesArgs {
    /// The replica to ask (its Lease holder; default: the first).
    #[arg(long, value_name = "REPLICA")]
    replica: Option<String>,
    #[command(flatten)]
    target: Target,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The CronJob, as NAMESPACE/NAME.
    cronjob: String,
    /// Which API serves it: batch (batch/v1) or shardcron (cronjobs.shardcron.io).
    #[arg(long, default_value = "batch", value_parser = crate::cli::arguments::parse_kind)]
    kind: CronJobKind,
    /// Then print the owner's decisions about it as they happen, until
    /// interrupted (or the owner stops).
    #[arg(long)]
    watch: bool,
    /// With --watch: stop after this many decisions.
    #[arg(long, value_name = "N")]
    watch_count: Option<usize>,
    #[command(flatten)]
    target: Target,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

pub fn ring(args: &RingArgs, out: &mut impl Write) -> Result<(), AdminError> {
    let answer = block_on(async {
        let path = format!("rings/{}", args.target.ring);
        if let Some(answer) = through_api_server(&args.target, &path).await? {
            return Ok(answer);
        }
        let reach = discover(&args.target).await?;
        let mut client = reach.dial(&reach.first(&args.target)?).await?;
        Ok(client
            .get_ring(authorized(GetRingRequest {}, &reach.token)?)
            .await?
            .into_inner())
    })?;
    match args.output {
        Output::Json => writeln!(out, "{}", output::ring_json(&answer))?,
        Output::Text => output::write_ring(out, &answer)?,
    }
    Ok(())
}

pub fn queues(args: &QueuesArgs, out: &mut impl Write) -> Result<(), AdminError> {
    let answer = block_on(async {
        let replica = match &args.replica {
            Some(replica) => Some(replica.clone()),
            // The replica the API server reaches first.
            None => through_api_server::<GetRingResponse>(
                &args.target,
                &format!("rings/{}", args.target.ring),
            )
            .await?
            .map(|ring| ring.replica),
        };
        if let Some(replica) = replica.filter(|_| uses_api_server(&args.target))
            && let Some(answer) =
                through_api_server(&args.target, &format!("queues/{replica}")).await?
        {
            return Ok(answer);
        }
        let reach = discover(&args.target).await?;
        let route = match &args.replica {
            Some(replica) => reach
                .route_to(replica)
                .ok_or_else(|| AdminError::UnknownReplica(replica.clone()))?,
            None => reach.first(&args.target)?,
        };
        let mut client = reach.dial(&route).await?;
        Ok(client
            .get_queues(authorized(GetQueuesRequest {}, &reach.token)?)
            .await?
            .into_inner())
    })?;
    match args.output {
        Output::Json => writeln!(out, "{}", output::queues_json(&answer))?,
        Output::Text => output::write_queues(out, &answer)?,
    }
    Ok(())
}

/// Whether `target` lets the commands go through the API server: asked
/// to (`--connect api-server`), or by default when no replica address or
/// replica token is given.
fn uses_api_server(target: &Target) -> bool {
    match target.connect {
        Connect::ApiServer => true,
        Connect::Auto => target.address.is_none() && target.token_file.is_none(),
        Connect::PortForward | Connect::Direct => false,
    }
}

/// The answer at `path` of the aggregated API, when `target` lets the
/// commands go through the API server and it serves that API; `None`: ask
/// the replicas directly (with `--connect api-server`, an error says why
/// not).
async fn through_api_server<T: prost::Message + Default>(
    target: &Target,
    path: &str,
) -> Result<Option<T>, AdminError> {
    if !uses_api_server(target) {
        return Ok(None);
    }
    let client = through_api::client(target).await?;
    match through_api::get(&client, path).await? {
        through_api::Served::Answer(answer) => Ok(Some(answer)),
        through_api::Served::No(why) if target.connect == Connect::ApiServer => {
            Err(AdminError::NotServed(why))
        }
        through_api::Served::No(_) => Ok(None),
    }
}

/// The aggregated API's path of the CronJob `request` names.
fn cronjob_path(request: &GetCronJobRequest) -> String {
    let kind = match request.kind() {
        ProtoKind::Shardcron => "?kind=shardcron",
        ProtoKind::Batch | ProtoKind::Unspecified => "",
    };
    format!(
        "namespaces/{}/cronjobs/{}{kind}",
        request.namespace, request.name
    )
}

/// The request for `cronjob` (NAMESPACE/NAME) of `kind`.
fn cronjob_request(cronjob: &str, kind: CronJobKind) -> Result<GetCronJobRequest, AdminError> {
    let (namespace, name) = crate::cli::arguments::namespaced_name(cronjob)
        .ok_or_else(|| AdminError::NotAName(cronjob.to_owned()))?;
    let kind = match kind {
        CronJobKind::Batch => ProtoKind::Batch,
        CronJobKind::Shardcron => ProtoKind::Shardcron,
    };
    Ok(GetCronJobRequest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        kind: kind.into(),
    })
}

/// The CronJob's live state from its owner, within the call deadline; the
/// route to the owner and what the Leases said, for what follows.
fn ask_owner(
    runtime: &tokio::runtime::Runtime,
    target: &Target,
    request: &GetCronJobRequest,
    cronjob: &str,
) -> Result<(GetCronJobResponse, Route, Reach), AdminError> {
    runtime.block_on(within_deadline(async {
        let reach = discover(target).await?;
        let first = reach.first(target)?;
        let (answer, route) = locate(&reach, first, request, cronjob).await?;
        Ok((answer, route, reach))
    }))
}

fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// `shardcron explain --live`: what the owner would decide now (a dry run
/// on what it holds) and what it decided lately, from the admin API.
pub fn explain_live(
    cronjob: &str,
    kind: CronJobKind,
    target: &Target,
    output: Output,
    out: &mut impl Write,
) -> Result<(), AdminError> {
    let request = cronjob_request(cronjob, kind)?;
    let runtime = current_thread()?;
    let answer = match runtime.block_on(within_deadline(through_api_server(
        target,
        &cronjob_path(&request),
    )))? {
        Some(answer) => answer,
        None => ask_owner(&runtime, target, &request, cronjob)?.0,
    };
    match output {
        Output::Json => writeln!(out, "{}", output::explained_json(cronjob, &answer))?,
        Output::Text => output::write_explained(out, cronjob, &answer)?,
    }
    Ok(())
}

pub fn status(args: &StatusArgs, out: &mut impl Write) -> Result<(), AdminError> {
    let request = cronjob_request(&args.cronjob, args.kind)?;
    let json = matches!(args.output, Output::Json);
    let runtime = current_thread()?;
    let watching = args.watch || args.watch_count.is_some();
    if !watching {
        let path = cronjob_path(&request);
        if let Some(answer) =
            runtime.block_on(within_deadline(through_api_server(&args.target, &path)))?
        {
            if json {
                writeln!(out, "{}", output::status_json(&args.cronjob, &answer))?;
            } else {
                output::write_status(out, &args.cronjob, &answer)?;
            }
            return Ok(());
        }
    } else if args.target.connect == Connect::ApiServer {
        return Err(AdminError::NoWatchThroughApiServer);
    }
    let (answer, mut route, mut reach) =
        ask_owner(&runtime, &args.target, &request, &args.cronjob)?;
    if json {
        writeln!(out, "{}", output::status_json(&args.cronjob, &answer))?;
    } else {
        output::write_status(out, &args.cronjob, &answer)?;
    }
    out.flush()?;
    if !args.watch && args.watch_count.is_none() {
        return Ok(());
    }
    // The owner's decisions as they happen, no overall deadline; when the
    // owner lets the CronJob go (it stops, or a rebalance moves it), find
    // the new one and watch there.
    let watch = WatchDecisionsRequest {
        namespace: request.namespace.clone(),
        name: request.name.clone(),
        kind: request.kind,
    };
    let mut owner = answer.owner;
    let mut seen = 0;
    runtime.block_on(async {
        for _ in 0..=MAX_FOLLOWS {
            let watched = watch_owner(&reach, &route, &watch, args, &mut seen, out).await;
            match watched {
                Ok(Watched::Done) => return Ok(()),
                Ok(Watched::Moved) => {}
                Err(error) if error.owner_may_have_moved() => {
                    // Said on stderr: stdout stays one record a line.
                    eprintln!(
                        "shardcron: the watch of {} through {route} ended ({error}); \
                         looking for its owner",
                        args.cronjob
                    );
                }
                Err(error) => return Err(error),
            }
            let (answer, next) = tokio::time::timeout(FOLLOW_DEADLINE, async {
                loop {
                    tokio::time::sleep(FOLLOW_RETRY).await;
                    // The Leases again: the new owner may be a new replica.
                    let Ok(fresh) = discover(&args.target).await else {
                        continue;
                    };
                    reach = fresh;
                    let Ok(first) = reach.first(&args.target) else {
                        continue;
                    };
                    // Each attempt within its deadline: a replica that went
                    // silent must not hold the search for the new owner.
                    let found = within_deadline(locate(&reach, first, &request, &args.cronjob));
                    match found.await {
                        Ok(found) if found.0.phase() == ActorPhase::Running => return Ok(found),
                        Ok(_) => {}
                        Err(error) if error.owner_may_have_moved() => {}
                        Err(error) => return Err(error),
                    }
                }
            })
            .await
            .map_err(|_| AdminError::Timeout(FOLLOW_DEADLINE))??;
            output::write_followed(out, json, &owner, &answer.owner)?;
            out.flush()?;
            owner = answer.owner;
            route = next;
        }
        Err(AdminError::TooManyHops(MAX_FOLLOWS))
    })
}

/// How many times `--watch` follows the CronJob to a new owner.
const MAX_FOLLOWS: usize = 16;
/// How long `--watch` looks for the new owner once the old one let go.
const FOLLOW_DEADLINE: Duration = Duration::from_secs(120);
/// How often it asks meanwhile.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// How a watch of one owner ended.
enum Watched {
    /// `--watch-count` decisions were printed.
    Done,
    /// The owner let the CronJob go or stopped.
    Moved,
}

async fn watch_owner(
    reach: &Reach,
    route: &Route,
    watch: &WatchDecisionsRequest,
    args: &StatusArgs,
    seen: &mut usize,
    out: &mut impl Write,
) -> Result<Watched, AdminError> {
    let mut client = within_deadline(reach.dial(route)).await?;
    let mut stream = client
        .watch_decisions(authorized(watch.clone(), &reach.token)?)
        .await?
        .into_inner();
    while args.watch_count.is_none_or(|count| *seen < count) {
        let Some(decision) = stream.message().await? else {
            return Ok(Watched::Moved);
        };
        *seen += 1;
        match args.output {
            Output::Json => writeln!(out, "{}", output::watched_json(&decision))?,
            Output::Text => output::write_watched(out, &decision)?,
        }
        out.flush()?;
    }
    Ok(Watched::Done)
}

/// Asks replicas for the CronJob's live state from `route` on, following
/// NOT_OWNER to the owner, a few hops at most (a rebalance may be under
/// way); returns the answer and the route to the owner.
async fn locate(
    reach: &Reach,
    mut route: Route,
    request: &GetCronJobRequest,
    cronjob: &str,
) -> Result<(GetCronJobResponse, Route), AdminError> {
    for _ in 0..MAX_HOPS {
        let mut client = reach.dial(&route).await?;
        match client
            .get_cron_job(authorized(request.clone(), &reach.token)?)
            .await
        {
            Ok(answer) => return Ok((answer.into_inner(), route)),
            Err(status) => match status.get_details_error_info() {
                Some(info) if info.reason == NOT_OWNER => {
                    let owner = info.metadata.get("owner").cloned().unwrap_or_default();
                    match reach.route_to(&owner) {
                        Some(next) if next != route => route = next,
                        _ => {
                            return Err(AdminError::NotOwner {
                                address: route.to_string(),
                                cronjob: cronjob.to_owned(),
                                owner,
                            });
                        }
                    }
                }
                _ => return Err(status.into()),
            },
        }
    }
    Err(AdminError::TooManyHops(MAX_HOPS))
}

fn block_on<T>(
    call: impl std::future::Future<Output = Result<T, AdminError>>,
) -> Result<T, AdminError> {
    current_thread()?.block_on(within_deadline(call))
}

async fn within_deadline<T>(
    call: impl std::future::Future<Output = Result<T, AdminError>>,
) -> Result<T, AdminError> {
    tokio::time::timeout(CALL_DEADLINE, call)
        .await
        .map_err(|_| AdminError::Timeout(CALL_DEADLINE))?
}

/// A request with the caller's token.
fn authorized<T>(message: T, token: &str) -> Result<tonic::Request<T>, AdminError> {
    let mut request = tonic::Request::new(message);
    let value = format!("Bearer {token}")
        .parse()
        .map_err(|_| AdminError::NoToken)?;
    request.metadata_mut().insert("authorization", value);
    Ok(request)
}
