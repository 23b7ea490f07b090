//! `shardcron ring` and `shardcron status NAMESPACE/NAME`: the admin API's
//! answers (docs/admin-api.md), asked with the caller's kubeconfig. The
//! bearer token is the kubeconfig user's; the replica's certificate is
//! trusted because the ring's Leases, read through the API server with
//! the same kubeconfig, publish it ([`CERT_ANNOTATION`]).

use super::Output;
use crate::admin::ADDRESS_ANNOTATION;
use crate::admin::proto::admin_service_client::AdminServiceClient;
use crate::admin::proto::{
    ActorPhase, CronJobKind as ProtoKind, GetCronJobRequest, GetCronJobResponse, GetRingRequest,
    GetRingResponse, WatchDecisionsRequest, WatchDecisionsResponse,
};
use crate::admin::service::NOT_OWNER;
use crate::admin::tls::CERT_ANNOTATION;
use crate::reconcile::CronJobKind;
use crate::shard::lease::RING_LABEL;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use secrecy::ExposeSecret as _;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_types::StatusExt as _;

/// How many replicas `status` asks before it gives up following owners.
const MAX_HOPS: usize = 3;

/// How long one call may take, connection included.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// Where the replica is, and who asks.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// A replica's admin API, HOST:PORT (default: the address the first
    /// replica's Lease publishes; from outside the pod network,
    /// `kubectl port-forward pod/shardcron-0 9443` and 127.0.0.1:9443).
    #[arg(long, value_name = "HOST:PORT")]
    address: Option<String>,
    /// The kubeconfig: its user's bearer token authenticates the call, and
    /// the ring's Leases are read with it.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The namespace of the ring's Leases (the controller's).
    #[arg(long, default_value = "shardcron-system")]
    lease_namespace: String,
    /// The ring's name (--shard-ring-name).
    #[arg(long, default_value = "shardcron")]
    ring: String,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Debug, clap::Args)]
pub struct RingArgs {
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The CronJob, as NAMESPACE/NAME.
    cronjob: String,
    /// Which API serves it: batch (batch/v1) or shardcron (cronjobs.shardcron.io).
    #[arg(long, default_value = "batch", value_parser = super::parse_kind)]
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
}

/// Errors the admin commands report (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0:?} is not NAMESPACE/NAME")]
    NotAName(String),
    #[error("{0:#}")]
    Client(anyhow::Error),
    #[error(
        "the kubeconfig's user has no bearer token (token or tokenFile); the admin API takes one"
    )]
    NoToken,
    #[error("reading the ring's Leases: {0}")]
    Leases(kube::Error),
    #[error("no Lease of ring {ring:?} in {namespace} publishes an admin certificate")]
    NoCertificate { ring: String, namespace: String },
    #[error("connecting to {address}: {source}")]
    Connect {
        address: String,
        source: tonic::transport::Error,
    },
    #[error("no Lease of ring {ring:?} publishes an admin address: give --address")]
    NoAddress { ring: String },
    #[error("still not at the owner after {0} replicas (a rebalance under way?): try again")]
    TooManyHops(usize),
    #[error("{address} does not own {cronjob}: {owner} does, and its Lease publishes no address")]
    NotOwner {
        address: String,
        cronjob: String,
        owner: String,
    },
    #[error("{code:?}: {message}")]
    Call { code: tonic::Code, message: String },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

