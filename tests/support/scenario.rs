//! Scenarios for the controller tests: a namespace, the controller scoped
//! to it, and helpers to create CronJobs and read what happened. Every
//! scenario names the kind of CronJob it runs on (batch/v1 or
//! shardcron.io), so one suite runs against both.

use super::cluster::{Cluster, TestNamespace};
use super::controller::Controller;
use super::cronjobs::CronJobs;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shardcron::reconcile::{CronJobKind, SCHEDULED_TIMESTAMP_ANNOTATION};
use std::time::Duration;

/// Enough for the next minute boundary, the create, and slack for a busy machine.
pub const ONE_SLOT: Duration = Duration::from_secs(100);
pub const TWO_SLOTS: Duration = Duration::from_secs(160);
/// How long an event may trail the write it reports: events are sent after
/// it, at the write gateway's lowest priority.
pub const EVENT_LAG: Duration = Duration::from_secs(15);

pub struct Scenario {
    pub ns: TestNamespace,
    pub admin: Client,
    pub controller: Controller,
    pub cronjobs: CronJobs,
    pub jobs: Api<Job>,
}

/// A batch/v1 scenario.
pub async fn scenario(test: &str) -> Scenario {
    scenario_of(CronJobKind::Batch, test, &[]).await
}

/// A batch/v1 scenario whose controller gets `extra_args` too.
pub async fn scenario_with(test: &str, extra_args: &[&str]) -> Scenario {
    scenario_of(CronJobKind::Batch, test, extra_args).await
}

/// The cluster for CronJobs of `kind`: for batch/v1 one without
/// kube-controller-manager's CronJob controller (shardcron replaces it);
/// for shardcron.io one with it (as on a managed control plane, where
/// shardcron serves only the CRD), the definition installed and the
/// controller granted deploy/crd/rbac.yaml.
pub async fn cluster_for(kind: CronJobKind) -> &'static Cluster {
    match kind {
        CronJobKind::Batch => Cluster::shared(),
        CronJobKind::Shardcron => {
            static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
            let cluster = Cluster::shared_beside_upstream();
            READY
                .get_or_init(|| async {
                    let admin = cluster.admin().await;
                    super::crd::install(&admin).await;
                    super::crd::grant_the_controller(&admin).await;
                })
                .await;
            cluster
        }
    }
}

/// A scenario on CronJobs of `kind`, its controller serving that kind and
/// given `extra_args` too.
pub async fn scenario_of(kind: CronJobKind, test: &str, extra_args: &[&str]) -> Scenario {
    let cluster = cluster_for(kind).await;
    let ns = cluster.namespace(test).await;
    let admin = cluster.admin().await;
    let kinds = format!("--cronjob-kinds={kind}");
    let args: Vec<&str> = std::iter::once(kinds.as_str())
        .chain(extra_args.iter().copied())
        .collect();
    let controller = Controller::start_with(cluster, &ns.name, &args).await;
    Scenario {
        cronjobs: CronJobs::namespaced(admin.clone(), &ns.name, kind),
        jobs: Api::namespaced(admin.clone(), &ns.name),
        ns,
        admin,
        controller,
    }
}

/// A CronJob running `busybox`; `spec` fields override the defaults; the
/// pod annotations steer kwok (see deploy/local/kwok-stages.yaml).
pub fn cronjob(name: &str, schedule: &str, spec: Value, pod_annotations: Value) -> CronJob {
    let mut full = json!({
        "schedule": schedule,
        "jobTemplate": {"spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": pod_annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}]
                }
            }
        }}
    });
    for (key, value) in spec.as_object().into_iter().flatten() {
        full[key] = value.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": full})).unwrap()
}

