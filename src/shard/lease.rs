//! This replica's own Lease: acquire it, renew it, publish the view on it,
//! release it on a graceful exit. A tokio task; the supervisor talks to it
//! through a [`Keeper`] handle and reads the shared [`Fence`] it feeds.
//!
//! Lease `<ring>.<replica id>` in the controller's namespace, labelled
//! `shardcron.io/ring=<ring>`, `holderIdentity` = the replica id, the view
//! in the annotation `shardcron.io/view` with the publication it belongs
//! to in `shardcron.io/publication`, and the process's incarnation in
//! `shardcron.io/incarnation`. Every write carries the resourceVersion last
//! read, so a second process started with the same replica id is noticed
//! (a 409 showing another incarnation) and ends this one, rather than both
//! acting under one name. Lease writes bypass the gateway: they must not
//! queue behind Job creates, and they are what keeps the fence open.

use super::fence::SharedFence;
use super::membership::LeaseObservation;
use super::protocol::{
    BUILD_ANNOTATION, PROTOCOLS_ANNOTATION, Protocol, Protocols, VIEW_PROTOCOL_ANNOTATION,
};
use crate::clock::BootInstant;
use crate::clock::Clock;
use actix::Recipient;
use actix::prelude::Message;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

pub const RING_LABEL: &str = "shardcron.io/ring";
/// Where the replica's admin API is reached (HOST:PORT); see
/// docs/admin-api.md.
pub const ADDRESS_ANNOTATION: &str = "shardcron.io/admin-address";
/// What a client trusts for the replica's admin API (PEM): its
/// self-signed certificate, or the CA that signed the one it was given.
pub const CERT_ANNOTATION: &str = "shardcron.io/admin-certificate";
/// The pod the replica runs in and its admin API's port there
/// (`NAMESPACE/NAME:PORT`): clients reach it through the API server's
/// `pods/portforward`, from wherever the API server is reachable.
pub const POD_ANNOTATION: &str = "shardcron.io/admin-pod";

pub const VIEW_ANNOTATION: &str = "shardcron.io/view";
pub const INCARNATION_ANNOTATION: &str = "shardcron.io/incarnation";
pub const PUBLICATION_ANNOTATION: &str = "shardcron.io/publication";
/// `"true"` while the replica is leaving (a graceful stop): peers leave it
/// out of their rings and load its keys while it still runs them.
pub const LEAVING_ANNOTATION: &str = "shardcron.io/leaving";

/// `--shard-*` settings.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub ring: String,
    pub replica_id: String,
    pub duration: Duration,
    pub renew_period: Duration,
    pub renew_deadline: Duration,
    /// How long a graceful stop keeps running its CronJobs at most while
    /// the peers load them (`--shard-drain-timeout`).
    pub drain: Duration,
    /// The admin API's self-signed certificate or its CA (PEM), published
    /// on the Lease for clients to trust ([`CERT_ANNOTATION`]).
    pub admin_certificate: Option<String>,
    /// Where the admin API is reached ([`ADDRESS_ANNOTATION`]).
    pub admin_address: Option<String>,
    /// The pod and port it is reached at by port-forward ([`POD_ANNOTATION`]).
    pub admin_pod: Option<String>,
}

/// The name of the Lease of member `replica` of ring `ring`.
pub fn lease_name_of(ring: &str, replica: &str) -> String {
    format!("{ring}.{replica}")
}

impl LeaseSettings {
    pub fn lease_name(&self) -> String {
        lease_name_of(&self.ring, &self.replica_id)
    }

    /// The label selector of the ring's Leases.
    pub fn selector(&self) -> String {
        format!("{RING_LABEL}={}", self.ring)
    }
}

