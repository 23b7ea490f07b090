//! Everything that talks to the Kubernetes API server. So far: the pure
//! parts of the write gateway, the rate limit ([`rate`]) and the queue
//! discipline ([`queue`]); the gateway, watchers and events come with the
//! running controller.

pub mod queue;
pub mod rate;
