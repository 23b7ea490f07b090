//! The admin service: each call authorized ([`super::access`]), then
//! answered from the supervisor (the ring, where a CronJob's actor is) and
//! the actor itself (its live state). It keeps nothing of its own.

use super::access::{Access, Action, Caller, GROUP};
use super::proto::admin_service_server::AdminService;
use super::proto::{
    ActorPhase, CronJobKind as ProtoKind, Decision, GetCronJobRequest, GetCronJobResponse,
    GetQueuesRequest, GetQueuesResponse, GetRingRequest, GetRingResponse, ListCronJobsRequest,
    ListCronJobsResponse, ListedCronJob, Member, NamespaceQueue, QueueClass, QueuedRequest,
    WatchDecisionsRequest, WatchDecisionsResponse,
};
use super::streams::{REAUTHORIZE_EVERY, STREAM_LIFETIME, StreamSlots};
use crate::actor::cronjob::{ActorState, Mail};
use crate::actor::feed::{DecisionFeed, DecisionRecord};
use crate::apiserver::gateway::Gateway;
use crate::apiserver::gateway::queue::ClassCensus;
use crate::apiserver::watch::cronjob_api;
use crate::reconcile::CronJobKind;
use crate::shard::debug::{DebugShards, ShardReport};
use crate::shard::supervisor::{ListOwned, Locate, Located};
use actix::Recipient;
use kube::Client;
use std::collections::HashMap;
use std::pin::Pin;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `reason` of the ErrorInfo a replica that does not own the CronJob
/// answers with; its metadata's `owner` names the one that does.
pub const NOT_OWNER: &str = "NOT_OWNER";

pub struct Admin {
    pub access: Access,
    pub report: Recipient<DebugShards>,
    pub locate: Recipient<Locate>,
    pub list: Recipient<ListOwned>,
    /// For the one read a call may make: the CronJob's UID, to name its
    /// owner when the actor is not here.
    pub client: Client,
    pub replica: String,
    /// The actors' decisions, for `WatchDecisions`.
    pub feed: DecisionFeed,
    /// Who holds the `WatchDecisions` streams ([`super::streams`]).
    pub streams: StreamSlots,
    /// Where a CronJob's request waits.
    pub gateway: Gateway,
}

/// What a watcher's stream holds before the watcher reads it.
const STREAM_BUFFER: usize = 64;

/// How often a `WatchDecisions` stream checks that the CronJob is still
/// owned here; once it is not, the stream ends (NOT_OWNER).
const OWNERSHIP_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// At most this many CronJobs a replica lists in one `ListCronJobs`
/// answer (each is its actor's state, asked of the actor); more are
/// counted as truncated.
pub const LIST_LIMIT: usize = 500;

/// Actors asked for their state at once by `ListCronJobs`.
const LIST_CONCURRENCY: usize = 16;

/// At most this many namespaces are named per class by `GetQueues`.
pub const QUEUE_NAMESPACES: usize = 20;

