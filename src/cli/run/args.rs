//! `shardcron run`'s flags and their checks: what a replica is told, and
//! the refusals of what cannot work (a ring name that is no DNS label, a
//! Lease duration that is not whole seconds, renewals slower than their
//! deadline, no CronJob kind).

use crate::admin;
use crate::apiserver::sharded::ServerShards;
use crate::apiserver::watch::ListStrategy;
use crate::reconcile::{CronJobKind, CronJobKinds};
use crate::shard::lease::LeaseSettings;
use crate::telemetry::logging::LogFormat;
use anyhow::Context as _;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file. Default: the in-cluster service account, then
    /// $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(super) kubeconfig: Option<PathBuf>,
    /// Only this namespace (repeat for several). Default: all namespaces.
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    pub(super) namespaces: Vec<String>,
    /// Where `/metrics` is served (port 0: any free port, logged).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(super) metrics_bind_address: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub(super) health_probe_bind_address: SocketAddr,
    /// Where `/debug/shards` and `/metrics/cronjobs` (the per-CronJob
    /// series) are served. They name every tenant's CronJobs, so this
    /// listens on loopback only unless told otherwise:
    /// reach it with `kubectl port-forward`, which Kubernetes authorizes
    /// (`pods/portforward`). Port 0: any free port, logged.
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub(super) debug_bind_address: SocketAddr,
    /// Where `/metrics` and `/metrics/cronjobs` are served to a Prometheus
    /// in the cluster: HTTPS with the admin API's certificate, each scrape's
    /// bearer token reviewed by the API server and `get` on the path
    /// authorized by RBAC (docs/operations.md). Port 0: any free port,
    /// logged.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub(super) secure_metrics_bind_address: SocketAddr,
    /// Where the admin API is served to kube-apiserver's aggregation layer
    /// (`admin.shardcron.io`, behind an APIService: docs/admin-api.md):
    /// HTTPS asking the request-header CA's client certificate. Port 0: any
    /// free port, logged.
    #[arg(long, default_value = "0.0.0.0:7443")]
    pub(super) aggregated_api_bind_address: SocketAddr,
    /// Keep the APIService of admin.shardcron.io registered while replicas
    /// run, served by this Service (NAMESPACE/NAME, port 443): registered,
    /// if missing, once this replica can serve it; withdrawn by the last
    /// replica to leave, so that
    /// a controller scaled to zero does not hold the cluster's namespace
    /// deletions (docs/admin-api.md). Default: the APIService is left to
    /// whoever installed it.
    #[arg(long, env = "SHARDCRON_AGGREGATED_API_SERVICE")]
    pub(super) aggregated_api_service: Option<admin::aggregated::registration::ServiceRef>,
    /// Where the admin API (gRPC over TLS, docs/admin-api.md) is served:
    /// every call is authenticated and authorized by the API server.
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub(super) admin_bind_address: SocketAddr,
    /// Where clients reach the admin API, published on the replica's Lease
    /// (default: the bind address, or with a wildcard one `POD_IP` and its
    /// port).
    #[arg(
        long,
        env = "SHARDCRON_ADMIN_ADVERTISE_ADDRESS",
        value_name = "HOST:PORT"
    )]
    pub(super) admin_advertise_address: Option<String>,
    /// The pod this replica runs in, NAMESPACE/NAME: published on its Lease
    /// with the admin API's port, so `shardcron status` reaches it through
    /// the API server's port-forward (the manifests set it).
    #[arg(long, env = "SHARDCRON_ADMIN_POD", value_name = "NAMESPACE/NAME")]
    pub(super) admin_pod: Option<String>,
    /// The admin API's certificate (PEM); without it, a self-signed one is
    /// made at start and published on the replica's Lease.
    #[arg(long, requires = "admin_tls_key_file", value_name = "FILE")]
    pub(super) admin_tls_cert_file: Option<String>,
    /// The admin API certificate's private key (PEM).
    #[arg(long, requires = "admin_tls_cert_file", value_name = "FILE")]
    pub(super) admin_tls_key_file: Option<String>,
    /// The CA (PEM) that signed `--admin-tls-cert-file`'s certificate,
    /// published on the replica's Lease for the `shardcron` CLI to trust
    /// (as a self-signed certificate is); without it, the CLI needs
    /// `--ca-file` or the aggregated API.
    #[arg(long, requires = "admin_tls_cert_file", value_name = "FILE")]
    pub(super) admin_tls_ca_file: Option<String>,
    /// Accept on the admin API only bearer tokens meant for one of these
    /// audiences (comma-separated), e.g. `shardcron-admin`, made with
    /// `kubectl create token SA --audience shardcron-admin` and passed to
    /// the CLI with `--token-file`: a replica then never receives a token
    /// the API server itself would accept. Default: the API server's own
    /// audiences (the kubeconfig's token works as it is).
    #[arg(
        long,
        env = "SHARDCRON_ADMIN_TOKEN_AUDIENCES",
        value_delimiter = ',',
        value_name = "AUDIENCE,..."
    )]
    pub(super) admin_token_audiences: Vec<String>,
    /// The zone of schedules without `spec.timeZone` (upstream: the
    /// kube-controller-manager process zone).
    #[arg(long, default_value = "UTC")]
    pub(super) default_time_zone: String,
    /// Sustained requests per second to the API server.
    #[arg(long, default_value_t = 20.0)]
    pub(super) kube_api_qps: f64,
    /// Requests allowed in a burst above the sustained rate.
    #[arg(long, default_value_t = 30)]
    pub(super) kube_api_burst: u32,
    /// The write gateway speaks HTTP/2 to the API server: its requests
    /// share one connection instead of one each in flight (30 at a
    /// herd's burst), at 13-21 % more CPU per firing (docs/performance.md).
    /// The reads, the watches and the Lease are HTTP/1.1 either way.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "SHARDCRON_API_HTTP2")]
    pub(super) api_http2: bool,
    /// The bulk loads read batch/v1 CronJobs in protobuf, as
    /// kube-controller-manager reads built-in kinds (the server encodes
    /// them several times cheaper than JSON), and a Job whose template came
    /// so is created in protobuf (docs/performance.md). The shardcron.io
    /// CRD, the watches and every other request stay JSON. `false` for a
    /// server or proxy that cannot answer in protobuf.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SHARDCRON_API_PROTOBUF")]
    pub(super) api_protobuf: bool,
    /// How the watches list: streaming lists where the server supports them.
    #[arg(long, value_enum, default_value = "auto")]
    pub(super) list_strategy: ListStrategy,
    /// Whether the API server is asked to send each replica only its share
    /// of the CronJobs (sharded list and watch, Kubernetes 1.36 alpha gate
    /// ShardedListAndWatch): `auto` where a probe shows the server filters.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "SHARDCRON_SERVER_SIDE_SHARDS"
    )]
    pub(super) server_side_shards: ServerShards,
    /// Which CronJobs to serve: `batch` (batch/v1, in place of
    /// kube-controller-manager's CronJob controller), `shardcron` (the
    /// cronjobs.shardcron.io CRD, beside it: `shardcron crd`), or
    /// `batch,shardcron` (both, kube-controller-manager's off).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "batch",
        value_parser = crate::cli::arguments::parse_kind,
        env = "SHARDCRON_CRONJOB_KINDS"
    )]
    pub(super) cronjob_kinds: Vec<CronJobKind>,
    /// This replica's stable id: its ring member name, its Lease's holder
    /// and the events' reporting instance. Default: the host name (the pod
    /// name in a StatefulSet). Two live processes must never share one.
    #[arg(long, env = "SHARDCRON_REPLICA_ID")]
    pub(super) replica_id: Option<String>,
    /// Export per-CronJob series (`shardcron_cronjob_*`, labelled by
    /// namespace and CronJob) for the CronJobs this replica owns, at
    /// `/metrics/cronjobs` on the debug listener: a small record per
    /// CronJob, 2 to 10 series each per scrape (docs/operations.md).
    /// `--cronjob-metrics=false` turns them off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SHARDCRON_CRONJOB_METRICS")]
    pub(super) cronjob_metrics: bool,
    /// Keep each CronJob's slot history in its `shardcron.io/slot-history`
    /// annotation: the slots that did not start and why, failed and
    /// replaced Jobs (docs/operations.md, "Why didn't my CronJob run?").
    /// Written only for what went wrong. `--slot-history=false` writes
    /// none (and leaves those written).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SHARDCRON_SLOT_HISTORY")]
    pub(super) slot_history: bool,
    /// The ring: replicas with the same ring name share the CronJobs.
    #[arg(long, default_value = "shardcron")]
    pub(super) shard_ring_name: String,
    /// Where the replicas' Leases live (the controller's own namespace).
    #[arg(long, env = "SHARDCRON_NAMESPACE", default_value = "shardcron-system")]
    pub(super) shard_lease_namespace: String,
    /// How long a replica's Lease lasts without renewal before its peers
    /// take its CronJobs over (a Go duration).
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    pub(super) shard_lease_duration: Duration,
    /// How often the own Lease is renewed.
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub(super) shard_renew_period: Duration,
    /// A replica that could not renew its Lease for this long stops acting
    /// (shorter than the Lease duration).
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub(super) shard_renew_deadline: Duration,
    /// On SIGTERM, how long the replica keeps running its CronJobs at most
    /// while its peers load them, so that they start them at once when it
    /// lets go (then it stops its actors: at most 10 s more). Keep it and
    /// those 10 s within the pod's terminationGracePeriodSeconds (80 s in
    /// deploy/).
    #[arg(long, default_value = "60s", value_parser = go_duration)]
    pub(super) shard_drain_timeout: Duration,
    /// Keep, for the CronJobs this replica would gain if one peer died,
    /// when each next falls due (about 100 bytes each; the CronJob watch
    /// selects their buckets too), so that at a take-over those due first
    /// are read on their own and start without waiting for the bulk load
    /// (docs/sharding.md, "Standby"). `--shard-standby=false` keeps none.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SHARDCRON_SHARD_STANDBY")]
    pub(super) shard_standby: bool,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub(super) log_format: LogFormat,
    /// Where to send traces (OTLP/gRPC, e.g. http://127.0.0.1:4317).
    /// Default: $OTEL_EXPORTER_OTLP_ENDPOINT; neither set: no traces. The
    /// other OTEL_* variables (service name, resource, sampler) apply.
    #[arg(long)]
    pub(super) otlp_endpoint: Option<String>,
    /// Threads doing the controller's work. 1: the watches, the write
    /// gateway, its HTTP connections, the supervisor, the Lease keeper and
    /// every CronJob actor share one thread, so a firing crosses no thread
    /// boundary (a quarter less CPU per firing, measured); N > 1: N tokio
    /// workers for I/O and N Arbiters for the actors. Scale out with
    /// replicas rather than threads.
    #[arg(long, env = "SHARDCRON_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(super) threads: u16,
    /// Let the kernel give this process transparent huge pages (its own
    /// setting), which the replica otherwise turns off for itself: about
    /// 7% more resident memory at 10^6 CronJobs, grown by the kernel in
    /// the background (docs/performance.md, "The fourth replica's growth
    /// was huge pages"), and no CPU saved (measured side by side); for
    /// such measurements.
    #[arg(long, env = "SHARDCRON_TRANSPARENT_HUGE_PAGES")]
    pub(super) transparent_huge_pages: bool,
}

