//! `shardcron crd`: the `cronjobs.shardcron.io` CustomResourceDefinition.
//!
//! Without arguments it prints the definition committed in deploy/crd/
//! (made from the Kubernetes version the project pins). `--from-openapi`
//! makes it from another cluster's own batch/v1 schema:
//! `kubectl get --raw /openapi/v3/apis/batch/v1 | shardcron crd --from-openapi -`.

use crate::cli::crd::{self, CrdError};
use std::io::Write;
use std::path::PathBuf;

/// The definition generated from the pinned Kubernetes' batch/v1.
pub const COMMITTED: &str = include_str!("../../../deploy/crd/cronjobs.shardcron.io.yaml");

#[derive(Debug, clap::Args)]
pub struct CrdArgs {
    /// Make the definition from this OpenAPI v3 document of batch/v1
    /// (`kubectl get --raw /openapi/v3/apis/batch/v1`; `-` reads stdin)
    /// instead of printing the committed one.
    #[arg(long, value_name = "FILE")]
    from_openapi: Option<PathBuf>,
}

/// Errors `crd` reports (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum CrdCommandError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not JSON: {source}")]
    NotJson {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {source}")]
    Definition { path: String, source: CrdError },
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

pub fn run(args: &CrdArgs, out: &mut impl Write) -> Result<(), CrdCommandError> {
    let Some(path) = &args.from_openapi else {
        out.write_all(COMMITTED.as_bytes())?;
        return Ok(());
    };
    let shown = path.display().to_string();
    let text = crate::cli::arguments::read_input(path).map_err(|source| CrdCommandError::Read {
        path: shown.clone(),
        source,
    })?;
    let openapi = serde_json::from_str(&text).map_err(|source| CrdCommandError::NotJson {
        path: shown.clone(),
        source,
    })?;
    let yaml = crd::definition(&openapi)
        .and_then(|definition| crd::to_yaml(&definition))
        .map_err(|source| CrdCommandError::Definition {
            path: shown,
            source,
        })?;
    out.write_all(yaml.as_bytes())?;
    Ok(())
}