/// The action of reading the CronJob `namespace/name`.
fn read_cronjob(namespace: &str, name: &str) -> Action {
    Action::ReadCronJob {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// The CronJob a request names, checked: its kind and key.
fn target(namespace: &str, name: &str, kind: i32) -> Result<(CronJobKind, String), Status> {
    if namespace.is_empty() || name.is_empty() {
        return Err(Status::invalid_argument("namespace and name are required"));
    }
    let kind = kind_of(kind)?;
    Ok((kind, kind.key(namespace, name)))
}

fn kind_of(kind: i32) -> Result<CronJobKind, Status> {
    match ProtoKind::try_from(kind) {
        Ok(ProtoKind::Unspecified | ProtoKind::Batch) => Ok(CronJobKind::Batch),
        Ok(ProtoKind::Shardcron) => Ok(CronJobKind::Shardcron),
        Err(_) => Err(Status::invalid_argument("unknown CronJob kind")),
    }
}

fn gone(error: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("the replica is shutting down: {error}"))
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn get_ring(
        &self,
        request: Request<GetRingRequest>,
    ) -> Result<Response<GetRingResponse>, Status> {
        self.access
            .check(&Caller::of(&request), &Action::ReadRing)
            .await?;
        let report = self
            .report
            .send(DebugShards { keys: false })
            .await
            .map_err(gone)?;
        Ok(Response::new(ring_response(report)))
    }

    type WatchDecisionsStream = DecisionStream;

    async fn get_queues(
        &self,
        request: Request<GetQueuesRequest>,
    ) -> Result<Response<GetQueuesResponse>, Status> {
        self.access
            .check(&Caller::of(&request), &Action::ReadQueues)
            .await?;
        let (rate, census) = self.gateway.queues();
        Ok(Response::new(queues_response(&self.replica, rate, census)))
    }

    async fn watch_decisions(
        &self,
        request: Request<WatchDecisionsRequest>,
    ) -> Result<Response<Self::WatchDecisionsStream>, Status> {
        self.watch(request).await
    }

    async fn list_cron_jobs(
        &self,
        request: Request<ListCronJobsRequest>,
    ) -> Result<Response<ListCronJobsResponse>, Status> {
        self.list(request).await
    }

    async fn get_cron_job(
        &self,
        request: Request<GetCronJobRequest>,
    ) -> Result<Response<GetCronJobResponse>, Status> {
        let call = request.get_ref();
        let (kind, key) = self
            .authorize(
                &Caller::of(&request),
                &call.namespace,
                &call.name,
                call.kind,
            )
            .await?;
        let located = self
            .locate
            .send(Locate {
                key: key.clone(),
                uid: None,
            })
            .await
            .map_err(gone)?;
        match located {
            Located::Running(actor) => {
                let state = actor.ask(Mail::Inspect).await.map_err(gone)?;
                let mut answer = running(&self.replica, state);
                let recent = self.feed.recent(&key);
                answer.recent_decisions = recent.decisions.iter().map(|r| decision(r)).collect();
                answer.decisions_since = recent.since.map(timestamp);
                answer.queued = self.gateway.queued(&key).map(|queued| QueuedRequest {
                    class: queued.class.to_owned(),
                    ahead: queued.ahead as u64,
                    rate: queued.rate,
                    expected_wait_seconds: queued.expected_wait().as_secs_f64(),
                });
                Ok(Response::new(answer))
            }
            Located::Waiting => Ok(Response::new(GetCronJobResponse {
                owner: self.replica.clone(),
                phase: ActorPhase::Waiting.into(),
                waiting_for: "its previous owner to let go".to_owned(),
                ..GetCronJobResponse::default()
            })),
            Located::Elsewhere { .. } => {
                let uid = self.uid_of(kind, &call.namespace, &call.name).await?;
                let owner = match self
                    .locate
                    .send(Locate {
                        key,
                        uid: Some(uid),
                    })
                    .await
                    .map_err(gone)?
                {
                    Located::Elsewhere { owner } => owner,
                    // Started here meanwhile: ask again.
                    _ => None,
                };
                Err(not_owner(&self.replica, owner.as_deref()))
            }
        }
    }
}

impl Admin {
    /// `ListCronJobs`: the CronJobs owned here in the namespace asked for,
    /// each actor asked for its state ([`LIST_CONCURRENCY`] at once), at
    /// most [`LIST_LIMIT`].
    async fn list(
        &self,
        request: Request<ListCronJobsRequest>,
    ) -> Result<Response<ListCronJobsResponse>, Status> {
        use futures::StreamExt as _;
        let call = request.get_ref();
        let kind = kind_of(call.kind)?;
        let namespace = (!call.namespace.is_empty()).then(|| call.namespace.clone());
        // The namespace is a prefix of the keys listed: a slash in it would
        // reach into another namespace's names.
        if namespace.as_deref().is_some_and(|ns| ns.contains('/')) {
            return Err(Status::invalid_argument("not a namespace's name"));
        }
        self.access
            .check(
                &Caller::of(&request),
                &Action::ListCronJobs {
                    namespace: namespace.clone(),
                },
            )
            .await?;
        let limit = match call.limit as usize {
            0 => LIST_LIMIT,
            asked => asked.min(LIST_LIMIT),
        };
        let owned = self
            .list
            .send(ListOwned {
                kind,
                namespace,
                limit,
            })
            .await
            .map_err(gone)?;
        let replica = self.replica.as_str();
        let items: Vec<Option<ListedCronJob>> = futures::stream::iter(owned.keys)
            .map(|(key, located)| async move {
                let state = match located {
                    Located::Running(actor) => {
                        running(replica, actor.ask(Mail::Inspect).await.ok()?)
                    }
                    _ => GetCronJobResponse {
                        owner: replica.to_owned(),
                        phase: ActorPhase::Waiting.into(),
                        waiting_for: "its previous owner to let go".to_owned(),
                        ..GetCronJobResponse::default()
                    },
                };
                let (_, namespace, name) = CronJobKind::parse_key(&key);
                Some(ListedCronJob {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    state: Some(state),
                })
            })
            .buffered(LIST_CONCURRENCY)
            .collect()
            .await;
        Ok(Response::new(ListCronJobsResponse {
            // An actor stopped meanwhile: no longer owned here.
            items: items.into_iter().flatten().collect(),
            truncated: owned.truncated,
        }))
    }
}

type DecisionStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<WatchDecisionsResponse, Status>> + Send>>;

impl Admin {
    /// The CronJob a call names, checked, once the caller may read it: its
    /// kind and key.
    async fn authorize(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
        kind: i32,
    ) -> Result<(CronJobKind, String), Status> {
        let (target, _user) = self.authorize_as(caller, namespace, name, kind).await?;
        Ok(target)
    }

    /// [`Self::authorize`], with the caller's username.
    async fn authorize_as(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
        kind: i32,
    ) -> Result<((CronJobKind, String), String), Status> {
        let target = target(namespace, name, kind)?;
        let user = self
            .access
            .check(caller, &read_cronjob(namespace, name))
            .await?;
        Ok((target, user))
    }

    /// `WatchDecisions`: the feed filtered to one key, through a bounded
    /// stream, until the caller hangs up, the caller may no longer read the
    /// CronJob, or the stream's lifetime is over ([`super::streams`]).
    async fn watch(
        &self,
        request: Request<WatchDecisionsRequest>,
    ) -> Result<Response<DecisionStream>, Status> {
        let call = request.get_ref();
        let caller = Caller::of(&request);
        let ((_, key), user) = self
            .authorize_as(&caller, &call.namespace, &call.name, call.kind)
            .await?;
        let action = read_cronjob(&call.namespace, &call.name);
        let slot = self
            .streams
            .open(&user)
            .map_err(|refused| Status::resource_exhausted(refused.to_string()))?;
        let mut feed = self.feed.subscribe();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (locate, replica) = (self.locate.clone(), self.replica.clone());
        let access = self.access.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut skipped = 0u64;
            let mut check = tokio::time::interval(OWNERSHIP_CHECK);
            let start = tokio::time::Instant::now();
            let mut reauthorize =
                tokio::time::interval_at(start + REAUTHORIZE_EVERY, REAUTHORIZE_EVERY);
            let over = tokio::time::sleep_until(start + STREAM_LIFETIME);
            tokio::pin!(over);
            loop {
                let record = tokio::select! {
                    () = tx.closed() => return,
                    () = &mut over => {
                        let _ = tx.try_send(Err(Status::aborted(format!(
                            "the stream's lifetime ({}s) is over: watch again",
                            STREAM_LIFETIME.as_secs()
                        ))));
                        return;
                    }
                    _ = reauthorize.tick() => {
                        if let Err(refused) = access.check(&caller, &action).await {
                            let _ = tx.try_send(Err(refused));
                            return;
                        }
                        continue;
                    }
                    _ = check.tick() => {
                        let here = locate.send(Locate { key: key.clone(), uid: None }).await;
                        match here {
                            Ok(Located::Running(_) | Located::Waiting) => continue,
                            // Moved: the caller asks where, and watches there.
                            Ok(Located::Elsewhere { owner }) => {
                                let _ = tx.try_send(Err(not_owner(&replica, owner.as_deref())));
                            }
                            Err(error) => {
                                let _ = tx.try_send(Err(gone(error)));
                            }
                        }
                        return;
                    }
                    received = feed.recv() => received,
                };
                match record {
                    Ok(record) if record.key == key => {
                        let answer = WatchDecisionsResponse {
                            decision: Some(decision(&record)),
                            skipped: std::mem::take(&mut skipped),
                        };
                        // Never waits on the caller: one that stops reading
                        // (its buffer full) misses decisions, counted in
                        // the next answer's `skipped`, and the stream's
                        // lifetime and re-authorization still end it.
                        match tx.try_send(Ok(answer)) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Full(Ok(answer))) => {
                                skipped = answer.skipped + 1;
                            }
                            Err(_) => return,
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(missed)) => skipped += missed,
                    Err(broadcast::error::RecvError::Closed) => {
                        let _ = tx.try_send(Err(gone("its actors have stopped")));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn uid_of(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
    ) -> Result<String, Status> {
        let api = cronjob_api(self.client.clone(), kind, Some(namespace));
        let found = tokio::time::timeout(crate::apiserver::deadline::GET, api.get_opt(name))
            .await
            .map_err(|_| Status::unavailable("reading the CronJob timed out"))?
            .map_err(|error| Status::unavailable(format!("reading the CronJob: {error}")))?;
        found
            .and_then(|cronjob| cronjob.metadata.uid)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no CronJob {namespace}/{name} of {}",
                    kind.api_version()
                ))
            })
    }
}

