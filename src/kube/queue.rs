//! The write gateway's queue discipline: strict priority between classes of
//! writes, and round-robin across namespaces inside a class, so one tenant's
//! 10,000 CronJobs due at `0 * * * *` cannot starve another tenant's one.
//! Pure data structure; the gateway pairs it with a [`TokenBucket`].
//!
//! [`TokenBucket`]: super::rate::TokenBucket

use std::collections::{HashMap, VecDeque};

/// Classes of writes, most urgent first. A Job create is the firing itself;
/// everything else can wait behind it, but for the status write that is a
/// slot's only lasting record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// A status write recording a slot whose Job may vanish without this
    /// replica (`ttlSecondsAfterFinished`), or that a stopping actor owes
    /// the key's next owner: behind a herd's creates it would leave the
    /// slot unrecorded for minutes (a lapse meanwhile lets the next owner
    /// start it again once the Job is gone) and hold a hand-off back.
    RecordSlot,
    CreateJob,
    /// What a slot's start may wait for besides its create: Replace's
    /// deletes and the decision's live reads.
    ReplaceDelete,
    Status,
    HistoryDelete,
    /// Kubernetes Events: informative, never ahead of a write that matters.
    Event,
}

impl Priority {
    pub const ALL: [Priority; 6] = [
        Priority::RecordSlot,
        Priority::CreateJob,
        Priority::ReplaceDelete,
        Priority::Status,
        Priority::HistoryDelete,
        Priority::Event,
    ];

    /// Whether the class may spend the bucket's last tokens, the reserve
    /// kept for a slot's start (see `gateway::dispatch`).
    pub fn may_use_reserve(self) -> bool {
        matches!(
            self,
            Priority::RecordSlot | Priority::CreateJob | Priority::ReplaceDelete
        )
    }

    /// The metric label of the class.
    pub fn label(self) -> &'static str {
        match self {
            Priority::RecordSlot => "record_slot",
            Priority::CreateJob => "create_job",
            Priority::ReplaceDelete => "replace_delete",
            Priority::Status => "status",
            Priority::HistoryDelete => "history_delete",
            Priority::Event => "event",
        }
    }
}

/// One class: a FIFO per namespace, served in turn.
#[derive(Debug)]
struct Class<T> {
    /// Namespaces with queued writes, in serving order.
    turn: VecDeque<String>,
    queues: HashMap<String, VecDeque<T>>,
    len: usize,
}

impl<T> Default for Class<T> {
    fn default() -> Self {
        Class {
            turn: VecDeque::new(),
            queues: HashMap::new(),
            len: 0,
        }
    }
}

impl<T> Class<T> {
    fn push(&mut self, namespace: &str, item: T) -> usize {
        let queue = match self.queues.get_mut(namespace) {
            Some(queue) => queue,
            None => {
                self.turn.push_back(namespace.to_owned());
                self.queues.entry(namespace.to_owned()).or_default()
            }
        };
        queue.push_back(item);
        self.len += 1;
        queue.len()
    }

    fn pop(&mut self) -> Option<(String, T)> {
        let namespace = self.turn.pop_front()?;
        let queue = self.queues.get_mut(&namespace)?;
        let item = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.remove(&namespace);
        } else {
            self.turn.push_back(namespace.clone());
        }
        self.len -= 1;
        Some((namespace, item))
    }
}

/// Writes waiting for their turn.
#[derive(Debug)]
pub struct FairQueue<T> {
    classes: [Class<T>; Priority::ALL.len()],
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            classes: Default::default(),
        }
    }
}

/// Where a write landed: how many writes of more urgent classes are queued,
/// and its place in its namespace's own line (1 = next for that namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub ahead_in_higher_classes: usize,
    pub in_namespace: usize,
}

impl<T> FairQueue<T> {
    pub fn push(&mut self, priority: Priority, namespace: &str, item: T) -> Position {
        let ahead = self.classes[..priority as usize]
            .iter()
            .map(|c| c.len)
            .sum();
        let in_namespace = self.classes[priority as usize].push(namespace, item);
        Position {
            ahead_in_higher_classes: ahead,
            in_namespace,
        }
    }

    /// The next write: the most urgent class first, namespaces in turn.
    pub fn pop(&mut self) -> Option<(Priority, String, T)> {
        Priority::ALL.into_iter().find_map(|priority| {
            let (namespace, item) = self.classes[priority as usize].pop()?;
            Some((priority, namespace, item))
        })
    }

