//! Where the CronJobs' actors run: one dispatcher per actor thread
//! (`--threads`), each new actor on the next in turn, all arming their
//! wake-ups on one timer wheel.

use crate::actor::cronjob::CronJobActor;
use crate::actor::runtime::{CellRef, CellThread};
use crate::actor::wheel::TimerWheel;
use crate::clock::Clock;
use actix::ArbiterHandle;
use prometheus_client::metrics::counter::Counter;

pub(super) struct ActorThreads {
    wheel: TimerWheel<CronJobActor>,
    /// Never empty: one per arbiter given, and the current one if none was.
    dispatchers: Vec<CellThread<CronJobActor>>,
    next: usize,
}

impl ActorThreads {
    /// A dispatcher on each of `arbiters`; a handler's panic counts in `panics`.
    pub(super) fn start(arbiters: &[ArbiterHandle], panics: &Counter, clock: Clock) -> Self {
        let mut dispatchers: Vec<_> = arbiters
            .iter()
            .map(|arbiter| CellThread::start(arbiter, panics.clone()))
            .collect();
        if dispatchers.is_empty() {
            dispatchers.push(CellThread::start(
                &actix::Arbiter::current(),
                panics.clone(),
            ));
        }
        Self {
            wheel: TimerWheel::start(clock),
            dispatchers,
            next: 0,
        }
    }

    /// The wheel a new actor arms its wake-ups on.
    pub(super) fn wheel(&self) -> TimerWheel<CronJobActor> {
        self.wheel.clone()
    }

    /// Runs `actor` on the next thread in turn.
    pub(super) fn start_actor(&mut self, actor: CronJobActor) -> CellRef<CronJobActor> {
        let dispatcher = &self.dispatchers[self.next % self.dispatchers.len()];
        self.next = self.next.wrapping_add(1);
        dispatcher.start_actor(actor)
    }
}
