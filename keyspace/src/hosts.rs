//! The enrolment listing behind `relay-tool hosts`: one [`HostRow`] per enrolment, streamed in
//! key order from one snapshot (each row handed on as it is read, nothing buffered).

use fjall::Readable;

use crate::codec::{self, UsageScope};
use crate::ops::seen;
use crate::parts::Part;
use crate::reader::{self, SnapView};
use relay_store::{HostFilter, HostRow, Result};

/// Hand every enrolment that passes `filter` to `each`, in host-key order, from one
/// snapshot. Returns how many were handed on.
///
/// # Errors
/// `Closed`, `Corrupt`, `Engine`, or the first error `each` returns (the listing stops).
pub(crate) fn hosts(
    v: &SnapView,
    filter: &HostFilter,
    each: &mut dyn FnMut(&HostRow) -> Result<()>,
) -> Result<u64> {
    let mut listed = 0;
    let range = [0u8]..codec::ENROL_END;
    for g in v.snap.range(v.parts.ks(Part::Enrolments), range) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let Some(pk) = codec::enrol_key_parse(&k) else {
            continue;
        };
        let enrolment = codec::dec_enrolment(&val)?;
        let ads = reader::enc_ads(v, &pk)?;
        let row = HostRow {
            enrolment,
            last_seen_day: seen::day_of(v, &pk)?,
            queue: reader::usage(v, &UsageScope::Target(pk))?,
            enc_ad_v1_at_ms: ads.v1.map(|a| a.at_ms),
            enc_ad_v2_at_ms: ads.v2.map(|a| a.at_ms),
        };
        if filter.matches(&row) {
            each(&row)?;
            listed += 1;
        }
    }
    Ok(listed)
}
