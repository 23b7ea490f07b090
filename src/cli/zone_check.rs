//! `shardcron zone-check --from-zone ZONE`: the CronJobs whose slots move
//! when their controller's time zone changes. A CronJob without
//! `spec.timeZone` (and without a `TZ=` prefix in its schedule) runs in its
//! controller's zone: kube-controller-manager's process zone, shardcron's
//! `--default-time-zone` (UTC by default). Before switching from one to the
//! other (docs/upgrading.md), this lists the CronJobs whose next slots
//! differ between the two zones, with the first slot that moves.

use super::arguments::Output;
use crate::clock::Clock;
use crate::schedule::{self, ScheduleZone, format_rfc3339, load_named_zone};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{Api, ListParams};
use std::io::Write;

/// How many upcoming slots are compared: a day's worth for hourly and
/// daily schedules, a few for the rarer ones.
const SLOTS_COMPARED: usize = 24;
/// CronJobs read per list request.
const PAGE: u32 = 500;

#[derive(Debug, clap::Args)]
pub struct ZoneCheckArgs {
    /// The zone the CronJobs ran in so far: kube-controller-manager's
    /// process zone (its TZ, or /etc/localtime), an IANA name.
    #[arg(long)]
    from_zone: String,
    /// The zone they will run in: shardcron's --default-time-zone.
    #[arg(long, default_value = "UTC")]
    to_zone: String,
    /// Only this namespace (default: every namespace).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// The kubeconfig (default: in a pod its ServiceAccount, else KUBECONFIG
    /// or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    output: Output,
}

/// Errors `zone-check` reports (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum ZoneCheckError {
    #[error("--from-zone: {0}")]
    From(schedule::ZoneError),
    #[error("--to-zone: {0}")]
    To(schedule::ZoneError),
    #[error("{0:#}")]
    Client(anyhow::Error),
    #[error("listing CronJobs: {0}")]
    List(kube::Error),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

/// A CronJob whose slots move: its first slot that differs, in each zone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    pub cronjob: String,
    pub schedule: String,
    /// The slot in the old zone, and where the new zone puts it.
    pub was: String,
    pub becomes: String,
}

/// The first of `schedule`'s next slots after `after` that differs between
/// `from` and `to`, if any. `None` too for a schedule that does not parse
/// (the controller reports that itself), that carries its own `TZ=`, or
/// that is an `@every` (zone-free).
pub fn first_moved_slot(
    schedule: &str,
    from: &TimeZone,
    to: &TimeZone,
    after: Timestamp,
) -> Option<(Timestamp, Timestamp)> {
    let parsed = schedule::parse(schedule).ok()?;
    if parsed.is_every() || matches!(parsed.zone(), ScheduleZone::Fixed(_)) {
        return None;
    }
    parsed
        .upcoming(after, from)
        .zip(parsed.upcoming(after, to))
        .take(SLOTS_COMPARED)
        .find(|(was, becomes)| was != becomes)
}

/// Of `cronjobs`, those without `spec.timeZone` whose slots move from
/// `from` to `to` after `after`, in their order.
pub fn moved(cronjobs: &[CronJob], from: &TimeZone, to: &TimeZone, after: Timestamp) -> Vec<Moved> {
    cronjobs
        .iter()
        .filter_map(|cronjob| {
            let spec = &cronjob.spec;
            if spec.time_zone.is_some() {
                return None;
            }
            let (was, becomes) = first_moved_slot(&spec.schedule, from, to, after)?;
            Some(Moved {
                cronjob: format!(
                    "{}/{}",
                    cronjob.metadata.namespace.as_deref().unwrap_or_default(),
                    cronjob.metadata.name.as_deref().unwrap_or_default()
                ),
                schedule: spec.schedule.clone(),
                was: format_rfc3339(was, from),
                becomes: format_rfc3339(becomes, from),
            })
        })
        .collect()
}

