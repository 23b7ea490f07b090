//! Which API serves a CronJob: batch/v1, or `cronjobs.shardcron.io/v1`, the
//! CRD with batch/v1's spec and status for clusters whose
//! kube-controller-manager keeps its own CronJob controller
//! (`crate::cli::crd`). A decision is the same for both; only the
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

impl CronJobKind {
    /// The key a CronJob is known by in the ring, the actors and the logs:
    /// `namespace/name` for batch/v1 (upstream's work-queue key), and
    /// `shardcron.io/namespace/name` for the CRD, so that namesakes of the
    /// two kinds served by one ring are two keys. Neither a namespace nor a
    /// name can hold a `/`, so the two forms never meet.
    pub fn key(self, namespace: &str, name: &str) -> String {
        match self {
            Self::Batch => format!("{namespace}/{name}"),
            Self::Shardcron => format!("{}/{namespace}/{name}", self.group()),
        }
    }

    /// The kind, namespace and name of a [`Self::key`] (a key of neither
    /// form reads as a batch/v1 one).
    pub fn parse_key(key: &str) -> (Self, &str, &str) {
        if let Some((group, rest)) = key.split_once('/')
            && let Some((namespace, name)) = rest.split_once('/')
            && let Some(kind) = Self::ALL.into_iter().find(|k| k.group() == group)
        {
            return (kind, namespace, name);
        }
        let (namespace, name) = key.split_once('/').unwrap_or((key, ""));
        (Self::Batch, namespace, name)
    }
}

/// The kinds one ring serves (`--cronjob-kinds`): a set of at most two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CronJobKinds {
    batch: bool,
    shardcron: bool,
}

impl CronJobKinds {
    pub fn of(kinds: impl IntoIterator<Item = CronJobKind>) -> Self {
        let mut set = Self::default();
        for kind in kinds {
            match kind {
                CronJobKind::Batch => set.batch = true,
                CronJobKind::Shardcron => set.shardcron = true,
            }
        }
        set
    }

    pub fn contains(self, kind: CronJobKind) -> bool {
        match kind {
            CronJobKind::Batch => self.batch,
            CronJobKind::Shardcron => self.shardcron,
        }
    }

    /// The kinds in the set, batch/v1 first.
    pub fn iter(self) -> impl Iterator<Item = CronJobKind> {
        CronJobKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    pub fn is_empty(self) -> bool {
        !(self.batch || self.shardcron)
    }

    /// The served kind whose group a controller reference's `api_version`
    /// names (any version: see [`CronJobKind::is_group_of`]).
    pub fn serving(self, api_version: &str) -> Option<CronJobKind> {
        self.iter().find(|k| k.is_group_of(api_version))
    }
}

impl std::fmt::Display for CronJobKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.iter().map(CronJobKind::name).collect();
        f.write_str(&names.join(","))
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

    /// The per-CronJob metrics read a key without this module (telemetry
    /// sits beside the layers): both readings must agree.
    #[test]
    fn the_metrics_read_a_key_as_its_kind_wrote_it() {
        for kind in CronJobKind::ALL {
            let key = kind.key("team-a", "nightly");
            assert_eq!(CronJobKind::parse_key(&key), (kind, "team-a", "nightly"));
            assert_eq!(
                crate::telemetry::cronjob_series::key_parts(&key),
                (kind.group(), "team-a", "nightly")
            );
        }
    }

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

    #[test]
    fn keys_tell_namesakes_of_the_two_kinds_apart_and_parse_back() {
        use CronJobKind::{Batch, Shardcron};
        let cases = [
            (Batch, "team-a", "report", "team-a/report"),
            (Shardcron, "team-a", "report", "shardcron.io/team-a/report"),
            // Dots are allowed in names and cannot be taken for a group.
            (Batch, "team-a", "a.b.c", "team-a/a.b.c"),
            (Shardcron, "batch", "x", "shardcron.io/batch/x"),
        ];
        for (kind, namespace, name, key) in cases {
            assert_eq!(kind.key(namespace, name), key);
            assert_eq!(CronJobKind::parse_key(key), (kind, namespace, name));
        }
        assert_ne!(Batch.key("a", "b"), Shardcron.key("a", "b"));
        // Not a key of either form: batch/v1's reading, never a panic.
        assert_eq!(CronJobKind::parse_key("odd"), (Batch, "odd", ""));
        assert_eq!(
            CronJobKind::parse_key("other.io/a/b"),
            (Batch, "other.io", "a/b")
        );
    }

    #[test]
    fn a_set_of_kinds_serves_the_controllers_of_its_groups() {
        use CronJobKind::{Batch, Shardcron};
        let both = CronJobKinds::of([Shardcron, Batch, Shardcron]);
        assert_eq!(both.iter().collect::<Vec<_>>(), [Batch, Shardcron]);
        assert_eq!(both.to_string(), "batch,shardcron");
        assert_eq!(both.serving("batch/v1beta1"), Some(Batch));
        assert_eq!(both.serving("shardcron.io/v1"), Some(Shardcron));
        let crd = CronJobKinds::of([Shardcron]);
        assert_eq!(crd.serving("batch/v1"), None);
        assert!(!crd.contains(Batch));
        assert!(CronJobKinds::of([]).is_empty());
    }
}