/// FAILED_PRECONDITION with an ErrorInfo naming the owner, so a client can
/// follow; without an owner (no ring yet, or the key moved meanwhile),
/// UNAVAILABLE.
fn not_owner(replica: &str, owner: Option<&str>) -> Status {
    match owner {
        Some(owner) => Status::with_error_details(
            Code::FailedPrecondition,
            format!("{replica} does not own this CronJob; {owner} does"),
            ErrorDetails::with_error_info(
                NOT_OWNER,
                GROUP,
                HashMap::from([("owner".to_owned(), owner.to_owned())]),
            ),
        ),
        None => Status::unavailable(format!(
            "{replica} does not own this CronJob and cannot name its owner now (no ring yet, or a rebalance under way): ask again"
        )),
    }
}

fn timestamp(t: jiff::Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.as_second(),
        nanos: t.subsec_nanosecond(),
    }
}

fn running(replica: &str, state: ActorState) -> GetCronJobResponse {
    GetCronJobResponse {
        owner: replica.to_owned(),
        phase: ActorPhase::Running.into(),
        waiting_for: String::new(),
        next_wakeup: state.next_wakeup.map(timestamp),
        last_schedule_time: state.last_schedule_time.map(timestamp),
        last_successful_time: state.last_successful_time.map(timestamp),
        active_jobs: state.active_jobs,
        suspended: state.suspended,
        children: u32::try_from(state.children).unwrap_or(u32::MAX),
        deciding: state.deciding,
        would_decide: state.would_decide,
        queued: None,
        recent_decisions: Vec::new(),
        decisions_since: None,
    }
}

