//! Everything that talks to the Kubernetes API server: the watches on
//! CronJobs and Jobs ([`watch`]) and the write gateway ([`gateway`]) with its
//! pure parts: the rate limit ([`rate`]), the queue discipline ([`queue`])
//! and the retry policy ([`retry`]).

pub mod gateway;
pub mod queue;
pub mod rate;
pub mod retry;
pub mod watch;
