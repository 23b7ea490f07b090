//! When an owned key starts: the hand-off rule ([`handoff::decide`]) applied
//! to the keys that wait, with the live peers' views. Part of the pure
//! protocol.

use super::{Command, Flaw, Ownership, Phase};
use crate::shard::handoff::{self, KeyDecision, Peer};
use crate::shard::protocol::Protocol;
use std::sync::Arc;
use std::time::Instant;

impl Ownership {
    /// The live peers with what their views claim, and whether the watch
    /// has shown our own publication back.
    pub(super) fn peers(&mut self, now: Instant) -> (Vec<Peer>, bool) {
        let asked = match &self.phase {
            Phase::Serving { publication, .. } => Some(publication),
            _ => None,
        };
        let ignore_peers = self.flawed(Flaw::IgnorePeers);
        let mut echoed = false;
        let mut peers = Vec::new();
        for (member, lease) in self.membership.live_views(now) {
            if member == self.me {
                echoed |= asked.is_some_and(|asked| {
                    lease.view.as_deref() == Some(asked.view.as_str())
                        && lease.publication.as_deref() == Some(asked.id.as_str())
                });
            } else if !ignore_peers {
                let protocol = match self.flawed(Flaw::ReadViewsAsVersion1) {
                    true => Some(Protocol::V1),
                    false => lease.view_protocol,
                };
                peers.push(Peer {
                    name: member.to_owned(),
                    claims: self.rings.claims(lease.view.as_deref(), protocol),
                });
            }
        }
        (peers, echoed)
    }

    /// Starts the waiting actors the hand-off rule lets run: only `key`, or all.
    pub(super) fn start_waiting(
        &mut self,
        only: Option<&str>,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let Phase::Serving { target, .. } = &self.phase else {
            return;
        };
        let target = target.clone();
        if !self.started.watches_listed || self.keys.none_waiting() {
            return;
        }
        // While a load hands over Jobs, only keys read on their own (with
        // their Jobs) may start.
        let jobs_pending = self.loads.loading_jobs();
        let from_standby = self.flawed(Flaw::StartFromStandby);
        let candidates: Vec<Arc<str>> = match only {
            Some(key) => match self.keys.waiting_entry(key) {
                Some((key, _)) => vec![key.clone()],
                None => return,
            },
            None if jobs_pending && !from_standby => self
                .loads
                .read_alone_keys()
                .filter(|key| self.keys.is_waiting(key))
                .cloned()
                .collect(),
            None => self.keys.waiting().cloned().collect(),
        };
        if candidates.is_empty() {
            return;
        }
        let (peers, own_view_seen) = self.peers(now);
        for key in candidates {
            let Some(uid) = self.keys.uid(&key).cloned() else {
                continue;
            };
            let unread =
                self.loads.awaits(&key) || (jobs_pending && !self.loads.knows_jobs_of(&key));
            if unread && !from_standby {
                continue;
            }
            match handoff::decide(&self.me, &uid, &target, own_view_seen, &peers) {
                KeyDecision::Run => {
                    if let Some(since) = self.keys.started(&key) {
                        let ran_elsewhere = self.ran_elsewhere(&uid);
                        out.push(Command::Start {
                            waited: now.saturating_duration_since(since),
                            key,
                            uid,
                            ran_elsewhere,
                        });
                    }
                }
                // Own view not back yet: the same for every key.
                KeyDecision::WaitForOwnView => break,
                KeyDecision::WaitFor(_) | KeyDecision::NotOurs => {}
            }
        }
    }
}
