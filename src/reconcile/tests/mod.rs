//! Tests of the decision core: upstream's own tables
//! (pkg/controller/cronjob/cronjob_controllerv2_test.go and utils_test.go),
//! the lookup and follow-up flows, event texts, and properties.

mod fixtures;
mod flows;
mod messages;
mod properties;
mod sync_table;
mod utils_tables;
