//! The CronJob actors' own runtime: each actor is its state and its mailbox
//! in one allocation (a cell: hence [`CellActor`] and [`CellContext`],
//! apart from actix's `Actor` and `Context`), and each thread's one
//! task ([`CellThread`]) runs the actors that have mail, a batch each.
//!
//! Why not actix's actors, which the supervisor still is:
//! an actix actor is a task of its own with a context, a channel and an
//! cell's sender state beside its struct, about 700 bytes of heap before
//! the actor holds anything (`cargo bench --bench actors`, the bare actor),
//! and at 10^6 CronJobs the idle actor's size is the replica's size. Here an
//! idle actor is one allocation (its state, an empty mailbox, a handle on
//! its thread's queue) and no task: a task exists only while the actor
//! has a request in flight ([`CellContext::spawn`]).
//!
//! What an actor is stays the same: its own state, touched only by its own
//! handler, one message at a time, in the order they were sent; its own
//! wake-up (on the replica's wheel); its own life (stopped by itself).
//!
//! Bounds: an actor handles at most [`BATCH`] messages before the other
//! actors with mail on its thread get theirs, so a flooded actor delays
//! its thread's others by one batch at most; the thread's queue holds
//! each actor at most once (an actor with mail is queued once until its
//! mail is done). A mailbox is not bounded in count: what is sent to an actor is the watch events of its own
//! CronJob and Jobs, its wake-ups (one at a time) and its own decisions'
//! outcomes (one at a time), docs/architecture.md "Bounds".
//!
//! A handler that panics (a bug) ends its own actor alone, as if it had
//! stopped itself, and is counted (`shardcron_actor_panics_total`): the
//! other actors of its thread go on. Without that the panic ended the
//! thread's task, and every actor of the thread (with `--threads 1`,
//! every one of the replica's) fell silent while the replica kept its
//! Lease.

use actix::ArbiterHandle;
use futures::FutureExt as _;
use prometheus_client::metrics::counter::Counter;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

/// Messages one actor handles before its thread's other actors with mail.
pub const BATCH: usize = 32;

/// An actor: its handler and its last words.
pub trait CellActor: Send + Sized + 'static {
    type Message: Send + 'static;

    /// Handles one message. Only this actor's thread calls it, one message
    /// at a time.
    fn receive(&mut self, message: Self::Message, ctx: &mut CellContext<'_, Self>);

    /// Called once when the actor ends: it stopped itself, or the last
    /// [`CellRef`] to it went (its thread ending, or its owner dropping it).
    fn ended(&mut self);
}

/// An actor's mailbox: its messages waiting, and whether it is queued to run.
struct Mailbox<M> {
    /// Boxed, and only while there is mail: an idle actor holds no queue,
    /// and the cell of a CronJob's actor stays within 320 bytes, one of
    /// mimalloc's size classes (a `VecDeque` inline is 24 bytes more, and
    /// would put every actor in the next class, 384 bytes: 64 bytes a
    /// CronJob).
    #[allow(clippy::box_collection)] // the point: a thin pointer inline
    queue: Option<Box<VecDeque<M>>>,
    /// In its thread's queue (or being run): a send need not queue it.
    scheduled: bool,
    /// Stopped: what is sent is dropped.
    closed: bool,
}

impl<M> Mailbox<M> {
    /// Nothing left to run: unqueued, and the buffer given back (an idle
    /// actor holds none).
    fn settle(&mut self) {
        self.scheduled = false;
        self.queue = None;
    }

    /// Stopped, or its thread gone: what is queued and what comes is dropped.
    fn close(&mut self) {
        self.closed = true;
        self.queue = None;
    }
}

struct Cell<A: CellActor> {
    mail: Mutex<Mailbox<A::Message>>,
    actor: Mutex<Option<A>>,
    thread: mpsc::UnboundedSender<Arc<Cell<A>>>,
}

/// The bytes of one actor's allocation, the `Arc`'s counts included (a test
/// keeps the CronJob actor's within a size class of the allocator's).
#[cfg(test)]
pub(crate) const fn cell_size<A: CellActor>() -> usize {
    2 * std::mem::size_of::<usize>() + std::mem::size_of::<Cell<A>>()
}