fn go_duration(text: &str) -> Result<Duration, String> {
    match crate::schedule::parse_go_duration(text) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos as u64)),
        Ok(_) => Err("must be positive".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

/// A DNS label: lowercase letters, digits and '-', starting and ending
/// with a letter or digit, at most 63 characters (the Lease name is
/// `<ring>.<replica id>`).
fn check_dns_label(flag: &str, value: &str) -> anyhow::Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if !ok {
        anyhow::bail!(
            "{flag} {value:?}: must be a DNS label (lowercase letters, digits and '-', at most 63)"
        );
    }
    Ok(())
}

pub(super) fn replica_id(args: &RunArgs) -> anyhow::Result<String> {
    let id = match &args.replica_id {
        Some(id) => id.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .context("no --replica-id and no host name to default to")?,
    };
    check_dns_label("--replica-id", &id)?;
    Ok(id)
}

pub(super) fn lease_settings(args: &RunArgs, replica_id: String) -> anyhow::Result<LeaseSettings> {
    check_dns_label("--shard-ring-name", &args.shard_ring_name)?;
    // Validated as it is written: the Lease stores whole seconds, and the
    // peers judge expiry by what is stored.
    let duration = args.shard_lease_duration;
    if duration.subsec_nanos() != 0
        || Duration::from_secs(crate::shard::lease::lease_duration_seconds(duration) as u64)
            != duration
    {
        anyhow::bail!(
            "--shard-lease-duration {duration:?}: must be a whole number of seconds, at least 1s (a Lease stores leaseDurationSeconds)"
        );
    }
    if args.shard_renew_deadline >= args.shard_lease_duration {
        anyhow::bail!("--shard-renew-deadline must be shorter than --shard-lease-duration");
    }
    if args.shard_renew_period >= args.shard_renew_deadline {
        anyhow::bail!("--shard-renew-period must be shorter than --shard-renew-deadline");
    }
    Ok(LeaseSettings {
        namespace: args.shard_lease_namespace.clone(),
        ring: args.shard_ring_name.clone(),
        replica_id,
        duration: args.shard_lease_duration,
        renew_period: args.shard_renew_period,
        renew_deadline: args.shard_renew_deadline,
        drain: args.shard_drain_timeout,
        admin_certificate: None,
        admin_address: None,
        admin_pod: None,
    })
}

