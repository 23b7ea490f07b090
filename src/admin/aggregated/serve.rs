//! The aggregated API's routes: each request's caller from the
//! aggregation layer's headers ([`super::requestheader`]), then its answer
//! from the admin service in this process, which authorizes the caller
//! (a SubjectAccessReview, as for a gRPC call), or from the replica that
//! knows (a CronJob's owner, the replica whose queues are asked for:
//! [`super::peers`]). Answers are JSON objects (`kind`, `apiVersion`,
//! `metadata`, `status`); refusals are Kubernetes `Status` objects.

use super::peers::Peers;
use super::registration::{self, ServiceRef};
use super::requestheader::{NotForwarded, RequestHeaderSettings, caller};
use super::routes::{Route, discovery, group_version, route};
use super::table;
use crate::admin::access::ForwardedUser;
use crate::admin::json::{queues_json, ring_json, status_json};
use crate::admin::proto::admin_service_server::AdminService;
use crate::admin::proto::{
    CronJobKind as ProtoKind, GetCronJobRequest, GetQueuesRequest, GetRingRequest,
    ListCronJobsRequest, ListCronJobsResponse,
};
use crate::admin::service::{Admin, NOT_OWNER};
use axum::Router;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::UserInfo;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;
use tonic_types::StatusExt;

/// What serves the aggregated API on one replica.
#[derive(Clone)]
pub struct AggregatedApi {
    /// The latest request-header settings read.
    pub settings: tokio::sync::watch::Receiver<Arc<RequestHeaderSettings>>,
    pub admin: Arc<Admin>,
    pub peers: Peers,
}

