//! `relay-tool rotate-epoch`: a new epoch for the store (needed after any restore not made by
//! `relay-tool restore`, e.g. a volume snapshot), recorded in the relay log. A directory store's
//! relay must be stopped; a PostgreSQL store is rotated in one transaction beside its running
//! relays (the epoch is the database's), and each relay takes the new epoch within
//! `relay_core::EPOCH_REFRESH` or at once when a host presents it.

use relay_core::EPOCH_REFRESH;

use crate::access::{self, Target};
use crate::fail::Failure;

/// Why the keyspace records the rotation.
const REASON: &str = "rotate-epoch by relay-tool";

/// Run the command; prints the old and the new epoch (one JSON object with `json`).
///
/// # Errors
/// `InUse` while a relay holds a directory store; missing directory; store errors.
pub(crate) fn rotate(dir: &Target, json: bool) -> Result<(), Failure> {
    let store = access::open_exclusive(dir, "rotate the epoch")?;
    let old = store.meta()?.epoch;
    let new = store.rotate_epoch(REASON).wait()?;
    access::close(store)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "old_epoch": old, "new_epoch": new })
        );
        return Ok(());
    }
    println!("epoch rotated: {old} -> {new} (recorded in the relay log)");
    if dir.shared() {
        println!(
            "relays running on this database serve it within {} s",
            EPOCH_REFRESH.as_secs()
        );
    }
    println!(
        "hosts will re-push unconfirmed items and re-pull from the start on their next contact"
    );
    Ok(())
}