/// `leaseDurationSeconds` for `duration`, which [`LeaseSettings`] users
/// validate to be whole seconds (see `--shard-lease-duration`): the peers
/// judge expiry by this value, so it must be the one the renew deadline was
/// checked against.
pub fn lease_duration_seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// What a Lease tells the membership.
pub fn observe(lease: &Lease) -> (String, LeaseObservation) {
    let spec = lease.spec.as_ref();
    let observation = LeaseObservation {
        holder: spec
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty()),
        renewal: lease.resource_version().unwrap_or_default(),
        duration: Duration::from_secs(
            spec.and_then(|s| s.lease_duration_seconds)
                .unwrap_or(15)
                .max(1) as u64,
        ),
        view: lease.annotations().get(VIEW_ANNOTATION).cloned(),
        publication: lease.annotations().get(PUBLICATION_ANNOTATION).cloned(),
        leaving: lease
            .annotations()
            .get(LEAVING_ANNOTATION)
            .is_some_and(|v| v == "true"),
        protocols: Protocols::of_lease(
            lease
                .annotations()
                .get(PROTOCOLS_ANNOTATION)
                .map(String::as_str),
        ),
        view_protocol: Protocol::of_view(
            lease
                .annotations()
                .get(VIEW_PROTOCOL_ANNOTATION)
                .map(String::as_str),
        ),
        build: lease
            .annotations()
            .get(BUILD_ANNOTATION)
            .map(|build| crate::release::bounded(build)),
    };
    (lease.name_any(), observation)
}

/// Something the keeper could not resolve by itself.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum KeeperReport {
    /// Another process with this replica id took the Lease over.
    Usurped { incarnation: String },
}

/// A view to write on the Lease, and which publication it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub view: String,
    /// The protocol version `view` is written in.
    pub protocol: Protocol,
    pub id: String,
    /// The replica is leaving ([`LEAVING_ANNOTATION`]).
    pub leaving: bool,
}

/// Handle on the keeper task.
#[derive(Clone)]
///
/// Bounded by design: the view to write is one value that the latest
/// publication replaces (a watch channel), and a release is asked once
/// (a channel of one).
pub struct Keeper {
    publication: Arc<watch::Sender<Option<Publication>>>,
    release: mpsc::Sender<oneshot::Sender<()>>,
    incarnation: String,
}

impl Keeper {
    /// Writes the view on the Lease now (and on every renewal after).
    pub fn publish(&self, publication: Publication) {
        self.publication.send_replace(Some(publication));
    }

    /// Writes no view from the next renewal on: the replica runs nothing
    /// (rejoining after a lapse) until it publishes again.
    pub fn withdraw(&self) {
        self.publication.send_replace(None);
    }

    /// This process's incarnation, unique to it among every process that
    /// ever held the replica id.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// Releases the Lease (no holder, no view) and ends the keeper; resolves
    /// when the write is done or has failed.
    pub async fn release(&self) {
        let (done, released) = oneshot::channel();
        if self.release.send(done).await.is_ok() {
            let _ = released.await;
        }
    }
}

/// What the supervisor asks of the keeper task.
struct Requests {
    published: watch::Receiver<Option<Publication>>,
    released: mpsc::Receiver<oneshot::Sender<()>>,
}

/// Starts the keeper on the current tokio runtime.
pub fn start(
    client: Client,
    settings: LeaseSettings,
    fence: SharedFence,
    reports: Recipient<KeeperReport>,
) -> Keeper {
    let (publication, published) = watch::channel(None);
    let (release, released) = mpsc::channel(1);
    let incarnation = incarnation();
    tokio::spawn(keep(
        client,
        settings,
        fence,
        reports,
        Requests {
            published,
            released,
        },
        incarnation.clone(),
    ));
    Keeper {
        publication: Arc::new(publication),
        release,
        incarnation,
    }
}

/// A process's own random id: std seeds each `RandomState`'s keys from the
/// operating system's randomness, so two processes (a restart under the same
/// replica id included) differ.
fn incarnation() -> String {
    use std::hash::BuildHasher;
    let keys = std::collections::hash_map::RandomState::new();
    format!("{:016x}", keys.hash_one(std::process::id()))
}

