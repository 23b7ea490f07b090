//! A ring of replicas for the fault tests: one namespace, N `shardcron run`
//! processes (`r0`, `r1`, ...) sharing a ring named after the namespace,
//! each as the controller's ServiceAccount, and a steady load of CronJobs
//! firing every minute. The invariants are checked from the API server's
//! own records (the Jobs) and from every replica's `/debug/shards`.

use super::cluster::{Cluster, TestNamespace};
use super::controller::Controller;
use super::eventually;
use super::proxy::Proxy;
use super::scenario::{cronjob, name_of, scheduled_time};
use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::json;
use shardcron::actor::apply::CREATED_BY_ANNOTATION;
use shardcron::reconcile::SCHEDULED_TIMESTAMP_ANNOTATION;
use shardcron_harness::cluster::CONTROLLER_NAMESPACE;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, Instant};

/// The Lease duration (the default) and the bound on a takeover.
pub const LEASE: Duration = Duration::from_secs(15);

pub struct Fleet {
    /// The control plane the fleet runs on.
    pub cluster: &'static Cluster,
    pub ns: TestNamespace,
    pub admin: Client,
    pub jobs: Api<Job>,
    pub replicas: Vec<Controller>,
    pub names: Vec<String>,
    /// The first slot every CronJob must have a Job for.
    pub first_slot: Timestamp,
    test: String,
    /// Flags every replica is started with, besides the fleet's own.
    replica_args: Vec<String>,
}

/// One slot's Job as the API server recorded it.
#[derive(Debug, Clone)]
pub struct Slot {
    pub cronjob: String,
    pub scheduled: Timestamp,
    pub created: Timestamp,
    pub created_by: String,
}

