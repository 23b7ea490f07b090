//! Data sets made once and kept: a control plane's etcd data holding a
//! large population of CronJobs (S7's million), stored in the build cache
//! and brought back by `deploy/local/up --etcd-from` in minutes instead of
//! the half hour creating them takes.
//!
//! A set is keyed by the Kubernetes version deploy/local builds (etcd's
//! data is read by that kube-apiserver) and by its shape (mix, count,
//! namespaces), so a changed shape or a Kubernetes upgrade makes a new one.

use crate::cluster::LocalCluster;
use crate::create;
use crate::mix::{self, Anchor, Mix};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use shardcron_harness::cluster::UpOptions;
use shardcron_harness::repo_root;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a data set holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub mix: Mix,
    pub count: usize,
    pub namespaces: usize,
}

/// Bumped when what a set holds changes for the same shape (the CronJob
/// object `create` writes, the namespaces' names).
const FORMAT: u32 = 1;

/// What is written beside a kept set's data (`shape.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Made {
    pub shape: Shape,
    pub kubernetes: String,
    pub made_at: String,
    pub create_seconds: f64,
}

impl Shape {
    /// The set's directory name: `k8s-<version>-<mix>-<count>x<namespaces>-f<FORMAT>`.
    pub fn key(&self, kubernetes: &str) -> String {
        let mix = serde_json::to_value(self.mix)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", self.mix));
        format!(
            "k8s-{kubernetes}-{mix}-{}x{}-f{FORMAT}",
            self.count, self.namespaces
        )
    }
}

/// The Kubernetes version deploy/local builds (`k8s.io/kubernetes` in its
/// go.mod).
pub fn kubernetes_version() -> anyhow::Result<String> {
    let path = repo_root().join("deploy/local/go.mod");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    version_in_go_mod(&text).with_context(|| format!("no k8s.io/kubernetes in {}", path.display()))
}

fn version_in_go_mod(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next()? == "k8s.io/kubernetes")
            .then(|| words.next().map(str::to_owned))
            .flatten()
    })
}

/// Where sets are kept: `<cache>/datasets`, the cache deploy/local/build
/// keeps its binaries in (`SHARDCRON_CACHE`, else `$XDG_CACHE_HOME/shardcron`,
/// else `~/.cache/shardcron`).
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let cache = match (
        std::env::var_os("SHARDCRON_CACHE"),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    ) {
        (Some(cache), _, _) => PathBuf::from(cache),
        (None, Some(xdg), _) => PathBuf::from(xdg).join("shardcron"),
        (None, None, Some(home)) => PathBuf::from(home).join(".cache/shardcron"),
        (None, None, None) => {
            bail!("no SHARDCRON_CACHE, XDG_CACHE_HOME or HOME to keep data sets in")
        }
    };
    Ok(cache.join("datasets"))
}

/// How fast a data set's CronJobs are asked for (at most 128 in flight):
/// no controller runs on the control plane that makes it, so the set-up
/// rate of a scenario (`--create-qps`, 200 a second) would only make it
/// slow (10^6 in 83 minutes, against 17 at about 960 a second here).
pub const MAKE_QPS: f64 = 2000.0;

/// The etcd data directory of the set of `shape`, made first if it is not
/// kept yet (creating its CronJobs at `create_qps` on a control plane of
/// its own, in `work`).
pub async fn ensure(shape: Shape, create_qps: f64, work: &Path) -> anyhow::Result<PathBuf> {
    let kubernetes = kubernetes_version()?;
    let kept = cache_dir()?.join(shape.key(&kubernetes));
    let data = kept.join("etcd");
    if data.join("member").is_dir() {
        eprintln!(
            "dataset: {} is kept in {}",
            shape.key(&kubernetes),
            kept.display()
        );
        return Ok(data);
    }
    eprintln!(
        "dataset: making {} (once; later runs start from it)",
        shape.key(&kubernetes)
    );
    let cluster_dir = work.join("dataset-cluster");
    let options = UpOptions {
        without_jaeger: true,
        sharded_watch: true,
        ..UpOptions::default()
    };
    let cluster = LocalCluster::up_with(&cluster_dir, options).await?;
    let started = Instant::now();
    let plan = mix::plan(
        shape.mix,
        shape.count,
        shape.namespaces,
        "a",
        Anchor::default(),
    );
    let created = create::create(&cluster.client, &plan, create_qps).await;
    let create_seconds = started.elapsed().as_secs_f64();
    drop(plan);
    if let Err(error) = created {
        // down removes the directory; the failed set is not kept.
        cluster.down()?;
        return Err(error.context("creating the data set"));
    }
    // A clean stop (SIGTERM) leaves etcd's files consistent.
    cluster.stop_keeping_data()?;
    let partial = kept.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial)?;
    }
    std::fs::create_dir_all(&partial)?;
    std::fs::rename(cluster_dir.join("etcd"), partial.join("etcd"))
        .context("moving etcd's data into the cache (is the cache on the same filesystem?)")?;
    let made = Made {
        shape,
        kubernetes,
        made_at: jiff::Timestamp::now().to_string(),
        create_seconds,
    };
    std::fs::write(
        partial.join("shape.json"),
        serde_json::to_vec_pretty(&made)?,
    )?;
    // Only a whole set ever has the kept name.
    if kept.exists() {
        std::fs::remove_dir_all(&kept)?;
    }
    std::fs::rename(&partial, &kept)?;
    std::fs::remove_dir_all(&cluster_dir)?;
    eprintln!(
        "dataset: {} CronJobs created in {create_seconds:.0} s, kept in {}",
        shape.count,
        kept.display()
    );
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_keyed_by_kubernetes_and_its_shape() {
        let shape = Shape {
            mix: Mix::Million,
            count: 1_000_000,
            namespaces: 1000,
        };
        assert_eq!(shape.key("v1.36.3"), "k8s-v1.36.3-million-1000000x1000-f1");
    }

    #[test]
    fn the_kubernetes_version_is_read_from_go_mod() {
        let go_mod =
            "require (\n\tk8s.io/api v0.36.3\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n";
        assert_eq!(version_in_go_mod(go_mod).as_deref(), Some("v1.36.3"));
        assert_eq!(version_in_go_mod("module x\n"), None);
        assert_eq!(
            kubernetes_version().ok().map(|v| v.starts_with("v1.")),
            Some(true)
        );
    }
}
