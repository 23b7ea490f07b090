//! `shardcron run`: the controller process.
//!
//! Wiring only: an actix System on a tokio runtime of `--threads` workers
//! (one by default: a current-thread runtime, the CronJob actors on the
//! System's own Arbiter; N > 1: N workers and N Arbiters), the supervisor,
//! the own Lease's keeper, and SIGTERM / Ctrl-C for a graceful stop (which
//! releases the Lease, so peers take over at once).

use crate::admin::{self, access::Access, scrape::ScrapeAccess, service::Admin, tls::TlsIdentity};
use crate::apiserver::gateway::{Gateway, Limits};
use crate::apiserver::sharded::ServerShards;
use crate::apiserver::watch::{self, ListStrategy};
use crate::reconcile::{CronJobKind, CronJobKinds};
use crate::schedule::load_named_zone;
use crate::shard::debug;
use crate::shard::fence::SharedFence;
use crate::shard::lease::{self, LeaseSettings};
use crate::shard::supervisor::{
    LeaseWatch, ServedKind, Shutdown, Supervisor, SupervisorParts, WatchSetup,
};
use crate::telemetry::Metrics;
use crate::telemetry::http::{self, Readiness};
use crate::telemetry::logging::{self, LogFormat};
use crate::telemetry::traces;
use actix::prelude::*;
use anyhow::Context as _;
use clap::Args;
use futures::FutureExt as _;
use kube::runtime::events::Reporter;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file. Default: the in-cluster service account, then
    /// $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Only this namespace (repeat for several). Default: all namespaces.
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    namespaces: Vec<String>,
    /// Where `/metrics` is served (port 0: any free port, logged).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_probe_bind_address: SocketAddr,
    /// Where `/debug/shards` and `/metrics/cronjobs` (the per-CronJob
    /// series) are served. They name every tenant's CronJobs, so this
    /// listens on loopback only unless told otherwise:
    /// reach it with `kubectl port-forward`, which Kubernetes authorizes
    /// (`pods/portforward`). Port 0: any free port, logged.
    #[arg(long, default_value = "127.0.0.1:8082")]
    debug_bind_address: SocketAddr,
    /// Where `/metrics` and `/metrics/cronjobs` are served to a Prometheus
    /// in the cluster: HTTPS with the admin API's certificate, each scrape's
    /// bearer token reviewed by the API server and `get` on the path
    /// authorized by RBAC (docs/operations.md). Port 0: any free port,
    /// logged.
    #[arg(long, default_value = "0.0.0.0:8443")]
    secure_metrics_bind_address: SocketAddr,
    /// Where the admin API is served to kube-apiserver's aggregation layer
    /// (`admin.shardcron.io`, behind an APIService: docs/admin-api.md):
    /// HTTPS asking the request-header CA's client certificate. Port 0: any
    /// free port, logged.
    #[arg(long, default_value = "0.0.0.0:7443")]
    aggregated_api_bind_address: SocketAddr,
    /// Keep the APIService of admin.shardcron.io registered while replicas
    /// run, served by this Service (NAMESPACE/NAME, port 443): registered,
    /// if missing, once this replica can serve it; withdrawn by the last
    /// replica to leave, so that
    /// a controller scaled to zero does not hold the cluster's namespace
    /// deletions (docs/admin-api.md). Default: the APIService is left to
    /// whoever installed it.
    #[arg(long, env = "SHARDCRON_AGGREGATED_API_SERVICE")]
    aggregated_api_service: Option<admin::aggregated::registration::ServiceRef>,
    /// Where the admin API (gRPC over TLS, docs/admin-api.md) is served:
    /// every call is authenticated and authorized by the API server.
    #[arg(long, default_value = "0.0.0.0:9443")]
    admin_bind_address: SocketAddr,
    /// Where clients reach the admin API, published on the replica's Lease
    /// (default: the bind address, or with a wildcard one `POD_IP` and its
    /// port).
    #[arg(
        long,
        env = "SHARDCRON_ADMIN_ADVERTISE_ADDRESS",
        value_name = "HOST:PORT"
    )]
    admin_advertise_address: Option<String>,
    /// The pod this replica runs in, NAMESPACE/NAME: published on its Lease
    /// with the admin API's port, so `shardcron status` reaches it through
    /// the API server's port-forward (the manifests set it).
    #[arg(long, env = "SHARDCRON_ADMIN_POD", value_name = "NAMESPACE/NAME")]
    admin_pod: Option<String>,
    /// The admin API's certificate (PEM); without it, a self-signed one is
    /// made at start and published on the replica's Lease.
    #[arg(long, requires = "admin_tls_key_file", value_name = "FILE")]
    admin_tls_cert_file: Option<String>,
    /// The admin API certificate's private key (PEM).
    #[arg(long, requires = "admin_tls_cert_file", value_name = "FILE")]
    admin_tls_key_file: Option<String>,
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
    admin_token_audiences: Vec<String>,
    /// The zone of schedules without `spec.timeZone` (upstream: the
    /// kube-controller-manager process zone).
    #[arg(long, default_value = "UTC")]
    default_time_zone: String,
    /// Sustained requests per second to the API server.
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f64,
    /// Requests allowed in a burst above the sustained rate.
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,
    /// How the watches list: streaming lists where the server supports them.
    #[arg(long, value_enum, default_value = "auto")]
    list_strategy: ListStrategy,
    /// Whether the API server is asked to send each replica only its share
    /// of the CronJobs (sharded list and watch, Kubernetes 1.36 alpha gate
    /// ShardedListAndWatch): `auto` where a probe shows the server filters.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "SHARDCRON_SERVER_SIDE_SHARDS"
    )]
    server_side_shards: ServerShards,
    /// Which CronJobs to serve: `batch` (batch/v1, in place of
    /// kube-controller-manager's CronJob controller), `shardcron` (the
    /// cronjobs.shardcron.io CRD, beside it: `shardcron crd`), or
    /// `batch,shardcron` (both, kube-controller-manager's off).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "batch",
        value_parser = super::parse_kind,
        env = "SHARDCRON_CRONJOB_KINDS"
    )]
    cronjob_kinds: Vec<CronJobKind>,
    /// This replica's stable id: its ring member name, its Lease's holder
    /// and the events' reporting instance. Default: the host name (the pod
    /// name in a StatefulSet). Two live processes must never share one.
    #[arg(long, env = "SHARDCRON_REPLICA_ID")]
    replica_id: Option<String>,
    /// Export per-CronJob series (`shardcron_cronjob_*`, labelled by
    /// namespace and CronJob) for the CronJobs this replica owns, at
    /// `/metrics/cronjobs` on the debug listener: a small record per
    /// CronJob, 6 to 7 series each per scrape (docs/operations.md).
    /// `--cronjob-metrics=false` turns them off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "SHARDCRON_CRONJOB_METRICS")]
    cronjob_metrics: bool,
    /// The ring: replicas with the same ring name share the CronJobs.
    #[arg(long, default_value = "shardcron")]
    shard_ring_name: String,
    /// Where the replicas' Leases live (the controller's own namespace).
    #[arg(long, env = "SHARDCRON_NAMESPACE", default_value = "shardcron-system")]
    shard_lease_namespace: String,
    /// How long a replica's Lease lasts without renewal before its peers
    /// take its CronJobs over (a Go duration).
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    shard_lease_duration: Duration,
    /// How often the own Lease is renewed.
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    shard_renew_period: Duration,
    /// A replica that could not renew its Lease for this long stops acting
    /// (shorter than the Lease duration).
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    shard_renew_deadline: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Where to send traces (OTLP/gRPC, e.g. http://127.0.0.1:4317).
    /// Default: $OTEL_EXPORTER_OTLP_ENDPOINT; neither set: no traces. The
    /// other OTEL_* variables (service name, resource, sampler) apply.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// Threads doing the controller's work. 1: the watches, the write
    /// gateway, its HTTP connections, the supervisor, the Lease keeper and
    /// every CronJob actor share one thread, so a firing crosses no thread
    /// boundary (a quarter less CPU per firing, measured); N > 1: N tokio
    /// workers for I/O and N Arbiters for the actors. Scale out with
    /// replicas rather than threads.
    #[arg(long, env = "SHARDCRON_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
}