impl Slot {
    /// The slot `job` was created for, if it is a CronJob's (it has the
    /// scheduled-timestamp annotation).
    pub fn of(job: &Job) -> Option<Slot> {
        let annotations = job.metadata.annotations.as_ref()?;
        annotations.get(SCHEDULED_TIMESTAMP_ANNOTATION)?;
        let name = name_of(job);
        let cronjob = name
            .rsplit_once('-')
            .map_or(name.clone(), |(c, _)| c.to_owned());
        Some(Slot {
            cronjob,
            scheduled: scheduled_time(job),
            created: job
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .expect("creationTimestamp"),
            created_by: annotations
                .get(CREATED_BY_ANNOTATION)
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// Seconds from the slot to the Job's creation (1 s resolution).
    pub fn delay(&self) -> i64 {
        self.created.as_second() - self.scheduled.as_second()
    }
}

impl Fleet {
    /// `replicas` replicas (ready), then `cronjobs` CronJobs at `*/1 * * * *`
    /// that keep every Job (for the checks).
    pub async fn new(test: &str, replicas: usize, cronjobs: usize) -> Fleet {
        Self::new_placed(test, replicas, cronjobs, false).await
    }

    /// As [`Fleet::new`], each replica as if in a pod ([`Fleet::add_in_pod`]).
    pub async fn new_in_pods(test: &str, replicas: usize, cronjobs: usize) -> Fleet {
        Self::new_placed(test, replicas, cronjobs, true).await
    }

    async fn new_placed(test: &str, replicas: usize, cronjobs: usize, in_pods: bool) -> Fleet {
        let mut fleet = Fleet::empty(test).await;
        for _ in 0..replicas {
            if in_pods {
                fleet.add_in_pod().await;
            } else {
                fleet.add().await;
            }
        }
        // Pods succeed after 1 s (kwok); every Job is kept for the checks.
        let spec = json!({"successfulJobsHistoryLimit": 100, "failedJobsHistoryLimit": 100});
        fleet
            .create_cronjobs(cronjobs, |name| {
                cronjob(name, "*/1 * * * *", spec.clone(), json!({}))
            })
            .await;
        fleet
    }

    /// A namespace and no replicas, no CronJobs yet.
    pub async fn empty(test: &str) -> Fleet {
        Self::empty_with(test, &[]).await
    }

    /// As [`Fleet::empty`], every replica to be started with `replica_args` too.
    pub async fn empty_with(test: &str, replica_args: &[&str]) -> Fleet {
        Self::empty_on(Cluster::shared(), test, replica_args).await
    }

    /// As [`Fleet::empty_with`], on `cluster`.
    pub async fn empty_on(cluster: &'static Cluster, test: &str, replica_args: &[&str]) -> Fleet {
        let ns = cluster.namespace(test).await;
        let admin = cluster.admin().await;
        Fleet {
            cluster,
            jobs: Api::namespaced(admin.clone(), &ns.name),
            admin,
            ns,
            replicas: Vec::new(),
            names: Vec::new(),
            first_slot: Timestamp::UNIX_EPOCH,
            test: test.to_owned(),
            replica_args: replica_args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Creates `count` CronJobs `c00`, `c01`, ... made by `make`, and waits
    /// until the ring runs each on exactly one replica.
    pub async fn create_cronjobs(&mut self, count: usize, make: impl Fn(&str) -> CronJob) {
        self.create_cronjobs_unwatched(count, make).await;
        self.converged(Duration::from_secs(60)).await;
    }

    /// [`Self::create_cronjobs`] without waiting for the ring: another
    /// controller runs them, or none yet.
    pub async fn create_cronjobs_unwatched(
        &mut self,
        count: usize,
        make: impl Fn(&str) -> CronJob,
    ) {
        let cronjobs: Api<CronJob> = Api::namespaced(self.admin.clone(), &self.ns.name);
        self.names = (0..count).map(|i| format!("c{i:02}")).collect();
        for name in &self.names {
            cronjobs
                .create(&PostParams::default(), &make(name))
                .await
                .expect("create CronJob");
        }
        self.first_slot = next_minute(Timestamp::now() + 5.seconds());
    }

    /// Starts one more replica and waits until it is ready.
    pub async fn add(&mut self) -> usize {
        let index = self.replicas.len();
        let mut replica = self.prepare(index).await;
        replica.launch();
        replica.wait_ready().await;
        self.replicas.push(replica);
        index
    }

    /// Starts one more replica as if it ran in pod `NAMESPACE-rN` of the
    /// controller's namespace (where its Lease is: the CLI follows no pod
    /// elsewhere): the pod exists on a kwok node, kwok's PortForward leads
    /// its admin port to the process, and the replica publishes the pod on
    /// its Lease (`--admin-pod`), so clients reach its admin API through
    /// the API server's `pods/portforward` as they would in a cluster.
    pub async fn add_in_pod(&mut self) -> usize {
        let index = self.replicas.len();
        let pod = format!("{}-r{index}", self.ns.name);
        let mut replica = self.prepare(index).await;
        replica
            .spec_mut()
            .args
            .push(format!("--admin-pod={CONTROLLER_NAMESPACE}/{pod}"));
        let port = replica.admin.port();
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), CONTROLLER_NAMESPACE);
        let manifest = json!({
            "metadata": {"name": pod},
            "spec": {
                "nodeName": "kwok-node-0",
                "containers": [{
                    "name": "shardcron",
                    "image": "shardcron:dev",
                    "ports": [{"name": "admin", "containerPort": port}]
                }]
            }
        });
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(manifest).expect("a Pod"),
        )
        .await
        .expect("create the replica's pod");
        let resource = ApiResource {
            group: "kwok.x-k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "kwok.x-k8s.io/v1alpha1".into(),
            kind: "PortForward".into(),
            plural: "portforwards".into(),
        };
        let forwards: Api<DynamicObject> =
            Api::namespaced_with(self.admin.clone(), CONTROLLER_NAMESPACE, &resource);
        let forward = json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "PortForward",
            "metadata": {"name": pod},
            "spec": {"forwards": [{
                "ports": [port],
                "target": {"address": "127.0.0.1", "port": port}
            }]}
        });
        forwards
            .create(
                &PostParams::default(),
                &serde_json::from_value(forward).expect("a PortForward"),
            )
            .await
            .expect("create the pod's PortForward (deploy/local/up installs its CRD)");
        replica.launch();
        replica.wait_ready().await;
        self.replicas.push(replica);
        index
    }