/// A panic in a handler leaves the actor as the handler left it; the
/// runtime's own updates are single assignments.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: CellActor> Cell<A> {
    /// Queues `message`; false if the actor has stopped.
    fn deliver(self: &Arc<Self>, message: A::Message) -> bool {
        let mut mail = lock(&self.mail);
        if mail.closed {
            return false;
        }
        // Room for one: most mail is one message, and a VecDeque's first
        // push makes room for four (640 bytes of CronJob mail). When a start
        // sends every actor a message at once, that was 160 MB at 250,000
        // actors, left resident as holes (S7).
        mail.queue
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)))
            .push_back(message);
        if !mail.scheduled {
            mail.scheduled = true;
            if self.thread.send(self.clone()).is_err() {
                // Its thread has ended: nothing will run it again.
                mail.close();
                return false;
            }
        }
        true
    }

    /// The actor after its handler panicked: it takes no more mail, and
    /// says its last words (they panicking too changes nothing more).
    fn end_after_panic(self: &Arc<Self>) {
        lock(&self.mail).close();
        let actor = lock(&self.actor).take();
        if let Some(mut actor) = actor {
            let _ = catch_unwind(AssertUnwindSafe(|| actor.ended()));
        }
    }

    /// One batch: up to [`BATCH`] messages, then back to the end of the
    /// thread's queue if mail is left.
    fn run_batch(self: &Arc<Self>) {
        let mut slot = lock(&self.actor);
        for _ in 0..BATCH {
            let message = {
                let mut mail = lock(&self.mail);
                match mail.queue.as_mut().and_then(|queue| queue.pop_front()) {
                    Some(message) => message,
                    None => {
                        mail.settle();
                        return;
                    }
                }
            };
            let Some(actor) = slot.as_mut() else {
                return;
            };
            let mut ctx = CellContext {
                cell: self,
                stop: false,
            };
            actor.receive(message, &mut ctx);
            if ctx.stop {
                lock(&self.mail).close();
                if let Some(mut actor) = slot.take() {
                    drop(slot);
                    actor.ended();
                }
                return;
            }
        }
        drop(slot);
        let mut mail = lock(&self.mail);
        if mail.queue.as_ref().is_none_or(|queue| queue.is_empty()) {
            mail.settle();
        } else if self.thread.send(self.clone()).is_err() {
            mail.close();
        }
    }
}

impl<A: CellActor> Drop for Cell<A> {
    fn drop(&mut self) {
        let actor = self
            .actor
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut actor) = actor {
            actor.ended();
        }
    }
}

/// What a handler can do besides changing its actor's state.
pub struct CellContext<'a, A: CellActor> {
    cell: &'a Arc<Cell<A>>,
    stop: bool,
}

impl<A: CellActor> CellContext<'_, A> {
    pub fn cell_ref(&self) -> CellRef<A> {
        CellRef(self.cell.clone())
    }

    pub fn weak_cell_ref(&self) -> WeakCellRef<A> {
        WeakCellRef(Arc::downgrade(self.cell))
    }

    /// Ends the actor once this message is handled; its mail is dropped.
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Runs `work` on this thread (as a task of its own: the actor handles
    /// other messages meanwhile); what it ends with comes back to the
    /// actor as a message, unless the actor has stopped by then. Must be
    /// called on a thread with a `LocalSet` (every actix Arbiter has one).
    ///
    /// `work` is boxed once, here: a decision's future is about 19 KB (its
    /// requests' futures, a `Job` by value), and an `async` block that
    /// awaits a future it captured holds it twice (the capture and the
    /// awaited copy), so the task's cell was 76 KB, allocated and copied
    /// for every decision (loadtest/report/HISTORY.md, "Smaller futures").
    pub fn spawn<F>(&self, work: F)
    where
        F: Future<Output = A::Message> + 'static,
    {
        let to = self.cell_ref();
        tokio::task::spawn_local(Box::pin(work).map(move |message| {
            to.post(message);
        }));
    }
}

