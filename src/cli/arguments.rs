//! What the subcommands share: a CronJob named NAMESPACE/NAME (and the API
//! server to reach it through), a kind, an output format, a kubeconfig, an
//! input file, the exit status for bad input.

use clap::ValueEnum;

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
pub(super) fn read_input(path: &std::path::Path) -> std::io::Result<String> {
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
pub(super) async fn kube_client(
    kubeconfig: Option<&std::path::PathBuf>,
    user_agent: &str,
) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = kube_config(kubeconfig).await?;
    crate::apiserver::client::build(config, user_agent).context("building the Kubernetes client")
}

/// The configuration [`kube_client`] builds its client from.
pub(super) async fn kube_config(
    kubeconfig: Option<&std::path::PathBuf>,
) -> anyhow::Result<kube::Config> {
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
pub(super) fn parse_kind(value: &str) -> Result<crate::reconcile::CronJobKind, String> {
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
    pub(super) cronjob: String,
    /// Which API serves it: batch (batch/v1) or shardcron (cronjobs.shardcron.io).
    #[arg(long, default_value = "batch", value_parser = parse_kind)]
    pub(super) kind: crate::reconcile::CronJobKind,
    /// The kubeconfig (default: in a pod its ServiceAccount, else KUBECONFIG
    /// or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub(super) kubeconfig: Option<std::path::PathBuf>,
}

/// `NAMESPACE/NAME` as the commands take a CronJob: both parts non-empty,
/// one `/`.
pub(super) fn namespaced_name(value: &str) -> Option<(&str, &str)> {
    value.split_once('/').filter(|(namespace, name)| {
        !namespace.is_empty() && !name.is_empty() && !name.contains('/')
    })
}
