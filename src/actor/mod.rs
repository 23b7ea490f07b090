//! One actor per CronJob: its compact state and its one timer
//! ([`cronjob`]), carrying out each decision through the write gateway
//! ([`apply`], the CronJob's own failed-Job streak in `streak`), and the
//! timer math ([`timer`]); idle actors' wake-ups are kept by one
//! [`wheel`] per replica, and the actors run on a [`runtime`] of their own
//! (one allocation per idle actor, no task).

pub mod apply;
pub mod cronjob;
pub mod feed;
pub mod runtime;
pub mod services;
pub mod timer;
pub mod wheel;

#[cfg(test)]
mod tests;