fn go_duration(text: &str) -> Result<Duration, String> {
    match crate::schedule::parse_go_duration(text) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos as u64)),
        Ok(_) => Err("must be positive".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

/// After a graceful stop (this replica's Lease released): the last replica
/// of the ring to leave withdraws the APIService. On a runtime of its own,
/// the controller's having stopped; every request within its deadline.
fn withdraw_apiservice_if_last(args: &RunArgs, namespace: &str, ring: &str, own: &str) {
    use admin::aggregated::registration::{self, Withdrawal};
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!(%error, "cannot withdraw the APIService: no runtime");
            return;
        }
    };
    runtime.block_on(async {
        let client = match super::kube_config(args.kubeconfig.as_ref())
            .await
            .and_then(|config| {
                crate::apiserver::client::build(config, &crate::apiserver::client::user_agent(own))
                    .context("building the Kubernetes client")
            }) {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%error, "cannot withdraw the APIService");
                return;
            }
        };
        match registration::withdraw_if_last(client, namespace, ring, own).await {
            Ok(Withdrawal::Withdrawn) => tracing::info!(
                apiservice = registration::NAME,
                "the last replica out withdrew the APIService"
            ),
            Ok(Withdrawal::PeersRemain(peers)) => {
                tracing::info!(?peers, "peers still run: the APIService stays")
            }
            Err(error) => tracing::warn!(%error, apiservice = registration::NAME, "withdrawing the APIService failed"),
        }
    });
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