impl AggregatedApi {
    /// The routes for one connection, whose verified client certificate
    /// has the common name `certificate_name`.
    pub fn router(&self, certificate_name: Option<String>) -> Router {
        let api = self.clone();
        Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
            let (api, name) = (api.clone(), certificate_name.clone());
            async move {
                // Reviews, the actor's answer, a peer's: the gRPC API's
                // deadline for a call, here too.
                let answered = api.answer(&method, &uri, &headers, name.as_deref());
                tokio::time::timeout(crate::admin::CALL_DEADLINE, answered)
                    .await
                    .unwrap_or_else(|_| {
                        refusal(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no answer within the call's deadline (30 s)",
                        )
                    })
            }
        })
    }

    async fn answer(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        certificate_name: Option<&str>,
    ) -> Response {
        let sent: Vec<(&str, &str)> = headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let route = route(uri.path());
        let settings = self.settings.borrow().clone();
        let user = match (caller(&settings, certificate_name, &sent), &route) {
            (Ok(user), _) => Some(user),
            // The aggregator's own discovery and availability checks.
            (Err(NotForwarded::NoUser), Route::Discovery(_)) => None,
            (Err(refused), _) => return refusal(StatusCode::UNAUTHORIZED, &refused.to_string()),
        };
        if method != Method::GET {
            return refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                "only get is served: the resources are read-only",
            );
        }
        let kind = match uri.query().unwrap_or_default() {
            query if query.split('&').any(|pair| pair == "kind=shardcron") => ProtoKind::Shardcron,
            _ => ProtoKind::Batch,
        };
        let format = Format::asked(headers);
        let answered = match (route, user) {
            (Route::Discovery(level), _) => Ok(axum::Json(discovery(level)).into_response()),
            (Route::CronJob { namespace, name }, Some(user)) => {
                self.cronjob(user, namespace, name, kind, format).await
            }
            (Route::CronJobs { namespace }, Some(user)) => {
                self.cronjobs(user, namespace, kind, format).await
            }
            (Route::Ring(ring), Some(user)) => self.ring(user, ring, format).await,
            (Route::Rings, Some(user)) => self.rings(user, format).await,
            (Route::Queues(replica), Some(user)) => self.queues(user, replica, format).await,
            (Route::AllQueues, Some(user)) => self.all_queues(user, format).await,
            (Route::Unknown, _) | (_, None) => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    &format!("{} is not served", uri.path()),
                );
            }
        };
        match answered {
            Ok(body) => body,
            Err(status) => refusal(super::http_status(status.code()), status.message()),
        }
    }

    async fn cronjob(
        &self,
        user: UserInfo,
        namespace: String,
        name: String,
        kind: ProtoKind,
        format: Format,
    ) -> Result<Response, Status> {
        let asked = GetCronJobRequest {
            namespace: namespace.clone(),
            name: name.clone(),
            kind: kind.into(),
        };
        let answer = match self
            .admin
            .get_cron_job(forwarded(asked.clone(), user))
            .await
        {
            Ok(answer) => answer.into_inner(),
            Err(status) => match status.get_details_error_info() {
                // Authorized here already: its owner answers.
                Some(info) if info.reason == NOT_OWNER => match info.metadata.get("owner") {
                    Some(owner) if !owner.is_empty() => {
                        self.peers.get_cron_job(owner, asked).await?
                    }
                    _ => return Err(Status::unavailable(status.message())),
                },
                _ => return Err(status),
            },
        };
        let cronjob = format!("{namespace}/{name}");
        let json = || {
            let status = status_json(&cronjob, &answer);
            object("CronJobState", &name, Some(&namespace), status)
        };
        let rows = || table::cronjobs_table(vec![table::cronjob_row(&namespace, &name, &answer)]);
        Ok(format.render(json, rows, &answer))
    }

    /// The CronJobs of a namespace (or of all) on every replica of the
    /// view this one acts on: its own, authorized for the caller, then each
    /// peer's (asked as the controller, at once), merged in name order. A
    /// peer that cannot answer fails the list (503): a list missing a
    /// replica's share would look complete.
    async fn cronjobs(
        &self,
        user: UserInfo,
        namespace: Option<String>,
        kind: ProtoKind,
        format: Format,
    ) -> Result<Response, Status> {
        let asked = ListCronJobsRequest {
            namespace: namespace.unwrap_or_default(),
            kind: kind.into(),
            limit: 0,
        };
        let mut merged: ListCronJobsResponse = self
            .admin
            .list_cron_jobs(forwarded(asked.clone(), user))
            .await?
            .into_inner();
        let peers = self.peers_in_view().await?;
        let answers = futures::future::join_all(
            peers
                .iter()
                .map(|peer| self.peers.list_cron_jobs(peer, asked.clone())),
        )
        .await;
        for answer in answers {
            let answer = answer?;
            merged.items.extend(answer.items);
            merged.truncated |= answer.truncated;
        }
        merged
            .items
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let states = || {
            merged
                .items
                .iter()
                .filter_map(|item| Some((item, item.state.as_ref()?)))
        };
        let json = || {
            table::list(
                "CronJobState",
                states()
                    .map(|(item, state)| {
                        let cronjob = format!("{}/{}", item.namespace, item.name);
                        let status = status_json(&cronjob, state);
                        object("CronJobState", &item.name, Some(&item.namespace), status)
                    })
                    .collect(),
            )
        };
        let rows = || {
            table::cronjobs_table(
                states()
                    .map(|(item, state)| table::cronjob_row(&item.namespace, &item.name, state))
                    .collect(),
            )
        };
        Ok(format.render(json, rows, &merged))
    }

    async fn ring(&self, user: UserInfo, ring: String, format: Format) -> Result<Response, Status> {
        let answer = self
            .admin
            .get_ring(forwarded(GetRingRequest::default(), user))
            .await?
            .into_inner();
        if answer.ring != ring {
            return Err(Status::not_found(format!(
                "this API serves the ring {:?}, not {ring:?}",
                answer.ring
            )));
        }
        let json = || object("Ring", &ring, None, ring_json(&answer));
        Ok(format.render(json, || table::ring_table(&answer), &answer))
    }

    async fn queues(
        &self,
        user: UserInfo,
        replica: String,
        format: Format,
    ) -> Result<Response, Status> {
        // Authorized here, whichever replica answers.
        let here = self
            .admin
            .get_queues(forwarded(GetQueuesRequest::default(), user))
            .await?
            .into_inner();
        let answer = if here.replica == replica {
            here
        } else {
            self.peers.get_queues(&replica).await?
        };
        let json = || object("Queues", &replica, None, queues_json(&answer));
        let rows = || table::queues_table(std::slice::from_ref(&answer));
        Ok(format.render(json, rows, &answer))
    }

    /// The other members of the view this replica acts on.
    async fn peers_in_view(&self) -> Result<Vec<String>, Status> {
        let report = self
            .admin
            .report
            .send(crate::shard::debug::DebugShards { keys: false })
            .await
            .map_err(|e| Status::unavailable(format!("the replica is shutting down: {e}")))?;
        Ok(report
            .view
            .into_iter()
            .filter(|member| *member != self.admin.replica)
            .collect())
    }

    /// The ring this replica serves, as a list of one (`kubectl get
    /// rings.admin.shardcron.io`); authorized as a `get` of it.
    async fn rings(&self, user: UserInfo, format: Format) -> Result<Response, Status> {
        let answer = self
            .admin
            .get_ring(forwarded(GetRingRequest::default(), user))
            .await?
            .into_inner();
        let json = || {
            let ring = object("Ring", &answer.ring, None, ring_json(&answer));
            table::list("Ring", vec![ring])
        };
        Ok(format.render(json, || table::ring_table(&answer), &answer))
    }

    /// Every replica's queues (`kubectl get queues.admin.shardcron.io`):
    /// this one's, authorized as a `get`, then each peer's of its view, at
    /// once; a peer that cannot answer fails the list (503).
    async fn all_queues(&self, user: UserInfo, format: Format) -> Result<Response, Status> {
        let here = self
            .admin
            .get_queues(forwarded(GetQueuesRequest::default(), user))
            .await?
            .into_inner();
        let peers = self.peers_in_view().await?;
        let theirs =
            futures::future::join_all(peers.iter().map(|peer| self.peers.get_queues(peer))).await;
        // The gRPC message of a list of queues is this replica's own (the
        // command line asks each replica itself).
        let own = here.clone();
        let mut replicas = vec![here];
        for answer in theirs {
            replicas.push(answer?);
        }
        replicas.sort_by(|a, b| a.replica.cmp(&b.replica));
        let json = || {
            let items = replicas
                .iter()
                .map(|q| object("Queues", &q.replica, None, queues_json(q)))
                .collect();
            table::list("Queues", items)
        };
        let rows = || table::queues_table(&replicas);
        Ok(format.render(json, rows, &own))
    }
}

