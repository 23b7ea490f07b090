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
    /// Daily at spread hours and minutes: the memory and start-up run.
    Daily,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub namespace: String,
    pub name: String,
    pub schedule: String,
}

/// Small tenants of the `tenants` mix, each alone in its namespace.
pub const SMALL_TENANTS: usize = 50;

/// The namespace of the big tenant in the `tenants` mix; `report` splits
/// the skew of the small tenants from it.
pub fn big_tenant_namespace(group: &str) -> String {
    format!("{NAMESPACE_PREFIX}{group}-big")
}

/// Plans `count` CronJobs over `namespaces` namespaces named
/// `lt-<group>-<i>`. `minute` is the minute of the hour of `herd` and
/// `tenants`.
pub fn plan(mix: Mix, count: usize, namespaces: usize, group: &str, minute: u8) -> Vec<Planned> {
    let namespaces = namespaces.max(1);
    let spread = |i: usize| format!("{NAMESPACE_PREFIX}{group}-{}", i % namespaces);
    let name = |i: usize| format!("cj-{i:06}");
    (0..count)
        .map(|i| match mix {
            Mix::Steady => Planned {
                namespace: spread(i),
                name: name(i),
                // Every tenth is every 5 minutes; the rest hourly, the
                // minute spread by a stride coprime with 60.
                schedule: if i % 10 == 9 {
                    "*/5 * * * *".to_owned()
                } else {
                    // The hourly ones' own index, so they cover all 60 minutes.
                    format!("{} * * * *", ((i - i / 10) * 7) % 60)
                },
            },
            Mix::Herd => Planned {
                namespace: spread(i),
                name: name(i),
                schedule: format!("{minute} * * * *"),
            },
            Mix::EveryMinute => Planned {
                namespace: spread(i),
                name: name(i),
                schedule: "* * * * *".to_owned(),
            },
            Mix::Daily => Planned {
                namespace: spread(i),
                name: name(i),
                schedule: format!("{} {} * * *", (i * 7) % 60, (i * 5) % 24),
            },
            Mix::Tenants => {
                let big = count.saturating_sub(SMALL_TENANTS);
                Planned {
                    namespace: if i < big {
                        big_tenant_namespace(group)
                    } else {
                        format!("{NAMESPACE_PREFIX}{group}-small-{}", i - big)
                    },
                    name: name(i),
                    schedule: format!("{minute} * * * *"),
                }
            }
        })
        .collect()
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
        let plan = plan(Mix::Steady, 1000, 10, "s1", 0);
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
        let plan = plan(Mix::Tenants, 1050, 1, "s5", 17);
        let big = plan
            .iter()
            .filter(|p| p.namespace == big_tenant_namespace("s5"))
            .count();
        assert_eq!(big, 1000);
        assert_eq!(namespaces_of(&plan).len(), 51);
        assert!(plan.iter().all(|p| p.schedule == "17 * * * *"));
    }

    #[test]
    fn daily_and_herd_schedules_parse() {
        for mix in [Mix::Daily, Mix::Herd, Mix::EveryMinute] {
            for p in plan(mix, 100, 3, "x", 59) {
                shardcron::schedule::parse(&p.schedule).expect("valid schedule");
            }
        }
    }
}