/// The actor has stopped: the message was not handled.
#[derive(Debug, Error)]
#[error("the actor has stopped")]
pub struct Stopped;

/// A strong reference to an actor: the actor lives while one exists (or while it has
/// mail or work in flight).
pub struct CellRef<A: CellActor>(Arc<Cell<A>>);

impl<A: CellActor> Clone for CellRef<A> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<A: CellActor> std::fmt::Debug for CellRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CellRef")
    }
}

impl<A: CellActor> CellRef<A> {
    /// Sends without waiting; false if the actor has stopped.
    pub fn post(&self, message: impl Into<A::Message>) -> bool {
        self.0.deliver(message.into())
    }

    /// Sends a question (`ask` wraps the reply's sender into a message)
    /// and waits for the answer.
    pub async fn ask<R>(
        &self,
        ask: impl FnOnce(oneshot::Sender<R>) -> A::Message,
    ) -> Result<R, Stopped> {
        let (reply, answer) = oneshot::channel();
        if !self.0.deliver(ask(reply)) {
            return Err(Stopped);
        }
        answer.await.map_err(|_| Stopped)
    }

    pub fn downgrade(&self) -> WeakCellRef<A> {
        WeakCellRef(Arc::downgrade(&self.0))
    }
}

/// A reference that does not keep the actor alive (the timer wheel's).
pub struct WeakCellRef<A: CellActor>(Weak<Cell<A>>);

impl<A: CellActor> Clone for WeakCellRef<A> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<A: CellActor> WeakCellRef<A> {
    pub fn upgrade(&self) -> Option<CellRef<A>> {
        self.0.upgrade().map(CellRef)
    }
}

/// One thread of actors: starts actors there and runs them.
pub struct CellThread<A: CellActor> {
    queue: mpsc::UnboundedSender<Arc<Cell<A>>>,
}

impl<A: CellActor> Clone for CellThread<A> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
        }
    }
}

impl<A: CellActor> CellThread<A> {
    /// Starts the thread's task on `arbiter`'s thread; it ends with
    /// the thread. `panics` counts the actors a panic ended.
    pub fn start(arbiter: &ArbiterHandle, panics: Counter) -> Self {
        let (queue, mut with_mail) = mpsc::unbounded_channel::<Arc<Cell<A>>>();
        arbiter.spawn(async move {
            while let Some(cell) = with_mail.recv().await {
                if catch_unwind(AssertUnwindSafe(|| cell.run_batch())).is_err() {
                    panics.inc();
                    tracing::error!("an actor's handler panicked (a bug, told above on stderr): that actor is ended, the others go on");
                    cell.end_after_panic();
                }
            }
        });
        Self { queue }
    }

