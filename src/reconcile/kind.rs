//! Which API serves a CronJob: batch/v1, or `cronjobs.shardcron.io/v1`, the
//! CRD with batch/v1's spec and status for clusters whose
//! kube-controller-manager keeps its own CronJob controller
//! (`crate::kube::crd`). A decision is the same for both; only the
//! references to the CronJob (the Jobs' controller reference, the events'
//! regarding object) and the URLs it is read and written at differ.

/// The API group and version of a CronJob. The kind is `CronJob` in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum CronJobKind {
    /// `batch/v1`, kube-controller-manager's own.
    #[default]
    Batch,
    /// `shardcron.io/v1`, the CRD.
    Shardcron,
}

impl CronJobKind {
    pub const ALL: [Self; 2] = [Self::Batch, Self::Shardcron];
    pub const KIND: &'static str = "CronJob";
    pub const PLURAL: &'static str = "cronjobs";

    pub const fn group(self) -> &'static str {
        match self {
            Self::Batch => "batch",
            Self::Shardcron => "shardcron.io",
        }
    }

    pub const fn version(self) -> &'static str {
        "v1"
    }

    /// `apiVersion` as objects and references write it.
    pub const fn api_version(self) -> &'static str {
        match self {
            Self::Batch => "batch/v1",
            Self::Shardcron => "shardcron.io/v1",
        }
    }

    /// The kind an `apiVersion` names, if it is one of the two.
    pub fn from_api_version(api_version: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.api_version() == api_version)
    }

    /// Whether a controller reference with `api_version` (and kind
    /// `CronJob`) names a CronJob of this kind: any version of the group,
    /// so that Jobs made in batch/v1beta1's days still count as batch's.
    pub fn is_group_of(self, api_version: &str) -> bool {
        api_version
            .split_once('/')
            .is_some_and(|(group, _)| group == self.group())
    }

    /// The short name the command line uses (`--cronjob-kinds batch,shardcron`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Batch => "batch",
            Self::Shardcron => "shardcron",
        }
    }
}

impl std::fmt::Display for CronJobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_round_trips_through_its_api_version() {
        for kind in CronJobKind::ALL {
            assert_eq!(
                CronJobKind::from_api_version(kind.api_version()),
                Some(kind)
            );
            assert_eq!(
                kind.api_version(),
                format!("{}/{}", kind.group(), kind.version())
            );
        }
        assert_eq!(CronJobKind::from_api_version("batch/v1beta1"), None);
        assert!(CronJobKind::Batch.is_group_of("batch/v1beta1"));
        assert!(!CronJobKind::Batch.is_group_of("shardcron.io/v1"));
        assert!(!CronJobKind::Batch.is_group_of("batch"));
        assert!(CronJobKind::Shardcron.is_group_of("shardcron.io/v1"));
        assert!(!CronJobKind::Shardcron.is_group_of("batch/v1"));
        assert_eq!(CronJobKind::default(), CronJobKind::Batch);
    }
}
