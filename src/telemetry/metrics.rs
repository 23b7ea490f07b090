//! The controller's Prometheus metrics, in one registry owned by the process
//! (no global state), shared through an `Arc`.
//!
//! Upstream's only CronJob metric is the creation-skew histogram with buckets
//! 1 s .. 512 s. shardcron wakes on the slot itself, so its skew is usually
//! a few milliseconds: the buckets run from 1 ms to about a minute.

use super::cronjob_series::CronJobSeries;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};
use std::sync::Arc;
use std::time::Duration;

/// How a Job create ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum CreateResultLabel {
    created,
    already_exists,
    namespace_terminating,
    failed,
}

/// Why a Job was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum DeleteReasonLabel {
    history,
    replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum OkLabel {
    ok,
    failed,
}

/// What a CronJob read again before a slot due at its hand-off showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum HandoffRereadLabel {
    /// The copy held was the latest: the slot's Job is created.
    unchanged,
    /// A newer version (the previous owner's last status write): decided
    /// again from it.
    newer,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HandoffRereadLabels {
    pub found: HandoffRereadLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CreateLabels {
    pub result: CreateResultLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DeleteLabels {
    pub reason: DeleteReasonLabel,
    pub result: OkLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    /// `create`, `delete`, `get`, `patch`, `patch_status`, `event`.
    pub verb: &'static str,
    /// The HTTP status code, or `error` when no answer came back.
    pub code: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DroppedLabels {
    /// `event` (waiting in the backlog) or `request` (an actor's write or
    /// read, failed without being sent).
    pub what: &'static str,
    pub gone: Gone,
}

/// What went that made a write pointless.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Gone {
    /// The API server answered that the namespace is gone or terminating.
    namespace,
    /// The watch saw the CronJob deleted.
    cronjob,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// An Event's reason: upstream's and shardcron's own, a closed set
    /// (`reconcile::events::Reason`).
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PriorityLabels {
    /// The gateway class (`Priority::label` in the gateway's queue):
    /// `record_slot`, `create_job`, `replace_delete`, `status`,
    /// `history_delete`, `event`.
    pub priority: &'static str,
}

/// `shardcron_build_info`'s labels: this build's release.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    /// The ring protocol versions it speaks (`1`, `1-2`).
    pub protocol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SyncLabels {
    pub result: OkLabel,
}

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    /// The per-CronJob series alone (`/metrics/cronjobs`).
    cronjob_registry: Registry,
    /// Every family's name (without the `shardcron_` prefix) and type.
    families: Vec<(&'static str, MetricType)>,
    pub creation_skew: HistogramWithExemplars<TraceExemplar>,
    pub policy_wait: Family<PolicyLabels, Histogram, fn() -> Histogram>,
    pub jobs_created: Family<CreateLabels, Counter>,
    pub jobs_deleted: Family<DeleteLabels, Counter>,
    pub actors: Gauge,
    pub syncs: Family<SyncLabels, Counter>,
    pub api_requests: Family<RequestLabels, Counter>,
    pub queue_depth: Family<PriorityLabels, Gauge>,
    pub rate_limit: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub queue_wait: Family<PriorityLabels, Histogram, fn() -> Histogram>,
    pub watch_restarts: Family<ResourceLabels, Counter>,
    pub watch_events: Family<ResourceLabels, Counter>,
    pub watch_bytes: Family<ResourceLabels, Counter>,
    pub ring_members: Gauge,
    pub ring_protocol: Gauge,
    pub ring_assignment: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub ring_incompatible_peers: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    pub owned: Family<OwnedLabels, Gauge>,
    pub rebalances: Counter,
    pub keys_moved: Family<MovedLabels, Counter>,
    pub standby_cronjobs: Gauge,
    pub keys_read_alone: Counter,
    pub handoff_wait: Histogram,
    pub handoff_publish: Histogram,
    pub handoff_rereads: Family<HandoffRereadLabels, Counter>,
    pub lease_valid: Gauge,
    pub lease_lapses: Counter,
    pub spans_dropped: Counter,
    pub events_dropped: Counter,
    pub events_held_back: Counter,
    pub events_queued: Gauge,
    pub events_recorded: Family<ReasonLabels, Counter>,
    pub status_writes_given_way: Counter,
    pub jobs_created_elsewhere: Counter,
    pub dropped_for_gone: Family<DroppedLabels, Counter>,
    pub actor_panics: Counter,
    /// The per-CronJob series of the CronJobs this replica owns.
    pub cronjobs: Arc<CronJobSeries>,
}

/// The exemplar of a skew observation: the trace of that firing.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: String,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum OwnedState {
    /// Its actor runs.
    Running,
    /// Ours under the view, waiting for the previous owner to let go.
    Waiting,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OwnedLabels {
    pub state: OwnedState,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum MoveDirection {
    Gained,
    Lost,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MovedLabels {
    pub direction: MoveDirection,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PolicyLabels {
    /// `forbid` or `catch_up` (`reconcile::PolicyWait`).
    pub policy: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

/// 1 ms, 2 ms, 4 ms, ... 65.5 s.
fn millis_to_minute() -> impl Iterator<Item = f64> {
    exponential_buckets(0.001, 2.0, 17)
}

/// 1 s, 2 s, 4 s, ... 18.2 h: a policy wait lasts up to a period.
fn seconds_to_hours() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 17))
}

impl Metrics {
    /// Every metric, the per-CronJob ones included.
    pub fn new() -> Self {
        Self::with_cronjob_series(true)
    }

    /// Sets `shardcron_build_info`: this release, and `protocols`, the ring
    /// protocol versions it speaks (the shard layer's to say).
    pub fn set_build(&self, protocols: String) {
        self.build_info
            .get_or_create(&BuildLabels {
                version: crate::release::VERSION,
                commit: crate::release::commit(),
                protocol: protocols,
            })
            .set(1);
    }

    /// Every metric; the per-CronJob ones only if `per_cronjob`
    /// (`--cronjob-metrics`).
    pub fn with_cronjob_series(per_cronjob: bool) -> Self {
        let mut registry = Registry::with_prefix("shardcron");
        // Apart: their labels name the tenants' namespaces and CronJobs
        // (served at /metrics/cronjobs on the loopback debug listener).
        let cronjobs = Arc::new(CronJobSeries::new(per_cronjob));
        let mut cronjob_registry = Registry::with_prefix("shardcron");
        cronjob_registry.register_collector(Box::new(cronjobs.clone()));
        let mut families: Vec<(&'static str, MetricType)> = CronJobSeries::FAMILIES.to_vec();
        let creation_skew = HistogramWithExemplars::new(millis_to_minute());
        register(
            &mut registry,
            &mut families,
            "job_creation_skew_seconds",
            "Time between the moment a slot could start and the creation of its Job: the controller's and the API server's lateness. A slot can start at its scheduled time plus the CronJob's offset under shardcron.io/spread, or later when its own spec made it wait (shardcron_job_policy_wait_seconds). Uses the controller's clock when the create returned",
            creation_skew.clone(),
        );
        let policy_wait =
            Family::<PolicyLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                seconds_to_hours,
            );
        register(
            &mut registry,
            &mut families,
            "job_policy_wait_seconds",
            "Time a slot waited, after its start, for what its CronJob's spec asked: policy=forbid, the running Job that held it back; policy=catch_up, a catch-up run's turn. Not in shardcron_job_creation_skew_seconds",
            policy_wait.clone(),
        );
        let jobs_created = Family::<CreateLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "jobs_created",
            "Job creates by result",
            jobs_created.clone(),
        );
        let jobs_deleted = Family::<DeleteLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "jobs_deleted",
            "Job deletes by reason and result",
            jobs_deleted.clone(),
        );
        let actors = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "actors",
            "CronJob actors running in this replica",
            actors.clone(),
        );
        let syncs = Family::<SyncLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "syncs",
            "Decisions run by the actors, by result (failed: retried with backoff)",
            syncs.clone(),
        );
        let api_requests = Family::<RequestLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "api_requests",
            "Requests to the API server by the gateway, by verb and HTTP status code",
            api_requests.clone(),
        );
        let queue_depth = Family::<PriorityLabels, Gauge>::default();
        register(
            &mut registry,
            &mut families,
            "gateway_queue_depth",
            "Requests waiting in the gateway for a rate-limit token, by class",
            queue_depth.clone(),
        );
        let rate_limit = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        register(
            &mut registry,
            &mut families,
            "gateway_rate_limit_qps",
            "The gateway's request rate now: --kube-api-qps, halved on each burst of 429s and climbing back without",
            rate_limit.clone(),
        );
        let queue_wait: Family<PriorityLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(millis_to_minute()));
        register(
            &mut registry,
            &mut families,
            "gateway_wait_seconds",
            "Time a request waited in the gateway before it was sent, by class",
            queue_wait.clone(),
        );
        let watch_restarts = Family::<ResourceLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "watch_relists",
            "Full (re)lists of a watched resource: the first sync and every restart after an error or 410 Gone",
            watch_restarts.clone(),
        );
        let watch_events = Family::<ResourceLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "watch_events",
            "Objects a watch received and decoded (listed, added, changed, deleted), by watch: what sharding the input divides",
            watch_events.clone(),
        );
        let watch_bytes = Family::<ResourceLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "watch_bytes",
            "Bytes of the response bodies a watch received (its lists and its watch streams), by watch",
            watch_bytes.clone(),
        );
        let ring_members = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "ring_members",
            "Members of the ring this replica acts on (0 while it acts on none)",
            ring_members.clone(),
        );
        let ring_protocol = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "ring_protocol",
            "The ring protocol version of the ring this replica acts on (0 while it acts on none)",
            ring_protocol.clone(),
        );
        let ring_assignment = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        register(
            &mut registry,
            &mut families,
            "ring_assignment",
            "A digest of the ring this replica acts on, its protocol version and members (0 while it acts on none): replicas that agree on who owns what show the same value",
            ring_assignment.clone(),
        );
        let ring_incompatible_peers = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "ring_incompatible_peers",
            "Live peers left out of the ring because they speak no ring protocol version it can run",
            ring_incompatible_peers.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        register(
            &mut registry,
            &mut families,
            "build_info",
            "This build: its release (version), commit and the ring protocol versions it speaks; always 1",
            build_info.clone(),
        );
        let owned = Family::<OwnedLabels, Gauge>::default();
        register(
            &mut registry,
            &mut families,
            "owned_cronjobs",
            "CronJobs this replica owns under its view: running, or waiting for the previous owner",
            owned.clone(),
        );
        let rebalances = Counter::default();
        register(
            &mut registry,
            &mut families,
            "rebalances",
            "Changes of the ring this replica acts on",
            rebalances.clone(),
        );
        let keys_moved = Family::<MovedLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "keys_moved",
            "CronJobs gained or lost by this replica in rebalances",
            keys_moved.clone(),
        );
        let standby_cronjobs = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "standby_cronjobs",
            "CronJobs this replica would gain if one peer died, kept on standby (when each next falls due)",
            standby_cronjobs.clone(),
        );
        let keys_read_alone = Counter::default();
        register(
            &mut registry,
            &mut families,
            "keys_read_alone",
            "Gained CronJobs read on their own at a take-over, ahead of the bulk load, as they fall due first",
            keys_read_alone.clone(),
        );
        let handoff_wait = Histogram::new(millis_to_minute());
        register(
            &mut registry,
            &mut families,
            "handoff_wait_seconds",
            "Time a gained CronJob waited for its previous owner to let go",
            handoff_wait.clone(),
        );
        let handoff_publish = Histogram::new(millis_to_minute());
        register(
            &mut registry,
            &mut families,
            "handoff_publish_seconds",
            "Time from a change of the ring to the publication of this replica's new view (its lost CronJobs' actors stopped)",
            handoff_publish.clone(),
        );
        let handoff_rereads = Family::<HandoffRereadLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "handoff_rereads",
            "CronJobs read again before creating a slot that fell due before their hand-off (a key moved off a live peer), by what the read found: newer, the previous owner had run the slot after this replica's copy was read",
            handoff_rereads.clone(),
        );
        let lease_valid = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "lease_valid",
            "1 while this replica's own Lease is valid by its clock and it may write, else 0",
            lease_valid.clone(),
        );
        let lease_lapses = Counter::default();
        register(
            &mut registry,
            &mut families,
            "lease_lapses",
            "Times this replica's renew deadline passed without a renewal, so it stopped acting and rejoined",
            lease_lapses.clone(),
        );
        let spans_dropped = Counter::default();
        register(
            &mut registry,
            &mut families,
            "trace_spans_dropped",
            "Spans the OTLP collector did not take (it was down or refused them); the controller goes on",
            spans_dropped.clone(),
        );
        let events_dropped = Counter::default();
        register(
            &mut registry,
            &mut families,
            "events_dropped",
            "Events not recorded because the event queue was full (the oldest of the same reason went first) or an equal one was already queued",
            events_dropped.clone(),
        );
        let events_held_back = Counter::default();
        register(
            &mut registry,
            &mut families,
            "events_held_back",
            "Events not recorded because their object had told 25 of their type and the budget refills one every 5 minutes (upstream's spam filter)",
            events_held_back.clone(),
        );
        let events_queued = Gauge::default();
        register(
            &mut registry,
            &mut families,
            "events_queued",
            "Events waiting in the replica's backlog to be recorded (at most 4096)",
            events_queued.clone(),
        );
        let events_recorded = Family::<ReasonLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "events_recorded",
            "Events the API server took, by reason",
            events_recorded.clone(),
        );
        let status_writes_given_way = Counter::default();
        register(
            &mut registry,
            &mut families,
            "status_writes_given_way",
            "Status writes recording a slot never sent: the slot's Job ended while the write waited for its turn, and the next decision wrote the slot and the Job's end at once",
            status_writes_given_way.clone(),
        );
        let jobs_created_elsewhere = Counter::default();
        register(
            &mut registry,
            &mut families,
            "jobs_created_elsewhere",
            "Jobs of slots due since this replica started, of CronJobs it runs, made by another controller (without shardcron's bucket label): kube-controller-manager's CronJob controller left on, two controllers running these CronJobs",
            jobs_created_elsewhere.clone(),
        );
        let dropped_for_gone = Family::<DroppedLabels, Counter>::default();
        register(
            &mut registry,
            &mut families,
            "dropped_for_gone",
            "Events and requests dropped unsent, each counted once, because their namespace is gone or terminating (the API server said so) or their CronJob was deleted",
            dropped_for_gone.clone(),
        );
        let actor_panics = Counter::default();
        register(
            &mut registry,
            &mut families,
            "actor_panics",
            "CronJob actors ended because their handler panicked (a bug; the panic is on stderr): each one's CronJob runs on no replica until it moves or this replica restarts",
            actor_panics.clone(),
        );
        Self {
            registry,
            cronjob_registry,
            dropped_for_gone,
            actor_panics,
            events_queued,
            events_recorded,
            families,
            cronjobs,
            spans_dropped,
            events_dropped,
            events_held_back,
            status_writes_given_way,
            jobs_created_elsewhere,
            ring_members,
            ring_protocol,
            ring_assignment,
            ring_incompatible_peers,
            build_info,
            owned,
            rebalances,
            keys_moved,
            standby_cronjobs,
            keys_read_alone,
            handoff_wait,
            handoff_publish,
            handoff_rereads,
            lease_valid,
            lease_lapses,
            creation_skew,
            policy_wait,
            jobs_created,
            jobs_deleted,
            actors,
            syncs,
            api_requests,
            queue_depth,
            rate_limit,
            queue_wait,
            watch_restarts,
            watch_events,
            watch_bytes,
        }
    }

    /// `trace_id`: the firing's trace, kept as the bucket's exemplar
    /// (shown in the OpenMetrics exposition).
    pub fn observe_skew(&self, skew: Duration, trace_id: Option<String>) {
        self.creation_skew.observe(
            skew.as_secs_f64(),
            trace_id.map(|trace_id| TraceExemplar { trace_id }),
            None,
        );
    }

    /// How long a slot waited for its CronJob's own `policy` (a
    /// `reconcile::PolicyWait`'s name) before it could start.
    pub fn observe_policy_wait(&self, policy: &'static str, waited: Duration) {
        self.policy_wait
            .get_or_create(&PolicyLabels { policy })
            .observe(waited.as_secs_f64());
    }

    /// Every series name `/metrics` and `/metrics/cronjobs` can carry, with the prefix and the
    /// suffixes of its type (`_total`; `_bucket`, `_sum`, `_count`): what
    /// alert rules and dashboards may query (tests/monitoring.rs). A family
    /// without a sample yet is not in the exposition, so it is not read
    /// from there.
    pub fn series_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (name, kind) in &self.families {
            let suffixes: &[&str] = match kind {
                MetricType::Counter => &["_total"],
                MetricType::Histogram => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("shardcron_{name}{s}")));
        }
        names
    }

    /// The text exposition format, for `/metrics`: no tenant's names.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The per-CronJob series, for `/metrics/cronjobs`.
    pub fn encode_cronjobs(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.cronjob_registry);
        out
    }
}

/// Registers `metric` as `name` and notes its name and type.
fn register(
    registry: &mut Registry,
    families: &mut Vec<(&'static str, MetricType)>,
    name: &'static str,
    help: &str,
    metric: impl Metric,
) {
    families.push((name, metric.metric_type()));
    registry.register(name, help, metric);
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
