//! Idle-enrolment expiry (the rule is relay-store's `rules::idle::expires`): a live enrolment
//! not seen for the idle period and whose queue is empty is deleted with its enc ads, its allowlist (through `write_list`, so `sender_index`
//! stays right) and its last-seen row, freeing its place under the live-enrolment cap.
//! Revoked rows stay (a revoked key stays revoked). Other targets' lists that name the key keep
//! it: they are records their targets signed, and the same key (the same holder) may enrol again.

use std::ops::Bound;

use crate::codec::{self, meta_key, UsageScope};
use crate::parts::Part;
use crate::reader::{self, Reader};
use crate::writer::Tx;
use relay_store::rules;
use relay_store::{Enrolment, IdleReport, Key32, Result};

use super::{enrol, lists, oplog, seen};

/// Look at up to `max` (at least one) enrolment rows after `after` (from the start when
/// `None`) and delete each live one last seen `idle_ms` or more before `now_ms` whose queue is
/// empty. One atomic operation, logged (`expire-idle`, with the count) when it deleted any;
/// `next` says where to continue.
pub(crate) fn expire_idle(
    tx: &mut Tx<'_>,
    now_ms: u64,
    idle_ms: u64,
    after: Option<&Key32>,
    max: usize,
) -> Result<IdleReport> {
    let max = max.max(1);
    let start = after.map(codec::enrol_key);
    let lo = match &start {
        Some(k) => Bound::Excluded(k.as_slice()),
        None => Bound::Included(&[][..]),
    };
    // One extra row tells whether to call again.
    let rows = tx.range(
        Part::Enrolments,
        lo,
        Bound::Excluded(&codec::ENROL_END[..]),
        max + 1,
    )?;
    let mut scan = rules::idle::Scan::new(max, rows.len());
    for (k, v) in rows.into_iter().take(scan.take()) {
        let Some(pk) = codec::enrol_key_parse(&k) else {
            continue;
        };
        let e = codec::dec_enrolment(&v)?;
        // A revoked row never expires (the rule says so too; this skips two reads).
        let expires = e.revoked_at_ms.is_none() && {
            let day = seen::day_of(tx, &pk)?;
            let queue = reader::usage(tx, &UsageScope::Target(pk))?;
            rules::idle::expires(&e, day, queue, now_ms, idle_ms)
        };
        if expires {
            expire(tx, &e)?;
        }
        scan.row(pk, expires);
    }
    let (report, entry) = scan.finish(idle_ms);
    if let Some(entry) = entry {
        oplog::append(tx, entry.kind, &entry.detail)?;
    }
    Ok(report)
}

/// Delete a live enrolment with its name index row, last-seen row, enc ads and allowlist.
fn expire(tx: &mut Tx<'_>, e: &Enrolment) -> Result<()> {
    let pk = &e.host_pubkey;
    tx.del(Part::Enrolments, &codec::name_key(&e.host_name, pk));
    tx.del(Part::Enrolments, &codec::enrol_key(pk));
    seen::del(tx, pk);
    tx.del(Part::EncAds, pk);
    tx.del(Part::EncAds, &codec::enc_ad_v2_key(pk));
    lists::write_list(tx, pk, None)?;
    enrol::bump(tx, meta_key::LIVE_ENROLMENTS, -1)
}
