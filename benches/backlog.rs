//! The Events' backlog under a herd: ns per Event pushed into a full
//! backlog (4,096 waiting, the default bound, so every push makes room),
//! for the indexed backlog and, as the reference in the same run, the plain
//! queue it replaced (a linear search for an equal Event, then the oldest
//! of the newcomer's reason removed in place).
//!
//! Workload: Events as a herd tells them: three reasons (`SuccessfulCreate`
//! most, `SawCompletedJob`, `SuccessfulDelete`), each about its own
//! CronJob UID, with a Job's name in the note, none equal to another.
//! `cargo bench --bench backlog`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use shardcron::apiserver::gateway::events::{BACKLOG, Backlog, Pushed, Queued};
use std::collections::VecDeque;
use std::hint::black_box;

#[derive(Clone)]
struct Told {
    uid: String,
    reason: &'static str,
    note: String,
}

impl Queued for Told {
    fn kind(&self) -> &str {
        self.reason
    }
    type Identity<'a> = (&'a str, &'a str, &'a str);
    fn identity(&self) -> Self::Identity<'_> {
        (&self.uid, self.reason, &self.note)
    }
}

fn told(i: usize) -> Told {
    let reason = match i % 5 {
        0 => "SawCompletedJob",
        1 => "SuccessfulDelete",
        _ => "SuccessfulCreate",
    };
    Told {
        uid: format!("6f1c1a3e-0000-4000-8000-{i:012}"),
        reason,
        note: format!("Created job report-{}", 29_000_000 + i),
    }
}

/// The backlog before 2026-12-04: what each push cost, for reference.
struct PlainQueue {
    waiting: VecDeque<Told>,
    capacity: usize,
}

impl PlainQueue {
    fn push(&mut self, event: Told) -> Pushed {
        if self
            .waiting
            .iter()
            .any(|e| e.identity() == event.identity())
        {
            return Pushed::Duplicate;
        }
        let mut pushed = Pushed::Queued;
        if self.waiting.len() >= self.capacity {
            let victim = self
                .waiting
                .iter()
                .position(|e| e.kind() == event.kind())
                .unwrap_or(0);
            self.waiting.remove(victim);
            pushed = Pushed::QueuedDroppingOldest;
        }
        self.waiting.push_back(event);
        pushed
    }
}

fn full_backlogs(c: &mut Criterion) {
    let newcomers: Vec<Told> = (BACKLOG..BACKLOG + 1_000).map(told).collect();
    let mut group = c.benchmark_group("push-into-full");
    group.bench_function("indexed", |b| {
        let mut backlog = Backlog::new(BACKLOG);
        for i in 0..BACKLOG {
            backlog.push(told(i));
        }
        let mut next = newcomers.iter().cycle();
        b.iter_batched(
            || next.next().cloned().unwrap_or_else(|| told(0)),
            |event| black_box(backlog.push(event)),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("plain-queue-reference", |b| {
        let mut queue = PlainQueue {
            waiting: (0..BACKLOG).map(told).collect(),
            capacity: BACKLOG,
        };
        let mut next = newcomers.iter().cycle();
        b.iter_batched(
            || next.next().cloned().unwrap_or_else(|| told(0)),
            |event| black_box(queue.push(event)),
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, full_backlogs);
criterion_main!(benches);
