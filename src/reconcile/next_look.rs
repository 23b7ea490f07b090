//! When a CronJob next needs its controller, read from its object alone:
//! what a replica keeps of the CronJobs it would gain if a peer died
//! ([`crate::shard::standby`]), so that it can read first, at the
//! take-over, those that fall due first.
//!
//! An ordering, never a decision: a CronJob whose answer here is wrong is
//! read later (with the bulk load) or sooner than it needed, nothing else.
//! So it leans early: a slot that may still be due is "now".

use super::options::{Options, RUN_NOW_ANNOTATION};
use super::schedule_setup::ScheduleSetup;
use super::view::StatusView;
use crate::schedule::slots::Slots;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::CronJobStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The fields of a CronJob that place its next decision.
#[derive(Debug, Clone, Copy)]
pub struct LookInput<'a> {
    pub meta: &'a ObjectMeta,
    pub schedule: &'a str,
    pub time_zone: Option<&'a str>,
    pub suspend: bool,
    pub starting_deadline_seconds: Option<i64>,
    pub status: Option<&'a CronJobStatus>,
}

/// The instant this CronJob next needs its controller, at `now`: `now`
/// itself when a slot (or a run-now request) is due, else its next
/// wake-up; `None` when nothing will ever be due without a change to the
/// object (suspended, no slot ahead, a schedule that does not parse: a
/// change comes through the watch and is looked at again).
pub fn next_look(
    input: LookInput<'_>,
    now: Timestamp,
    default_zone: &TimeZone,
) -> Option<Timestamp> {
    let annotations = input.meta.annotations.as_ref();
    if annotations.is_some_and(|a| a.contains_key(RUN_NOW_ANNOTATION)) {
        return Some(now);
    }
    if input.suspend {
        return None;
    }
    let setup = ScheduleSetup::new(input.schedule, input.time_zone);
    let schedule = setup.schedule.ok()?;
    let options = Options::from_annotations(annotations);
    let status = StatusView::from_api(input.status).seeded(input.meta);
    let namespace = input.meta.namespace.as_deref().unwrap_or_default();
    let name = input.meta.name.as_deref().unwrap_or_default();
    let slots = Slots {
        schedule: &schedule,
        zone: default_zone,
        created: input
            .meta
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        last_scheduled: status.last_schedule_time.get(),
        starting_deadline_seconds: input.starting_deadline_seconds,
        once_per_wall_time: options.once_per_wall_time(),
        catch_up_window: options.catch_up_window(),
        spread_offset: options.spread_offset(namespace, name),
    };
    match slots.due(now) {
        // Too short an interval to count slots: upstream looks every time.
        Err(_) | Ok(Some(_)) => Some(now),
        Ok(None) => slots.next_wakeup(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("c".into()),
            namespace: Some("n".into()),
            creation_timestamp: Some(Time(at("2026-11-01T00:00:00Z"))),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..ObjectMeta::default()
        }
    }

    fn look(
        schedule: &str,
        suspend: bool,
        deadline: Option<i64>,
        last: Option<&str>,
        annotations: &[(&str, &str)],
        now: &str,
    ) -> Option<Timestamp> {
        let meta = meta(annotations);
        let status = CronJobStatus {
            last_schedule_time: last.map(|t| Time(at(t))),
            ..CronJobStatus::default()
        };
        next_look(
            LookInput {
                meta: &meta,
                schedule,
                time_zone: None,
                suspend,
                starting_deadline_seconds: deadline,
                status: Some(&status),
            },
            at(now),
            &TimeZone::UTC,
        )
    }

    /// A row: why, the schedule, suspended, the deadline, the last slot,
    /// the annotations, the expected answer.
    struct Case {
        why: &'static str,
        schedule: &'static str,
        suspend: bool,
        deadline: Option<i64>,
        last: Option<&'static str>,
        annotations: &'static [(&'static str, &'static str)],
        expected: Option<&'static str>,
    }

    const NOW: &str = "2026-11-29T10:00:30Z";

    const CASES: &[Case] = &[
        Case {
            why: "hourly, ran this hour: the next hour",
            schedule: "0 * * * *",
            suspend: false,
            deadline: None,
            last: Some("2026-11-29T10:00:00Z"),
            annotations: &[],
            expected: Some("2026-11-29T11:00:00Z"),
        },
        Case {
            why: "hourly, this hour's slot not run: now",
            schedule: "0 * * * *",
            suspend: false,
            deadline: None,
            last: Some("2026-11-29T09:00:00Z"),
            annotations: &[],
            expected: Some(NOW),
        },
        Case {
            why: "missed past its deadline: the next slot",
            schedule: "0 * * * *",
            suspend: false,
            deadline: Some(10),
            last: Some("2026-11-29T09:00:00Z"),
            annotations: &[],
            expected: Some("2026-11-29T11:00:00Z"),
        },
        Case {
            why: "suspended: never",
            schedule: "0 * * * *",
            suspend: true,
            deadline: None,
            last: Some("2026-11-29T09:00:00Z"),
            annotations: &[],
            expected: None,
        },
        Case {
            why: "a run-now request: now, even suspended",
            schedule: "0 * * * *",
            suspend: true,
            deadline: None,
            last: None,
            annotations: &[(RUN_NOW_ANNOTATION, "2026-11-29T10:00:00Z")],
            expected: Some(NOW),
        },
        Case {
            why: "does not parse: never",
            schedule: "not a schedule",
            suspend: false,
            deadline: None,
            last: None,
            annotations: &[],
            expected: None,
        },
        Case {
            why: "weekly, created after its last slot: the next one",
            schedule: "0 3 * * 1",
            suspend: false,
            deadline: Some(300),
            last: None,
            annotations: &[],
            expected: Some("2026-11-30T03:00:00Z"),
        },
    ];

    #[test]
    fn the_table() {
        for case in CASES {
            assert_eq!(
                look(
                    case.schedule,
                    case.suspend,
                    case.deadline,
                    case.last,
                    case.annotations,
                    NOW
                ),
                case.expected.map(at),
                "{}",
                case.why
            );
        }
    }
}
