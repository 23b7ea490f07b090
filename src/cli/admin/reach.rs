//! How `shardcron status` and `shardcron ring` reach a replica's admin API:
//! the ring's Leases, read through the API server with the caller's
//! kubeconfig, say which certificates to trust and, per replica, its pod
//! (reached through the API server's `pods/portforward`, as `kubectl
//! port-forward` does) and its address (reached directly).

use super::error::AdminError;
use super::target::{Connect, Target};
use crate::admin::proto::admin_service_client::AdminServiceClient;
use crate::admin::tls::CERT_ANNOTATION;
use crate::admin::{ADDRESS_ANNOTATION, AdminPod, POD_ANNOTATION};
use crate::shard::lease::RING_LABEL;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use secrecy::ExposeSecret as _;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// How long a port-forward's own error (say, nothing listens on the pod's
/// port) is awaited after the connection failed, to report it.
const FORWARD_ERROR_WAIT: Duration = Duration::from_secs(2);

/// How often an open connection to a replica is pinged (HTTP/2 PING), idle
/// or not: a `--watch` stream is silent between decisions, and a replica
/// that is gone without a word (a port-forward that keeps its end open
/// after the pod's process exited, a black-holed address) would otherwise
/// hold the stream forever.
const PING_EVERY: Duration = Duration::from_secs(10);
/// How long a ping's answer is awaited before the connection is given up
/// (its streams end with an error, and `--watch` looks for the owner again).
const PING_ANSWER: Duration = Duration::from_secs(10);

/// One way to a replica's admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// HOST:PORT, dialled directly.
    Address(String),
    /// The replica's pod, through the API server's port-forward.
    PortForward(AdminPod),
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Address(address) => f.write_str(address),
            Route::PortForward(pod) => pod.fmt(f),
        }
    }
}

/// What one replica's Lease publishes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    pub address: Option<String>,
    pub pod: Option<AdminPod>,
}

/// The way `connect` takes to a replica that published `published`.
pub fn route(connect: Connect, published: &Published) -> Option<Route> {
    let by_pod = || published.pod.clone().map(Route::PortForward);
    let direct = || published.address.clone().map(Route::Address);
    match connect {
        // (api-server never reaches a replica itself.)
        Connect::Auto | Connect::ApiServer => by_pod().or_else(direct),
        Connect::PortForward => by_pod(),
        Connect::Direct => direct(),
    }
}

/// What the ring's Leases and the kubeconfig give a client: the caller's
/// token, the certificates to trust, and how each replica is reached.
pub struct Reach {
    pub token: String,
    certificates: Vec<String>,
    /// Replica (Lease holder) to what its Lease publishes, sorted.
    replicas: BTreeMap<String, Published>,
    connect: Connect,
    /// The caller's client: the port-forwards go through it.
    client: kube::Client,
}

/// Reads the kubeconfig's token and the ring's Leases, with the caller's
/// own credentials (so RBAC on the Leases applies too).
pub async fn discover(target: &Target) -> Result<Reach, AdminError> {
    let config = crate::cli::arguments::kube_config(target.kubeconfig.as_ref())
        .await
        .map_err(AdminError::Client)?;
    let auth = &config.auth_info;
    let read = |file: &std::path::Path, what: &str| {
        std::fs::read_to_string(file)
            .map(|text| text.trim().to_owned())
            .map_err(|e| AdminError::Client(anyhow::anyhow!("reading {what} {file:?}: {e}")))
    };
    let token = match (
        &target.token_file,
        &auth.token,
        &auth.token_file,
        &auth.exec,
    ) {
        (Some(file), ..) => read(file, "--token-file")?,
        (None, Some(token), _, _) => token.expose_secret().to_owned(),
        (None, None, Some(file), _) => read(file.as_ref(), "tokenFile")?,
        (None, None, None, Some(exec)) => exec_token(exec)?,
        (None, None, None, None) => return Err(AdminError::NoToken),
    };
    let pinned = match &target.ca_file {
        Some(file) => Some(read(file, "--ca-file")?),
        None => None,
    };
    let client = crate::apiserver::client::build(config, "shardcron-admin-cli")
        .map_err(|e| AdminError::Client(e.into()))?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &target.lease_namespace);
    let listed = leases
        .list(&ListParams::default().labels(&format!("{RING_LABEL}={}", target.ring)))
        .await
        .map_err(AdminError::Leases)?;
    let mut reach = Reach {
        token,
        certificates: Vec::new(),
        replicas: BTreeMap::new(),
        connect: target.connect,
        client,
    };
    for lease in &listed.items {
        let Some(annotations) = lease.metadata.annotations.as_ref() else {
            continue;
        };
        if let (None, Some(pem)) = (&pinned, annotations.get(CERT_ANNOTATION)) {
            reach.certificates.push(pem.clone());
        }
        let Some(holder) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()) else {
            continue;
        };
        reach.replicas.insert(
            holder,
            Published {
                address: annotations.get(ADDRESS_ANNOTATION).cloned(),
                // A replica's pod is in its Lease's namespace (the
                // controller's): a Lease naming a pod elsewhere would lead
                // callers' tokens to a namespace its writer controls.
                pod: annotations
                    .get(POD_ANNOTATION)
                    .and_then(|pod| AdminPod::parse(pod))
                    .filter(|pod| pod.namespace == target.lease_namespace),
            },
        );
    }
    reach.certificates.extend(pinned);
    if reach.certificates.is_empty() {
        return Err(AdminError::NoCertificate {
            ring: target.ring.clone(),
            namespace: target.lease_namespace.clone(),
        });
    }
    Ok(reach)
}

