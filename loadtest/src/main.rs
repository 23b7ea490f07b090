//! `shardcron-loadtest`: creates CronJob populations, observes how a
//! controller serves them, and compares shardcron with
//! kube-controller-manager's CronJob controller on the same local control
//! plane build. See loadtest/README.md.

mod apimetrics;
mod cli;
mod cluster;
mod compare;
mod create;
mod dataset;
mod firingcost;
mod hostile;
mod million;
mod mix;
mod observe;
mod overhead;
mod procstat;
mod report;
mod scale;
mod scaleout;
mod slots;

use anyhow::{Context, bail};
use clap::Parser;
use cli::{Cli, Command};
use cluster::ClientLimits;
use compare::{Scenario, ScenarioName, Settings, Variant};
use shardcron::reconcile::CronJobKind;
use std::path::PathBuf;
use std::time::Duration;

fn shardcron_bin(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let bin = match given {
        Some(bin) => bin,
        None => std::env::current_exe()?.with_file_name("shardcron"),
    };
    if !bin.is_file() {
        bail!(
            "{} does not exist: build it (cargo build --release --bin shardcron) or pass --shardcron-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// The cluster of $KUBECONFIG (or ~/.kube/config), for `create` and `observe`.
async fn connect() -> anyhow::Result<kube::Client> {
    kube::Client::try_default()
        .await
        .context("connecting to the cluster ($KUBECONFIG)")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Create {
            mix,
            count,
            namespaces,
            group,
            minute,
            hour,
            qps,
        } => {
            let client = connect().await?;
            let at = mix::Anchor {
                minute,
                quiet_hour: hour,
            };
            create::create(&client, &mix::plan(mix, count, namespaces, &group, at), qps).await
        }
        Command::Dataset {
            mix,
            count,
            namespaces,
            qps,
        } => {
            let shape = dataset::Shape {
                mix,
                count,
                namespaces,
            };
            let work = shardcron_harness::repo_root().join("loadtest/results");
            std::fs::create_dir_all(&work)?;
            let data = dataset::ensure(shape, qps, &work).await?;
            println!("{}", data.display());
            Ok(())
        }
        Command::Observe {
            minutes,
            tail,
            processes,
        } => {
            let client = connect().await?;
            let watch = observe::JobWatch::start(&client, mix::NAMESPACE_PREFIX);
            let (from, to) = observe::whole_minutes(10, minutes);
            let window = observe::Window {
                from,
                to,
                tail: Duration::from_secs(tail),
                prefix: mix::NAMESPACE_PREFIX,
                kind: CronJobKind::Batch,
                processes: &processes,
                big_tenant: None,
                done_after_jobs: None,
                failover: None,
            };
            let observation = observe::observe(&client, watch, &window).await?;
            println!("{}", serde_json::to_string_pretty(&observation)?);
            Ok(())
        }
        Command::Compare {
            scenario,
            mode,
            controllers,
            minutes,
            qps,
            burst,
            create_qps,
            out,
            shardcron_bin: bin,
            assert_complete,
            resume,
            keep_logs,
            join_during_herd,
            no_flood,
            no_attacks,
            spread,
            no_rolling_restart,
            without_sharded_watch,
            cronjob_kind,
        } => {
            let mut scenario = Scenario::new(scenario, mode);
            if let Some(minutes) = minutes {
                scenario.set_minutes(minutes)?;
            }
            let controllers = scenario.controllers(controllers)?;
            if cronjob_kind == CronJobKind::Shardcron
                && matches!(
                    scenario.name,
                    ScenarioName::S3 | ScenarioName::S7 | ScenarioName::S8
                )
            {
                bail!(
                    "--cronjob-kind shardcron runs S1, S2, S4, S5 and S6 (S3, S7 and S8 make batch/v1 CronJobs only)"
                );
            }
            let out = out.unwrap_or_else(|| {
                let flood = match (no_flood, no_attacks) {
                    (true, _) => "-no-flood",
                    (false, true) => "-no-attacks",
                    (false, false) => "",
                };
                let served = match (cronjob_kind, without_sharded_watch) {
                    (CronJobKind::Shardcron, _) => "-crd",
                    (CronJobKind::Batch, true) => "-unsharded",
                    (CronJobKind::Batch, false) => "",
                };
                scenario.default_out(qps, spread, &[flood, served].concat())
            });
            let settings = Settings {
                shardcron_bin: if controllers.iter().any(|c| *c != Variant::Upstream) {
                    shardcron_bin(bin)?
                } else {
                    PathBuf::new()
                },
                out: out.clone(),
                limits: ClientLimits { qps, burst },
                create_qps,
                resume,
                keep_logs,
                join_during_herd,
                flood: !no_flood,
                attacks: !no_attacks,
                spread_seconds: spread.unwrap_or(0),
                rolling_restart: !no_rolling_restart,
                sharded_watch: !without_sharded_watch && cronjob_kind == CronJobKind::Batch,
                cronjob_kind,
            };
            if scenario.name == ScenarioName::S6 {
                let runs = scaleout::run(&scenario, &controllers, &settings, report::scaleout_line)
                    .await?;
                report::write_scaleout(&out, &scenario, &runs)?;
                println!("{}", report::scaleout_markdown(&scenario, &runs));
                eprintln!("compare: report in {}", out.display());
                return Ok(());
            }
            if scenario.name == ScenarioName::S7 {
                let runs = million::run(&scenario, &controllers, &settings).await?;
                million::write(&out, &scenario, &runs)?;
                println!("{}", million::markdown(&scenario, &runs));
                eprintln!("compare: report in {}", out.display());
                return Ok(());
            }
            if scenario.name == ScenarioName::S3 {
                let runs =
                    scale::run(&scenario, &controllers, &settings, report::scale_line).await?;
                report::write_scale(&out, &scenario, &runs)?;
                println!("{}", report::scale_markdown(&scenario, &runs));
                eprintln!("compare: report in {}", out.display());
                return Ok(());
            }
            let runs =
                compare::compare(&scenario, &controllers, &settings, report::one_line).await?;
            report::write(&out, &scenario, &runs)?;
            println!("{}", report::markdown(&scenario, &runs));
            eprintln!("compare: report in {}", out.display());
            if assert_complete {
                for run in &runs {
                    let s = &run.observation.slots;
                    if s.missed > 0 || s.duplicates > 0 || s.answered == 0 {
                        bail!(
                            "{}: {} of {} slots missed, {} duplicates (e.g. {:?})",
                            run.variant,
                            s.missed,
                            s.expected,
                            s.duplicates,
                            s.missed_examples
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Overhead {
            count,
            minutes,
            out,
            shardcron_bin: bin,
            variant,
            variant_bin,
            mix,
        } => {
            let repo = shardcron_harness::repo_root();
            let out = out.unwrap_or_else(|| repo.join("loadtest/results/trace-overhead"));
            let variant: Vec<String> = variant
                .iter()
                .flat_map(|v| v.split_whitespace())
                .map(str::to_owned)
                .collect();
            let variant = overhead::Variant {
                args: variant,
                bin: variant_bin
                    .map(|bin| shardcron_bin(Some(bin)))
                    .transpose()?,
            };
            let report = overhead::run(
                &out,
                &shardcron_bin(bin)?,
                mix,
                count,
                minutes.max(1),
                &variant,
            )
            .await?;
            for side in [&report.off, &report.on] {
                let s = &side.observation.slots;
                let label = match (side.tracing, &side.bin, side.args.is_empty()) {
                    (true, _, _) => "tracing on".to_owned(),
                    (false, None, true) => "plain".to_owned(),
                    (false, None, false) => side.args.join(" "),
                    (false, Some(bin), _) => format!("{bin} {}", side.args.join(" ")),
                };
                println!(
                    "{label:>12}: {} slots, {} answered, {} missed, {} duplicates, {:.3} ms CPU per firing, {:.2} requests per firing",
                    s.expected,
                    s.answered,
                    s.missed,
                    s.duplicates,
                    side.cpu_ms_per_firing,
                    side.requests_per_firing
                );
            }
            println!(
                "ratio second/plain: {:.3} ({:+.1}%)",
                report.ratio,
                (report.ratio - 1.0) * 100.0
            );
            Ok(())
        }
        Command::FiringCost {
            count,
            minutes,
            rounds,
            warmup_rounds,
            job_controller_qps,
            out,
            shardcron_bin: bin,
        } => {
            let repo = shardcron_harness::repo_root();
            let out = out.unwrap_or_else(|| repo.join("loadtest/results/firing-cost"));
            let report = firingcost::run(
                &out,
                &shardcron_bin(bin)?,
                count,
                minutes.max(1),
                firingcost::Rounds {
                    warmup: warmup_rounds,
                    counted: rounds.max(1),
                },
                job_controller_qps.max(1),
            )
            .await?;
            println!("{}", firingcost::markdown(&report));
            eprintln!("firing-cost: report in {}", out.display());
            Ok(())
        }
    }
}
