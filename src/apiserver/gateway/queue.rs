//! The write gateway's queue discipline: namespaces take turns, one write
//! a turn, and each namespace's turn serves its most urgent write (classes
//! in strict priority within a namespace, FIFO within a class). So one
//! tenant's 10,000 CronJobs due at `0 * * * *`, or a stream of run-now
//! requests, takes one write in N when N namespaces wait, whatever its
//! classes: no write of another namespace, of any class, waits behind more
//! than one of its writes per turn. (Strict priority between classes
//! across namespaces let one namespace's creates starve another's history
//! delete, and with it that CronJob's next slot.) Pure data structure; the
//! gateway pairs it with a [`TokenBucket`].
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

/// One namespace's writes: a FIFO per class.
#[derive(Debug)]
struct Line<T> {
    classes: [VecDeque<T>; Priority::ALL.len()],
    len: usize,
}

impl<T> Default for Line<T> {
    fn default() -> Self {
        Line {
            classes: Default::default(),
            len: 0,
        }
    }
}

impl<T> Line<T> {
    /// The most urgent class with a write waiting.
    fn head(&self) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|priority| !self.classes[*priority as usize].is_empty())
    }

    /// The place (0: next) in this line, in serving order, of the first
    /// write `matches` picks.
    fn place_of(&self, matches: &mut impl FnMut(&T) -> bool) -> Option<(Priority, usize)> {
        let mut before = 0;
        for priority in Priority::ALL {
            let class = &self.classes[priority as usize];
            if let Some(index) = class.iter().position(&mut *matches) {
                return Some((priority, before + index));
            }
            before += class.len();
        }
        None
    }
}

/// Writes waiting for their turn.
#[derive(Debug)]
pub struct FairQueue<T> {
    /// Namespaces with queued writes, in serving order.
    turn: VecDeque<String>,
    lines: HashMap<String, Line<T>>,
    /// Queued writes per class.
    depth: [usize; Priority::ALL.len()],
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            turn: VecDeque::new(),
            lines: HashMap::new(),
            depth: [0; Priority::ALL.len()],
        }
    }
}

/// Where a write landed in its namespace's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Its place in the line, in serving order (1: next for the namespace).
    pub in_namespace: usize,
    /// The namespace had no write waiting: it joins the turns.
    pub opened_line: bool,
}

impl<T> FairQueue<T> {
    pub fn push(&mut self, priority: Priority, namespace: &str, item: T) -> Position {
        let line = match self.lines.get_mut(namespace) {
            Some(line) => line,
            None => {
                self.turn.push_back(namespace.to_owned());
                self.lines.entry(namespace.to_owned()).or_default()
            }
        };
        line.classes[priority as usize].push_back(item);
        line.len += 1;
        self.depth[priority as usize] += 1;
        let in_namespace = line.classes[..=priority as usize]
            .iter()
            .map(VecDeque::len)
            .sum();
        Position {
            in_namespace,
            opened_line: line.len == 1,
        }
    }

    /// The next write: the next namespace's most urgent one.
    pub fn pop(&mut self) -> Option<(Priority, String, T)> {
        let namespace = self.turn.pop_front()?;
        let line = self.lines.get_mut(&namespace)?;
        let priority = line.head()?;
        let item = line.classes[priority as usize].pop_front()?;
        line.len -= 1;
        self.depth[priority as usize] -= 1;
        if line.len == 0 {
            self.lines.remove(&namespace);
        } else {
            self.turn.push_back(namespace.clone());
        }
        Some((priority, namespace, item))
    }

    /// The class of the next write, if any.
    pub fn next_priority(&self) -> Option<Priority> {
        let namespace = self.turn.front()?;
        self.lines.get(namespace)?.head()
    }

    /// Whether some namespace's most urgent write may spend the reserve
    /// ([`Priority::may_use_reserve`]): a slot's start waits, maybe behind
    /// namespaces whose next write may not.
    pub fn has_urgent_head(&self) -> bool {
        self.lines
            .values()
            .any(|line| line.head().is_some_and(Priority::may_use_reserve))
    }

    /// The next write that may spend the reserve: the most urgent write of
    /// the first namespace, in turn order, whose most urgent write may. The
    /// namespaces passed over keep their places.
    pub fn pop_urgent(&mut self) -> Option<(Priority, String, T)> {
        let index = self.turn.iter().position(|namespace| {
            self.lines
                .get(namespace)
                .and_then(Line::head)
                .is_some_and(Priority::may_use_reserve)
        })?;
        let namespace = self.turn.remove(index)?;
        self.turn.push_front(namespace);
        self.pop()
    }

