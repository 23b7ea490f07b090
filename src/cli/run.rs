//! `shardcron run`: the controller process.
//!
//! Wiring only: an actix System on a multi-threaded tokio runtime (watchers,
//! the gateway's requests and the HTTP endpoints run on its workers), one
//! Arbiter per core for the CronJob actors, the supervisor on the System
//! thread, and SIGTERM / Ctrl-C for a graceful stop.

use crate::actor::apply::Shared;
use crate::kube::gateway::{Gateway, Limits};
use crate::kube::watch::{self, ListStrategy};
use crate::schedule::load_named_zone;
use crate::shard::supervisor::{CronJobWatch, JobWatch, Shutdown, Supervisor};
use crate::telemetry::Metrics;
use crate::telemetry::http::{self, Readiness};
use crate::telemetry::logging::{self, LogFormat};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::events::Reporter;
use ::kube::{Client, Config};
use actix::prelude::*;
use anyhow::Context as _;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// This replica's id (events' reporting instance).
    #[arg(long, env = "SHARDCRON_REPLICA_ID")]
    replica_id: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    logging::init(args.log_format);
    if !(args.kube_api_qps.is_finite() && args.kube_api_qps > 0.0) {
        anyhow::bail!("--kube-api-qps must be a positive number");
    }
    let default_zone = load_named_zone(&args.default_time_zone)
        .map_err(|e| anyhow::anyhow!("--default-time-zone: {e}"))?;
    let system = System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("cannot start the tokio runtime")
    });
    let started = system.block_on(start(args, default_zone));
    if let Err(error) = started {
        System::current().stop();
        return Err(error);
    }
    system.run().context("the actor system failed")?;
    Ok(())
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<Client> {
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
    Client::try_from(config).context("building the Kubernetes client")
}

async fn start(args: &RunArgs, default_zone: jiff::tz::TimeZone) -> anyhow::Result<()> {
    let client = client(args.kubeconfig.as_ref()).await?;
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());

    let (metrics_addr, metrics_server) = http::bind(
        args.metrics_bind_address,
        http::metrics_router(metrics.clone()),
    )
    .await
    .with_context(|| format!("binding {}", args.metrics_bind_address))?;
    let (health_addr, health_server) = http::bind(
        args.health_probe_bind_address,
        http::health_router(readiness.clone()),
    )
    .await
    .with_context(|| format!("binding {}", args.health_probe_bind_address))?;
    tokio::spawn(metrics_server);
    tokio::spawn(health_server);
    tracing::info!(%metrics_addr, %health_addr, "serving /metrics, /healthz and /readyz");

    let strategy = args.list_strategy.resolve(&client).await;
    let gateway = Gateway::start(
        client.clone(),
        Limits {
            qps: args.kube_api_qps,
            burst: args.kube_api_burst,
        },
        Reporter {
            controller: "shardcron".to_owned(),
            instance: args.replica_id.clone(),
        },
        metrics.clone(),
    );

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arbiters: Vec<ArbiterHandle> = (0..cores).map(|_| Arbiter::new().handle()).collect();
    let scopes: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        args.namespaces.iter().cloned().map(Some).collect()
    };
    let supervisor = {
        let (metrics, scopes) = (metrics.clone(), scopes.clone());
        Supervisor::create(move |ctx| {
            let shared = Arc::new(Shared {
                gateway,
                reports: ctx.address().recipient(),
                metrics,
                default_zone,
            });
            Supervisor::new(shared, arbiters, scopes, readiness)
        })
    };
    for (scope, namespace) in scopes.iter().enumerate() {
        let to = supervisor.clone();
        watch::cronjobs(
            client.clone(),
            namespace.as_deref(),
            strategy,
            metrics.clone(),
            move |event| to.do_send(CronJobWatch { scope, event }),
        );
        let to = supervisor.clone();
        watch::jobs(
            client.clone(),
            namespace.as_deref(),
            strategy,
            metrics.clone(),
            move |event| to.do_send(JobWatch { scope, event }),
        );
    }
    tracing::info!(?strategy, ?scopes, arbiters = cores, "controller started");
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("termination signal received");
        supervisor.do_send(Shutdown);
    });
    Ok(())
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