    /// Starts one more replica that reaches the API server only through a
    /// proxy the test controls, waits until it is ready and the ring has
    /// converged, and returns the proxy.
    pub async fn add_behind_proxy(&mut self) -> Proxy {
        let mut replica = self.prepare(self.replicas.len()).await;
        let upstream: std::net::SocketAddr = replica
            .server()
            .trim_start_matches("https://")
            .parse()
            .expect("the API server's address");
        let proxy = Proxy::start(upstream).await;
        replica.set_server(&format!("https://{}", proxy.addr));
        replica.launch();
        replica.wait_ready().await;
        self.replicas.push(replica);
        self.converged(Duration::from_secs(60)).await;
        proxy
    }

    /// Replica `index`, prepared but not started.
    pub async fn prepare(&self, index: usize) -> Controller {
        let mut args: Vec<&str> = self.replica_args.iter().map(String::as_str).collect();
        // Odd replicas run the thread-per-core layout, even ones the default
        // single thread: every fleet test runs both, side by side in one ring.
        if index % 2 == 1 {
            args.extend(["--threads", "2"]);
        }
        Controller::replica(
            self.cluster,
            &self.ns.name,
            &self.ns.name,
            &format!("r{index}"),
            &args,
        )
        .await
    }

    pub fn live(&self) -> impl Iterator<Item = &Controller> {
        self.replicas.iter().filter(|r| r.is_running())
    }

    /// Waits until every running replica acts on the ring of exactly the
    /// running replicas, nothing waits or stops, and every CronJob runs on
    /// exactly one replica. Returns how long that took.
    pub async fn converged(&self, timeout: Duration) -> Duration {
        let started = Instant::now();
        let expected: BTreeSet<String> = self.live().map(|r| r.replica.clone()).collect();
        let all: BTreeSet<String> = self
            .names
            .iter()
            .map(|n| format!("{}/{n}", self.ns.name))
            .collect();
        let what = format!("every CronJob on exactly one of {expected:?}");
        eventually(&what, timeout, || async {
            let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for replica in self.live() {
                let report = replica.shards()?;
                let view: BTreeSet<String> = report.view.iter().cloned().collect();
                if view != expected || report.waiting > 0 || report.stopping > 0 {
                    return None;
                }
                for key in report.keys.unwrap_or_default() {
                    owners.entry(key).or_default().push(replica.replica.clone());
                }
            }
            let keys: BTreeSet<String> = owners.keys().cloned().collect();
            (keys == all && owners.values().all(|o| o.len() == 1)).then_some(())
        })
        .await;
        started.elapsed()
    }

    /// Which replica runs each CronJob now (by name).
    pub fn owners(&self) -> BTreeMap<String, String> {
        let mut owners = BTreeMap::new();
        for replica in self.live() {
            for key in replica.shards().and_then(|r| r.keys).unwrap_or_default() {
                let name = key.rsplit('/').next().unwrap_or_default().to_owned();
                owners.insert(name, replica.replica.clone());
            }
        }
        owners
    }

    /// The keys replica `index` runs now.
    pub fn keys_of(&self, index: usize) -> BTreeSet<String> {
        self.replicas[index]
            .shards()
            .and_then(|r| r.keys)
            .unwrap_or_default()
            .into_iter()
            .map(|key| key.rsplit('/').next().unwrap_or_default().to_owned())
            .collect()
    }