/// The Lease requests the keeper makes: kube's `Api<Lease>` in the
/// process, scripted answers in the tests.
trait LeaseRequests: Send + Sync + 'static {
    fn get(&self, name: &str) -> impl Future<Output = kube::Result<Option<Lease>>> + Send;
    fn create(&self, lease: &Lease) -> impl Future<Output = kube::Result<Lease>> + Send;
    fn replace(
        &self,
        name: &str,
        lease: &Lease,
    ) -> impl Future<Output = kube::Result<Lease>> + Send;
}

impl LeaseRequests for Api<Lease> {
    async fn get(&self, name: &str) -> kube::Result<Option<Lease>> {
        self.get_opt(name).await
    }

    async fn create(&self, lease: &Lease) -> kube::Result<Lease> {
        Api::create(self, &PostParams::default(), lease).await
    }

    async fn replace(&self, name: &str, lease: &Lease) -> kube::Result<Lease> {
        Api::replace(self, name, &PostParams::default(), lease).await
    }
}

struct State<A> {
    api: A,
    settings: LeaseSettings,
    incarnation: String,
    /// The Lease as last written or read (its resourceVersion is the precondition).
    current: Option<Lease>,
    view: Option<Publication>,
    /// A write of ours has succeeded: from now on another incarnation is a usurper.
    acquired: bool,
    /// Before that: the other incarnation holding our replica id, if any.
    predecessor: Predecessor,
}

/// A previous process with this replica id, as seen by a new one that has
/// not acquired the Lease yet.
///
/// Two processes with one replica id (a restarted pod whose predecessor is
/// only partitioned, or two pods of one StatefulSet ordinal) must never act
/// at once. The new one takes the Lease over only after it has seen the
/// Lease unchanged for a full Lease duration on its own clock, as peers
/// judge expiry, or released (no holder): by then the old process has
/// fenced itself (its renew deadline is shorter than the duration).
#[derive(Debug, Default)]
struct Predecessor {
    /// The resourceVersion last seen and when it was first seen.
    seen: Option<(String, BootInstant)>,
}

#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// The Lease is expired for us to take.
    Done,
    /// Not yet: at least this long to go.
    For(Duration),
}

impl Predecessor {
    fn observe(&mut self, version: &str, duration: Duration, now: BootInstant) -> Wait {
        let since = match &self.seen {
            Some((seen, since)) if seen == version => *since,
            _ => {
                self.seen = Some((version.to_owned(), now));
                now
            }
        };
        let unchanged = now.saturating_duration_since(since);
        if unchanged >= duration {
            Wait::Done
        } else {
            Wait::For(duration - unchanged)
        }
    }
}

enum RenewError {
    Api(kube::Error),
    /// Another live process holds this replica id: wait this long at least.
    PredecessorActive(Duration),
    KeptChanging,
    Usurped(String),
}