    /// The class of the next write, if any.
    pub fn next_priority(&self) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|priority| self.classes[*priority as usize].len > 0)
    }

    pub fn len(&self) -> usize {
        self.classes.iter().map(|c| c.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queued writes of one class (the depth metric).
    pub fn depth(&self, priority: Priority) -> usize {
        self.classes[priority as usize].len
    }

    /// The first queued write `matches` picks, and how many writes would be
    /// granted before it if nothing else arrived: every write of a more
    /// urgent class, then, round-robin in its class, up to its own round
    /// from each namespace (one more from those served before its own).
    pub fn place_of(&self, mut matches: impl FnMut(&T) -> bool) -> Option<Place> {
        let mut ahead = 0;
        for priority in Priority::ALL {
            let class = &self.classes[priority as usize];
            for (turn, namespace) in class.turn.iter().enumerate() {
                let Some(index) = class
                    .queues
                    .get(namespace)
                    .and_then(|queue| queue.iter().position(&mut matches))
                else {
                    continue;
                };
                let in_class: usize = class
                    .turn
                    .iter()
                    .enumerate()
                    .map(|(other, name)| {
                        let len = class.queues.get(name).map_or(0, VecDeque::len);
                        let rounds = if other < turn { index + 1 } else { index };
                        len.min(rounds)
                    })
                    .sum();
                return Some(Place {
                    priority,
                    ahead: ahead + in_class,
                });
            }
            ahead += class.len;
        }
        None
    }
}

impl<T> FairQueue<T> {
    /// How many writes wait in each class (most urgent first, empty ones
    /// included) and, per class, each namespace's line (in serving order).
    /// Copies counts only: the caller sorts, outside the gateway's lock.
    pub fn census(&self) -> Vec<ClassCensus> {
        Priority::ALL
            .into_iter()
            .map(|priority| {
                let class = &self.classes[priority as usize];
                ClassCensus {
                    priority,
                    waiting: class.len,
                    namespaces: class
                        .turn
                        .iter()
                        .map(|namespace| {
                            let len = class.queues.get(namespace).map_or(0, VecDeque::len);
                            (namespace.clone(), len)
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

/// One class's writes waiting (see [`FairQueue::census`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassCensus {
    pub priority: Priority,
    pub waiting: usize,
    /// Namespace and how many of its writes wait, in serving order.
    pub namespaces: Vec<(String, usize)>,
}

/// Where a queued write stands (see [`FairQueue::place_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub priority: Priority,
    /// Writes granted before it if nothing else arrived.
    pub ahead: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_census_counts_each_class_and_each_namespaces_line() {
        let mut q = FairQueue::default();
        for (priority, namespace, count) in [
            (Priority::CreateJob, "big", 3),
            (Priority::CreateJob, "small", 1),
            (Priority::Event, "big", 2),
        ] {
            for i in 0..count {
                q.push(priority, namespace, i);
            }
        }
        let census = q.census();
        assert_eq!(census.len(), Priority::ALL.len());
        assert_eq!(census[1].priority, Priority::CreateJob);
        assert_eq!(census[1].waiting, 4);
        assert_eq!(
            census[1].namespaces,
            [("big".to_owned(), 3), ("small".to_owned(), 1)]
        );
        assert_eq!(census[5].waiting, 2);
        let total: usize = census.iter().map(|c| c.waiting).sum();
        assert_eq!(total, q.len());
        assert!(census[0].namespaces.is_empty());
    }

    #[test]
    fn a_writes_place_is_how_many_pops_come_before_it() {
        // Every item of a mixed queue: its place is its pop order.
        let mut q = FairQueue::default();
        let mut n = 0;
        for (priority, namespace, count) in [
            (Priority::Status, "big", 7),
            (Priority::CreateJob, "big", 3),
            (Priority::Status, "small", 2),
            (Priority::CreateJob, "one", 1),
            (Priority::Status, "mid", 4),
            (Priority::Event, "big", 2),
        ] {
            for _ in 0..count {
                q.push(priority, namespace, n);
                n += 1;
            }
        }
        let places: Vec<Place> = (0..n)
            .map(|item| q.place_of(|v| *v == item).expect("queued"))
            .collect();
        let mut popped = 0;
        while let Some((priority, _, item)) = q.pop() {
            assert_eq!(
                places[item],
                Place {
                    priority,
                    ahead: popped
                },
                "item {item}"
            );
            popped += 1;
        }
        assert_eq!(q.place_of(|_| true), None);
    }

    #[test]
    fn creates_go_first_then_the_rest_in_class_order() {
        let mut q = FairQueue::default();
        q.push(Priority::HistoryDelete, "a", 1);
        q.push(Priority::Status, "a", 2);
        q.push(Priority::CreateJob, "a", 3);
        q.push(Priority::ReplaceDelete, "a", 4);
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|(p, _, v)| (p, v))
            .collect();
        assert_eq!(
            order,
            [
                (Priority::CreateJob, 3),
                (Priority::ReplaceDelete, 4),
                (Priority::Status, 2),
                (Priority::HistoryDelete, 1)
            ]
        );
    }

    #[test]
    fn a_big_tenant_does_not_starve_a_small_one() {
        let mut q = FairQueue::default();
        for i in 0..10_000 {
            q.push(Priority::CreateJob, "big", i);
        }
        let pos = q.push(Priority::CreateJob, "small", -1);
        assert_eq!(
            pos,
            Position {
                ahead_in_higher_classes: 0,
                in_namespace: 1
            }
        );
        let first_two: Vec<_> = (0..2)
            .filter_map(|_| q.pop())
            .map(|(_, ns, v)| (ns, v))
            .collect();
        assert_eq!(
            first_two,
            [("big".to_string(), 0), ("small".to_string(), -1)]
        );
        assert_eq!(q.len(), 9_999);
        assert_eq!(q.depth(Priority::CreateJob), 9_999);
    }

    #[test]
    fn namespaces_alternate_and_fifo_holds_within_one() {
        let mut q = FairQueue::default();
        for (ns, v) in [
            ("a", 1),
            ("a", 2),
            ("a", 3),
            ("b", 10),
            ("c", 20),
            ("b", 11),
        ] {
            q.push(Priority::Status, ns, v);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, _, v)| v).collect();
        assert_eq!(order, [1, 10, 20, 2, 11, 3]);
        assert!(q.is_empty());
        assert!(q.pop().is_none());
    }

    #[test]
    fn position_counts_more_urgent_writes() {
        let mut q = FairQueue::default();
        q.push(Priority::CreateJob, "a", ());
        q.push(Priority::CreateJob, "b", ());
        q.push(Priority::Status, "a", ());
        let pos = q.push(Priority::Status, "a", ());
        assert_eq!(
            pos,
            Position {
                ahead_in_higher_classes: 2,
                in_namespace: 2
            }
        );
    }
}