fn decision(record: &DecisionRecord) -> Decision {
    Decision {
        at: Some(timestamp(record.at)),
        outcome: record.outcome.to_owned(),
        steps: record.steps.clone(),
        trace_id: record.trace_id.clone().unwrap_or_default(),
        created_job: record.created.clone().unwrap_or_default(),
        events: record.events.clone(),
    }
}

/// The gateway's queues in the API's terms: per class, the namespaces
/// with the most writes waiting first (at most [`QUEUE_NAMESPACES`]; ties
/// in serving order), the rest summed.
fn queues_response(replica: &str, rate: f64, census: Vec<ClassCensus>) -> GetQueuesResponse {
    let mut ahead = 0;
    let classes = census
        .into_iter()
        .map(|class| {
            let mut namespaces = class.namespaces;
            // Stable: equal lines keep their serving order.
            namespaces.sort_by_key(|line| std::cmp::Reverse(line.1));
            let others = namespaces.split_off(namespaces.len().min(QUEUE_NAMESPACES));
            let answer = QueueClass {
                class: class.priority.label().to_owned(),
                waiting: class.waiting as u64,
                ahead: ahead as u64,
                drain_seconds: if rate > 0.0 {
                    (ahead + class.waiting) as f64 / rate
                } else {
                    0.0
                },
                namespaces: namespaces
                    .into_iter()
                    .map(|(namespace, waiting)| NamespaceQueue {
                        namespace,
                        waiting: waiting as u64,
                    })
                    .collect(),
                other_waiting: others.iter().map(|(_, n)| *n as u64).sum(),
                other_namespaces: others.len() as u64,
            };
            ahead += class.waiting;
            answer
        })
        .collect();
    GetQueuesResponse {
        replica: replica.to_owned(),
        rate,
        classes,
    }
}

