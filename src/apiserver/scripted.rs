//! A scripted API server for the shell's unit tests: a `kube::Client` over
//! a `tower` service that answers each request from a function of it, and
//! records what was asked (kube-rs tests its own client the same way). What
//! a real server cannot be made to do on demand (a given status, a page
//! boundary, silence) is one line of a script.

use kube::Client;
use kube::client::Body;
use std::sync::{Arc, Mutex};

/// A request as the script sees it.
pub struct Request {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The path without the query.
    pub fn path(&self) -> &str {
        without_query(&self.uri)
    }
}

fn without_query(uri: &str) -> &str {
    uri.split('?').next().unwrap_or_default()
}

/// One answer of the script.
pub enum Answer {
    /// A status code and a JSON body.
    Json(u16, serde_json::Value),
    /// No answer at all: a black hole.
    Silence,
    /// An answer that comes only after a while: a slow server.
    Late(std::time::Duration, Box<Answer>),
    /// A watch's answer: 200 and these events, one JSON object per line,
    /// then the end of the stream.
    Events(Vec<serde_json::Value>),
    /// 200 and these bytes (a protobuf body).
    Bytes(Vec<u8>),
    /// No answer, the connection failed (reset, or a pooled connection
    /// the server had closed): the client's request fails with a service
    /// error, as hyper's `SendRequest` does.
    ConnectionFailed,
}

/// `kind: Status` as the API server writes an error.
pub fn status(code: u16, reason: &str) -> Answer {
    Answer::Json(
        code,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code,
        }),
    )
}

/// The requests a scripted client sent, as `METHOD path?query`.
#[derive(Clone, Default)]
pub struct Asked(Arc<Mutex<Vec<String>>>);

impl Asked {
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The requests as `METHOD path`, without their queries.
    pub fn paths(&self) -> Vec<String> {
        let all = self.all();
        all.iter().map(|a| without_query(a).to_owned()).collect()
    }
}

/// A client whose every request `script` answers.
pub fn client(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> (Client, Asked) {
    let asked = Asked::default();
    let record = asked.clone();
    let script = Arc::new(script);
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (record, script) = (record.clone(), script.clone());
        async move {
            let (parts, body) = request.into_parts();
            let request = Request {
                method: parts.method.as_str().to_owned(),
                uri: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default(),
                body: body.collect_bytes().await.unwrap_or_default().to_vec(),
            };
            record
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{} {}", request.method, request.uri));
            let mut answer = script(&request);
            while let Answer::Late(delay, later) = answer {
                tokio::time::sleep(delay).await;
                answer = *later;
            }
            match answer {
                Answer::Json(code, body) => {
                    let body = serde_json::to_vec(&body).unwrap_or_default();
                    let mut response = http::Response::new(Body::from(body));
                    *response.status_mut() =
                        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::IM_A_TEAPOT);
                    Ok::<_, std::io::Error>(response)
                }
                Answer::Events(events) => {
                    let mut body = Vec::new();
                    for event in &events {
                        body.extend(serde_json::to_vec(event).unwrap_or_default());
                        body.push(b'\n');
                    }
                    Ok(http::Response::new(Body::from(body)))
                }
                Answer::Bytes(body) => Ok(http::Response::new(Body::from(body))),
                Answer::ConnectionFailed => Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "scripted: connection reset",
                )),
                Answer::Silence | Answer::Late(..) => std::future::pending().await,
            }
        }
    });
    (Client::new(service, "default"), asked)
}
