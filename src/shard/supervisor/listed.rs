//! Where the watches stand: each watched scope's CronJob and Job watches
//! (their re-lists, and whether each has listed once) and the ring's Lease
//! watch's re-list. The protocol may start actors once every scope has
//! listed ([`Listed::all_listed`]).

use super::intake::JobStream;
use crate::reconcile::{CronJobKind, CronJobKinds};
use crate::shard::relist::Relist;
use std::sync::Arc;

/// Every scope's watches and the Lease watch.
pub(super) struct Listed {
    /// By scope number.
    pub(super) scopes: Vec<ScopeState>,
    pub(super) leases: Relist<String>,
    /// Every scope has listed at least once.
    synced: bool,
}

impl Listed {
    pub(super) fn new(scopes: Vec<ScopeState>) -> Self {
        Self {
            scopes,
            leases: Relist::default(),
            synced: false,
        }
    }

    /// Whether every scope's watches have listed (`None`: not yet), and if
    /// so whether it is the first time.
    pub(super) fn all_listed(&mut self) -> Option<bool> {
        if !self.scopes.iter().all(ScopeState::listed) {
            return None;
        }
        let first = !self.synced;
        self.synced = true;
        Some(first)
    }
}

/// Where one watched scope (a namespace, or all) stands.
#[derive(Default)]
pub(super) struct ScopeState {
    pub(super) namespace: Option<String>,
    /// Each served kind's CronJob watch: its re-list, and whether it has
    /// listed once.
    cronjobs: Vec<(CronJobKind, Relist<Arc<str>>, bool)>,
    labelled_jobs_listed: bool,
    unlabelled_jobs_listed: bool,
    labelled_jobs: Relist<String>,
    unlabelled_jobs: Relist<String>,
}

impl ScopeState {
    /// The scope of `namespace`, serving `kinds`; without the unlabelled
    /// Job watch (`unlabelled_jobs: false`), its list counts as done from
    /// the start.
    pub(super) fn new(
        namespace: Option<String>,
        kinds: CronJobKinds,
        unlabelled_jobs: bool,
    ) -> Self {
        Self {
            namespace,
            cronjobs: kinds
                .iter()
                .map(|kind| (kind, Relist::default(), false))
                .collect(),
            unlabelled_jobs_listed: !unlabelled_jobs,
            ..Self::default()
        }
    }

    /// The re-list of the CronJob watch of `kind`, and whether it listed.
    pub(super) fn cronjobs(
        &mut self,
        kind: CronJobKind,
    ) -> Option<(&mut Relist<Arc<str>>, &mut bool)> {
        self.cronjobs
            .iter_mut()
            .find(|(k, _, _)| *k == kind)
            .map(|(_, relist, listed)| (relist, listed))
    }

    pub(super) fn listed(&self) -> bool {
        self.cronjobs.iter().all(|(_, _, listed)| *listed)
            && self.labelled_jobs_listed
            && self.unlabelled_jobs_listed
    }

    /// Watches that started at a version rather than with a list (the
    /// first ring's: [`super::watches::Reshaped`]) count as listed.
    pub(super) fn started_without_list(&mut self, labelled_jobs: bool, kinds: &[CronJobKind]) {
        self.labelled_jobs_listed |= labelled_jobs;
        for (kind, _, listed) in &mut self.cronjobs {
            *listed |= kinds.contains(kind);
        }
    }

    pub(super) fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    pub(super) fn jobs(&mut self, stream: JobStream) -> (&mut Relist<String>, &mut bool) {
        match stream {
            JobStream::Labelled => (&mut self.labelled_jobs, &mut self.labelled_jobs_listed),
            JobStream::Unlabelled => (&mut self.unlabelled_jobs, &mut self.unlabelled_jobs_listed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::CronJobKind;

    #[test]
    fn every_scope_lists_before_the_protocol_may_start_actors() {
        let kinds = CronJobKinds::of([CronJobKind::Batch]);
        let mut listed = Listed::new(vec![
            ScopeState::new(Some("a".into()), kinds, false),
            ScopeState::new(Some("b".into()), kinds, true),
        ]);
        assert_eq!(listed.all_listed(), None);
        for scope in &mut listed.scopes {
            scope.started_without_list(true, &[CronJobKind::Batch]);
        }
        assert_eq!(
            listed.all_listed(),
            None,
            "b's unlabelled Jobs are not listed"
        );
        *listed.scopes[1].jobs(JobStream::Unlabelled).1 = true;
        assert_eq!(listed.all_listed(), Some(true));
        assert_eq!(listed.all_listed(), Some(false), "the first time once");
    }
}