impl<A: LeaseRequests> State<A> {
    fn desired(&self, base: Option<&Lease>, holder: Option<&str>) -> Lease {
        let now = MicroTime(Clock::System.now());
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.lease_name()),
                namespace: Some(self.settings.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        });
        lease
            .labels_mut()
            .insert(RING_LABEL.to_owned(), self.settings.ring.clone());
        let annotations: &mut BTreeMap<String, String> = lease.annotations_mut();
        annotations.insert(INCARNATION_ANNOTATION.to_owned(), self.incarnation.clone());
        annotations.insert(
            PROTOCOLS_ANNOTATION.to_owned(),
            Protocols::THIS_BUILD.encode(),
        );
        annotations.insert(BUILD_ANNOTATION.to_owned(), crate::release::build());
        for (key, value) in [
            (CERT_ANNOTATION, &self.settings.admin_certificate),
            (ADDRESS_ANNOTATION, &self.settings.admin_address),
            (POD_ANNOTATION, &self.settings.admin_pod),
        ] {
            match value {
                Some(value) => annotations.insert(key.to_owned(), value.clone()),
                None => annotations.remove(key),
            };
        }
        match (&self.view, holder) {
            (Some(publication), Some(_)) => {
                annotations.insert(VIEW_ANNOTATION.to_owned(), publication.view.clone());
                annotations.insert(PUBLICATION_ANNOTATION.to_owned(), publication.id.clone());
                annotations.insert(
                    VIEW_PROTOCOL_ANNOTATION.to_owned(),
                    publication.protocol.to_string(),
                );
                if publication.leaving {
                    annotations.insert(LEAVING_ANNOTATION.to_owned(), "true".to_owned());
                } else {
                    annotations.remove(LEAVING_ANNOTATION);
                }
            }
            _ => {
                annotations.remove(VIEW_ANNOTATION);
                annotations.remove(PUBLICATION_ANNOTATION);
                annotations.remove(VIEW_PROTOCOL_ANNOTATION);
                annotations.remove(LEAVING_ANNOTATION);
            }
        }
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != holder {
            spec.acquire_time = holder.map(|_| now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = holder.map(str::to_owned);
        spec.lease_duration_seconds = Some(lease_duration_seconds(self.settings.duration));
        spec.renew_time = Some(now);
        lease.spec = Some(spec);
        lease
    }

    /// One write of the Lease with `holder`; re-reads once on a conflict.
    async fn write(&mut self, holder: Option<&str>) -> Result<(), RenewError> {
        let name = self.settings.lease_name();
        for _ in 0..2 {
            let base = match self.current.take() {
                Some(lease) => Some(lease),
                None => self.api.get(&name).await.map_err(RenewError::Api)?,
            };
            if let Some(lease) = &base {
                let theirs = lease.annotations().get(INCARNATION_ANNOTATION);
                let held_by_us = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(self.settings.replica_id.as_str());
                if held_by_us && theirs.is_some_and(|t| *t != self.incarnation) {
                    if self.acquired {
                        return Err(RenewError::Usurped(theirs.cloned().unwrap_or_default()));
                    }
                    // Another process holds our name: it may still be acting.
                    let version = lease.resource_version().unwrap_or_default();
                    if let Wait::For(left) = self.predecessor.observe(
                        &version,
                        self.settings.duration,
                        BootInstant::now(),
                    ) {
                        return Err(RenewError::PredecessorActive(left));
                    }
                }
            }
            let desired = self.desired(base.as_ref(), holder);
            let result = match base {
                Some(_) => self.api.replace(&name, &desired).await,
                None => self.api.create(&desired).await,
            };
            match result {
                Ok(written) => {
                    self.current = Some(written);
                    self.acquired = true;
                    return Ok(());
                }
                // Changed (or deleted, or created) behind our back: read again.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
                Err(error) => return Err(RenewError::Api(error)),
            }
        }
        Err(RenewError::KeptChanging)
    }
}

