//! Which CronJob each Job belongs to, as the supervisor tracks it. Pure.
//!
//! A Job is routed by its controller reference (kind CronJob, by UID) to
//! that CronJob only if the CronJob is in the Job's own namespace, as
//! upstream lists a CronJob's Jobs in its namespace: a Job anywhere else
//! that names a CronJob's UID (a tenant may write any ownerReference on its
//! own Jobs) counts for nothing, neither active, nor a slot, nor history.
//! A Job whose CronJob has no actor here yet is parked until the actor
//! starts and claims it. Every Job with a CronJob controller is remembered (UID ->
//! namespace and owner), so that a change of controller withdraws it from
//! the old owner and a re-list can tell which Jobs disappeared meanwhile.
//!
//! shardcron labels every Job it creates with its CronJob's bucket. A Job
//! of a slot due since this replica started that arrives without the label
//! was made by another controller running the same CronJob
//! (kube-controller-manager's, left on): said once per Job
//! ([`JobRoute::MadeElsewhere`]), by the replica whose actor has it.

use crate::apiserver::watch::JobFacts;
use crate::reconcile::{JobSummary, controller_in};
use jiff::Timestamp;
use std::collections::HashMap;

/// A message for the actor of the CronJob with UID `owner_uid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRoute {
    /// The Job was added or changed.
    Deliver { owner_uid: String, job: JobSummary },
    /// The Job was deleted, or its controller is no longer this CronJob.
    Withdraw { owner_uid: String, job_uid: String },
    /// A slot's Job made by another controller, first seen.
    MadeElsewhere(MadeElsewhere),
}

/// A slot's Job another controller made: its CronJob (`namespace`, the
/// controller reference's API version, name and UID) and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeElsewhere {
    pub namespace: String,
    pub api_version: String,
    pub cronjob: String,
    pub owner_uid: String,
    pub job: String,
}

struct Home {
    namespace: String,
    owner_uid: String,
    /// Which Job watch selects it: the labelled one or the unlabelled one.
    labelled: bool,
}

#[derive(Default)]
pub struct JobIndex {
    homes: HashMap<String, Home>,
    /// By the CronJob they wait for: its namespace (the Jobs') and UID.
    parked: HashMap<(String, String), Vec<JobSummary>>,
    /// Unlabelled Jobs of slots from this instant on are another
    /// controller's ([`JobRoute::MadeElsewhere`]); `None`: not looked for.
    made_elsewhere_since: Option<Timestamp>,
}

/// `has_actor(namespace, uid)`: the CronJob with that UID has an actor here
/// and lives in that namespace.
pub trait HasActor: Fn(&str, &str) -> bool {}
impl<F: Fn(&str, &str) -> bool> HasActor for F {}

impl JobIndex {
    /// An index that tells the unlabelled Jobs of slots due from `started`
    /// on (this replica's start: earlier ones may be from before a move).
    pub fn made_elsewhere_since(started: Timestamp) -> Self {
        Self {
            made_elsewhere_since: Some(started),
            ..Self::default()
        }
    }

    /// A Job was added or changed. Returns the messages for the actors.
    pub fn apply(&mut self, job: JobFacts, has_actor: impl HasActor) -> Vec<JobRoute> {
        let mut routes = Vec::new();
        let previous = match &job.owner_uid {
            Some(owner) => self.homes.insert(
                job.uid.clone(),
                Home {
                    namespace: job.namespace.clone(),
                    owner_uid: owner.clone(),
                    labelled: job.labelled,
                },
            ),
            None => self.homes.remove(&job.uid),
        };
        let first_seen = previous.is_none();
        if let Some(previous) = previous.filter(|p| Some(&p.owner_uid) != job.owner_uid.as_ref()) {
            routes.extend(self.withdraw(previous, &job.uid, &has_actor));
        }
        let Some(owner_uid) = job.owner_uid.clone() else {
            return routes;
        };
        if has_actor(&job.namespace, &owner_uid) {
            let summary = job.summary();
            let since = self.made_elsewhere_since;
            let made_elsewhere = first_seen
                && !job.labelled
                && summary
                    .scheduled
                    .zip(since)
                    .is_some_and(|(slot, since)| slot >= since);
            if made_elsewhere && let Some(owner) = controller_in(&job.job.metadata) {
                routes.push(JobRoute::MadeElsewhere(MadeElsewhere {
                    namespace: job.namespace.clone(),
                    api_version: owner.api_version.clone(),
                    cronjob: owner.name.clone(),
                    owner_uid: owner_uid.clone(),
                    job: summary.name.clone(),
                }));
            }
            routes.push(JobRoute::Deliver {
                owner_uid,
                job: summary,
            });
        } else {
            let waiting = self
                .parked
                .entry((job.namespace.clone(), owner_uid))
                .or_default();
            waiting.retain(|c| c.uid != job.uid);
            waiting.push(job.summary());
        }
        routes
    }

