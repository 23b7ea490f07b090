//! `shardcron convert`: batch/v1 CronJobs as `cronjobs.shardcron.io` ones,
//! for moving them from kube-controller-manager's controller to a ring
//! serving the CRD (docs/operations.md, "Moving a CronJob over").
//!
//! Reads what `kubectl get cronjobs.batch -o yaml` prints (one CronJob, a
//! List, or several YAML documents) from a file or stdin, or lists them
//! from the cluster itself (`--namespace`, `--all-namespaces`, with the
//! caller's kubeconfig, so RBAC decides what may be read), and prints the
//! copies as YAML documents for `kubectl apply -f -`.

use crate::cli::crd::from_batch::{ConvertError, to_shardcron};
use serde::Deserialize;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("source")
        .required(true)
        .args(["filename", "namespace", "all_namespaces"])
))]
pub struct ConvertArgs {
    /// The batch/v1 CronJobs (`-` reads stdin).
    #[arg(long, short = 'f', value_name = "FILE")]
    filename: Option<PathBuf>,
    /// Every batch/v1 CronJob of NAMESPACE, read from the cluster.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Every batch/v1 CronJob of the cluster.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    /// With --namespace or --all-namespaces: the kubeconfig (default: in a
    /// pod its ServiceAccount, else KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The copies are not suspended (the move suspends the originals first,
    /// so that their last slots are final when copied).
    #[arg(long)]
    resume: bool,
}

/// Errors `convert` reports (exit status 2); nothing is printed then.
#[derive(Debug, thiserror::Error)]
pub enum ConvertCommandError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: document {document} is not YAML or JSON: {message}")]
    Parse {
        path: String,
        document: usize,
        message: String,
    },
    #[error("{path}: document {document}: {source}")]
    Convert {
        path: String,
        document: usize,
        source: ConvertError,
    },
    #[error("{path}: no CronJob in it")]
    Empty { path: String },
    #[error("connecting to the cluster: {0:#}")]
    Client(anyhow::Error),
    #[error("listing the batch/v1 CronJobs of {scope}: {source}")]
    List {
        scope: String,
        source: crate::apiserver::bulk::LoadError,
    },
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(args: &ConvertArgs, out: &mut impl Write) -> Result<(), ConvertCommandError> {
    let copies = match &args.filename {
        Some(filename) => {
            let path = filename.display().to_string();
            let text = super::arguments::read_input(filename).map_err(|source| {
                ConvertCommandError::Read {
                    path: path.clone(),
                    source,
                }
            })?;
            convert_all(&text, args.resume, &path)?
        }
        None => {
            let namespace = args.namespace.as_deref().filter(|_| !args.all_namespaces);
            let scope = match namespace {
                Some(namespace) => format!("namespace {namespace}"),
                None => "every namespace".to_owned(),
            };
            let items = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(list_cronjobs(args.kubeconfig.as_ref(), namespace, &scope))?;
            convert_items(items, args.resume, &scope, 1)?
        }
    };
    // Everything is converted before anything is printed: a bad document
    // leaves no half output to apply.
    for copy in copies {
        // YAML of a JSON value cannot fail.
        let yaml = serde_yaml_ng::to_string(&copy).unwrap_or_default();
        write!(out, "---\n{yaml}")?;
    }
    Ok(())
}

/// The batch/v1 CronJobs of `namespace` (`None`: all), as `kubectl get -o
/// json` gives them (without managedFields), page by page, each page
/// within the list deadline.
async fn list_cronjobs(
    kubeconfig: Option<&PathBuf>,
    namespace: Option<&str>,
    scope: &str,
) -> Result<Vec<Value>, ConvertCommandError> {
    use k8s_openapi::api::batch::v1::CronJob;
    use kube::api::Api;
    let agent = format!("shardcron-convert/{}", env!("CARGO_PKG_VERSION"));
    let client = super::arguments::kube_client(kubeconfig, &agent)
        .await
        .map_err(ConvertCommandError::Client)?;
    let api: Api<CronJob> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let mut items = Vec::new();
    crate::apiserver::bulk::list_all(api, None, |page: Vec<CronJob>| {
        // Serializing a typed object cannot fail.
        items.extend(
            page.iter()
                .map(|c| serde_json::to_value(c).unwrap_or_default()),
        );
        async {}
    })
    .await
    .map_err(|source| ConvertCommandError::List {
        scope: scope.to_owned(),
        source,
    })?;
    Ok(items)
}

