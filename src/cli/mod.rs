//! The `shardcron` command line: argument parsing and dispatch to subcommands.

mod admin;
mod arguments;
mod convert;
pub mod crd;
mod explain;
mod history;
mod next;
mod run;
mod trigger;
mod zone_check;

use arguments::EXIT_BAD_INPUT;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// A horizontally sharded Kubernetes CronJob controller.
#[derive(Debug, Parser)]
#[command(name = "shardcron", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the next activation times of a schedule, as Kubernetes computes them.
    Next(next::NextArgs),
    /// Show what the controller would do with a CronJob and its Jobs now, and why.
    Explain(explain::ExplainArgs),
    /// Print the cronjobs.shardcron.io CustomResourceDefinition (batch/v1's CronJob as a CRD).
    Crd(crd::command::CrdArgs),
    /// Copy batch/v1 CronJobs as cronjobs.shardcron.io ones, their last slot carried.
    Convert(convert::ConvertArgs),
    /// Ask for one run of a CronJob now (its shardcron.io/run-now annotation).
    Trigger(trigger::TriggerArgs),
    /// Show the ring as a replica sees it (the admin API).
    Ring(admin::RingArgs),
    /// What waits in a replica's write gateway, by class and namespace
    /// (the admin API's GetQueues).
    Queues(admin::QueuesArgs),
    /// Show a CronJob's live state on the replica that owns it (the admin API).
    Status(admin::StatusArgs),
    /// Show each recent slot of a CronJob and what became of it (skipped and
    /// why, failed, replaced, started), from the API server alone.
    History(history::HistoryArgs),
    /// List the CronJobs without spec.timeZone whose slots move when their
    /// controller's zone changes (kube-controller-manager's to shardcron's).
    ZoneCheck(zone_check::ZoneCheckArgs),
    /// Print this build's release: version, commit and ring protocol versions.
    Version,
    /// Run the controller.
    Run(Box<run::RunArgs>),
}

/// `shardcron version`'s answer.
fn version() -> String {
    use crate::release::{VERSION, commit};
    let protocols = crate::shard::protocol::Protocols::THIS_BUILD;
    format!(
        "shardcron {VERSION}\ncommit: {}\nring protocols: {protocols}\n",
        commit()
    )
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Next(args) => {
            next::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Explain(args) => {
            explain::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Convert(args) => {
            convert::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Trigger(args) => {
            trigger::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Ring(args) => {
            admin::ring(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Queues(args) => {
            admin::queues(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Status(args) => {
            admin::status(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::History(args) => {
            history::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Crd(args) => {
            crd::command::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::ZoneCheck(args) => {
            zone_check::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
        }
        Command::Version => {
            print!("{}", version());
            Ok(())
        }
        Command::Run(args) => {
            return match run::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("shardcron: {err:#}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("shardcron: {err}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