/// What the caller asked for (`Accept`): JSON, a Table (`kubectl get`:
/// [`table`]), or the gRPC API's own message ([`super::PROTOBUF`]), which
/// the command line decodes and prints as it prints a direct answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Table,
    Protobuf,
}

impl Format {
    fn asked(headers: &HeaderMap) -> Format {
        let accepts: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect();
        if accepts.iter().any(|value| value.contains(super::PROTOBUF)) {
            Format::Protobuf
        } else if accepts.iter().any(|value| table::wants_table(value)) {
            Format::Table
        } else {
            Format::Json
        }
    }

    fn render(
        self,
        json: impl FnOnce() -> Value,
        table: impl FnOnce() -> Value,
        message: &impl prost::Message,
    ) -> Response {
        match self {
            Format::Json => (StatusCode::OK, axum::Json(json())).into_response(),
            Format::Table => (StatusCode::OK, axum::Json(table())).into_response(),
            Format::Protobuf => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, super::PROTOBUF)],
                message.encode_to_vec(),
            )
                .into_response(),
        }
    }
}

/// How often kube-apiserver's request-header settings are read again (its
/// front-proxy CA rotated, its names changed), and read again after a
/// failure (the RoleBinding to read them applied after the replica
/// started: first after 15 s, doubling up to 5 minutes, as a replica of a
/// cluster without deploy/admin-api keeps asking).
pub const SETTINGS_REFRESH: Duration = Duration::from_secs(60);
pub const SETTINGS_RETRY: (Duration, Duration) =
    (Duration::from_secs(15), Duration::from_secs(300));

/// The settings and the TLS configuration made from them.
type Served = (Arc<RequestHeaderSettings>, Arc<rustls::ServerConfig>);