    /// A Job was deleted.
    pub fn delete(&mut self, job_uid: &str, has_actor: impl HasActor) -> Option<JobRoute> {
        let home = self.homes.remove(job_uid)?;
        self.withdraw(home, job_uid, &has_actor)
    }

    /// The Jobs parked for the CronJob `namespace`/`owner_uid` whose actor
    /// starts now: those of its namespace only.
    pub fn claim(&mut self, namespace: &str, owner_uid: &str) -> Vec<JobSummary> {
        self.parked
            .remove(&(namespace.to_owned(), owner_uid.to_owned()))
            .unwrap_or_default()
    }

    /// The UIDs of the Jobs known here in the namespaces `in_scope` accepts
    /// and labelled or not as `labelled` says (what a re-list of that
    /// watch must show again).
    pub fn uids_in<'a>(
        &'a self,
        in_scope: impl Fn(&str) -> bool + 'a,
        labelled: bool,
    ) -> impl Iterator<Item = &'a String> + 'a {
        self.homes
            .iter()
            .filter(move |(_, home)| home.labelled == labelled && in_scope(&home.namespace))
            .map(|(uid, _)| uid)
    }

    /// Whether the Job with this UID is remembered.
    pub fn knows(&self, job_uid: &str) -> bool {
        self.homes.contains_key(job_uid)
    }

    /// Whether the remembered Job with this UID carries the bucket label
    /// (as last seen); `None` if it is not remembered.
    pub fn is_labelled(&self, job_uid: &str) -> Option<bool> {
        self.homes.get(job_uid).map(|home| home.labelled)
    }

    /// Forgets the Jobs (remembered or parked) of every CronJob that `keep`
    /// (by the CronJob's UID) rejects: this replica no longer owns it.
    pub fn retain_owners(&mut self, keep: impl Fn(&str) -> bool) {
        self.homes.retain(|_, home| keep(&home.owner_uid));
        self.parked.retain(|(_, owner_uid), _| keep(owner_uid));
    }

    /// Jobs remembered (shown by `/debug/shards`).
    pub fn len(&self) -> usize {
        self.homes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.homes.is_empty()
    }

    fn withdraw(
        &mut self,
        home: Home,
        job_uid: &str,
        has_actor: &impl HasActor,
    ) -> Option<JobRoute> {
        if has_actor(&home.namespace, &home.owner_uid) {
            return Some(JobRoute::Withdraw {
                owner_uid: home.owner_uid,
                job_uid: job_uid.to_owned(),
            });
        }
        let parked = (home.namespace, home.owner_uid);
        if let Some(waiting) = self.parked.get_mut(&parked) {
            waiting.retain(|c| c.uid != job_uid);
            if waiting.is_empty() {
                self.parked.remove(&parked);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(uid: &str, owner: Option<&str>) -> JobFacts {
        JobFacts {
            namespace: "ns".into(),
            uid: uid.into(),
            owner_uid: owner.map(str::to_owned),
            labelled: true,
            job: Box::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("job-{uid}"), "namespace": "ns", "uid": uid}
                }))
                .expect("a Job"),
            ),
        }
    }

    /// A Job without the bucket label, controlled by CronJob `owner`
    /// (named `cj-<owner>`), of the slot `slot` if any.
    fn unlabelled(uid: &str, owner: &str, slot: Option<&str>) -> JobFacts {
        let annotations = match slot {
            Some(slot) => {
                serde_json::json!({crate::reconcile::SCHEDULED_TIMESTAMP_ANNOTATION: slot})
            }
            None => serde_json::json!({}),
        };
        JobFacts {
            labelled: false,
            job: Box::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {
                        "name": format!("job-{uid}"), "namespace": "ns", "uid": uid,
                        "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                            "name": format!("cj-{owner}"), "uid": owner, "controller": true}],
                    }
                }))
                .expect("a Job"),
            ),
            ..job(uid, Some(owner))
        }
    }

    fn made_elsewhere(routes: &[JobRoute]) -> Vec<&str> {
        routes
            .iter()
            .filter_map(|route| match route {
                JobRoute::MadeElsewhere(found) => Some(found.job.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_slots_job_without_the_bucket_label_since_the_start_is_said_once() {
        let started: Timestamp = "2026-12-07T10:00:00Z".parse().unwrap();
        let mut index = JobIndex::made_elsewhere_since(started);
        let mine = running(&["c1"]);
        // Another controller's Job of a slot since the start: said once,
        // and delivered as any Job.
        let routes = index.apply(unlabelled("j1", "c1", Some("2026-12-07T10:01:00Z")), &mine);
        assert_eq!(
            routes[0],
            JobRoute::MadeElsewhere(MadeElsewhere {
                namespace: "ns".into(),
                api_version: "batch/v1".into(),
                cronjob: "cj-c1".into(),
                owner_uid: "c1".into(),
                job: "job-j1".into(),
            })
        );
        assert!(matches!(routes[1], JobRoute::Deliver { .. }));
        let again = index.apply(unlabelled("j1", "c1", Some("2026-12-07T10:01:00Z")), &mine);
        assert!(made_elsewhere(&again).is_empty(), "said once per Job");
        // Not said: a slot before the start (a move's history), a Job of
        // no slot (`kubectl create job --from`), shardcron's own (labelled),
        // a CronJob with no actor here (its owner says it).
        for (uid, owner, slot) in [
            ("j2", "c1", Some("2026-12-07T09:59:00Z")),
            ("j3", "c1", None),
            ("j5", "c2", Some("2026-12-07T10:01:00Z")),
        ] {
            let routes = index.apply(unlabelled(uid, owner, slot), &mine);
            assert!(made_elsewhere(&routes).is_empty(), "{uid}");
        }
        let labelled = JobFacts {
            labelled: true,
            ..unlabelled("j4", "c1", Some("2026-12-07T10:01:00Z"))
        };
        assert!(made_elsewhere(&index.apply(labelled, &mine)).is_empty());
        // An index not told when the replica started says nothing.
        let mut quiet = JobIndex::default();
        let routes = quiet.apply(unlabelled("j6", "c1", Some("2026-12-07T10:01:00Z")), &mine);
        assert!(made_elsewhere(&routes).is_empty());
    }

    /// CronJobs of namespace `ns` with an actor here.
    fn running(uids: &'static [&'static str]) -> impl Fn(&str, &str) -> bool {
        move |namespace, uid| namespace == "ns" && uids.contains(&uid)
    }

    #[test]
    fn a_job_goes_to_its_controllers_actor() {
        let mut index = JobIndex::default();
        let routes = index.apply(job("j1", Some("c1")), running(&["c1"]));
        assert_eq!(
            routes,
            vec![JobRoute::Deliver {
                owner_uid: "c1".into(),
                job: job("j1", None).summary()
            }]
        );
        assert_eq!(
            index.delete("j1", running(&["c1"])),
            Some(JobRoute::Withdraw {
                owner_uid: "c1".into(),
                job_uid: "j1".into()
            })
        );
        assert!(index.is_empty());
    }

    #[test]
    fn jobs_without_a_cronjob_controller_are_not_kept() {
        let mut index = JobIndex::default();
        assert!(index.apply(job("j1", None), running(&["c1"])).is_empty());
        assert_eq!(index.len(), 0);
        assert_eq!(index.delete("j1", running(&["c1"])), None);
    }

    #[test]
    fn a_job_waits_for_its_actor_and_is_claimed_once() {
        let mut index = JobIndex::default();
        assert!(index.apply(job("j1", Some("c1")), running(&[])).is_empty());
        // A change while parked replaces the parked summary.
        assert!(index.apply(job("j1", Some("c1")), running(&[])).is_empty());
        index.apply(job("j2", Some("c1")), running(&[]));
        let claimed: Vec<String> = index.claim("ns", "c1").into_iter().map(|j| j.uid).collect();
        assert_eq!(claimed, ["j1", "j2"]);
        assert!(index.claim("ns", "c1").is_empty());
    }

    #[test]
    fn a_parked_job_that_is_deleted_is_not_claimed() {
        let mut index = JobIndex::default();
        index.apply(job("j1", Some("c1")), running(&[]));
        assert_eq!(index.delete("j1", running(&[])), None);
        assert!(index.claim("ns", "c1").is_empty());
    }

    #[test]
    fn a_change_of_controller_withdraws_the_job_from_the_old_owner() {
        let mut index = JobIndex::default();
        index.apply(job("j1", Some("c1")), running(&["c1", "c2"]));
        let routes = index.apply(job("j1", Some("c2")), running(&["c1", "c2"]));
        assert_eq!(
            routes,
            vec![
                JobRoute::Withdraw {
                    owner_uid: "c1".into(),
                    job_uid: "j1".into()
                },
                JobRoute::Deliver {
                    owner_uid: "c2".into(),
                    job: job("j1", None).summary()
                }
            ]
        );
        // Losing its controller altogether withdraws it too.
        let routes = index.apply(job("j1", None), running(&["c1", "c2"]));
        assert_eq!(
            routes,
            vec![JobRoute::Withdraw {
                owner_uid: "c2".into(),
                job_uid: "j1".into()
            }]
        );
    }

    #[test]
    fn the_jobs_of_a_watch_are_those_of_its_namespaces_and_its_label() {
        let mut index = JobIndex::default();
        index.apply(job("j1", Some("c1")), running(&["c1"]));
        index.apply(job("j2", Some("c1")), running(&["c1"]));
        let mut other = job("j3", Some("c9"));
        other.namespace = "elsewhere".into();
        index.apply(other, running(&["c1"]));
        let mut by_hand = job("j4", Some("c1"));
        by_hand.labelled = false;
        index.apply(by_hand, running(&["c1"]));
        let mut in_scope: Vec<&String> = index.uids_in(|ns| ns == "ns", true).collect();
        in_scope.sort();
        assert_eq!(in_scope, ["j1", "j2"]);
        let unlabelled: Vec<&String> = index.uids_in(|ns| ns == "ns", false).collect();
        assert_eq!(unlabelled, ["j4"]);
    }

    #[test]
    fn jobs_of_cronjobs_no_longer_owned_are_forgotten_parked_or_not() {
        let mut index = JobIndex::default();
        index.apply(job("j1", Some("c1")), running(&["c1"]));
        index.apply(job("j2", Some("c2")), running(&["c1"]));
        index.retain_owners(|owner_uid| owner_uid == "c1");
        assert!(index.knows("j1"));
        assert!(!index.knows("j2"));
        assert!(index.claim("ns", "c2").is_empty());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_job_of_another_namespace_never_reaches_the_cronjob_it_names() {
        let mut index = JobIndex::default();
        let mut forged = job("j1", Some("c1"));
        forged.namespace = "mallory".into();
        assert!(index.apply(forged.clone(), running(&["c1"])).is_empty());
        // Nor once the actor starts and claims what waited for it.
        assert!(index.apply(forged, running(&[])).is_empty());
        assert!(index.claim("ns", "c1").is_empty());
        assert_eq!(index.delete("j1", running(&["c1"])), None);
    }
}