async fn list(args: &ZoneCheckArgs) -> Result<Vec<CronJob>, ZoneCheckError> {
    let client = super::arguments::kube_client(args.kubeconfig.as_ref(), "shardcron-zone-check")
        .await
        .map_err(ZoneCheckError::Client)?;
    let api: Api<CronJob> = match &args.namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let mut all = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(ZoneCheckError::List)?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}

pub fn run(args: &ZoneCheckArgs, out: &mut impl Write) -> Result<(), ZoneCheckError> {
    let from = load_named_zone(&args.from_zone).map_err(ZoneCheckError::From)?;
    let to = load_named_zone(&args.to_zone).map_err(ZoneCheckError::To)?;
    let cronjobs = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(list(args))?;
    let moved = moved(&cronjobs, &from, &to, Clock::System.now());
    match args.output {
        Output::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(&moved).unwrap_or_else(|_| "[]".to_owned())
        )?,
        Output::Text if moved.is_empty() => writeln!(
            out,
            "no CronJob without spec.timeZone has a slot that moves from {} to {}",
            args.from_zone, args.to_zone
        )?,
        Output::Text => {
            writeln!(
                out,
                "CronJobs without spec.timeZone whose slots move from {} to {} (set spec.timeZone: {}, or --default-time-zone):",
                args.from_zone, args.to_zone, args.from_zone
            )?;
            for m in &moved {
                writeln!(
                    out,
                    "{}\t{}\tslot {} becomes {}",
                    m.cronjob, m.schedule, m.was, m.becomes
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> TimeZone {
        load_named_zone(name).expect("a zone")
    }

    /// One row: schedule, old zone, whether its slots move to UTC.
    #[test]
    fn a_schedules_slots_move_where_the_zones_disagree_on_its_fields() {
        let after: Timestamp = "2026-12-07T10:00:30Z".parse().expect("a time");
        let rows = [
            ("0 9 * * *", "Europe/Berlin", true),
            ("*/5 * * * *", "Europe/Berlin", false),
            // Berlin is a whole hour off UTC: hourly slots stay...
            ("0 * * * *", "Europe/Berlin", false),
            // ...Kolkata half an hour: they move.
            ("0 * * * *", "Asia/Kolkata", true),
            ("*/15 * * * *", "Asia/Kolkata", false),
            ("0 9 * * *", "UTC", false),
            ("0 9 * * *", "Etc/UTC", false),
            // Zone-free or zoned by itself.
            ("@every 1h", "Asia/Kolkata", false),
            ("TZ=Europe/Paris 0 9 * * *", "Asia/Kolkata", false),
            // The controller reports these itself.
            ("not a schedule", "Asia/Kolkata", false),
            // A rare schedule's slots move too.
            ("30 2 * 3 0", "Europe/Berlin", true),
        ];
        for (schedule, from, moves) in rows {
            let got = first_moved_slot(schedule, &zone(from), &TimeZone::UTC, after);
            assert_eq!(got.is_some(), moves, "{schedule} from {from}: {got:?}");
            if let Some((was, becomes)) = got {
                assert_ne!(was, becomes);
            }
        }
    }

    #[test]
    fn only_cronjobs_without_a_time_zone_are_listed() {
        let cronjob = |name: &str, schedule: &str, zone: Option<&str>| -> CronJob {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "team", "name": name},
                "spec": {
                    "schedule": schedule,
                    "timeZone": zone,
                    "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}
                }
            }))
            .expect("a CronJob")
        };
        let cronjobs = [
            cronjob("daily", "0 9 * * *", None),
            cronjob("zoned", "0 9 * * *", Some("Europe/Berlin")),
            cronjob("often", "*/1 * * * *", None),
        ];
        let after: Timestamp = "2026-12-07T10:00:30Z".parse().expect("a time");
        let moved = moved(&cronjobs, &zone("Europe/Berlin"), &TimeZone::UTC, after);
        assert_eq!(
            moved,
            [Moved {
                cronjob: "team/daily".to_owned(),
                schedule: "0 9 * * *".to_owned(),
                was: "2026-12-08T09:00:00+01:00".to_owned(),
                becomes: "2026-12-08T10:00:00+01:00".to_owned(),
            }]
        );
    }
}
