//! The gained CronJobs read on their own at a take-over
//! ([`super::standby_reads`]): the reads in flight, the rescan armed while
//! the loads of gained keys run, and whether the protocol may be told
//! that every key due soon has been read
//! ([`crate::shard::ownership::Input::DueKeysRead`]).

use crate::shard::ownership::Epoch;

#[derive(Debug, Default)]
pub(super) struct DueReads {
    /// A rescan of the gained keys is armed.
    rescan_armed: bool,
    /// Gained keys being read on their own.
    in_flight: usize,
    /// The standby entries cannot tell every gained key due soon, until
    /// the loads of gained keys are idle again: a bucket gained since had
    /// none loaded (its standby load pending or in flight, its actors'
    /// stop reports not all in, the watch's list under way).
    unknown: bool,
    /// The epoch whose due keys were last reported read.
    told: Option<Epoch>,
}

impl DueReads {
    /// `keys` more are being read.
    pub(super) fn started(&mut self, keys: usize) {
        self.in_flight += keys;
    }

    /// A read ended, whatever its result.
    pub(super) fn ended(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Arms a rescan unless one is: whether it was armed now.
    pub(super) fn arm_rescan(&mut self) -> bool {
        !std::mem::replace(&mut self.rescan_armed, true)
    }

    pub(super) fn rescan_ran(&mut self) {
        self.rescan_armed = false;
    }

    /// The entries cannot tell every gained key due soon (if `unknown`)
    /// until the loads are next idle.
    pub(super) fn unknown_until_loads_idle(&mut self, unknown: bool) {
        self.unknown |= unknown;
    }

    /// The loads of gained keys are idle: the entries tell again.
    pub(super) fn loads_idle(&mut self) {
        self.unknown = false;
    }

    /// Whether the protocol may be told that `epoch`'s due keys are read,
    /// as far as the reads know: none in flight, the entries can tell, and
    /// not told yet in this epoch.
    pub(super) fn may_tell(&self, epoch: Epoch) -> bool {
        !self.unknown && self.in_flight == 0 && self.told != Some(epoch)
    }

    pub(super) fn told(&mut self, epoch: Epoch) {
        self.told = Some(epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn told_once_per_epoch_when_nothing_is_in_flight_and_the_entries_tell() {
        let mut reads = DueReads::default();
        assert!(reads.may_tell(1));
        reads.started(2);
        assert!(!reads.may_tell(1), "two reads in flight");
        reads.ended();
        reads.ended();
        reads.ended();
        assert!(reads.may_tell(1), "never below zero");
        reads.unknown_until_loads_idle(true);
        reads.unknown_until_loads_idle(false);
        assert!(!reads.may_tell(1), "unknown until the loads are idle");
        reads.loads_idle();
        reads.told(1);
        assert!(!reads.may_tell(1), "once per epoch");
        assert!(reads.may_tell(2));
    }

    #[test]
    fn one_rescan_armed_at_a_time() {
        let mut reads = DueReads::default();
        assert!(reads.arm_rescan());
        assert!(!reads.arm_rescan());
        reads.rescan_ran();
        assert!(reads.arm_rescan());
    }
}
