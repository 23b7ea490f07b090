//! `shardcron convert`: batch/v1 CronJobs as `cronjobs.shardcron.io` ones,
//! for moving them from kube-controller-manager's controller to a ring
//! serving the CRD (docs/operations.md, "Moving a CronJob over").
//!
//! Reads what `kubectl get cronjobs.batch -o yaml` prints (one CronJob, a
//! List, or several YAML documents) from a file or stdin, and prints the
//! copies as YAML documents for `kubectl apply -f -`.

use crate::kube::crd::convert::{ConvertError, to_shardcron};
use serde::Deserialize;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// The batch/v1 CronJobs (`-` reads stdin).
    #[arg(long, short = 'f', value_name = "FILE")]
    filename: PathBuf,
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
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(args: &ConvertArgs, out: &mut impl Write) -> Result<(), ConvertCommandError> {
    let path = args.filename.display().to_string();
    let text = super::read_input(&args.filename).map_err(|source| ConvertCommandError::Read {
        path: path.clone(),
        source,
    })?;
    let copies = convert_all(&text, args.resume, &path)?;
    // Everything is converted before anything is printed: a bad document
    // leaves no half output to apply.
    for copy in copies {
        // YAML of a JSON value cannot fail.
        let yaml = serde_yaml_ng::to_string(&copy).unwrap_or_default();
        write!(out, "---\n{yaml}")?;
    }
    Ok(())
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
        for item in &items {
            copies.push(to_shardcron(item, resume).map_err(|source| {
                ConvertCommandError::Convert {
                    path: path.to_owned(),
                    document: document_number,
                    source,
                }
            })?);
        }
    }
    if copies.is_empty() {
        return Err(ConvertCommandError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(copies)
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