fn replica_id(args: &RunArgs) -> anyhow::Result<String> {
    let id = match &args.replica_id {
        Some(id) => id.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .context("no --replica-id and no host name to default to")?,
    };
    check_dns_label("--replica-id", &id)?;
    Ok(id)
}

fn lease_settings(args: &RunArgs, replica_id: String) -> anyhow::Result<LeaseSettings> {
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
        admin_certificate: None,
        admin_address: None,
        admin_pod: None,
    })
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::with_cronjob_series(args.cronjob_metrics));
    let (traces, layer) = match traces::start(args.otlp_endpoint.as_deref(), &metrics)? {
        Some((traces, layer)) => (Some(traces), Some(layer)),
        None => (None, None),
    };
    logging::init(args.log_format, layer);
    let result = run_controller(args, metrics);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    result
}

fn run_controller(args: &RunArgs, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    if !(args.kube_api_qps.is_finite() && args.kube_api_qps > 0.0) {
        anyhow::bail!("--kube-api-qps must be a positive number");
    }
    served_kinds(&args.cronjob_kinds)?;
    let mut settings = lease_settings(args, replica_id(args)?)?;
    let identity = match (&args.admin_tls_cert_file, &args.admin_tls_key_file) {
        (Some(cert), Some(key)) => TlsIdentity::from_files(cert, key)?,
        _ => TlsIdentity::self_signed(&settings.replica_id)?,
    };
    settings.admin_certificate = identity.self_signed.then(|| identity.cert_pem.clone());
    settings.admin_address = admin::advertised_address(
        args.admin_bind_address,
        args.admin_advertise_address.as_deref(),
        std::env::var("POD_IP").ok().as_deref(),
    );
    settings.admin_pod = match &args.admin_pod {
        Some(pod) => admin::published_pod(pod, args.admin_bind_address.port())
            .map_err(|e| anyhow::anyhow!("--admin-pod: {e}"))?,
        None => None,
    };
    let default_zone = load_named_zone(&args.default_time_zone)
        .map_err(|e| anyhow::anyhow!("--default-time-zone: {e}"))?;
    let threads = usize::from(args.threads);
    let system = System::with_tokio_rt(move || {
        let mut builder = if threads == 1 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        };
        builder
            .enable_all()
            .build()
            .expect("cannot start the tokio runtime")
    });
    let (ring, own, lease_namespace) = (
        settings.ring.clone(),
        settings.replica_id.clone(),
        settings.namespace.clone(),
    );
    let started = system.block_on(start(args, settings, identity, default_zone, metrics));
    if let Err(error) = started {
        System::current().stop();
        return Err(error);
    }
    match system.run_with_code().context("the actor system failed")? {
        0 => {
            if args.aggregated_api_service.is_some() {
                withdraw_apiservice_if_last(args, &lease_namespace, &ring, &own);
            }
            Ok(())
        }
        code => anyhow::bail!("stopped with exit code {code}"),
    }
}