/// The kinds a ring serves: at least one.
pub(super) fn served_kinds(kinds: &[CronJobKind]) -> anyhow::Result<CronJobKinds> {
    let set = CronJobKinds::of(kinds.iter().copied());
    if set.is_empty() {
        anyhow::bail!("--cronjob-kinds: name batch, shardcron or both");
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::RunArgs;
    use crate::cli::Cli;
    use clap::{Args as _, Command, Parser as _};
    use std::collections::BTreeSet;

    fn threads(args: &[&str]) -> Result<u16, String> {
        let cli = Cli::try_parse_from([&["shardcron", "run"], args].concat())
            .map_err(|e| e.to_string())?;
        match cli.command {
            crate::cli::Command::Run(run) => Ok(run.threads),
            _ => Err("not run".to_owned()),
        }
    }

    fn kinds(args: &[&str]) -> Result<Vec<super::CronJobKind>, String> {
        let cli = Cli::try_parse_from([&["shardcron", "run"], args].concat())
            .map_err(|e| e.to_string())?;
        match cli.command {
            crate::cli::Command::Run(run) => Ok(run.cronjob_kinds),
            _ => Err("not run".to_owned()),
        }
    }

    #[test]
    fn batch_is_served_by_default_and_either_kind_or_both_on_request() {
        use super::CronJobKind::{Batch, Shardcron};
        // The default holds unless SHARDCRON_CRONJOB_KINDS is set, which no test does.
        assert_eq!(kinds(&[]), Ok(vec![Batch]));
        assert_eq!(
            kinds(&["--cronjob-kinds", "shardcron"]),
            Ok(vec![Shardcron])
        );
        let unknown = kinds(&["--cronjob-kinds", "cron"]).expect_err("an unknown kind");
        assert!(
            unknown.contains("\"cron\" is not a CronJob kind"),
            "{unknown}"
        );
        assert_eq!(
            kinds(&["--cronjob-kinds", "batch,shardcron"]),
            Ok(vec![Batch, Shardcron])
        );
        assert_eq!(
            super::served_kinds(&[Shardcron, Shardcron]).ok(),
            Some(super::CronJobKinds::of([Shardcron]))
        );
        assert_eq!(
            super::served_kinds(&[Shardcron, Batch]).ok(),
            Some(super::CronJobKinds::of([Batch, Shardcron]))
        );
        let none = super::served_kinds(&[]).expect_err("no kind");
        assert!(none.to_string().contains("--cronjob-kinds"), "{none}");
    }

    #[test]
    fn threads_default_to_one_and_reject_zero() {
        // The default holds unless SHARDCRON_THREADS is set, which no test does.
        assert_eq!(threads(&[]), Ok(1));
        assert_eq!(threads(&["--threads", "4"]), Ok(4));
        let zero = threads(&["--threads", "0"]).expect_err("0 threads");
        assert!(zero.contains("--threads"), "{zero}");
    }

    /// The flags named in the first cell of each row of the flag table in
    /// docs/operations.md's `shardcron run` section.
    fn documented_flags() -> BTreeSet<String> {
        let guide = include_str!("../../../docs/operations.md");
        let section = guide
            .split("## `shardcron run`")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/operations.md has a `shardcron run` section");
        section
            .lines()
            .filter(|line| line.starts_with("| `--"))
            .filter_map(|row| row.split('|').nth(1))
            .flat_map(|cell| cell.split("`--").skip(1))
            .map(|flag| {
                let name = flag.split([' ', '`']).next().unwrap_or_default();
                format!("--{name}")
            })
            .collect()
    }

    #[test]
    fn each_flag_of_run_has_a_row_in_the_operations_guide_and_each_row_a_flag() {
        let command = RunArgs::augment_args(Command::new("run"));
        let flags: BTreeSet<String> = command
            .get_arguments()
            .filter_map(|argument| argument.get_long())
            .map(|long| format!("--{long}"))
            .collect();
        assert_eq!(documented_flags(), flags);
    }
}
