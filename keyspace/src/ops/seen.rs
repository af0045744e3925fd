//! Last seen: the UTC day each live key was last seen (a hop by it, a push to it), one row per
//! key (`enrolments`, `0x02 ++ host key`). The relay batches sightings in memory and writes a
//! key's day at most once per day; a missing row means "seen at enrolment".

use crate::codec;
use crate::parts::Part;
use crate::reader::Reader;
use crate::writer::Tx;
use relay_store::rules;
use relay_store::{Key32, Result};

use super::enrol;

/// Record that each key was seen on its day, in one atomic operation
/// (`rules::seen::advances`: a live key only, never moving a day back). Answers the number of
/// rows written.
pub(crate) fn record_seen(tx: &mut Tx<'_>, seen: &[(Key32, u32)]) -> Result<u64> {
    let mut written = 0;
    for (pk, day) in seen {
        let live = enrol::live(tx, pk)?.is_some();
        if !rules::seen::advances(live, day_of(tx, pk)?, *day) {
            continue;
        }
        put(tx, pk, *day);
        written += 1;
    }
    Ok(written)
}

/// The stored last-seen day of `pk`.
pub(crate) fn day_of(r: &impl Reader, pk: &Key32) -> Result<Option<u32>> {
    r.get(Part::Enrolments, &codec::seen_key(pk))?
        .map(|v| codec::dec(&v, "last seen"))
        .transpose()
}

/// Set the last-seen day of `pk`.
pub(crate) fn put(tx: &mut Tx<'_>, pk: &Key32, day: u32) {
    tx.put(Part::Enrolments, &codec::seen_key(pk), codec::enc(&day));
}

/// Forget the last-seen day of `pk` (its enrolment went).
pub(crate) fn del(tx: &mut Tx<'_>, pk: &Key32) {
    tx.del(Part::Enrolments, &codec::seen_key(pk));
}
