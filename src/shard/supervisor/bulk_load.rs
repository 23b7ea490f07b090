//! Bulk loads of gained CronJobs (and their Jobs) when the ring changes:
//! the pages stream into the supervisor, the Jobs first; the protocol
//! hears when a load's Jobs are all in (it starts no gained actor before)
//! and when the load is done.

use super::Supervisor;
use super::intake::Source;
use crate::apiserver::bulk::{self, CronJobList, LoadCounts, LoadSelectors, Loaded};
use crate::bucket::{self, Bucket};
use crate::shard::ownership::{Epoch, Input};
use crate::shard::ring::Ring;
use crate::telemetry::metrics::{MoveDirection, MovedLabels};
use crate::telemetry::trace_span::TraceSpan;
use actix::prelude::*;
use futures::FutureExt as _;
use std::sync::Arc;

/// A page of a bulk load asked for in an epoch.
#[derive(Message)]
#[rtype(result = "()")]
struct LoadPage(Loaded, Epoch);

/// A bulk load finished; the ring its gains were counted from, and
/// whether its page that says the Jobs are done was delivered.
#[derive(Message)]
#[rtype(result = "()")]
struct LoadDone {
    result: Result<LoadCounts, bulk::LoadError>,
    previous: Option<Arc<Ring>>,
    jobs_told: bool,
}

impl Supervisor {
    /// Loads, in bulk, the CronJobs owned under `target` but not under
    /// `previous` (all owned if `None`).
    pub(super) fn load(
        &mut self,
        target: Arc<Ring>,
        previous: Option<Arc<Ring>>,
        epoch: Epoch,
        ctx: &mut Context<Self>,
    ) {
        let me = self.setup.me.clone();
        let client = self.setup.client.clone();
        let namespaces = self.namespaces();
        let Some(selectors) = self.load_selectors(&target, previous.as_deref()) else {
            // Nothing gained: nothing to list.
            ctx.notify(LoadDone {
                result: Ok(LoadCounts::default()),
                previous,
                jobs_told: false,
            });
            return;
        };
        self.preempt_standby_load();
        let to = ctx.address();
        let span = TraceSpan::root("shard.load", Vec::new);
        tokio::spawn(span.clone().attach(async move {
            let gained = |uid: &str| {
                target.owner(uid) == Some(me.as_str())
                    && previous
                        .as_ref()
                        .is_none_or(|p| p.owner(uid) != Some(me.as_str()))
            };
            let mut jobs_told = false;
            let deliver = |page: Loaded| {
                jobs_told |= page.jobs_done;
                to.send(LoadPage(page, epoch)).map(drop)
            };
            let result = bulk::load(client, &namespaces, &selectors, gained, deliver).await;
            if let Ok(counts) = &result {
                span.set("shard.cronjobs_gained", counts.cronjobs as i64);
                span.set("shard.jobs_gained", counts.jobs as i64);
            }
            to.do_send(LoadDone {
                result,
                previous,
                jobs_told,
            });
        }));
    }

    /// What to ask the server for when loading what `target` gives this
    /// replica and `previous` did not: the gained buckets' Jobs and the
    /// unlabelled ones, and each served kind's CronJobs (where the server
    /// shards that kind's lists, only the gained buckets', in lists of
    /// about [`bulk::LIST_TARGET`] by the density this replica knows).
    /// `None` if nothing is gained.
    fn load_selectors(&self, target: &Ring, previous: Option<&Ring>) -> Option<LoadSelectors> {
        let me = self.setup.me.as_str();
        let mut gained: Vec<Bucket> = target
            .buckets_of(me)
            .into_iter()
            .filter(|b| previous.is_none_or(|p| p.owner_of(*b) != Some(me)))
            .collect();
        if gained.is_empty() {
            return None;
        }
        // Sorted, so that a list's buckets are few hash ranges.
        gained.sort_unstable();
        Some(LoadSelectors {
            cronjobs: self.cronjob_lists(&gained, previous.map_or(0, |p| p.buckets_of(me).len())),
            jobs: std::iter::once(bucket::label_selector(&gained))
                .chain(
                    self.watches
                        .watches_unlabelled_jobs()
                        .then(bucket::unlabelled_selector),
                )
                .collect(),
            reads: self.watches.list_reads(),
        })
    }
}

impl Supervisor {
    /// The lists that read the CronJobs of `buckets` (sorted): for each
    /// served kind, where the server shards its lists, lists of about
    /// [`bulk::list_target`] CronJobs by the density this replica knows
    /// (its actors over the `owned_buckets` they are in;
    /// [`bulk::buckets_per_list_knowing`]); else one list of every CronJob
    /// of the kind.
    pub(super) fn cronjob_lists(
        &self,
        buckets: &[Bucket],
        owned_buckets: usize,
    ) -> Vec<CronJobList> {
        let reads = self.watches.list_reads();
        self.watches
            .served()
            .iter()
            .flat_map(|served| {
                let kind = served.kind;
                let lists: Vec<CronJobList> = if served.server_shards {
                    let per_list = bulk::buckets_per_list_knowing(
                        self.actors.len(),
                        owned_buckets,
                        self.watches.cronjobs_at_start(),
                        bulk::list_target(kind, reads),
                    );
                    buckets
                        .chunks(bulk::even_per_list(buckets.len(), per_list))
                        .map(|chunk| CronJobList {
                            kind,
                            buckets: Some(chunk.to_vec()),
                        })
                        .collect()
                } else {
                    vec![CronJobList {
                        kind,
                        buckets: None,
                    }]
                };
                lists
            })
            .collect()
    }
}

impl Handler<LoadPage> for Supervisor {
    type Result = ();

    /// The Jobs' pages come first, then the page that says they are all
    /// in (from then on the protocol starts each gained key as it
    /// arrives), then the CronJobs' pages ([`Supervisor::take_loaded`]).
    fn handle(&mut self, LoadPage(page, epoch): LoadPage, ctx: &mut Self::Context) {
        let jobs_done = page.jobs_done;
        self.take_loaded(page, Source::Load(epoch), ctx);
        if jobs_done {
            self.step(Input::LoadJobsDone, super::now(), ctx, None);
        }
    }
}

impl Handler<LoadDone> for Supervisor {
    type Result = ();

    fn handle(
        &mut self,
        LoadDone {
            result,
            previous,
            jobs_told,
        }: LoadDone,
        ctx: &mut Self::Context,
    ) {
        let ok = match result {
            Ok(counts) => {
                tracing::info!(
                    cronjobs = counts.cronjobs,
                    jobs = counts.jobs,
                    "loaded gained CronJobs"
                );
                self.actor_services
                    .metrics
                    .keys_moved
                    .get_or_create(&MovedLabels {
                        direction: MoveDirection::Gained,
                    })
                    .inc_by(counts.cronjobs as u64);
                true
            }
            Err(error) => {
                tracing::warn!(%error, "bulk load of gained CronJobs failed; retrying");
                false
            }
        };
        self.step(
            Input::LoadDone {
                ok,
                previous,
                jobs_told,
            },
            super::now(),
            ctx,
            None,
        );
        if self.ownership.loads_in_flight() == 0 {
            self.deletions.loads_done();
            self.loads_idle_on_standby(ctx);
            crate::memory::release_free_pages();
        }
    }
}
