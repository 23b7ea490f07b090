//! The dispatcher: grants the gateway's requests their turns, the most
//! urgent class first and namespaces in turn ([`FairQueue`]), one per token
//! of the [`TokenBucket`] refilled at the [`AdaptiveRate`]; and the gather
//! rule that shares a herd's first burst among its tenants.

use crate::apiserver::gateway::queue::{FairQueue, Priority};
use crate::apiserver::gateway::rate::{AdaptiveRate, TokenBucket};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::PriorityLabels;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Client-side limits, as kube-controller-manager's `--kube-api-qps` and
/// `--kube-api-burst`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: 20.0,
            burst: 30,
        }
    }
}

/// A request waiting for its turn.
pub(super) struct Ticket {
    pub(super) priority: Priority,
    pub(super) namespace: String,
    pub(super) grant: oneshot::Sender<()>,
    /// The CronJob whose decision sent it, if any (the admin API asks
    /// where a CronJob's request stands).
    pub(super) key: Option<Arc<str>>,
}

/// A ticket in the queue.
pub(super) struct Waiting {
    grant: oneshot::Sender<()>,
    pub(super) key: Option<Arc<str>>,
}

/// The queue, shared with whoever asks where a request stands (locked
/// only to push, pop and look: never across an await).
pub(super) type SharedQueue = Arc<std::sync::Mutex<FairQueue<Waiting>>>;

fn lock(queue: &SharedQueue) -> std::sync::MutexGuard<'_, FairQueue<Waiting>> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// After an idle spell, the dispatcher gathers tickets before it spends the
/// refilled burst, and stops at the first of: no ticket for [`GATHER_IDLE`];
/// no new namespace for [`GATHER_SETTLE`]; [`GATHER_MAX`] after the first.
///
/// Why: a herd's actors all wake at the same second, but they reach the
/// gateway one after another, over half a second for 5,000 of them on 2
/// cores. Granted at once, the burst (30 by default) goes to whichever
/// namespace's actors happened to come first, and a tenant with one CronJob
/// waits behind it; gathered first, the round-robin shares the burst among
/// every namespace due at that instant. Gathering is only worth its delay
/// while new namespaces keep arriving, hence the settle rule: a lone write
/// waits 5 ms, a one-namespace herd 25 ms, a many-tenant herd up to 250 ms.
const GATHER_IDLE: Duration = Duration::from_millis(5);
const GATHER_SETTLE: Duration = Duration::from_millis(25);
const GATHER_MAX: Duration = Duration::from_millis(250);

/// When a gather that started at `first` ends, given the last ticket and the
/// last ticket that opened a namespace's line.
fn gather_deadline(
    first: tokio::time::Instant,
    last_ticket: tokio::time::Instant,
    last_new_namespace: tokio::time::Instant,
) -> tokio::time::Instant {
    (first + GATHER_MAX)
        .min(last_ticket + GATHER_IDLE)
        .min(last_new_namespace + GATHER_SETTLE)
}

/// The dispatcher's pace: the token bucket, refilled at the adaptive rate,
/// which learns of 429s through a counter the requests bump.
pub(super) struct Pace {
    bucket: TokenBucket,
    /// Tokens only Job creates and what they wait for may spend: half the
    /// burst. A backlog of status writes, history deletes and events would
    /// otherwise keep the bucket empty, and a slot due meanwhile (keys
    /// gained from a dead replica, a CronJob on its own minute) would start
    /// at the refill rate instead of at once. The others still get the
    /// whole refill rate; only the reserve itself is kept from them.
    reserve: u32,
    rate: AdaptiveRate,
    throttled: Arc<AtomicU64>,
    seen: u64,
}

impl Pace {
    pub(super) fn new(limits: Limits, throttled: Arc<AtomicU64>) -> Self {
        let now = tokio::time::Instant::now().into_std();
        Pace {
            bucket: TokenBucket::new(limits.qps, limits.burst, now),
            reserve: limits.burst / 2,
            rate: AdaptiveRate::new(limits.qps),
            throttled,
            seen: 0,
        }
    }

    /// A token at `now` for a request of class `next`, or how long until one.
    fn try_take(
        &mut self,
        next: Priority,
        now: Instant,
        metrics: &Metrics,
    ) -> Result<(), Duration> {
        let throttled = self.throttled.load(Ordering::Relaxed);
        if throttled != self.seen {
            self.seen = throttled;
            self.rate.throttled(now);
        }
        let qps = self.rate.qps(now);
        self.bucket.set_qps(qps, now);
        metrics.rate_limit.set(qps);
        let keep = if next.may_use_reserve() {
            0
        } else {
            self.reserve
        };
        self.bucket.try_take_keeping(keep, now)
    }
}