async fn start(
    args: &RunArgs,
    settings: LeaseSettings,
    identity: TlsIdentity,
    default_zone: jiff::tz::TimeZone,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    // Read once: the client is built from it, and the replica's own token
    // (for its peers) taken from it.
    let config = super::kube_config(args.kubeconfig.as_ref()).await?;
    let own_token = admin::aggregated::peers::OwnToken::from_config(&config);
    let user_agent = crate::apiserver::client::user_agent(&settings.replica_id);
    let fence = SharedFence::new(settings.renew_deadline);
    // The gateway's writes on connections of their own, which refuse to
    // write once the fence has lapsed; the Lease and the reads on the other.
    let gateway_client = crate::apiserver::client::build_fenced(
        config.clone(),
        &user_agent,
        Arc::new(fence.clone()),
    )
    .context("building the write gateway's Kubernetes client")?;
    let client = crate::apiserver::client::build(config, &user_agent)
        .context("building the Kubernetes client")?;
    let admin_listener = tokio::net::TcpListener::bind(args.admin_bind_address)
        .await
        .with_context(|| format!("binding {}", args.admin_bind_address))?;
    let readiness = Arc::new(Readiness::default());
    let metrics_listener = http::listen(args.metrics_bind_address)
        .await
        .with_context(|| format!("binding {}", args.metrics_bind_address))?;
    let health_listener = http::listen(args.health_probe_bind_address)
        .await
        .with_context(|| format!("binding {}", args.health_probe_bind_address))?;
    let debug_listener = http::listen(args.debug_bind_address)
        .await
        .with_context(|| format!("binding {}", args.debug_bind_address))?;
    let aggregated_listener = http::listen(args.aggregated_api_bind_address)
        .await
        .with_context(|| format!("binding {}", args.aggregated_api_bind_address))?;
    let secure_metrics_listener = http::listen(args.secure_metrics_bind_address)
        .await
        .with_context(|| format!("binding {}", args.secure_metrics_bind_address))?;
    let secure_metrics_tls = admin::https::server_config(&identity)
        .context("the certificate for the metrics endpoint")?;

    let strategy = args.list_strategy.resolve(&client).await;
    let kinds = served_kinds(&args.cronjob_kinds)?;
    let mut served = Vec::new();
    for kind in kinds.iter() {
        // Asked per kind: Kubernetes 1.36 shards batch/v1's watches, not
        // custom resources'.
        let server_shards = args
            .server_side_shards
            .resolve(&client, kind, args.namespaces.first().map(String::as_str))
            .await;
        served.push(ServedKind {
            kind,
            server_shards,
        });
    }
    let gateway = Gateway::start(
        gateway_client,
        Limits {
            qps: args.kube_api_qps,
            burst: args.kube_api_burst,
        },
        Reporter {
            controller: "shardcron".to_owned(),
            instance: Some(settings.replica_id.clone()),
        },
        metrics.clone(),
        Arc::new(fence.clone()),
    );

    let threads = usize::from(args.threads);
    // One thread: the actors live on the System's own Arbiter, beside
    // everything else, so no message between them wakes another thread.
    let arbiters: Vec<ArbiterHandle> = if threads == 1 {
        vec![Arbiter::current()]
    } else {
        (0..threads).map(|_| Arbiter::new().handle()).collect()
    };
    let scopes: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        args.namespaces.iter().cloned().map(Some).collect()
    };
    let feed = crate::actor::feed::DecisionFeed::default();
    let supervisor = Supervisor::start_with(SupervisorParts {
        feed: feed.clone(),
        client: client.clone(),
        lease: settings.clone(),
        fence,
        gateway: gateway.clone(),
        metrics: metrics.clone(),
        default_zone,
        arbiters,
        scopes: scopes.clone(),
        readiness: readiness.clone(),
        watches: Some(WatchSetup {
            client: client.clone(),
            strategy,
            metrics: metrics.clone(),
            kinds: served.clone(),
        }),
    });
    let metrics_addr = metrics_listener.local_addr()?;
    let health_addr = health_listener.local_addr()?;
    let debug_addr = debug_listener.local_addr()?;
    tokio::spawn(http::serve(
        metrics_listener,
        http::metrics_router(metrics.clone()),
    ));
    tokio::spawn(http::serve(health_listener, http::health_router(readiness)));
    tokio::spawn(http::serve(
        debug_listener,
        debug::router(supervisor.clone().recipient())
            .merge(http::cronjob_metrics_router(metrics.clone())),
    ));
    let secure_metrics_addr = secure_metrics_listener.local_addr()?;
    let scrape = admin::scrape::router(metrics.clone(), ScrapeAccess::new(client.clone()));
    tokio::spawn(admin::https::serve(
        secure_metrics_listener,
        secure_metrics_tls,
        move |_| scrape.clone(),
    ));
    tracing::info!(%metrics_addr, %health_addr, %debug_addr, %secure_metrics_addr, "serving /metrics, /healthz and /readyz, /debug/shards, and both metrics paths over HTTPS to authorized scrapers");
    let admin_addr = admin_listener.local_addr()?;
    let admin = Arc::new(Admin {
        access: Access::new(client.clone(), args.admin_token_audiences.clone()),
        report: supervisor.clone().recipient(),
        locate: supervisor.clone().recipient(),
        client: client.clone(),
        replica: settings.replica_id.clone(),
        feed,
        streams: admin::streams::StreamSlots::new(
            admin::MAX_WATCHERS,
            admin::streams::MAX_WATCHERS_PER_IDENTITY,
        ),
        gateway: gateway.clone(),
    });
    let aggregated_addr = aggregated_listener.local_addr()?;
    let peers = admin::aggregated::peers::Peers {
        client: client.clone(),
        namespace: settings.namespace.clone(),
        ring: settings.ring.clone(),
        token: own_token,
    };
    {
        let (identity, client, admin) = (identity.clone(), client.clone(), admin.clone());
        let registers = args.aggregated_api_service.clone();
        tokio::spawn(async move {
            admin::aggregated::serve::run(
                aggregated_listener,
                &identity,
                client,
                admin,
                peers,
                registers,
            )
            .await;
        });
    }
    tracing::info!(%aggregated_addr, "serving the aggregated admin API (admin.shardcron.io, through kube-apiserver)");
    tokio::spawn(async move {
        if let Err(error) = admin::serve(admin_listener, &identity, admin).await {
            tracing::error!(%error, "the admin API stopped");
        }
    });
    tracing::info!(%admin_addr, "serving the admin API (gRPC over TLS)");
    {
        let to = supervisor.clone();
        watch::leases(
            client.clone(),
            &settings.namespace,
            &settings.selector(),
            metrics.clone(),
            |lease| lease::observe(&lease),
            move |event| to.send(LeaseWatch(event)).map(drop),
        );
    }
    tracing::info!(
        ?strategy,
        ?served,
        ?scopes,
        threads,
        replica = %settings.replica_id,
        lease = %settings.lease_name(),
        lease_namespace = %settings.namespace,
        "controller started"
    );
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("termination signal received");
        supervisor.do_send(Shutdown);
    });
    Ok(())
}

/// The kinds a ring serves: at least one.
fn served_kinds(kinds: &[CronJobKind]) -> anyhow::Result<CronJobKinds> {
    let set = CronJobKinds::of(kinds.iter().copied());
    if set.is_empty() {
        anyhow::bail!("--cronjob-kinds: name batch, shardcron or both");
    }
    Ok(set)
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops gracefully");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::Cli;
    use clap::Parser as _;

    fn threads(args: &[&str]) -> Result<u16, String> {
        let cli = Cli::try_parse_from([&["shardcron", "run"], args].concat())
            .map_err(|e| e.to_string())?;
        match cli.command {
            super::super::Command::Run(run) => Ok(run.threads),
            _ => Err("not run".to_owned()),
        }
    }

    fn kinds(args: &[&str]) -> Result<Vec<super::CronJobKind>, String> {
        let cli = Cli::try_parse_from([&["shardcron", "run"], args].concat())
            .map_err(|e| e.to_string())?;
        match cli.command {
            super::super::Command::Run(run) => Ok(run.cronjob_kinds),
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
}
