//! A load's batch/v1 CronJob lists in protobuf (`--api-protobuf`): from
//! the watch cache, one LIST without pages at least as new as a consistent
//! read made at the load's start; else pages, as [`super::list_all`]'s.
//! The answers are read by [`crate::apiserver::protobuf`]; kube-rs decodes
//! JSON only, so the requests are sent and their bodies read here.
//!
//! Why one LIST and not a streaming list: kube-apiserver sends a streaming
//! list's objects through a watch, and closes a watch whose queue of
//! changes fills while it sends them (10 to 100 changes by the cache's
//! size: 10 at S7's cold start, under a second of a busy minute's status
//! writes; `super`'s comment). A
//! LIST is no watch: nothing cuts it but the server's request timeout
//! (60 s by default), which a list of about [`super::WHOLE_LIST_TARGET`]
//! CronJobs ends well within. Its items are decoded as the body arrives
//! ([`ListItems`]): never more than one item and one chunk held.

use super::lists::{LoadError, PAGE};
use crate::apiserver::deadline::headers::ResponseHeadersWithin;
use crate::apiserver::deadline::{LIST_PAGE, within};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::protobuf::list::ListItems;
use crate::apiserver::protobuf::{self, ProtobufError, ReadError, cronjob};
use http_body_util::BodyExt as _;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{ListParams, VersionMatch};
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

/// Reads every CronJob of `namespace` (`None`: all) from the watch cache
/// by one LIST no older than `version` (`Some`), or by pages (`None`),
/// handing them to `page` a page at a time.
pub(super) async fn read_cronjobs<Taken>(
    client: &Client,
    namespace: Option<&str>,
    version: Option<&str>,
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
    match version {
        Some(version) => whole(client, &url, version, counted).await?,
        None => pages(client, &url, counted).await?,
    }
    tracing::debug!(
        cronjobs = read,
        whole = version.is_some(),
        "read a list of CronJobs in protobuf"
    );
    Ok(())
}

/// One LIST of every CronJob `url` selects, no pages, from the watch cache
/// at least as new as `version` (a version newer than the cache's, after 3
/// s, is refused: [`super::cache_behind`]); each part of the body within
/// the list deadline. A body that ends (or breaks) before the list's end is
/// [`LoadError::EndedEarly`], read again as a cut streaming list is.
async fn whole<Taken>(
    client: &Client,
    url: &kube::core::Request,
    version: &str,
    mut page: impl FnMut(Vec<LeanCronJob>) -> Taken,
) -> Result<(), LoadError>
where
    Taken: Future<Output = ()>,
{
    let params = ListParams::default()
        .at(version)
        .matching(VersionMatch::NotOlderThan);
    let mut request = url.list(&params).map_err(kube::Error::BuildRequest)?;
    // The server answers the headers once it has gathered, converted and
    // sized every item: as long as its own request timeout allows.
    request
        .extensions_mut()
        .insert(ResponseHeadersWithin(LIST_PAGE));
    let mut body = send(client, request, protobuf::CONTENT_TYPE).await?;
    let mut items = ListItems::new("CronJobList");
    let mut held = Vec::new();
    loop {
        let part = within(LIST_PAGE, body.frame())
            .await
            .map_err(LoadError::Deadline)?;
        let data = match part {
            None => break,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Some(Err(error)) => {
                tracing::debug!(%error, "a LIST's body broke off");
                return Err(LoadError::EndedEarly);
            }
        };
        items.push(&data);
        while let Some(item) = items.next_item()? {
            held.push(cronjob::from_message(&item)?);
            if held.len() >= PAGE as usize {
                page(std::mem::take(&mut held)).await;
            }
        }
    }
    match items.finish() {
        Ok(()) => {
            page(held).await;
            Ok(())
        }
        Err(ProtobufError::Truncated) => Err(LoadError::EndedEarly),
        Err(error) => Err(error.into()),
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
