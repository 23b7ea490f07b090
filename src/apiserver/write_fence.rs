//! The question every write asks first: may this replica write now? The
//! shard layer answers it (its Lease, by the replica's own clock); the
//! gateway and the fenced connections ask it. A trait of its own, so that
//! neither the gateway nor the shard's fence depends on the socket code.

use std::time::Duration;

/// Whether this replica may write now, and for how long. The shard
/// layer's fence answers (`shard::fence::SharedFence`); the gateway asks
/// before every request and cuts a request still unanswered when the fence
/// lapses, and its connections ask before every write.
pub trait WriteFence: Send + Sync + 'static {
    /// How much longer this replica may write if its Lease is not renewed
    /// meanwhile; `None`: not now.
    fn valid_for(&self) -> Option<Duration>;

    fn may_write(&self) -> bool {
        self.valid_for().is_some()
    }
}
