//! The controller suite (tests/suites/controller_e2e.rs) on shardcron.io
//! CronJobs, on a control plane whose kube-controller-manager runs its own
//! CronJob controller (as a managed one does) and a ring serving only the
//! CRD (`--cronjob-kinds shardcron`). That batch/v1 CronJobs there are left
//! to kube-controller-manager is tests/crd.rs's.

mod support;

#[path = "suites/controller_e2e.rs"]
mod e2e;

use shardcron::reconcile::CronJobKind;

/// The kind the suite's CronJobs are.
const KIND: CronJobKind = CronJobKind::Shardcron;
