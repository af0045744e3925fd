//! Whether a connection is streaming a long response (the events stream): the idle timeout
//! leaves such a connection alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A request extension: the connection's count of responses being streamed. A handler that
/// streams a long response holds it ([`Streaming::hold`]) so the idle timeout leaves the
/// connection alone.
#[derive(Clone, Default)]
pub(crate) struct Streaming(Arc<AtomicUsize>);

/// Held while a response streams; dropping it lets the idle timeout apply again.
pub(crate) struct StreamingHeld(Arc<AtomicUsize>);

impl Streaming {
    /// Count one streamed response until the handle drops.
    pub(crate) fn hold(&self) -> StreamingHeld {
        self.0.fetch_add(1, Ordering::AcqRel);
        StreamingHeld(self.0.clone())
    }

    pub(super) fn active(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

impl Drop for StreamingHeld {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