/// The bearer token a kubeconfig's exec plugin (a cloud's login helper,
/// an OIDC helper) prints as an ExecCredential, run as kubectl runs it:
/// non-interactive (stdin closed), `KUBERNETES_EXEC_INFO` set. A plugin
/// that gives a client certificate instead gives no token.
fn exec_token(exec: &kube::config::ExecConfig) -> Result<String, AdminError> {
    let command = exec
        .command
        .as_deref()
        .ok_or_else(|| AdminError::Client(anyhow::anyhow!("the exec plugin names no command")))?;
    let api_version = exec
        .api_version
        .as_deref()
        .unwrap_or("client.authentication.k8s.io/v1");
    let info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": false},
    });
    let mut run = std::process::Command::new(command);
    run.args(exec.args.iter().flatten())
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    for variable in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (variable.get("name"), variable.get("value")) {
            run.env(name, value);
        }
    }
    let failed = |why: String| AdminError::Client(anyhow::anyhow!("exec plugin {command}: {why}"));
    let output = run.output().map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Err(failed(format!("exited with {}", output.status)));
    }
    let credential: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| failed(format!("not an ExecCredential: {e}")))?;
    credential["status"]["token"]
        .as_str()
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .ok_or(AdminError::NoToken)
}

impl Reach {
    /// The replica to ask first: `--address`, else the first replica that
    /// can be reached the way `--connect` says.
    pub fn first(&self, target: &Target) -> Result<Route, AdminError> {
        if let Some(address) = &target.address {
            return Ok(Route::Address(address.clone()));
        }
        self.replicas
            .values()
            .find_map(|published| route(self.connect, published))
            .ok_or_else(|| AdminError::NoAddress {
                ring: target.ring.clone(),
                what: match self.connect {
                    Connect::Auto | Connect::ApiServer => "an admin pod or address",
                    Connect::PortForward => "an admin pod",
                    Connect::Direct => "an admin address",
                },
                hint: match self.connect {
                    Connect::PortForward => " or --connect direct",
                    Connect::Direct => " or --connect port-forward",
                    Connect::Auto | Connect::ApiServer => "",
                },
            })
    }

    /// The way to `replica`, if its Lease publishes one.
    pub fn route_to(&self, replica: &str) -> Option<Route> {
        route(self.connect, self.replicas.get(replica)?)
    }

    /// A TLS channel along `route` that trusts the certificates the ring's
    /// Leases publish (the name checked is `localhost`, which each
    /// self-signed certificate names).
    pub async fn dial(&self, route: &Route) -> Result<AdminServiceClient<Channel>, AdminError> {
        let tls = ClientTlsConfig::new()
            .ca_certificates(self.certificates.iter().map(Certificate::from_pem))
            .domain_name("localhost");
        let connect_error = |source| AdminError::Connect {
            address: route.to_string(),
            source,
        };
        let uri = match route {
            Route::Address(address) => format!("https://{address}"),
            Route::PortForward(_) => "https://localhost".to_owned(),
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| AdminError::Client(anyhow::anyhow!("address {route}: {e}")))?
            .tls_config(tls)
            .map_err(connect_error)?
            .http2_keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_ANSWER)
            .keep_alive_while_idle(true);
        let channel = match route {
            Route::Address(_) => endpoint.connect().await.map_err(connect_error)?,
            Route::PortForward(pod) => {
                let failure = Arc::new(Mutex::new(None));
                let connected = endpoint
                    .connect_with_connector(forwarder(&self.client, pod, failure.clone()))
                    .await;
                match connected {
                    Ok(channel) => channel,
                    Err(source) => {
                        // The port-forward's own words say more than TLS's.
                        tokio::time::sleep(FORWARD_ERROR_WAIT).await;
                        let told = failure.lock().ok().and_then(|mut told| told.take());
                        return Err(match told {
                            Some(message) => AdminError::PortForward {
                                pod: pod.clone(),
                                message,
                            },
                            None => connect_error(source),
                        });
                    }
                }
            }
        };
        Ok(AdminServiceClient::new(channel))
    }
}