/// A CronJob firing every minute that keeps no Job: none in its history,
/// and each removed by the TTL controller as soon as it ends (kwok's pods
/// succeed after 1 s). Only the protocol and `lastScheduleTime` keep a slot
/// from running twice once its Job is gone.
pub fn keeping_no_job(name: &str) -> CronJob {
    let spec = json!({"successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 0});
    let mut cronjob = cronjob(name, "*/1 * * * *", spec, json!({}));
    if let Some(job) = cronjob.spec.job_template.spec.as_mut() {
        job.ttl_seconds_after_finished = Some(0);
    }
    cronjob
}

/// The index of a [`mixed`] CronJob's name (`c07`: 7), if it is one.
fn mix_index(name: &str) -> Option<usize> {
    name.strip_prefix('c')?.parse().ok()
}

/// Whether [`mixed`] makes CronJob `name` keep no Job (every third).
pub fn keeps_no_job_in_mix(name: &str) -> bool {
    mix_index(name).is_some_and(|index| index.is_multiple_of(3))
}

/// CronJob `name`: every third keeps no Job; of the others, every third
/// is Forbid, every third Replace, the rest Allow (upstream's default).
pub fn mixed(name: &str) -> CronJob {
    let index = mix_index(name).unwrap_or(0);
    if index.is_multiple_of(3) {
        return keeping_no_job(name);
    }
    let policy = ["Allow", "Forbid", "Replace"][(index / 3) % 3];
    let spec = json!({
        "concurrencyPolicy": policy,
        "successfulJobsHistoryLimit": 100,
        "failedJobsHistoryLimit": 100,
    });
    cronjob(name, "*/1 * * * *", spec, json!({}))
}

pub fn long_running() -> Value {
    json!({"shardcron.test/run-for": "600s"})
}

impl Scenario {
    pub async fn create(&self, cronjob: &CronJob) -> CronJob {
        self.cronjobs
            .create(&PostParams::default(), cronjob)
            .await
            .expect("create CronJob")
    }

    pub async fn get(&self, name: &str) -> CronJob {
        self.cronjobs.get(name).await.expect("get CronJob")
    }

    /// The kind of the scenario's CronJobs.
    pub fn kind(&self) -> CronJobKind {
        self.cronjobs.kind
    }

    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.cronjobs
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("patch CronJob");
    }

    pub async fn all_jobs(&self) -> Vec<Job> {
        self.jobs
            .list(&ListParams::default())
            .await
            .expect("list Jobs")
            .items
    }

    /// Jobs not being deleted.
    pub async fn live_jobs(&self) -> Vec<Job> {
        let mut jobs: Vec<Job> = self
            .all_jobs()
            .await
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .collect();
        jobs.sort_by_key(|j| j.metadata.name.clone());
        jobs
    }

    pub async fn active_count(&self, name: &str) -> usize {
        let cronjob = self.get(name).await;
        cronjob.status.and_then(|s| s.active).map_or(0, |a| a.len())
    }

    /// Events on the CronJob, as (type, reason, message).
    pub async fn events(&self, name: &str) -> Vec<(String, String, String)> {
        let events: Api<Event> = Api::namespaced(self.admin.clone(), &self.ns.name);
        let selector = format!("involvedObject.kind=CronJob,involvedObject.name={name}");
        events
            .list(&ListParams::default().fields(&selector))
            .await
            .expect("list events")
            .items
            .into_iter()
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                )
            })
            .collect()
    }

    pub async fn has_event(&self, name: &str, reason: &str) -> bool {
        self.events(name).await.iter().any(|(_, r, _)| r == reason)
    }
}

pub fn finished(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        .map(|c| c.type_.as_str())
}

pub fn scheduled_time(job: &Job) -> jiff::Timestamp {
    let text = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCHEDULED_TIMESTAMP_ANNOTATION))
        .expect("the scheduled-timestamp annotation");
    text.parse()
        .unwrap_or_else(|e| panic!("annotation {text:?} is not RFC 3339: {e}"))
}

pub fn name_of(job: &Job) -> String {
    job.metadata.name.clone().unwrap_or_default()
}

/// Every Job is for a different slot (no duplicate), named after its slot.
pub fn assert_one_job_per_slot(cronjob: &str, jobs: &[Job]) {
    let mut slots: Vec<jiff::Timestamp> = jobs.iter().map(scheduled_time).collect();
    for job in jobs {
        let minutes = scheduled_time(job).as_second() / 60;
        assert_eq!(name_of(job), format!("{cronjob}-{minutes}"));
    }
    slots.sort();
    let before = slots.len();
    slots.dedup();
    assert_eq!(before, slots.len(), "two Jobs for one slot");
}