    /// Starts `actor` on this thread; it handles nothing until
    /// it is sent something.
    pub fn start_actor(&self, actor: A) -> CellRef<A> {
        CellRef(Arc::new(Cell {
            mail: Mutex::new(Mailbox {
                queue: None,
                scheduled: false,
                closed: false,
            }),
            actor: Mutex::new(Some(actor)),
            thread: self.queue.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Records what it handled; stops on 0; answers questions with its count.
    struct Recorder {
        seen: Arc<Mutex<Vec<u32>>>,
        stopped: Arc<AtomicUsize>,
    }

    enum Message {
        Number(u32),
        Count(oneshot::Sender<usize>),
        /// Handled after a task of its own finishes.
        Later(u32),
        /// A planted bug.
        Panic,
    }

    impl CellActor for Recorder {
        type Message = Message;

        fn receive(&mut self, message: Message, ctx: &mut CellContext<'_, Self>) {
            match message {
                Message::Number(0) => ctx.stop(),
                Message::Number(n) => lock(&self.seen).push(n),
                Message::Count(reply) => {
                    let _ = reply.send(lock(&self.seen).len());
                }
                Message::Later(n) => ctx.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Message::Number(n)
                }),
                Message::Panic => panic!("a planted bug"),
            }
        }

        fn ended(&mut self) {
            self.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn recorder() -> (Recorder, Arc<Mutex<Vec<u32>>>, Arc<AtomicUsize>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicUsize::new(0));
        let actor = Recorder {
            seen: seen.clone(),
            stopped: stopped.clone(),
        };
        (actor, seen, stopped)
    }

    #[actix::test]
    async fn an_actor_handles_its_mail_in_order_across_turns_and_answers_questions() {
        let thread = CellThread::start(&actix::Arbiter::current(), Counter::default());
        let (actor, seen, _) = recorder();
        let cell = thread.start_actor(actor);
        // More than a batch's worth, sent before the thread runs.
        let sent: Vec<u32> = (1..=3 * BATCH as u32 + 5).collect();
        for n in &sent {
            assert!(cell.post(Message::Number(*n)));
        }
        assert_eq!(cell.ask(Message::Count).await.unwrap(), sent.len());
        assert_eq!(*lock(&seen), sent);
    }

    #[actix::test]
    async fn a_flooded_actor_lets_the_others_on_its_thread_have_a_turn() {
        let thread = CellThread::start(&actix::Arbiter::current(), Counter::default());
        let (flooded, _, _) = recorder();
        let (quiet, quiet_seen, _) = recorder();
        let flooded = thread.start_actor(flooded);
        let quiet = thread.start_actor(quiet);
        for n in 1..=10 * BATCH as u32 {
            flooded.post(Message::Number(n));
        }
        quiet.post(Message::Number(7));
        // The quiet actor's answer comes after the flooded one's first
        // turn, long before its tenth.
        let (reply, answer) = oneshot::channel();
        flooded.post(Message::Count(reply));
        assert_eq!(quiet.ask(Message::Count).await.unwrap(), 1);
        assert_eq!(*lock(&quiet_seen), vec![7]);
        assert_eq!(answer.await.unwrap(), 10 * BATCH);
    }

    #[actix::test]
    async fn a_stopped_actor_takes_no_more_mail_and_says_its_last_words_once() {
        let thread = CellThread::start(&actix::Arbiter::current(), Counter::default());
        let (actor, seen, stopped) = recorder();
        let cell = thread.start_actor(actor);
        cell.post(Message::Number(1));
        cell.post(Message::Number(0));
        // Queued behind the stop: dropped with the mailbox.
        cell.post(Message::Number(2));
        assert!(cell.ask(Message::Count).await.is_err());
        assert!(!cell.post(Message::Number(3)));
        assert_eq!(*lock(&seen), vec![1]);
        drop(cell);
        assert_eq!(stopped.load(Ordering::SeqCst), 1);
    }

    #[actix::test]
    async fn a_panicking_actor_ends_alone_and_is_counted() {
        let panics = Counter::default();
        let thread = CellThread::start(&actix::Arbiter::current(), panics.clone());
        let (faulty, _, faulty_stopped) = recorder();
        let faulty = thread.start_actor(faulty);
        let (sound, sound_seen, _) = recorder();
        let sound = thread.start_actor(sound);
        faulty.post(Message::Panic);
        sound.post(Message::Number(2));
        assert_eq!(sound.ask(Message::Count).await.unwrap(), 1);
        assert!(faulty.ask(Message::Count).await.is_err());
        assert!(!faulty.post(Message::Number(3)));
        assert_eq!(panics.get(), 1);
        assert_eq!(faulty_stopped.load(Ordering::SeqCst), 1);
        sound.post(Message::Number(4));
        assert_eq!(sound.ask(Message::Count).await.unwrap(), 2);
        assert_eq!(*lock(&sound_seen), vec![2, 4]);
    }

    #[actix::test]
    async fn spawned_work_comes_back_as_a_message_and_keeps_the_actor_alive() {
        let thread = CellThread::start(&actix::Arbiter::current(), Counter::default());
        let (actor, seen, stopped) = recorder();
        let cell = thread.start_actor(actor);
        let weak = cell.downgrade();
        cell.post(Message::Later(5));
        assert_eq!(cell.ask(Message::Count).await.unwrap(), 0);
        drop(cell);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*lock(&seen), vec![5]);
        // The last cell went with the task: the actor ended.
        assert!(weak.upgrade().is_none());
        assert_eq!(stopped.load(Ordering::SeqCst), 1);
    }
}
