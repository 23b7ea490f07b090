//! Everything that talks to the Kubernetes API server. So far only the pure
//! parts of the write gateway: the rate limit ([`rate`]), the queue
//! discipline ([`queue`]) and the retry policy ([`retry`]). The gateway
//! itself, the watchers and events come with the running controller.

pub mod queue;
pub mod rate;
pub mod retry;
