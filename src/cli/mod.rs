//! The `shardcron` command line: argument parsing and dispatch to subcommands.

mod admin;
mod convert;
mod crd;
mod explain;
mod history;
mod next;
mod run;
mod trigger;

use clap::{Parser, Subcommand, ValueEnum};
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
    Crd(crd::CrdArgs),
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
    /// Run the controller.
    Run(Box<run::RunArgs>),
}

/// Output format shared by the inspection commands.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// Exit status for bad input (invalid schedule, zone, file), as documented.
pub const EXIT_BAD_INPUT: u8 = 2;

/// The text of the file `path`, or of stdin when `path` is `-`.
fn read_input(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().lock().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

/// A client from `kubeconfig`, or else from inside a pod, or else from the
/// default kubeconfig (`KUBECONFIG`, `~/.kube/config`), as kubectl finds
/// one; `user_agent` names the caller to the API server.
async fn kube_client(
    kubeconfig: Option<&std::path::PathBuf>,
    user_agent: &str,
) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = kube_config(kubeconfig).await?;
    crate::apiserver::client::build(config, user_agent).context("building the Kubernetes client")
}

/// The configuration [`kube_client`] builds its client from.
async fn kube_config(kubeconfig: Option<&std::path::PathBuf>) -> anyhow::Result<kube::Config> {
    use anyhow::Context as _;
    use kube::Config;
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => match Config::incluster() {
            Ok(config) => config,
            Err(_) => Config::from_kubeconfig(&KubeConfigOptions::default())
                .await
                .context("no in-cluster config and no usable kubeconfig")?,
        },
    };
    Ok(config)
}

/// `--cronjob-kinds`' and `--kind`'s values: a kind's short name.
fn parse_kind(value: &str) -> Result<crate::reconcile::CronJobKind, String> {
    use crate::reconcile::CronJobKind;
    CronJobKind::ALL
        .into_iter()
        .find(|kind| kind.name() == value)
        .ok_or_else(|| {
            format!("{value:?} is not a CronJob kind: batch (batch/v1) or shardcron (cronjobs.shardcron.io)")
        })
}

/// A CronJob the command acts on, and the API server to reach it through
/// (`trigger`, `history`).
#[derive(Debug, clap::Args)]
pub struct CronJobTarget {
    /// The CronJob, as NAMESPACE/NAME.
    cronjob: String,
    /// Which API serves it: batch (batch/v1) or shardcron (cronjobs.shardcron.io).
    #[arg(long, default_value = "batch", value_parser = parse_kind)]
    kind: crate::reconcile::CronJobKind,
    /// The kubeconfig (default: in a pod its ServiceAccount, else KUBECONFIG
    /// or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
}

/// `NAMESPACE/NAME` as the commands take a CronJob: both parts non-empty,
/// one `/`.
fn namespaced_name(value: &str) -> Option<(&str, &str)> {
    value.split_once('/').filter(|(namespace, name)| {
        !namespace.is_empty() && !name.is_empty() && !name.contains('/')
    })
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
            crd::run(&args, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
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
