//! One actor per CronJob: its compact state and its one timer
//! ([`cronjob`]), carrying out each decision through the write gateway
//! ([`apply`]), and the timer math ([`timer`]).

pub mod apply;
pub mod cronjob;
pub mod timer;

#[cfg(test)]
mod tests;