    pub fn len(&self) -> usize {
        self.depth.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queued writes of one class (the depth metric).
    pub fn depth(&self, priority: Priority) -> usize {
        self.depth[priority as usize]
    }

    /// The first queued write `matches` picks, and how many writes would be
    /// granted before it if nothing else arrived: its namespace's writes
    /// ahead of it in its line, and, turn by turn, as many from each other
    /// namespace (one more from those served before its own).
    pub fn place_of(&self, mut matches: impl FnMut(&T) -> bool) -> Option<Place> {
        for (turn, namespace) in self.turn.iter().enumerate() {
            let Some((priority, index)) = self
                .lines
                .get(namespace)
                .and_then(|line| line.place_of(&mut matches))
            else {
                continue;
            };
            let ahead = self
                .turn
                .iter()
                .enumerate()
                .map(|(other, name)| {
                    let len = self.lines.get(name).map_or(0, |line| line.len);
                    let rounds = if other < turn { index + 1 } else { index };
                    len.min(rounds)
                })
                .sum();
            return Some(Place { priority, ahead });
        }
        None
    }
}

impl<T> FairQueue<T> {
    /// How many writes wait in each class (most urgent first, empty ones
    /// included) and, per class, each namespace's writes of that class (in
    /// serving order).
    /// Copies counts only: the caller sorts, outside the gateway's lock.
    pub fn census(&self) -> Vec<ClassCensus> {
        Priority::ALL
            .into_iter()
            .map(|priority| ClassCensus {
                priority,
                waiting: self.depth[priority as usize],
                namespaces: self
                    .turn
                    .iter()
                    .filter_map(|namespace| {
                        let len = self.lines.get(namespace)?.classes[priority as usize].len();
                        (len > 0).then(|| (namespace.clone(), len))
                    })
                    .collect(),
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
                in_namespace: 1,
                opened_line: true
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

    /// The attack the old discipline (strict priority between classes
    /// across namespaces) lost to: one namespace keeps its creates queued
    /// (run-now once a second on ten CronJobs, faster than the rate), and
    /// another's decision waits for a history delete, the least urgent
    /// write but Events. It is served at the next turn, not never.
    #[test]
    fn a_flood_of_creates_does_not_starve_another_namespaces_least_urgent_write() {
        let mut q = FairQueue::default();
        for i in 0..100 {
            q.push(Priority::CreateJob, "flood", i);
        }
        q.push(Priority::HistoryDelete, "victim", -1);
        let mut served = Vec::new();
        for i in 100..200 {
            // The flood adds a create for every one served.
            q.push(Priority::CreateJob, "flood", i);
            let (_, namespace, item) = q.pop().expect("queued");
            served.push((namespace, item));
            if item == -1 {
                break;
            }
        }
        assert_eq!(served, [("flood".to_owned(), 0), ("victim".to_owned(), -1)]);
        assert_eq!(q.next_priority(), Some(Priority::CreateJob));
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
    fn an_urgent_write_may_be_served_past_namespaces_whose_next_is_not() {
        let mut q = FairQueue::default();
        q.push(Priority::Event, "busy", 1);
        q.push(Priority::Status, "idle", 2);
        assert!(!q.has_urgent_head());
        assert_eq!(q.pop_urgent(), None);
        q.push(Priority::CreateJob, "due", 3);
        q.push(Priority::Event, "due", 4);
        assert!(q.has_urgent_head());
        assert_eq!(q.pop_urgent(), Some((Priority::CreateJob, "due".into(), 3)));
        // The others kept their places; `due` went to the back.
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, _, v)| v).collect();
        assert_eq!(rest, [1, 2, 4]);
    }

    #[test]
    fn position_is_the_place_in_the_namespaces_line() {
        let mut q = FairQueue::default();
        q.push(Priority::CreateJob, "a", ());
        q.push(Priority::CreateJob, "b", ());
        q.push(Priority::Status, "a", ());
        let pos = q.push(Priority::Status, "a", ());
        assert_eq!(
            pos,
            Position {
                in_namespace: 3,
                opened_line: false
            }
        );
        // A more urgent write goes ahead of the namespace's others.
        let pos = q.push(Priority::RecordSlot, "a", ());
        assert_eq!(
            pos,
            Position {
                in_namespace: 1,
                opened_line: false
            }
        );
    }
}