    /// Every Job of the namespace as a slot record; asserts that no two
    /// Jobs share a CronJob and a slot.
    pub async fn slots(&self) -> Vec<Slot> {
        let jobs = self
            .jobs
            .list(&ListParams::default())
            .await
            .expect("list Jobs");
        let mut seen = BTreeSet::new();
        let mut slots = Vec::new();
        for slot in jobs.items.iter().filter_map(Slot::of) {
            assert!(
                seen.insert((slot.cronjob.clone(), slot.scheduled)),
                "two Jobs for {} at {}",
                slot.cronjob,
                slot.scheduled
            );
            slots.push(slot);
        }
        slots
    }

    /// Waits until every CronJob has its Job for every slot from the first
    /// up to `last`, then returns the slots (no duplicates, none missing).
    pub async fn all_slots_through(&self, last: Timestamp) -> Vec<Slot> {
        let budget = (last.as_second() - Timestamp::now().as_second()).max(0) as u64 + 40;
        let expected: BTreeSet<(String, Timestamp)> = self
            .names
            .iter()
            .flat_map(|name| minutes(self.first_slot, last).map(move |slot| (name.clone(), slot)))
            .collect();
        eventually(
            &format!("a Job for every slot from {} to {last}", self.first_slot),
            Duration::from_secs(budget),
            || async {
                let slots = self.slots().await;
                let have: BTreeSet<(String, Timestamp)> = slots
                    .iter()
                    .map(|s| (s.cronjob.clone(), s.scheduled))
                    .collect();
                expected.is_subset(&have).then_some(slots)
            },
        )
        .await
        .into_iter()
        .filter(|s| s.scheduled >= self.first_slot && s.scheduled <= last)
        .collect()
    }

    /// Records a figure: printed, and appended to target/test-figures/sharding.txt.
    pub fn figure(&self, text: &str) {
        let line = format!("{}: {text}", self.test);
        println!("{line}");
        let dir = super::repo_root().join("target/test-figures");
        let _ = std::fs::create_dir_all(&dir);
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("sharding.txt"))
        {
            let _ = writeln!(file, "{line}");
        }
    }
}

/// The first minute boundary strictly after `t`.
pub fn next_minute(t: Timestamp) -> Timestamp {
    Timestamp::from_second((t.as_second() / 60 + 1) * 60).expect("in range")
}

/// Waits, if need be, until the wall clock is clear of the replicas' hold
/// around whole minutes (`shardcron::shard::ownership::HOLD_BEFORE_MINUTE`
/// before one to `HOLD_AFTER_MINUTE` after it) with 5 s to spare on
/// either side: a join or a leave started now moves its keys at once.
pub async fn clear_of_a_whole_minute() {
    use shardcron::shard::ownership::{HOLD_AFTER_MINUTE, HOLD_BEFORE_MINUTE};
    let first = HOLD_AFTER_MINUTE.as_secs() as i64 + 1;
    let last = 60 - HOLD_BEFORE_MINUTE.as_secs() as i64 - 5;
    if !(first..=last).contains(&Timestamp::now().as_second().rem_euclid(60)) {
        at_second(first, Duration::ZERO).await;
    }
}

/// Minute boundaries from `first` through `last`.
pub fn minutes(first: Timestamp, last: Timestamp) -> impl Iterator<Item = Timestamp> {
    (first.as_second() / 60..=last.as_second() / 60)
        .map(|m| Timestamp::from_second(m * 60).expect("in range"))
}

/// Sleeps until the wall clock shows `second` past a minute (the next such
/// moment at least `at_least` from now).
pub async fn at_second(second: i64, at_least: Duration) -> Timestamp {
    let earliest = Timestamp::now() + at_least;
    let mut target =
        Timestamp::from_second(earliest.as_second() / 60 * 60 + second).expect("in range");
    if target < earliest {
        target += 60.seconds();
    }
    let wait = target.duration_since(Timestamp::now());
    tokio::time::sleep(wait.try_into().unwrap_or_default()).await;
    target
}