/// A connector for tonic that opens a port-forward to `pod` through the
/// API server for each connection; what goes wrong is left in `failure`.
fn forwarder(
    client: &kube::Client,
    pod: &AdminPod,
    failure: Arc<Mutex<Option<String>>>,
) -> impl tower::Service<
    http::Uri,
    Response = hyper_util::rt::TokioIo<tokio::io::DuplexStream>,
    Error = kube::Error,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let (name, port) = (pod.name.clone(), pod.port);
    tower::service_fn(move |_: http::Uri| {
        let (pods, name, failure) = (pods.clone(), name.clone(), failure.clone());
        async move {
            let keep = |message: String| {
                if let Ok(mut slot) = failure.lock() {
                    *slot = Some(message);
                }
            };
            let mut forwarded = pods
                .portforward(&name, &[port])
                .await
                .inspect_err(|error| match error {
                    // The API server's own words (a refusal names the verb
                    // and resource RBAC lacks), without the Status's dump.
                    kube::Error::Api(status) => keep(status.message.clone()),
                    other => keep(other.to_string()),
                })?;
            if let Some(error) = forwarded.take_error(port) {
                let failure = failure.clone();
                tokio::spawn(async move {
                    if let (Some(message), Ok(mut slot)) = (error.await, failure.lock()) {
                        *slot = Some(message);
                    }
                });
            }
            let stream = forwarded
                .take_stream(port)
                .ok_or_else(|| kube::Error::Service("the port-forward has no stream".into()))?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Connect, Published, Route, exec_token, route};
    use crate::admin::AdminPod;

    fn plugin(script: &str) -> kube::config::ExecConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "sh",
            "args": ["-c", script],
            "env": [{"name": "GREETING", "value": "t0ken"}],
        }))
        .expect("an exec config")
    }

    #[test]
    fn an_exec_plugins_token_is_the_bearer_token() {
        // The plugin sees KUBERNETES_EXEC_INFO and the kubeconfig's env.
        let printed = plugin(
            r#"case "$KUBERNETES_EXEC_INFO" in *ExecCredential*) ;; *) exit 3;; esac
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$GREETING""#,
        );
        assert_eq!(exec_token(&printed).expect("a token"), "t0ken");
        for (script, expected) in [
            ("exit 1", "exited with"),
            ("echo not-json", "not an ExecCredential"),
            (
                r#"echo '{"status":{"clientCertificateData":"x"}}'"#,
                "no bearer token",
            ),
        ] {
            let error = exec_token(&plugin(script)).expect_err(script).to_string();
            assert!(error.contains(expected), "{script}: {error}");
        }
    }

    #[test]
    fn auto_prefers_the_pod_and_falls_back_to_the_address() {
        let pod = AdminPod {
            namespace: "shardcron-system".into(),
            name: "shardcron-0".into(),
            port: 9443,
        };
        let both = Published {
            address: Some("10.0.0.7:9443".into()),
            pod: Some(pod.clone()),
        };
        let address_only = Published {
            address: Some("127.0.0.1:9443".into()),
            pod: None,
        };
        let pod_only = Published {
            address: None,
            pod: Some(pod.clone()),
        };
        let by_pod = Some(Route::PortForward(pod));
        for (connect, published, expected) in [
            (Connect::Auto, &both, by_pod.clone()),
            (
                Connect::Auto,
                &address_only,
                Some(Route::Address("127.0.0.1:9443".into())),
            ),
            (Connect::Auto, &Published::default(), None),
            (Connect::PortForward, &both, by_pod.clone()),
            (Connect::PortForward, &address_only, None),
            (
                Connect::Direct,
                &both,
                Some(Route::Address("10.0.0.7:9443".into())),
            ),
            (Connect::Direct, &pod_only, None),
        ] {
            assert_eq!(
                route(connect, published),
                expected,
                "{connect:?} {published:?}"
            );
        }
    }
}
