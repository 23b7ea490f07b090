//! Tests of the decision core: upstream's own tables
//! (pkg/controller/cronjob/cronjob_controllerv2_test.go and utils_test.go),
//! the lookup and follow-up flows, a lost status write, event texts, and
//! properties.

mod catch_up;
mod converted;
mod fall_back;
mod fixtures;
mod flows;
mod lost_status_write;
mod messages;
mod pause;
mod properties;
mod run_now;
mod spread;
mod sync_table;
mod utils_tables;
