//! The admin answers through the API server (deploy/admin-api: the
//! aggregated `admin.shardcron.io`), with whatever credential the
//! kubeconfig holds (a client certificate, a token, an exec plugin): no
//! token is sent to a replica and nothing is read from a Lease. The answer
//! is asked for as the gRPC API's own message ([`PROTOBUF`]), so it prints
//! exactly as a direct answer does.

use super::error::AdminError;
use super::target::Target;
use crate::admin::aggregated::PROTOBUF;
use crate::admin::aggregated::routes::group_version;
use http::{Request, StatusCode, header};

/// Whether the API server serves the aggregated API, and its answer.
pub enum Served<T> {
    Answer(T),
    /// The group is not registered, or its APIService is unavailable: why.
    No(String),
}

/// A client of the kubeconfig's API server, as the kubeconfig's user.
pub async fn client(target: &Target) -> Result<kube::Client, AdminError> {
    let config = crate::cli::arguments::kube_config(target.kubeconfig.as_ref())
        .await
        .map_err(AdminError::Client)?;
    crate::apiserver::client::build(config, "shardcron-admin-cli")
        .map_err(|e| AdminError::Client(e.into()))
}

/// GET `/apis/admin.shardcron.io/v1alpha1/{path}` as the message `T`.
pub async fn get<T: prost::Message + Default>(
    client: &kube::Client,
    path: &str,
) -> Result<Served<T>, AdminError> {
    let base = format!("/apis/{}", group_version());
    // Discovery first: a 404 there means the group is not registered (a
    // 404 below is the answer's own).
    let (status, body) = send(client, &base, "application/json").await?;
    match status {
        StatusCode::OK => {}
        StatusCode::NOT_FOUND => {
            return Ok(Served::No(format!(
                "{} is not served by this API server (kubectl apply -k deploy/admin-api)",
                group_version()
            )));
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            return Ok(Served::No(format!(
                "{} is registered but unavailable: {}",
                group_version(),
                message(&body)
            )));
        }
        other => return Err(refused(other, &body)),
    }
    let (status, body) = send(client, &format!("{base}/{path}"), PROTOBUF).await?;
    if status != StatusCode::OK {
        return Err(refused(status, &body));
    }
    T::decode(body.as_slice())
        .map(Served::Answer)
        .map_err(|e| AdminError::Client(anyhow::anyhow!("decoding the answer of {path}: {e}")))
}

async fn send(
    client: &kube::Client,
    path: &str,
    accept: &str,
) -> Result<(StatusCode, Vec<u8>), AdminError> {
    let request = Request::get(path)
        .header(header::ACCEPT, accept)
        .body(Vec::new())
        .map_err(|e| AdminError::Client(e.into()))?;
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(|e| AdminError::Client(anyhow::anyhow!("GET {path}: {e}")))?;
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| AdminError::Client(anyhow::anyhow!("reading the answer of {path}: {e}")))?
        .to_bytes();
    Ok((status, body.to_vec()))
}

/// The message of a Kubernetes `Status` body, else the body as text.
fn message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|status| status["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned())
}

/// A refusal as the admin commands report it.
fn refused(status: StatusCode, body: &[u8]) -> AdminError {
    AdminError::Call {
        code: crate::admin::aggregated::grpc_code(status),
        message: message(body),
    }
}
