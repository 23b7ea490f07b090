//! One actor per owned CronJob: its compact state, its one timer, applying
//! the decision's plan through the write gateway. So far the timer math
//! ([`timer`]); the actix actors come with the running controller.

pub mod timer;
