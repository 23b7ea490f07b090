//! What others ask the supervisor: where a CronJob's actor is (the admin
//! API's [`Locate`]), the CronJobs it owns in a namespace ([`ListOwned`]),
//! and the ring as this replica sees it (`/debug/shards`).

use super::{Supervisor, now};
use crate::actor::cronjob::CronJobActor;
use crate::actor::runtime::CellRef;
use crate::clock::BootInstant;
use crate::reconcile::CronJobKind;
use crate::shard::debug::{DebugShards, ShardReport};
use actix::prelude::*;

/// Where a CronJob's actor is, for the admin API: here, waiting here, or
/// elsewhere. `uid`, when the caller knows it (from a GET), names the owner
/// of a CronJob whose actor is not here.
#[derive(Debug, Message)]
#[rtype(result = "Located")]
pub struct Locate {
    pub key: String,
    pub uid: Option<String>,
}

#[derive(Debug)]
pub enum Located {
    Running(CellRef<CronJobActor>),
    Waiting,
    /// Not here; its owner under this replica's ring, if known.
    Elsewhere {
        owner: Option<String>,
    },
}

impl Handler<Locate> for Supervisor {
    type Result = MessageResult<Locate>;

    fn handle(&mut self, message: Locate, _: &mut Self::Context) -> Self::Result {
        if let Some(running) = self
            .ownership
            .uid_of(&message.key)
            .and_then(|uid| self.actors.get(uid))
        {
            return MessageResult(Located::Running(running.cell.clone()));
        }
        if self.ownership.is_waiting(&message.key) {
            return MessageResult(Located::Waiting);
        }
        let owner = message
            .uid
            .as_deref()
            .and_then(|uid| self.ownership.owner_of(uid))
            .map(str::to_owned);
        MessageResult(Located::Elsewhere { owner })
    }
}

/// The CronJobs of one kind this replica owns in a namespace (`None`:
/// every namespace), at most `limit`, in key order.
#[derive(Message)]
#[rtype(result = "OwnedList")]
pub struct ListOwned {
    pub kind: CronJobKind,
    pub namespace: Option<String>,
    pub limit: usize,
}

/// What [`ListOwned`] answers: each key with where it stands (running or
/// waiting), and whether more were owned than listed.
#[derive(Debug, Default)]
pub struct OwnedList {
    pub keys: Vec<(String, Located)>,
    pub truncated: bool,
}

impl Handler<ListOwned> for Supervisor {
    type Result = MessageResult<ListOwned>;

    fn handle(&mut self, message: ListOwned, _: &mut Self::Context) -> Self::Result {
        let prefix = match (&message.namespace, message.kind) {
            (Some(namespace), kind) => kind.key(namespace, ""),
            (None, CronJobKind::Batch) => String::new(),
            (None, kind) => format!("{}/", kind.group()),
        };
        let mut owned = self
            .ownership
            .keys_from(&prefix)
            .filter(|(key, _)| CronJobKind::parse_key(key).0 == message.kind)
            .map(|(key, uid)| {
                let located = match self.actors.get(uid) {
                    Some(running) if !self.ownership.is_waiting(key) => {
                        Located::Running(running.cell.clone())
                    }
                    _ => Located::Waiting,
                };
                (key.to_string(), located)
            });
        let keys: Vec<(String, Located)> = owned.by_ref().take(message.limit).collect();
        let truncated = owned.next().is_some();
        MessageResult(OwnedList { keys, truncated })
    }
}

impl Handler<DebugShards> for Supervisor {
    type Result = MessageResult<DebugShards>;

    fn handle(&mut self, message: DebugShards, _: &mut Self::Context) -> Self::Result {
        let lease_valid = self.setup.fence.lock().may_act(BootInstant::now());
        let report = self.ownership.report(now(), lease_valid, message.keys);
        MessageResult(ShardReport {
            ring: self.setup.ring_name.clone(),
            jobs_remembered: self.for_actors.jobs.len(),
            standby: self.standby_report(),
            ..report
        })
    }
}
