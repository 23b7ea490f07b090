//! `shardcron run`: the controller process.
//!
//! Wiring only: an actix System on a tokio runtime of `--threads` workers
//! (one by default: a current-thread runtime, the CronJob actors on the
//! System's own Arbiter; N > 1: N workers and N Arbiters), the supervisor,
//! the own Lease's keeper, and SIGTERM / Ctrl-C for a graceful stop (which
//! releases the Lease, so peers take over at once). The flags and their
//! checks: [`args`].

mod args;

pub use args::RunArgs;
use args::{lease_settings, replica_id, served_kinds};

use crate::admin::{self, access::Access, scrape::ScrapeAccess, service::Admin, tls::TlsIdentity};
use crate::apiserver::client::Protocol;
use crate::apiserver::gateway::{Gateway, Limits};
use crate::apiserver::watch;
use crate::schedule::load_named_zone;
use crate::shard::debug;
use crate::shard::fence::SharedFence;
use crate::shard::lease::{self, LeaseSettings};
use crate::shard::supervisor::{
    ActorParts, LeaseWatch, ServedKind, Shutdown, Supervisor, SupervisorParts, WatchSetup,
};
use crate::telemetry::Metrics;
use crate::telemetry::http::{self, Readiness};
use crate::telemetry::logging;
use crate::telemetry::traces;
use actix::prelude::*;
use anyhow::Context as _;
use futures::FutureExt as _;
use kube::runtime::events::Reporter;
use std::sync::Arc;

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
        let client = match super::arguments::kube_config(args.kubeconfig.as_ref())
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

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::with_cronjob_series(args.cronjob_metrics));
    metrics.set_build(crate::shard::protocol::Protocols::THIS_BUILD.encode());
    let traces = traces::start(args.otlp_endpoint.as_deref(), &metrics)?;
    logging::init(args.log_format);
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
        (Some(cert), Some(key)) => {
            TlsIdentity::from_files(cert, key, args.admin_tls_ca_file.as_deref())?
        }
        _ => TlsIdentity::self_signed(&settings.replica_id)?,
    };
    settings.admin_certificate = identity.published.clone();
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
    if args.transparent_huge_pages {
        crate::memory::allow_transparent_huge_pages();
    }
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
    let config = super::arguments::kube_config(args.kubeconfig.as_ref()).await?;
    let own_token = admin::aggregated::peers::OwnToken::from_config(&config);
    let user_agent = crate::apiserver::client::user_agent(&settings.replica_id);
    let fence = SharedFence::new(settings.renew_deadline);
    // The gateway's writes on connections of their own, which refuse to
    // write once the fence has lapsed; the Lease and the reads on the other.
    let protocol = if args.api_http2 {
        Protocol::Http2
    } else {
        Protocol::Http1
    };
    let gateway_client = crate::apiserver::client::build_fenced(
        config.clone(),
        &user_agent,
        protocol,
        Arc::new(fence.clone()),
    )
    .context("building the write gateway's Kubernetes client")?;
    let client = crate::apiserver::client::build(config, &user_agent)
        .context("building the Kubernetes client")?;
    let admin_listener = bind(args.admin_bind_address).await?;
    let readiness = Arc::new(Readiness::default());
    let metrics_listener = bind(args.metrics_bind_address).await?;
    let health_listener = bind(args.health_probe_bind_address).await?;
    let debug_listener = bind(args.debug_bind_address).await?;
    let aggregated_listener = bind(args.aggregated_api_bind_address).await?;
    let secure_metrics_listener = bind(args.secure_metrics_bind_address).await?;
    let secure_metrics_tls = admin::https::server_config(&identity)
        .context("the certificate for the metrics endpoint")?;

    let kinds = served_kinds(&args.cronjob_kinds)?;
    let scope = args.namespaces.first().map(String::as_str);
    // Asked of the first kind served: every watch of a replica lists alike.
    let strategy = match kinds.iter().next() {
        Some(kind) => args.list_strategy.resolve(&client, kind, scope).await,
        None => watch::ListStrategy::Paginated,
    };
    let mut served = Vec::new();
    for kind in kinds.iter() {
        // Asked per kind: Kubernetes 1.36 shards batch/v1's watches, not
        // custom resources'.
        let server_shards = args.server_side_shards.resolve(&client, kind, scope).await;
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
        client: client.clone(),
        lease: settings.clone(),
        fence,
        actors: ActorParts {
            gateway: gateway.clone(),
            metrics: metrics.clone(),
            default_zone,
            slot_history: args.slot_history,
            feed: feed.clone(),
            clock: crate::clock::Clock::System,
        },
        arbiters,
        scopes: scopes.clone(),
        readiness: readiness.clone(),
        watches: Some(WatchSetup {
            client: client.clone(),
            strategy,
            metrics: metrics.clone(),
            kinds: served.clone(),
            protobuf: args.api_protobuf,
        }),
        standby: args.shard_standby,
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
        list: supervisor.clone().recipient(),
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
    // The namespaces' deletions, as they begin: what waits for a deleted
    // namespace is dropped then, not once kube-controller-manager reaches
    // its CronJobs.
    for scope in &scopes {
        let gateway = gateway.clone();
        watch::namespaces::namespaces(
            client.clone(),
            scope.as_deref(),
            metrics.clone(),
            move |namespace, going| gateway.namespace_gone(namespace, going),
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

/// A listener on `addr`; the error names the address.
async fn bind(addr: std::net::SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    http::listen(addr)
        .await
        .with_context(|| format!("binding {addr}"))
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
