//! What the watches saw deleted that the supervisor must still know of:
//! the UIDs deleted while a bulk load was in flight (a load's page, read
//! before the deletion, must not bring them back), and the last
//! [`REMEMBERED`] CronJobs deleted (a held Job of one is released without
//! a GET, [`super::orphans`]; a standby read skips it).

use std::collections::{HashSet, VecDeque};

/// The watches' deletions, by UID.
#[derive(Default)]
pub(super) struct Deletions {
    /// CronJobs and Jobs deleted while a load was in flight: empty once no
    /// load is ([`Deletions::loads_done`]).
    during_load: HashSet<String>,
    cronjobs: RecentlyDeleted,
}

impl Deletions {
    /// The watch saw the CronJob `uid` deleted, `loading` or not.
    pub(super) fn cronjob(&mut self, uid: &str, loading: bool) {
        self.job(uid, loading);
        self.cronjobs.insert(uid);
    }

    /// The watch saw the Job (or CronJob) `uid` deleted.
    pub(super) fn job(&mut self, uid: &str, loading: bool) {
        if loading {
            self.during_load.insert(uid.to_owned());
        }
    }

    /// Whether `uid` was deleted while the loads in flight ran: their
    /// pages may still hold it.
    pub(super) fn during_load(&self, uid: &str) -> bool {
        self.during_load.contains(uid)
    }

    /// Whether the CronJob `uid` is among the last deleted.
    pub(super) fn cronjob_deleted(&self, uid: &str) -> bool {
        self.cronjobs.contains(uid)
    }

    /// No load is in flight any more.
    pub(super) fn loads_done(&mut self) {
        self.during_load.clear();
    }
}

/// How many deleted CronJobs' UIDs are remembered (about 40 bytes each).
pub const REMEMBERED: usize = 10_000;

/// The UIDs of the last [`REMEMBERED`] CronJobs the watch saw deleted.
#[derive(Default)]
struct RecentlyDeleted {
    order: VecDeque<String>,
    uids: HashSet<String>,
}

impl RecentlyDeleted {
    fn insert(&mut self, uid: &str) {
        if !self.uids.insert(uid.to_owned()) {
            return;
        }
        self.order.push_back(uid.to_owned());
        if self.order.len() > REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.uids.remove(&oldest);
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.uids.contains(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_during_a_load_are_kept_until_the_loads_are_done() {
        let mut deletions = Deletions::default();
        deletions.job("job-a", false);
        deletions.job("job-b", true);
        deletions.cronjob("cronjob-a", false);
        deletions.cronjob("cronjob-b", true);
        assert!(!deletions.during_load("job-a"));
        assert!(deletions.during_load("job-b"));
        assert!(!deletions.during_load("cronjob-a"));
        assert!(deletions.during_load("cronjob-b"));
        assert!(deletions.cronjob_deleted("cronjob-a") && deletions.cronjob_deleted("cronjob-b"));
        assert!(!deletions.cronjob_deleted("job-a"));
        deletions.loads_done();
        assert!(!deletions.during_load("job-b") && !deletions.during_load("cronjob-b"));
        assert!(
            deletions.cronjob_deleted("cronjob-b"),
            "the last deleted stay"
        );
    }

    #[test]
    fn remembers_the_last_deleted_uids_only() {
        let mut deleted = RecentlyDeleted::default();
        for i in 0..REMEMBERED + 5 {
            deleted.insert(&format!("uid-{i}"));
        }
        deleted.insert("uid-7");
        assert!(!deleted.contains("uid-4"), "the oldest are forgotten");
        assert!(deleted.contains("uid-5"));
        assert!(deleted.contains(&format!("uid-{}", REMEMBERED + 4)));
        assert_eq!(deleted.order.len(), REMEMBERED);
        assert_eq!(deleted.uids.len(), REMEMBERED);
    }
}