/// Grants turns: namespaces in turn, each its most urgent write, one per
/// token. A ticket whose requester went away is skipped without a token.
pub(super) async fn dispatch(
    mut incoming: mpsc::UnboundedReceiver<Ticket>,
    mut pace: Pace,
    metrics: Arc<Metrics>,
    queue: SharedQueue,
) {
    let mut open = true;
    // Whether the ticket opened its namespace's line.
    let enqueue = |queue: &SharedQueue, ticket: Ticket| {
        let waiting = Waiting {
            grant: ticket.grant,
            key: ticket.key,
        };
        lock(queue)
            .push(ticket.priority, &ticket.namespace, waiting)
            .opened_line
    };
    let queue = &queue;
    loop {
        if lock(queue).is_empty() {
            if !open {
                return;
            }
            match incoming.recv().await {
                Some(ticket) => enqueue(queue, ticket),
                None => return,
            };
            let first = tokio::time::Instant::now();
            let (mut last_ticket, mut last_new_namespace) = (first, first);
            loop {
                let until = gather_deadline(first, last_ticket, last_new_namespace);
                match tokio::time::timeout_at(until, incoming.recv()).await {
                    Ok(Some(ticket)) => {
                        last_ticket = tokio::time::Instant::now();
                        if enqueue(queue, ticket) {
                            last_new_namespace = last_ticket;
                        }
                    }
                    Ok(None) => {
                        open = false;
                        break;
                    }
                    Err(_elapsed) => break,
                }
            }
        }
        while let Ok(ticket) = incoming.try_recv() {
            enqueue(queue, ticket);
        }
        let next = {
            let queued = lock(queue);
            for priority in Priority::ALL {
                metrics
                    .queue_depth
                    .get_or_create(&PriorityLabels {
                        priority: priority.label(),
                    })
                    .set(queued.depth(priority) as i64);
            }
            queued.next_priority()
        };
        let Some(next) = next else {
            continue;
        };
        // tokio's clock, so that tests can pause it.
        let now = tokio::time::Instant::now().into_std();
        // The next namespace's write, or, when only the reserve is left and
        // that write may not spend it, the first slot's start waiting.
        // (The scan for a slot's start waiting behind the front runs only
        // when the front's write may not spend the reserve and is refused.)
        let taken = match pace.try_take(next, now, &metrics) {
            Ok(()) => Ok(false),
            Err(_)
                if !next.may_use_reserve()
                    && lock(queue).has_urgent_head()
                    && pace.try_take(Priority::CreateJob, now, &metrics).is_ok() =>
            {
                Ok(true)
            }
            Err(wait) => Err(wait),
        };
        match taken {
            Ok(urgent_only) => {
                let mut queued = lock(queue);
                let mut pop = || {
                    if urgent_only {
                        queued.pop_urgent()
                    } else {
                        queued.pop()
                    }
                };
                while let Some((_, _, waiting)) = pop() {
                    if waiting.grant.send(()).is_ok() {
                        break;
                    }
                }
            }
            Err(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    ticket = incoming.recv(), if open => match ticket {
                        Some(ticket) => {
                            enqueue(queue, ticket);
                        }
                        None => open = false,
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues one create as an actor would; the receiver fires on its grant.
    fn ticket(tickets: &mpsc::UnboundedSender<Ticket>, namespace: &str) -> oneshot::Receiver<()> {
        ticket_of(tickets, Priority::CreateJob, namespace)
    }

    fn ticket_of(
        tickets: &mpsc::UnboundedSender<Ticket>,
        priority: Priority,
        namespace: &str,
    ) -> oneshot::Receiver<()> {
        let (grant, granted) = oneshot::channel();
        tickets
            .send(Ticket {
                priority,
                namespace: namespace.to_owned(),
                grant,
                key: None,
            })
            .expect("the dispatcher is running");
        granted
    }

    /// A burst of 4 and almost no refill: whoever is granted within the
    /// test got one of the burst's tokens.
    fn start_dispatcher() -> mpsc::UnboundedSender<Ticket> {
        let (tickets, queued) = mpsc::unbounded_channel();
        let limits = Limits {
            qps: 0.001,
            burst: 4,
        };
        let pace = Pace::new(limits, Arc::new(AtomicU64::new(0)));
        tokio::spawn(dispatch(
            queued,
            pace,
            Arc::new(Metrics::new()),
            SharedQueue::default(),
        ));
        tickets
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_halves_the_pace_of_grants_until_the_rate_climbs_back() {
        let (tickets, queued) = mpsc::unbounded_channel();
        let throttled = Arc::new(AtomicU64::new(0));
        let limits = Limits {
            qps: 10.0,
            burst: 1,
        };
        let metrics = Arc::new(Metrics::new());
        let pace = Pace::new(limits, throttled.clone());
        tokio::spawn(dispatch(
            queued,
            pace,
            metrics.clone(),
            SharedQueue::default(),
        ));
        // Ten grants in a row, one every 100 ms at 10 qps.
        let granted_in = |count: usize| {
            let tickets = tickets.clone();
            async move {
                let started = tokio::time::Instant::now();
                let grants: Vec<_> = (0..count).map(|_| ticket(&tickets, "ns")).collect();
                for grant in grants {
                    grant.await.expect("granted");
                }
                started.elapsed()
            }
        };
        granted_in(1).await; // the burst's token
        let full = granted_in(10).await;
        throttled.fetch_add(1, Ordering::Relaxed);
        let halved = granted_in(10).await;
        assert!(
            halved.as_secs_f64() > 1.6 * full.as_secs_f64(),
            "{halved:?} against {full:?}"
        );
        assert!(metrics.rate_limit.get() < 10.0);
        tokio::time::sleep(AdaptiveRate::RECOVERY).await;
        let recovered = granted_in(10).await;
        assert!(recovered.as_secs_f64() < 1.1 * full.as_secs_f64());
        assert_eq!(metrics.rate_limit.get(), 10.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_that_wakes_a_moment_later_shares_the_burst() {
        let tickets = start_dispatcher();
        let mut big: Vec<_> = (0..10).map(|_| ticket(&tickets, "big")).collect();
        // The small tenant's actor reaches the gateway 2 ms after the herd.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut small = ticket(&tickets, "small");
        tokio::time::sleep(Duration::from_millis(100)).await;

        assert_eq!(
            small.try_recv(),
            Ok(()),
            "the small tenant waits behind the burst"
        );
        let big_granted = big.iter_mut().filter_map(|g| g.try_recv().ok()).count();
        assert_eq!(big_granted, 3, "the rest of the burst goes to the herd");
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_ticket_costs_no_token() {
        let tickets = start_dispatcher();
        // Ten tickets of a stopping actor, abandoned while queued, then
        // four of another: the burst of 4 goes to the four.
        let abandoned: Vec<_> = (0..10).map(|_| ticket(&tickets, "moved")).collect();
        drop(abandoned);
        let mut kept: Vec<_> = (0..4).map(|_| ticket(&tickets, "staying")).collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(kept.iter_mut().all(|g| g.try_recv() == Ok(())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_of_lesser_writes_leaves_half_the_burst_for_a_slots_start() {
        let tickets = start_dispatcher();
        // A backlog of status writes and events: half the burst of 4 goes.
        let mut backlog: Vec<_> = (0..10)
            .map(|i| ticket_of(&tickets, Priority::ALL[3 + i % 3], "busy"))
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let granted = backlog.iter_mut().filter_map(|g| g.try_recv().ok()).count();
        assert_eq!(granted, 2);
        // A create and the read before it find the other half at once.
        let mut start = [
            ticket_of(&tickets, Priority::ReplaceDelete, "due"),
            ticket(&tickets, "due"),
        ];
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(start.iter_mut().all(|g| g.try_recv() == Ok(())));
        assert_eq!(
            backlog.iter_mut().filter_map(|g| g.try_recv().ok()).count(),
            0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_write_waits_only_for_the_idle_gap() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        ticket(&tickets, "a").await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_IDLE);
    }

    /// Queues a ticket for `namespace(i)` every 4 ms (inside the idle gap)
    /// for 400 ms, as a herd's actors reaching the gateway one by one.
    fn trickle(
        tickets: &mpsc::UnboundedSender<Ticket>,
        namespace: impl Fn(usize) -> String + Send + 'static,
    ) -> tokio::task::JoinHandle<Vec<oneshot::Receiver<()>>> {
        let tickets = tickets.clone();
        tokio::spawn(async move {
            let mut later = Vec::new();
            for i in 0..100 {
                tokio::time::sleep(Duration::from_millis(4)).await;
                later.push(ticket(&tickets, &namespace(i)));
            }
            later
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_one_namespace_herd_is_gathered_until_no_new_namespace_comes() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        let first = ticket(&tickets, "big");
        let feeder = trickle(&tickets, |_| "big".to_owned());
        first.await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_SETTLE);
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn new_namespaces_arriving_steadily_are_gathered_for_at_most_the_limit() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        let first = ticket(&tickets, "a");
        let feeder = trickle(&tickets, |i| format!("tenant-{i}"));
        first.await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_MAX);
        feeder.abort();
    }

    /// S5's shape: the big tenant's actors keep arriving, and one-CronJob
    /// tenants turn up among them, 20 ms apart, for longer than a fixed
    /// 50 ms gather would have waited.
    #[tokio::test(start_paused = true)]
    async fn tenants_arriving_among_a_herd_share_the_burst() {
        let tickets = start_dispatcher();
        let first = ticket(&tickets, "big");
        let feeder = trickle(&tickets, |_| "big".to_owned());
        let mut small = Vec::new();
        for tenant in 0..3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            small.push(ticket(&tickets, &format!("small-{tenant}")));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (tenant, granted) in small.iter_mut().enumerate() {
            assert_eq!(
                granted.try_recv(),
                Ok(()),
                "small-{tenant} waits behind the herd"
            );
        }
        drop(first);
        feeder.abort();
    }
}