async fn keep(
    client: Client,
    settings: LeaseSettings,
    fence: SharedFence,
    reports: Recipient<KeeperReport>,
    mut requests: Requests,
    incarnation: String,
) {
    let mut state = State {
        api: Api::namespaced(client, &settings.namespace),
        incarnation,
        current: None,
        view: None,
        acquired: false,
        predecessor: Predecessor::default(),
        settings,
    };
    // A renewal may take until the renew deadline: one that commits slowly
    // still counts (the fence measures from its send), and one still
    // unanswered at the deadline could not keep the fence open anyway.
    let attempt_timeout = state.settings.renew_deadline;
    let mut ticks = tokio::time::interval(state.settings.renew_period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // In this order: after a renewal that took its whole deadline the
        // tick is always due, and a fair choice could put a release (the
        // process waiting to exit) off again and again.
        tokio::select! {
            biased;
            release = requests.released.recv() => match release {
                Some(done) => {
                    fence.lock().release();
                    match tokio::time::timeout(attempt_timeout, state.write(None)).await {
                        Ok(Ok(())) => tracing::info!(lease = %state.settings.lease_name(), "released the Lease"),
                        _ => tracing::warn!(lease = %state.settings.lease_name(), "could not release the Lease; peers take over when it expires"),
                    }
                    let _ = done.send(());
                    return;
                }
                None => return,
            },
            changed = requests.published.changed() => match changed {
                Ok(()) => state.view = requests.published.borrow_and_update().clone(),
                Err(_) => return,
            },
            _ = ticks.tick() => {}
        }
        let sent_at = BootInstant::now();
        let replica = state.settings.replica_id.clone();
        match tokio::time::timeout(attempt_timeout, state.write(Some(&replica))).await {
            Ok(Ok(())) => fence.lock().renewed(sent_at, BootInstant::now()),
            Ok(Err(RenewError::Usurped(incarnation))) => {
                fence.lock().release();
                reports.do_send(KeeperReport::Usurped { incarnation });
                return;
            }
            Ok(Err(RenewError::Api(error))) => {
                tracing::warn!(%error, "could not renew the Lease");
            }
            Ok(Err(RenewError::PredecessorActive(left))) => {
                tracing::warn!(
                    lease = %state.settings.lease_name(),
                    ?left,
                    "another process holds this replica id's Lease: waiting until it is released or unrenewed for a full Lease duration"
                );
            }
            Ok(Err(RenewError::KeptChanging)) => {
                tracing::warn!("could not renew the Lease: it changed under every write");
            }
            Err(_) => {
                state.current = None;
                tracing::warn!(timeout = ?attempt_timeout, "renewing the Lease timed out");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::{Actor, Handler};
    use std::collections::VecDeque;
    use std::sync::Mutex;

    const DURATION: Duration = Duration::from_secs(15);

    /// The API server's answer to the keeper's next request.
    enum Answer {
        /// To a GET: the Lease, or none.
        Found(Option<Box<Lease>>),
        /// To a create or replace: written (with the next resourceVersion).
        Written,
        /// To any request: this HTTP status.
        Fails(u16),
    }

    /// Scripted answers, in order, and the requests asked.
    #[derive(Default)]
    struct Scripted {
        answers: Mutex<VecDeque<Answer>>,
        asked: Mutex<Vec<&'static str>>,
        version: Mutex<u64>,
    }

    fn status(code: u16) -> kube::Error {
        let reason = match code {
            404 => "NotFound",
            409 => "Conflict",
            429 => "TooManyRequests",
            _ => "InternalError",
        };
        kube::Error::Api(
            kube::core::Status::failure("scripted", reason)
                .with_code(code)
                .boxed(),
        )
    }

    impl Scripted {
        fn answer(&self, verb: &'static str) -> Answer {
            self.asked.lock().unwrap().push(verb);
            self.answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| panic!("no answer scripted for a {verb}"))
        }

        fn written(&self, lease: &Lease) -> Lease {
            let mut version = self.version.lock().unwrap();
            *version += 1;
            let mut lease = lease.clone();
            lease.metadata.resource_version = Some(version.to_string());
            lease
        }

        fn write(&self, verb: &'static str, lease: &Lease) -> kube::Result<Lease> {
            match self.answer(verb) {
                Answer::Written => Ok(self.written(lease)),
                Answer::Fails(code) => Err(status(code)),
                Answer::Found(_) => panic!("a {verb} answered like a GET"),
            }
        }
    }

    impl LeaseRequests for Arc<Scripted> {
        async fn get(&self, _name: &str) -> kube::Result<Option<Lease>> {
            match self.answer("get") {
                Answer::Found(lease) => Ok(lease.map(|l| *l)),
                Answer::Fails(code) => Err(status(code)),
                Answer::Written => panic!("a get answered like a write"),
            }
        }

        async fn create(&self, lease: &Lease) -> kube::Result<Lease> {
            self.write("create", lease)
        }

        async fn replace(&self, _name: &str, lease: &Lease) -> kube::Result<Lease> {
            self.write("replace", lease)
        }
    }

    fn keeper_state(answers: Vec<Answer>) -> (State<Arc<Scripted>>, Arc<Scripted>) {
        let script = Arc::new(Scripted {
            answers: Mutex::new(answers.into()),
            ..Scripted::default()
        });
        let state = State {
            api: script.clone(),
            settings: LeaseSettings {
                admin_certificate: None,
                admin_address: None,
                admin_pod: None,
                namespace: "shardcron-system".into(),
                ring: "ring".into(),
                replica_id: "r0".into(),
                duration: DURATION,
                renew_period: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(10),
                drain: Duration::from_secs(15),
            },
            incarnation: "mine".into(),
            current: None,
            view: None,
            acquired: false,
            predecessor: Predecessor::default(),
        };
        (state, script)
    }

    /// The Lease `r0` as written by incarnation `incarnation`.
    fn held_by(incarnation: &str, version: u64) -> Box<Lease> {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ring.r0", "namespace": "shardcron-system",
                         "resourceVersion": version.to_string(),
                         "annotations": {INCARNATION_ANNOTATION: incarnation}},
            "spec": {"holderIdentity": "r0", "leaseDurationSeconds": 15}
        }))
        .map(Box::new)
        .expect("a Lease")
    }

    fn renew(state: &mut State<Arc<Scripted>>) -> Result<(), RenewError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime.block_on(state.write(Some("r0")))
    }

    fn code(result: &Result<(), RenewError>) -> Option<u16> {
        match result {
            Err(RenewError::Api(kube::Error::Api(status))) => Some(status.code),
            _ => None,
        }
    }

    #[test]
    fn the_keeper_answers_each_api_answer() {
        use Answer::*;
        // (case, answers, requests made, outcome, acquired after)
        type Check = fn(&Result<(), RenewError>) -> bool;
        type Case = (&'static str, Vec<Answer>, Vec<&'static str>, Check, bool);
        let cases: Vec<Case> = vec![
            (
                "no Lease yet: created",
                vec![Found(None), Written],
                vec!["get", "create"],
                |r| r.is_ok(),
                true,
            ),
            (
                "ours: renewed",
                vec![Found(Some(held_by("mine", 4))), Written],
                vec!["get", "replace"],
                |r| r.is_ok(),
                true,
            ),
            (
                "409 Conflict: read again, then renewed",
                vec![
                    Found(Some(held_by("mine", 4))),
                    Fails(409),
                    Found(Some(held_by("mine", 5))),
                    Written,
                ],
                vec!["get", "replace", "get", "replace"],
                |r| r.is_ok(),
                true,
            ),
            (
                "deleted by hand (404 on replace): read again, created",
                vec![
                    Found(Some(held_by("mine", 4))),
                    Fails(404),
                    Found(None),
                    Written,
                ],
                vec!["get", "replace", "get", "create"],
                |r| r.is_ok(),
                true,
            ),
            (
                "conflicts twice: given up until the next tick",
                vec![
                    Found(Some(held_by("mine", 4))),
                    Fails(409),
                    Found(Some(held_by("mine", 5))),
                    Fails(409),
                ],
                vec!["get", "replace", "get", "replace"],
                |r| matches!(r, Err(RenewError::KeptChanging)),
                false,
            ),
            (
                "429 on the write: not renewed, left to the next tick (no retry inside the renew deadline)",
                vec![Found(Some(held_by("mine", 4))), Fails(429)],
                vec!["get", "replace"],
                |r| code(r) == Some(429),
                false,
            ),
            (
                "500 on the read",
                vec![Fails(500)],
                vec!["get"],
                |r| code(r) == Some(500),
                false,
            ),
            (
                "another live process with our id: wait, write nothing",
                vec![Found(Some(held_by("theirs", 4)))],
                vec!["get"],
                |r| matches!(r, Err(RenewError::PredecessorActive(left)) if *left == DURATION),
                false,
            ),
        ];
        for (case, answers, asked, outcome, acquired) in cases {
            let (mut state, script) = keeper_state(answers);
            let result = renew(&mut state);
            assert!(outcome(&result), "{case}: unexpected outcome");
            assert_eq!(*script.asked.lock().unwrap(), asked, "{case}");
            assert_eq!(state.acquired, acquired, "{case}");
            assert!(
                script.answers.lock().unwrap().is_empty(),
                "{case}: answers left"
            );
        }
    }

    #[test]
    fn once_acquired_another_incarnation_means_usurped() {
        let (mut state, _) = keeper_state(vec![Answer::Found(None), Answer::Written]);
        assert!(renew(&mut state).is_ok());
        // Our write is forgotten (a timeout), and the next read shows
        // another process with our id.
        state.current = None;
        state
            .api
            .answers
            .lock()
            .unwrap()
            .push_back(Answer::Found(Some(held_by("theirs", 9))));
        match renew(&mut state) {
            Err(RenewError::Usurped(by)) => assert_eq!(by, "theirs"),
            _ => panic!("a usurper must end this process"),
        }
    }

    /// Takes the keeper's reports (none are expected here).
    struct Reports;

    impl Actor for Reports {
        type Context = actix::Context<Self>;
    }

    impl Handler<KeeperReport> for Reports {
        type Result = ();
        fn handle(&mut self, _: KeeperReport, _: &mut Self::Context) {}
    }

    /// The keeper's loop against a black hole, on a paused clock: each
    /// renewal is given up at the renew deadline and the next one sent at
    /// once; the fence never opens; and a release, asked while a renewal
    /// hangs, is done within two deadlines (the hanging renewal, then the
    /// release's own write), so a stopping process never waits for silence.
    #[actix::test]
    async fn a_keeper_facing_a_black_hole_gives_up_at_each_deadline_and_still_releases() {
        tokio::time::pause();
        let began = tokio::time::Instant::now();
        let sent_at = Arc::new(Mutex::new(Vec::new()));
        let record = sent_at.clone();
        let (client, asked) = crate::apiserver::scripted::client(move |_| {
            record.lock().unwrap().push(began.elapsed());
            crate::apiserver::scripted::Answer::Silence
        });
        let settings = keeper_state(Vec::new()).0.settings;
        let deadline = settings.renew_deadline;
        let fence = SharedFence::new(deadline);
        let keeper = start(client, settings, fence.clone(), Reports.start().recipient());
        tokio::time::sleep(2 * deadline + deadline / 2).await;
        let gets = asked.all();
        assert!(gets.iter().all(|r| r.starts_with("GET ")), "{gets:?}");
        // Each renewal sent as the previous one is given up (to the timer's
        // millisecond).
        let sent_at = sent_at.lock().unwrap().clone();
        let expected = [Duration::ZERO, deadline, 2 * deadline];
        assert_eq!(sent_at.len(), expected.len(), "{sent_at:?}");
        for (sent, due) in sent_at.iter().zip(expected) {
            assert!(
                sent.abs_diff(due) < Duration::from_millis(10),
                "{sent_at:?}"
            );
        }
        assert!(!fence.lock().may_act(BootInstant::now()));
        let asked_at = tokio::time::Instant::now();
        tokio::time::timeout(3 * deadline, keeper.release())
            .await
            .expect("the release ends");
        let took = asked_at.elapsed();
        assert!(took <= 2 * deadline, "released after {took:?}");
        assert_eq!(asked.all().len(), 4, "one more GET, for the release");
    }

    fn at(seconds: u64) -> BootInstant {
        BootInstant::from_since_boot(Duration::from_secs(1_000 + seconds))
    }

    #[test]
    fn a_new_process_waits_while_its_predecessor_renews() {
        let mut predecessor = Predecessor::default();
        assert_eq!(
            predecessor.observe("1", DURATION, at(0)),
            Wait::For(DURATION)
        );
        assert_eq!(
            predecessor.observe("1", DURATION, at(10)),
            Wait::For(Duration::from_secs(5))
        );
        // Renewed: the count starts again.
        assert_eq!(
            predecessor.observe("2", DURATION, at(12)),
            Wait::For(DURATION)
        );
        assert_eq!(
            predecessor.observe("2", DURATION, at(26)),
            Wait::For(Duration::from_secs(1))
        );
    }

    #[test]
    fn a_new_process_takes_over_after_a_full_duration_unrenewed() {
        let mut predecessor = Predecessor::default();
        predecessor.observe("7", DURATION, at(0));
        assert_eq!(predecessor.observe("7", DURATION, at(15)), Wait::Done);
    }
}
