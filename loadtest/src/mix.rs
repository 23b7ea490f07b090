//! Schedule mixes: which CronJobs a scenario creates, as a pure plan.
//!
//! A plan is a list of (namespace, name, schedule); `create` turns it into
//! objects. Keeping it pure lets the tests check the shares a preset
//! promises (10% every five minutes, one big tenant, ...) without a cluster.

use serde::{Deserialize, Serialize};

/// The namespace prefix of every loadtest object: `observe` and the
/// controllers' `--namespace` filters key on it.
pub const NAMESPACE_PREFIX: &str = "lt-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mix {
    /// Hourly at minutes spread over the hour, plus 10% every 5 minutes.
    Steady,
    /// All at one minute of the hour (`--minute`).
    Herd,
    /// One namespace with all but 50 at `--minute`, and 50 namespaces with
    /// one each at the same minute.
    Tenants,
    /// Every minute (`* * * * *`): failover and overhead runs.
    EveryMinute,
    /// S8: one hostile namespace with all but 50, yearly (they run only
    /// when the tenant asks: `crate::hostile` floods them with run-now
    /// requests and large annotations), and 50 quiet namespaces with one
    /// every-minute CronJob each.
    Hostile,
    /// Daily at spread hours and minutes, none in the three hours from
    /// `--hour`: the memory and start-up run, whose controllers should sit
    /// idle.
    Daily,
    /// Every minute, two in three under Forbid with Jobs that run 90 s and
    /// a 20 s starting deadline: each of those skips every other slot
    /// (held behind its running Job, then past its deadline), so a third
    /// of all slots are skipped, each one a slot-history write. The slot
    /// history's worst normal case (`overhead --mix skipping`).
    Skipping,
    /// S7's data set, made once and kept (`crate::dataset`): times that do
    /// not depend on when it was made, mostly weekly and daily with a few
    /// hourly, so about 190 of 10^6 fall due each minute, each with a
    /// starting deadline (see [`MILLION_STARTING_DEADLINE_SECONDS`]).
    Million,
}

/// When a plan's CronJobs fire, where a mix lets it be chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// The minute of the hour of `herd` and `tenants`.
    pub minute: u8,
    /// `daily` leaves this hour and the next two (the controllers' local
    /// time) without a firing.
    pub quiet_hour: u8,
}

/// Hours of the day a `daily` CronJob may fire at: all but the quiet three.
const DAILY_HOURS: usize = 21;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub namespace: String,
    pub name: String,
    pub schedule: String,
    /// `spec.startingDeadlineSeconds`, where the mix sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_deadline_seconds: Option<i64>,
    /// How long each Job's pod runs (a Go duration, kwok's
    /// `shardcron.test/run-for`), where the mix sets it: else about 1 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_for: Option<String>,
    /// `spec.concurrencyPolicy` set to Forbid (else Allow).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forbid: bool,
}

/// Small tenants of the `tenants` mix, each alone in its namespace.
pub const SMALL_TENANTS: usize = 50;

/// The namespace of the big tenant in the `tenants` mix; `report` splits
/// the skew of the small tenants from it.
pub fn big_tenant_namespace(group: &str) -> String {
    format!("{NAMESPACE_PREFIX}{group}-big")
}

/// Plans `count` CronJobs over `namespaces` namespaces named
/// `lt-<group>-<i>`, firing as `at` says.
pub fn plan(mix: Mix, count: usize, namespaces: usize, group: &str, at: Anchor) -> Vec<Planned> {
    let minute = at.minute;
    let namespaces = namespaces.max(1);
    let spread = |i: usize| format!("{NAMESPACE_PREFIX}{group}-{}", i % namespaces);
    (0..count)
        .map(|i| {
            let (namespace, schedule) = match mix {
                // Every tenth is every 5 minutes; the rest hourly, the
                // minute spread by a stride coprime with 60 over the hourly
                // ones' own index, so they cover all 60 minutes.
                Mix::Steady if i % 10 == 9 => (spread(i), "*/5 * * * *".to_owned()),
                Mix::Steady => (spread(i), format!("{} * * * *", ((i - i / 10) * 7) % 60)),
                Mix::Herd => (spread(i), format!("{minute} * * * *")),
                Mix::EveryMinute | Mix::Skipping => (spread(i), "* * * * *".to_owned()),
                // 5 is coprime with 21, so every allowed hour is used.
                Mix::Daily => (
                    spread(i),
                    format!(
                        "{} {} * * *",
                        (i * 7) % 60,
                        (usize::from(at.quiet_hour) + 3 + (i * 5) % DAILY_HOURS) % 24
                    ),
                ),
                Mix::Million => (spread(i), million_schedule(i)),
                Mix::Hostile => {
                    let hostile = count.saturating_sub(SMALL_TENANTS);
                    if i < hostile {
                        (big_tenant_namespace(group), "0 0 1 1 *".to_owned())
                    } else {
                        let small = i - hostile;
                        let namespace = format!("{NAMESPACE_PREFIX}{group}-small-{small}");
                        (namespace, "* * * * *".to_owned())
                    }
                }
                Mix::Tenants => {
                    let big = count.saturating_sub(SMALL_TENANTS);
                    let namespace = if i < big {
                        big_tenant_namespace(group)
                    } else {
                        format!("{NAMESPACE_PREFIX}{group}-small-{}", i - big)
                    };
                    (namespace, format!("{minute} * * * *"))
                }
            };
            let skipping = mix == Mix::Skipping && i % 3 != 0;
            Planned {
                namespace,
                name: format!("cj-{i:06}"),
                schedule,
                starting_deadline_seconds: match mix {
                    Mix::Million => Some(MILLION_STARTING_DEADLINE_SECONDS),
                    _ if skipping => Some(SKIPPING_STARTING_DEADLINE_SECONDS),
                    _ => None,
                },
                run_for: skipping.then(|| SKIPPING_RUN_FOR.to_owned()),
                forbid: skipping,
            }
        })
        .collect()
}

