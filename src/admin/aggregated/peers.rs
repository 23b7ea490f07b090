//! How a replica asks another for what only that one knows (a CronJob's
//! live state is on its owner): the admin API's gRPC, reached at the
//! address and with the certificate on the peer's Lease, authenticated
//! with the replica's own ServiceAccount token (which the peer reviews and
//! RBAC lets read `cronjobs.admin.shardcron.io`: deploy/kubernetes/rbac.yaml).
//! The caller was authorized by the replica that forwards.

use crate::admin::proto::admin_service_client::AdminServiceClient;
use crate::admin::proto::{
    GetCronJobRequest, GetCronJobResponse, GetQueuesRequest, GetQueuesResponse,
    ListCronJobsRequest, ListCronJobsResponse,
};
use crate::admin::{ADDRESS_ANNOTATION, CALL_DEADLINE, tls::CERT_ANNOTATION};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use secrecy::{ExposeSecret, SecretString};
use std::path::PathBuf;
use std::time::Duration;
use tonic::Status;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// How long reaching a peer may take (its Lease read, the TLS connection).
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// The replica's own credential for its peers.
#[derive(Clone)]
pub enum OwnToken {
    /// From the kubeconfig.
    Fixed(SecretString),
    /// A projected ServiceAccount token, read again for each call (the
    /// kubelet rotates it).
    File(PathBuf),
    None,
}

impl OwnToken {
    pub fn from_config(config: &kube::Config) -> Self {
        if let Some(path) = &config.auth_info.token_file {
            return OwnToken::File(path.into());
        }
        match &config.auth_info.token {
            Some(token) => OwnToken::Fixed(token.clone()),
            None => OwnToken::None,
        }
    }

    fn read(&self) -> Result<SecretString, Status> {
        match self {
            OwnToken::Fixed(token) => Ok(token.clone()),
            OwnToken::File(path) => std::fs::read_to_string(path)
                .map(|text| SecretString::from(text.trim().to_owned()))
                .map_err(|e| {
                    Status::unavailable(format!(
                        "reading the replica's token {}: {e}",
                        path.display()
                    ))
                }),
            OwnToken::None => Err(Status::unavailable(
                "this replica has no ServiceAccount token to ask its peers with",
            )),
        }
    }
}

/// The replica's peers in its ring.
#[derive(Clone)]
pub struct Peers {
    pub client: Client,
    /// Where the ring's Leases are.
    pub namespace: String,
    pub ring: String,
    pub token: OwnToken,
}

impl Peers {
    /// `request`, asked of `owner`.
    pub async fn get_cron_job(
        &self,
        owner: &str,
        request: GetCronJobRequest,
    ) -> Result<GetCronJobResponse, Status> {
        let mut peer = self.dial(owner).await?;
        Ok(peer.get_cron_job(self.call(request)?).await?.into_inner())
    }

    /// The CronJobs `replica` owns, as `request` asks.
    pub async fn list_cron_jobs(
        &self,
        replica: &str,
        request: ListCronJobsRequest,
    ) -> Result<ListCronJobsResponse, Status> {
        let mut peer = self.dial(replica).await?;
        Ok(peer.list_cron_jobs(self.call(request)?).await?.into_inner())
    }

    /// `replica`'s write gateway queues.
    pub async fn get_queues(&self, replica: &str) -> Result<GetQueuesResponse, Status> {
        let mut peer = self.dial(replica).await?;
        let call = self.call(GetQueuesRequest::default())?;
        Ok(peer.get_queues(call).await?.into_inner())
    }

    /// `request` with the replica's token and the call's deadline.
    fn call<T>(&self, request: T) -> Result<tonic::Request<T>, Status> {
        let mut call = tonic::Request::new(request);
        call.set_timeout(CALL_DEADLINE);
        let bearer = format!("Bearer {}", self.token.read()?.expose_secret());
        let value = bearer
            .parse()
            .map_err(|_| Status::internal("the replica's token is not a valid header"))?;
        call.metadata_mut().insert("authorization", value);
        Ok(call)
    }

    /// A connection to `replica`, within [`CONNECT_DEADLINE`].
    async fn dial(&self, replica: &str) -> Result<AdminServiceClient<Channel>, Status> {
        tokio::time::timeout(CONNECT_DEADLINE, self.connect(replica))
            .await
            .map_err(|_| Status::unavailable(format!("reaching {replica} timed out")))?
    }

    async fn connect(&self, owner: &str) -> Result<AdminServiceClient<Channel>, Status> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let lease = leases
            .get(&format!("{}.{owner}", self.ring))
            .await
            .map_err(|e| Status::unavailable(format!("the Lease of {owner}: {e}")))?;
        let annotations = lease.metadata.annotations.unwrap_or_default();
        let (Some(address), Some(certificate)) = (
            annotations.get(ADDRESS_ANNOTATION),
            annotations.get(CERT_ANNOTATION),
        ) else {
            return Err(Status::unavailable(format!(
                "{owner}'s Lease publishes no admin address and certificate"
            )));
        };
        // The certificate is the owner's self-signed one, made for its name.
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(certificate))
            .domain_name(owner);
        let channel = Channel::from_shared(format!("https://{address}"))
            .map_err(|e| Status::unavailable(format!("{owner}'s address {address:?}: {e}")))?
            .tls_config(tls)
            .map_err(|e| Status::unavailable(format!("TLS to {owner}: {e}")))?
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("connecting to {owner} at {address}: {e}")))?;
        Ok(AdminServiceClient::new(channel))
    }
}