/// Reads kube-apiserver's request-header settings (again every
/// [`SETTINGS_REFRESH`]: a connection is served with those it was accepted
/// under, a request checked against the latest), and serves the aggregated
/// API on `listener` until the process ends. Until they can be read (an
/// API server without the aggregation layer, no right to read
/// `kube-system/extension-apiserver-authentication` yet) it says why and
/// tries again ([`SETTINGS_RETRY`]), serving nothing meanwhile: the
/// controller itself runs on. With `registers` (`--aggregated-api-service`)
/// it registers the APIService once it can serve it, not before: one
/// registered with no replica able to answer would hold the cluster's
/// namespace deletions ([`super::registration`]).
pub async fn run(
    listener: tokio::net::TcpListener,
    identity: &crate::admin::tls::TlsIdentity,
    client: kube::Client,
    admin: Arc<Admin>,
    peers: Peers,
    registers: Option<ServiceRef>,
) {
    let mut why_not = String::new();
    let mut retry = SETTINGS_RETRY.0;
    let first = loop {
        match read_settings(&client, identity).await {
            Ok(served) => break served,
            Err(why) => {
                if why != why_not {
                    tracing::warn!(%why, retry_in = ?retry, "the aggregated admin API is not served yet");
                    why_not = why;
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(SETTINGS_RETRY.1);
            }
        }
    };
    if !why_not.is_empty() {
        tracing::info!(
            "kube-apiserver's request-header settings read: serving the aggregated admin API"
        );
    }
    if let Some(service) = registers {
        let client = client.clone();
        tokio::spawn(async move {
            match registration::register(client, &service).await {
                Ok(done) => tracing::info!(
                    apiservice = registration::NAME,
                    ?done,
                    ?service,
                    "the APIService is registered"
                ),
                Err(error) => {
                    tracing::warn!(%error, apiservice = registration::NAME, "registering the APIService failed")
                }
            }
        });
    }
    let (settings_tx, settings) = tokio::sync::watch::channel(first.0.clone());
    let (tls_tx, tls) = tokio::sync::watch::channel(first.1);
    let identity = identity.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SETTINGS_REFRESH).await;
            match read_settings(&client, &identity).await {
                Ok((read, tls)) if read != *settings_tx.borrow() => {
                    tracing::info!(
                        "kube-apiserver's request-header settings changed: serving with the new ones"
                    );
                    tls_tx.send_replace(tls);
                    settings_tx.send_replace(read);
                }
                Ok(_) => {}
                Err(why) => {
                    tracing::warn!(%why, "re-reading kube-apiserver's request-header settings failed: serving with the last ones")
                }
            }
            if settings_tx.is_closed() {
                return;
            }
        }
    });
    let api = AggregatedApi {
        settings,
        admin,
        peers,
    };
    crate::admin::https::serve_changing(listener, tls, move |client| {
        api.router(client.and_then(super::common_name))
    })
    .await;
}

/// kube-apiserver's request-header settings, and the TLS configuration
/// that asks for its client certificate; or why not.
async fn read_settings(
    client: &kube::Client,
    identity: &crate::admin::tls::TlsIdentity,
) -> Result<Served, String> {
    use super::requestheader::{CONFIG_MAP_NAME, CONFIG_MAP_NAMESPACE};
    use k8s_openapi::api::core::v1::ConfigMap;
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), CONFIG_MAP_NAMESPACE);
    let map = tokio::time::timeout(crate::apiserver::deadline::GET, maps.get(CONFIG_MAP_NAME))
        .await
        .map_err(|_| format!("reading {CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME} timed out"))?
        .map_err(|e| format!("reading {CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}: {e}"))?;
    let settings = RequestHeaderSettings::from_config_map(&map.data.unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let tls = crate::admin::https::server_config_asking_clients(identity, &settings.client_ca_pem)
        .map_err(|e| e.to_string())?;
    Ok((Arc::new(settings), tls))
}

/// `request` as made for `user`, whom kube-apiserver authenticated.
fn forwarded<T>(request: T, user: UserInfo) -> tonic::Request<T> {
    let mut request = tonic::Request::new(request);
    request.extensions_mut().insert(ForwardedUser(user));
    request
}

fn object(kind: &str, name: &str, namespace: Option<&str>, status: Value) -> Value {
    json!({
        "kind": kind,
        "apiVersion": group_version(),
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    })
}

/// A Kubernetes `Status` object, as kubectl prints a refusal.
fn refusal(code: StatusCode, message: &str) -> Response {
    let reason = match code {
        StatusCode::UNAUTHORIZED => "Unauthorized",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