/// The copies of every CronJob in `text`: each YAML document is a CronJob
/// or a List of them.
fn convert_all(text: &str, resume: bool, path: &str) -> Result<Vec<Value>, ConvertCommandError> {
    let mut copies = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let document_number = index + 1;
        let value = Value::deserialize(document).map_err(|e| ConvertCommandError::Parse {
            path: path.to_owned(),
            document: document_number,
            message: e.to_string(),
        })?;
        let items = match value.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None if value.is_null() => Vec::new(),
            None => vec![value],
        };
        match convert_items(items, resume, path, document_number) {
            Err(ConvertCommandError::Empty { .. }) => {}
            other => copies.extend(other?),
        }
    }
    if copies.is_empty() {
        return Err(ConvertCommandError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(copies)
}

/// The copies of `items`, the CronJobs of document `document` of `path`.
fn convert_items(
    items: Vec<Value>,
    resume: bool,
    path: &str,
    document: usize,
) -> Result<Vec<Value>, ConvertCommandError> {
    if items.is_empty() {
        return Err(ConvertCommandError::Empty {
            path: path.to_owned(),
        });
    }
    items
        .iter()
        .map(|item| {
            to_shardcron(item, resume).map_err(|source| ConvertCommandError::Convert {
                path: path.to_owned(),
                document,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRONJOB: &str = "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: a\n  namespace: t\nspec:\n  schedule: '@hourly'\n  suspend: true\n  jobTemplate: {}\nstatus:\n  lastScheduleTime: '2024-03-01T10:00:00Z'\n";

    #[test]
    fn documents_and_lists_are_converted_in_order() {
        let list = format!(
            "apiVersion: v1\nkind: List\nitems:\n- {}",
            CRONJOB
                .replace('\n', "\n  ")
                .replace("name: a", "name: b")
                .trim_end()
        );
        let text = format!("{CRONJOB}---\n{list}\n");
        let copies = convert_all(&text, true, "in.yaml").unwrap();
        let names: Vec<&str> = copies
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(copies.iter().all(|c| c["apiVersion"] == "shardcron.io/v1"));
        assert!(copies.iter().all(|c| c["spec"]["suspend"] == false));
        assert_eq!(
            copies[1]["metadata"]["annotations"]["shardcron.io/last-schedule-time"],
            "2024-03-01T10:00:00Z"
        );
    }

    fn parse(args: &[&str]) -> Result<ConvertArgs, String> {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([&["shardcron", "convert"], args].concat())
            .map_err(|e| e.to_string())?;
        match cli.command {
            crate::cli::Command::Convert(args) => Ok(args),
            _ => Err("not convert".to_owned()),
        }
    }

    #[test]
    fn one_source_is_named_a_file_a_namespace_or_every_namespace() {
        assert!(parse(&["-f", "-"]).is_ok_and(|a| a.filename.is_some()));
        assert!(parse(&["-n", "team-a"]).is_ok_and(|a| a.namespace.as_deref() == Some("team-a")));
        assert!(parse(&["-A"]).is_ok_and(|a| a.all_namespaces));
        let none = parse(&[]).expect_err("no source");
        assert!(none.contains("--filename"), "{none}");
        let two = parse(&["-f", "-", "-A"]).expect_err("two sources");
        assert!(two.contains("cannot be used with"), "{two}");
    }

    #[test]
    fn a_bad_document_is_named_and_nothing_is_converted() {
        let text = format!("{CRONJOB}---\nkind: Job\napiVersion: batch/v1\n");
        let err = convert_all(&text, false, "in.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "in.yaml: document 2: expected a batch/v1 CronJob, found batch/v1 Job"
        );
        let err = convert_all("", false, "in.yaml").unwrap_err();
        assert_eq!(err.to_string(), "in.yaml: no CronJob in it");
        let err = convert_all("a: [", false, "in.yaml").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("in.yaml: document 1 is not YAML"),
            "{err}"
        );
    }
}
