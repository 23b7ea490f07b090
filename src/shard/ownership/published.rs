//! What this replica has published of its view: how many publications
//! (their ids), whether one was published since the last join, the live
//! peers it was published before, and whether the ring acted on gains from
//! a leaving peer (then the next view waits for the gains due first:
//! [`super::Ownership::may_publish`]).
//!
//! Invariant: a publication's id is the process's incarnation and a count
//! that only grows, so no two publications of one process share an id.

use super::messages::Epoch;
use crate::shard::handoff;
use crate::shard::lease::Publication;
use crate::shard::ring::Ring;
use std::collections::BTreeSet;

#[derive(Debug)]
pub(super) struct Published {
    /// Unique to this process: the publications' ids start with it.
    incarnation: String,
    count: u64,
    /// A view was published since the last join.
    in_join: bool,
    /// The live peers when the view was last published: a change of them
    /// publishes again ([`super::Ownership::advance`]).
    live: BTreeSet<String>,
    /// The ring changed to leave out a live member that is leaving: the
    /// next view is published once its keys are loaded here, or those due
    /// first read.
    gains_from_leaving: bool,
    /// The epoch of the last [`super::Input::DueKeysRead`]: in the current
    /// one, a ring gaining from a leaving peer publishes with its loads in
    /// flight.
    due_read_in: Option<Epoch>,
}

impl Published {
    pub(super) fn new(incarnation: String) -> Self {
        Self {
            incarnation,
            count: 0,
            in_join: false,
            live: BTreeSet::new(),
            gains_from_leaving: false,
            due_read_in: None,
        }
    }

    /// The next publication: `target`'s view (`leaving`: it says so),
    /// published before the live peers `live`.
    pub(super) fn next(
        &mut self,
        target: &Ring,
        leaving: bool,
        live: BTreeSet<String>,
    ) -> Publication {
        self.count += 1;
        self.live = live;
        Publication {
            view: handoff::encode_view(target),
            protocol: target.protocol(),
            id: format!("{}.{}", self.incarnation, self.count),
            leaving,
        }
    }

    /// The join's first view is out (its gains from a leaver with it).
    pub(super) fn joined(&mut self) {
        self.in_join = true;
        self.gains_from_leaving = false;
    }

    /// The view is withdrawn (a rejoin after a lapse).
    pub(super) fn withdrawn(&mut self) {
        self.in_join = false;
    }

    pub(super) fn in_join(&self) -> bool {
        self.in_join
    }

    /// Whether the live peers are others than when the view was published.
    pub(super) fn live_changed(&self, live: &BTreeSet<String>) -> bool {
        *live != self.live
    }

    /// The ring acted on had a member that is leaving: this ring gains from it.
    pub(super) fn note_gains_from_a_leaver(&mut self) {
        self.gains_from_leaving = true;
    }

    pub(super) fn gains_from_a_leaver(&self) -> bool {
        self.gains_from_leaving
    }

    /// The gained keys due first were read in `epoch`.
    pub(super) fn due_read(&mut self, epoch: Epoch) {
        self.due_read_in = Some(epoch);
    }

    /// Whether the gains no longer hold the view back in `epoch`: none from
    /// a leaver, or those due first read in it.
    pub(super) fn gains_ready(&self, epoch: Epoch) -> bool {
        !self.gains_from_leaving || self.due_read_in == Some(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ring::Ring;

    #[test]
    fn each_publication_has_an_id_of_its_own_and_remembers_its_live_peers() {
        let ring = Ring::new(["r0", "r1"]);
        let mut published = Published::new("inc".into());
        let live: BTreeSet<String> = ["r1".to_owned()].into();
        let first = published.next(&ring, false, live.clone());
        let second = published.next(&ring, true, BTreeSet::new());
        assert_eq!((first.id.as_str(), second.id.as_str()), ("inc.1", "inc.2"));
        assert_eq!(first.view, "r0,r1");
        assert!(second.leaving && !first.leaving);
        assert!(published.live_changed(&live), "published last before none");
        assert!(!published.live_changed(&BTreeSet::new()));
    }

    #[test]
    fn gains_from_a_leaver_hold_the_view_until_those_due_are_read_in_the_epoch() {
        let mut published = Published::new("inc".into());
        let (epoch, later): (Epoch, Epoch) = (1, 2);
        assert!(published.gains_ready(epoch));
        published.note_gains_from_a_leaver();
        assert!(!published.gains_ready(epoch));
        published.due_read(epoch);
        assert!(published.gains_ready(epoch) && !published.gains_ready(later));
        published.joined();
        assert!(published.in_join() && published.gains_ready(later));
        published.withdrawn();
        assert!(!published.in_join());
    }
}
