//! Where a running retention sweep continues (`ops::sweep`): its own module so the writer,
//! which holds the committed position, and the sweep operation, which moves it, both import it
//! without importing each other.

use std::ops::Bound;

use fjall::Slice;

/// Where the calls of a running sweep continue: the last expiry and dedup-prune index rows it
/// handled (`None`: from the start). Held by the writer, moved only by committed groups.
///
/// Safe to skip what lies before: every row there was deleted by this run, and rows written
/// since sort after it (an item expires at its acceptance time + retention, a prune row is keyed
/// by now, both past every earlier call's now). The one exception, a key rotation moving a due
/// item to a lower key mid-run, is expired by the next run: a call that finds nothing more
/// resets the position, so every run starts at the beginning.
#[derive(Clone, Default)]
pub(crate) struct SweepFrom {
    pub(crate) expiry: Option<Slice>,
    pub(crate) dedup: Option<Slice>,
}

/// The lower bound of a scan: after the run's last row, else the start of `prefix`.
pub(crate) fn from<'a>(last: &'a Option<Slice>, prefix: &'a [u8]) -> Bound<&'a [u8]> {
    match last {
        Some(k) => Bound::Excluded(k.as_ref()),
        None => Bound::Included(prefix),
    }
}