/// `skipping`'s Forbid Jobs run this long: past the next slot (held),
/// done before the one after.
const SKIPPING_RUN_FOR: &str = "90s";
/// ... and the slot they held is then past this deadline: skipped.
const SKIPPING_STARTING_DEADLINE_SECONDS: i64 = 20;

/// `million`'s CronJobs may start at most this long after their slot: a
/// data set brought back days after it was made must not fire the slot
/// each CronJob missed meanwhile (upstream ignores slots older than the
/// deadline too), yet a hand-off's late slots still run.
pub const MILLION_STARTING_DEADLINE_SECONDS: i64 = 300;

/// The `million` mix's `i`th schedule: one in 500 hourly, one in ten daily,
/// the rest weekly, at minutes that do not depend on when the set was made.
/// At 10^6 about 190 fall due each minute (33 hourly, 69 daily, 89 weekly).
fn million_schedule(i: usize) -> String {
    if i.is_multiple_of(500) {
        // The hourly ones' own index, strided over the hour (7 is coprime
        // with 60).
        format!("{} * * * *", (i / 500 * 7) % 60)
    } else if i % 10 == 1 {
        // The daily ones' own index, strided over the day's 1,440 minutes
        // (797 is a prime that divides no factor of 1,440).
        let minute_of_day = (i / 10 * 797) % 1440;
        format!("{} {} * * *", minute_of_day % 60, minute_of_day / 60)
    } else {
        // The rest are not an arithmetic progression, so a stride would
        // leave minutes empty: a hash spreads them over the week's 10,080.
        let minute_of_week = (fmix64(i as u64) % 10_080) as usize;
        let minute_of_day = minute_of_week % 1440;
        format!(
            "{} {} * * {}",
            minute_of_day % 60,
            minute_of_day / 60,
            minute_of_week / 1440
        )
    }
}