/// The ring as `/debug/shards` reports it, in the API's terms.
pub fn ring_response(report: ShardReport) -> GetRingResponse {
    let mut view = report.view;
    view.sort();
    GetRingResponse {
        replica: report.replica,
        ring: report.ring,
        phase: report.phase,
        lease_valid: report.lease_valid,
        view,
        members: report
            .members
            .into_iter()
            .map(|member| Member {
                lease: member.lease,
                holder: member.holder.unwrap_or_default(),
                live: member.live,
                last_renewal_seen_ms: member.last_renewal_seen_ms,
            })
            .collect(),
        running: report.running as u64,
        waiting: report.waiting as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_does_not_own_the_cronjob_names_its_owner() {
        let status = not_owner("r0", Some("r2"));
        assert_eq!(status.code(), Code::FailedPrecondition);
        let info = status.get_details_error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, NOT_OWNER);
        assert_eq!(info.domain, GROUP);
        assert_eq!(info.metadata.get("owner").map(String::as_str), Some("r2"));
        assert_eq!(not_owner("r0", None).code(), Code::Unavailable);
    }

    #[test]
    fn the_queues_answer_names_the_longest_lines_and_sums_the_rest() {
        use crate::apiserver::gateway::queue::Priority;
        let many: Vec<(String, usize)> = (0..QUEUE_NAMESPACES + 5)
            .map(|i| (format!("ns{i:02}"), if i == 7 { 100 } else { 1 }))
            .collect();
        let waiting = many.iter().map(|(_, n)| n).sum();
        let census = vec![
            ClassCensus {
                priority: Priority::CreateJob,
                waiting: 10,
                namespaces: vec![("a".into(), 4), ("b".into(), 6)],
            },
            ClassCensus {
                priority: Priority::Status,
                waiting,
                namespaces: many,
            },
        ];
        let answer = queues_response("r0", 10.0, census);
        let create = &answer.classes[0];
        assert_eq!(
            (create.class.as_str(), create.waiting, create.ahead),
            ("create_job", 10, 0)
        );
        assert_eq!(
            create.namespaces[0].namespace, "b",
            "the longest line first"
        );
        assert!((create.drain_seconds - 1.0).abs() < 1e-9);
        let status = &answer.classes[1];
        assert_eq!(status.ahead, 10);
        assert_eq!(status.namespaces.len(), QUEUE_NAMESPACES);
        assert_eq!(status.namespaces[0].namespace, "ns07");
        assert_eq!(
            status.namespaces[1].namespace, "ns00",
            "ties in serving order"
        );
        assert_eq!((status.other_namespaces, status.other_waiting), (5, 5));
        assert!((status.drain_seconds - (10 + waiting) as f64 / 10.0).abs() < 1e-9);
    }

    #[test]
    fn an_actors_state_becomes_a_running_answer() {
        let at: jiff::Timestamp = "2026-11-26T10:00:00.5Z".parse().expect("a time");
        let answer = running(
            "r1",
            ActorState {
                next_wakeup: Some(at),
                last_schedule_time: None,
                last_successful_time: None,
                active_jobs: vec!["nightly-1".into()],
                suspended: true,
                children: 3,
                deciding: false,
                would_decide: vec!["nothing due: no unstarted slot".into()],
            },
        );
        assert_eq!(answer.owner, "r1");
        assert_eq!(answer.phase(), ActorPhase::Running);
        assert_eq!(
            answer.next_wakeup,
            Some(prost_types::Timestamp {
                seconds: at.as_second(),
                nanos: 500_000_000
            })
        );
        assert_eq!(answer.active_jobs, ["nightly-1"]);
        assert!(answer.suspended);
    }
}