impl From<tonic::Status> for AdminError {
    fn from(status: tonic::Status) -> Self {
        AdminError::Call {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

pub fn ring(args: &RingArgs, out: &mut impl Write) -> Result<(), AdminError> {
    let answer = block_on(async {
        let reach = discover(&args.target).await?;
        let mut client = reach.dial(&reach.first(&args.target)?).await?;
        Ok(client
            .get_ring(authorized(GetRingRequest {}, &reach.token)?)
            .await?
            .into_inner())
    })?;
    match args.target.output {
        Output::Json => writeln!(out, "{}", ring_json(&answer))?,
        Output::Text => write_ring(out, &answer)?,
    }
    Ok(())
}

pub fn status(args: &StatusArgs, out: &mut impl Write) -> Result<(), AdminError> {
    let (namespace, name) = super::namespaced_name(&args.cronjob)
        .ok_or_else(|| AdminError::NotAName(args.cronjob.clone()))?;
    let kind = match args.kind {
        CronJobKind::Batch => ProtoKind::Batch,
        CronJobKind::Shardcron => ProtoKind::Shardcron,
    };
    let request = GetCronJobRequest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        kind: kind.into(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (answer, owner, reach) = runtime.block_on(within_deadline(async {
        let reach = discover(&args.target).await?;
        let mut address = reach.first(&args.target)?;
        // A replica that does not own the CronJob names the one that does:
        // follow it, a few hops at most (a rebalance may be under way).
        for _ in 0..MAX_HOPS {
            let mut client = reach.dial(&address).await?;
            match client
                .get_cron_job(authorized(request.clone(), &reach.token)?)
                .await
            {
                Ok(answer) => return Ok((answer.into_inner(), address, reach)),
                Err(status) => match status.get_details_error_info() {
                    Some(info) if info.reason == NOT_OWNER => {
                        let owner = info.metadata.get("owner").cloned().unwrap_or_default();
                        match reach.addresses.get(&owner) {
                            Some(next) if *next != address => address = next.clone(),
                            _ => {
                                return Err(AdminError::NotOwner {
                                    address,
                                    cronjob: args.cronjob.clone(),
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
    }))?;
    match args.target.output {
        Output::Json => writeln!(out, "{}", status_json(&args.cronjob, &answer))?,
        Output::Text => write_status(out, &args.cronjob, &answer)?,
    }
    out.flush()?;
    if !args.watch && args.watch_count.is_none() {
        return Ok(());
    }
    // The owner's decisions as they happen: no overall deadline.
    let watch = WatchDecisionsRequest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        kind: kind.into(),
    };
    runtime.block_on(async {
        let mut client = within_deadline(reach.dial(&owner)).await?;
        let mut stream = client
            .watch_decisions(authorized(watch, &reach.token)?)
            .await?
            .into_inner();
        let mut seen = 0;
        while args.watch_count.is_none_or(|count| seen < count) {
            let Some(decision) = stream.message().await? else {
                break;
            };
            seen += 1;
            match args.target.output {
                Output::Json => writeln!(out, "{}", decision_json(&decision))?,
                Output::Text => write_decision(out, &decision)?,
            }
            out.flush()?;
        }
        Ok(())
    })
}

fn block_on<T>(
    call: impl std::future::Future<Output = Result<T, AdminError>>,
) -> Result<T, AdminError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(within_deadline(call))
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

/// What the ring's Leases and the kubeconfig give a client: the caller's
/// token, the certificates to trust, and where each replica's admin API is.
struct Reach {
    token: String,
    certificates: Vec<String>,
    /// Replica (Lease holder) to its published address, sorted.
    addresses: BTreeMap<String, String>,
}

/// Reads the kubeconfig's token and the ring's Leases, with the caller's
/// own credentials (so RBAC on the Leases applies too).
async fn discover(target: &Target) -> Result<Reach, AdminError> {
    let config = super::kube_config(target.kubeconfig.as_ref())
        .await
        .map_err(AdminError::Client)?;
    let token = match (&config.auth_info.token, &config.auth_info.token_file) {
        (Some(token), _) => token.expose_secret().to_owned(),
        (None, Some(file)) => std::fs::read_to_string(file)
            .map_err(|e| AdminError::Client(anyhow::anyhow!("reading tokenFile {file}: {e}")))?
            .trim()
            .to_owned(),
        (None, None) => return Err(AdminError::NoToken),
    };
    let client = crate::kube::client::build(config, "shardcron-admin-cli")
        .map_err(|e| AdminError::Client(e.into()))?;
    let leases: Api<Lease> = Api::namespaced(client, &target.lease_namespace);
    let listed = leases
        .list(&ListParams::default().labels(&format!("{RING_LABEL}={}", target.ring)))
        .await
        .map_err(AdminError::Leases)?;
    let mut reach = Reach {
        token,
        certificates: Vec::new(),
        addresses: BTreeMap::new(),
    };
    for lease in &listed.items {
        let Some(annotations) = lease.metadata.annotations.as_ref() else {
            continue;
        };
        if let Some(pem) = annotations.get(CERT_ANNOTATION) {
            reach.certificates.push(pem.clone());
        }
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        if let (Some(holder), Some(address)) = (holder, annotations.get(ADDRESS_ANNOTATION)) {
            reach.addresses.insert(holder, address.clone());
        }
    }
    if reach.certificates.is_empty() {
        return Err(AdminError::NoCertificate {
            ring: target.ring.clone(),
            namespace: target.lease_namespace.clone(),
        });
    }
    Ok(reach)
}

impl Reach {
    /// The address to ask first: `--address`, else the first replica's.
    fn first(&self, target: &Target) -> Result<String, AdminError> {
        target
            .address
            .clone()
            .or_else(|| self.addresses.values().next().cloned())
            .ok_or_else(|| AdminError::NoAddress {
                ring: target.ring.clone(),
            })
    }

    /// A TLS channel to `address` that trusts the certificates the ring's
    /// Leases publish (the name checked is `localhost`, which each
    /// self-signed certificate names).
    async fn dial(&self, address: &str) -> Result<AdminServiceClient<Channel>, AdminError> {
        let tls = ClientTlsConfig::new()
            .ca_certificates(self.certificates.iter().map(Certificate::from_pem))
            .domain_name("localhost");
        let connect_error = |source| AdminError::Connect {
            address: address.to_owned(),
            source,
        };
        let channel = Channel::from_shared(format!("https://{address}"))
            .map_err(|e| AdminError::Client(anyhow::anyhow!("address {address}: {e}")))?
            .tls_config(tls)
            .map_err(connect_error)?
            .connect()
            .await
            .map_err(connect_error)?;
        Ok(AdminServiceClient::new(channel))
    }
}

fn ring_json(ring: &GetRingResponse) -> serde_json::Value {
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

fn write_ring(out: &mut impl Write, ring: &GetRingResponse) -> std::io::Result<()> {
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

fn time(t: &Option<prost_types::Timestamp>) -> Option<String> {
    t.as_ref()
        .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
        .map(|t| t.to_string())
}

fn phase(answer: &GetCronJobResponse) -> &'static str {
    match answer.phase() {
        ActorPhase::Running => "running",
        ActorPhase::Waiting => "waiting",
        ActorPhase::Unspecified => "unknown",
    }
}

fn status_json(cronjob: &str, answer: &GetCronJobResponse) -> serde_json::Value {
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
    })
}

fn write_status(
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
    Ok(())
}

fn decision_json(decision: &WatchDecisionsResponse) -> serde_json::Value {
    let text = |s: &String| (!s.is_empty()).then(|| s.clone());
    json!({
        "at": time(&decision.at),
        "outcome": decision.outcome,
        "steps": decision.steps,
        "traceId": text(&decision.trace_id),
        "createdJob": text(&decision.created_job),
        "skipped": decision.skipped,
    })
}

fn write_decision(out: &mut impl Write, decision: &WatchDecisionsResponse) -> std::io::Result<()> {
    if decision.skipped > 0 {
        writeln!(
            out,
            "({} decisions of the replica skipped: the watch fell behind)",
            decision.skipped
        )?;
    }
    let trace = if decision.trace_id.is_empty() {
        String::new()
    } else {
        format!(" trace {}", decision.trace_id)
    };
    writeln!(
        out,
        "{} {}{trace}",
        time(&decision.at).unwrap_or_default(),
        decision.outcome
    )?;
    for step in &decision.steps {
        writeln!(out, "    - {step}")?;
    }
    Ok(())
}
