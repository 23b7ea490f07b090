//! A load's batch/v1 CronJob lists in protobuf (`--api-protobuf`): the
//! same streaming list or pages as [`super::read_all`]'s, the answers read
//! by [`crate::apiserver::protobuf`]. kube-rs decodes JSON only, so the
//! requests are sent and their bodies read here.

use super::lists::{LoadError, PAGE, STREAM_TIMEOUT_SECONDS};
use crate::apiserver::deadline::{LIST_PAGE, within};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::protobuf::{self, Frames, ReadError, cronjob};
use http_body_util::BodyExt as _;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{ListParams, WatchParams};
use kube::client::Body;
use kube::{Client, Resource as _};

impl From<ReadError> for LoadError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Status(status) => LoadError::Api(kube::Error::Api(status)),
            ReadError::Protobuf(error) => LoadError::Protobuf(error),
        }
    }
}

/// Reads every CronJob of `namespace` (`None`: all) by a streaming list or
/// by pages, handing them to `page` a page at a time.
pub(super) async fn read_cronjobs<Taken>(
    client: &Client,
    namespace: Option<&str>,
    streaming: bool,
    mut page: impl FnMut(Vec<LeanCronJob>) -> Taken,
) -> Result<(), LoadError>
where
    Taken: Future<Output = ()>,
{
    let url = kube::core::Request::new(CronJob::url_path(&(), namespace));
    let mut read = 0;
    let counted = |cronjobs: Vec<LeanCronJob>| {
        read += cronjobs.len();
        page(cronjobs)
    };
    if streaming {
        stream(client, &url, counted).await?;
    } else {
        pages(client, &url, counted).await?;
    }
    tracing::debug!(
        cronjobs = read,
        streaming,
        "read a list of CronJobs in protobuf"
    );
    Ok(())
}

/// A streaming list, as [`super::stream_all`]'s: each part of the body
/// within the list deadline, ended at the initial events' bookmark.
async fn stream<Taken>(
    client: &Client,
    url: &kube::core::Request,
    mut page: impl FnMut(Vec<LeanCronJob>) -> Taken,
) -> Result<(), LoadError>
where
    Taken: Future<Output = ()>,
{
    let params = WatchParams::default()
        .initial_events()
        .timeout(STREAM_TIMEOUT_SECONDS);
    let request = url.watch(&params, "").map_err(kube::Error::BuildRequest)?;
    let mut body = send(client, request, protobuf::WATCH_CONTENT_TYPE).await?;
    let mut frames = Frames::default();
    let mut held = Vec::new();
    loop {
        let Some(part) = within(LIST_PAGE, body.frame())
            .await
            .map_err(LoadError::Deadline)?
        else {
            return Err(LoadError::EndedEarly);
        };
        let Ok(data) = part?.into_data() else {
            continue;
        };
        frames.push(&data);
        while let Some(event) = frames.next_event()? {
            match event.kind.as_str() {
                "ADDED" | "MODIFIED" => {
                    held.push(cronjob::from_object(&event.object)?);
                    if held.len() >= PAGE as usize {
                        page(std::mem::take(&mut held)).await;
                    }
                }
                "BOOKMARK" if cronjob::ends_initial_events(&event.object) => {
                    page(held).await;
                    return Ok(());
                }
                "ERROR" => {
                    // The stream's 200 is no code for a failure: a Status
                    // that does not decode is reported as the server's own.
                    let status = protobuf::error_status(
                        http::StatusCode::INTERNAL_SERVER_ERROR,
                        &event.object,
                    );
                    return Err(LoadError::Api(kube::Error::Api(Box::new(status))));
                }
                // Other bookmarks; a deletion cannot come before the end of
                // the initial events.
                _ => {}
            }
        }
    }
}

/// Paginated lists, as [`super::list_all`]'s.
async fn pages<Taken>(
    client: &Client,
    url: &kube::core::Request,
    mut page: impl FnMut(Vec<LeanCronJob>) -> Taken,
) -> Result<(), LoadError>
where
    Taken: Future<Output = ()>,
{
    let mut params = ListParams {
        limit: Some(PAGE),
        ..ListParams::default()
    };
    loop {
        let request = url.list(&params).map_err(kube::Error::BuildRequest)?;
        let body = within(LIST_PAGE, async {
            let body = send(client, request, protobuf::CONTENT_TYPE).await?;
            Ok::<_, LoadError>(body.collect().await?.to_bytes())
        })
        .await
        .map_err(LoadError::Deadline)??;
        let (cronjobs, next) = cronjob::from_list(&body)?;
        page(cronjobs).await;
        match next {
            // A continued page is read at the first page's snapshot.
            Some(token) => params.continue_token = Some(token),
            None => return Ok(()),
        }
    }
}

/// Sends `request` asking for `accept`; its body if the server took it,
/// else the `Status` it answered, as kube-rs reports one.
async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<Body, LoadError> {
    let mut request = request.map(Body::from);
    request
        .headers_mut()
        .insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
    let response = within(LIST_PAGE, client.send(request))
        .await
        .map_err(LoadError::Deadline)??;
    let status = response.status();
    if status.is_success() {
        return Ok(response.into_body());
    }
    let body = within(LIST_PAGE, response.into_body().collect())
        .await
        .map_err(LoadError::Deadline)??
        .to_bytes();
    let status = protobuf::error_status(status, &body);
    Err(LoadError::Api(kube::Error::Api(Box::new(status))))
}
