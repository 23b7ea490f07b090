//! The controller suite (tests/suites/controller_e2e.rs) on batch/v1
//! CronJobs, shardcron in place of kube-controller-manager's CronJob
//! controller.

mod support;

#[path = "suites/controller_e2e.rs"]
mod e2e;

use shardcron::reconcile::CronJobKind;

/// The kind the suite's CronJobs are.
const KIND: CronJobKind = CronJobKind::Batch;