/// MurmurHash3's 64-bit finalizer: a cheap, well-mixed hash of an index.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The distinct namespaces of a plan, in first-seen order.
pub fn namespaces_of(plan: &[Planned]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    plan.iter()
        .filter(|p| seen.insert(p.namespace.clone()))
        .map(|p| p.namespace.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_has_a_tenth_every_five_minutes_and_spreads_the_rest() {
        let plan = plan(Mix::Steady, 1000, 10, "s1", Anchor::default());
        let five = plan.iter().filter(|p| p.schedule == "*/5 * * * *").count();
        assert_eq!(five, 100);
        let minutes: std::collections::BTreeSet<_> = plan
            .iter()
            .filter(|p| p.schedule != "*/5 * * * *")
            .map(|p| p.schedule.clone())
            .collect();
        assert_eq!(minutes.len(), 60, "hourly ones cover every minute");
        assert_eq!(namespaces_of(&plan).len(), 10);
        for p in &plan {
            shardcron::schedule::parse(&p.schedule).expect("valid schedule");
        }
    }

    #[test]
    fn tenants_has_one_big_namespace_and_fifty_single_ones() {
        let at = Anchor {
            minute: 17,
            quiet_hour: 0,
        };
        let plan = plan(Mix::Tenants, 1050, 1, "s5", at);
        let big = plan
            .iter()
            .filter(|p| p.namespace == big_tenant_namespace("s5"))
            .count();
        assert_eq!(big, 1000);
        assert_eq!(namespaces_of(&plan).len(), 51);
        assert!(plan.iter().all(|p| p.schedule == "17 * * * *"));
    }

    #[test]
    fn hostile_has_one_flooding_namespace_and_fifty_quiet_every_minute_ones() {
        let plan = plan(Mix::Hostile, 250, 1, "s8", Anchor::default());
        let hostile = big_tenant_namespace("s8");
        let flood: Vec<_> = plan.iter().filter(|p| p.namespace == hostile).collect();
        assert_eq!(flood.len(), 200);
        assert!(flood.iter().all(|p| p.schedule == "0 0 1 1 *"));
        let quiet: Vec<_> = plan.iter().filter(|p| p.namespace != hostile).collect();
        assert_eq!(quiet.len(), SMALL_TENANTS);
        assert_eq!(namespaces_of(&plan).len(), SMALL_TENANTS + 1);
        assert!(quiet.iter().all(|p| p.schedule == "* * * * *"));
    }

    #[test]
    fn daily_and_herd_schedules_parse() {
        let at = Anchor {
            minute: 59,
            quiet_hour: 4,
        };
        for mix in [Mix::Daily, Mix::Herd, Mix::EveryMinute] {
            for p in plan(mix, 100, 3, "x", at) {
                shardcron::schedule::parse(&p.schedule).expect("valid schedule");
            }
        }
    }

    #[test]
    fn skipping_has_two_in_three_forbid_behind_jobs_that_outlive_their_minute() {
        let plan = plan(Mix::Skipping, 300, 2, "x", Anchor::default());
        let forbid: Vec<_> = plan.iter().filter(|p| p.forbid).collect();
        assert_eq!(forbid.len(), 200);
        assert!(forbid.iter().all(
            |p| p.run_for.as_deref() == Some("90s") && p.starting_deadline_seconds == Some(20)
        ));
        assert!(
            plan.iter()
                .filter(|p| !p.forbid)
                .all(|p| p.run_for.is_none() && p.starting_deadline_seconds.is_none())
        );
        assert!(plan.iter().all(|p| p.schedule == "* * * * *"));
    }

    #[test]
    fn million_fires_a_few_hundred_a_minute_in_every_minute_of_the_week() {
        let plan = plan(Mix::Million, 1_000_000, 1000, "s7", Anchor::default());
        assert_eq!(namespaces_of(&plan).len(), 1000);
        let hourly = plan
            .iter()
            .filter(|p| p.schedule.ends_with("* * * *"))
            .count();
        let weekly = plan.iter().filter(|p| !p.schedule.ends_with('*')).count();
        let daily = plan.len() - hourly - weekly;
        assert_eq!((hourly, daily), (2_000, 100_000));
        // Firings in each minute of a week: every minute has some, none
        // has many more than the mean (about 190).
        let mut per_minute = vec![0u32; 10_080];
        for p in &plan {
            assert_eq!(p.starting_deadline_seconds, Some(300));
            let fields: Vec<&str> = p.schedule.split(' ').collect();
            let minute: usize = fields[0].parse().unwrap();
            let hours: Vec<usize> = match fields[1] {
                "*" => (0..24).collect(),
                h => vec![h.parse().unwrap()],
            };
            let days: Vec<usize> = match fields[4] {
                "*" => (0..7).collect(),
                d => vec![d.parse().unwrap()],
            };
            for d in &days {
                for h in &hours {
                    per_minute[d * 1440 + h * 60 + minute] += 1;
                }
            }
        }
        let (min, max) = (per_minute.iter().min(), per_minute.iter().max());
        assert!(min >= Some(&130), "{min:?}");
        assert!(max <= Some(&260), "{max:?}");
        for p in plan.iter().step_by(997) {
            shardcron::schedule::parse(&p.schedule).expect("valid schedule");
        }
    }

    #[test]
    fn daily_leaves_its_three_quiet_hours_alone_and_uses_every_other() {
        for quiet_hour in [0u8, 22, 23] {
            let at = Anchor {
                minute: 0,
                quiet_hour,
            };
            let hours: std::collections::BTreeSet<u32> = plan(Mix::Daily, 1000, 1, "x", at)
                .iter()
                .map(|p| p.schedule.split(' ').nth(1).unwrap().parse().unwrap())
                .collect();
            let quiet: Vec<u32> = (0..3).map(|k| (u32::from(quiet_hour) + k) % 24).collect();
            assert_eq!(hours.len(), 21);
            assert!(
                quiet.iter().all(|h| !hours.contains(h)),
                "{quiet:?} in {hours:?}"
            );
        }
    }
}
