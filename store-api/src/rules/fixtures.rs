//! Plain records the rules' unit tests share.

use crate::types::{Enrolment, SenderList};

/// A sender list of `target` naming `senders` (keys `[n; 32]`), signed at `iat_ms`.
pub(crate) fn list(target: u8, senders: &[u8], iat_ms: u64) -> SenderList {
    SenderList {
        target: [target; 32],
        senders: senders.iter().map(|s| [*s; 32]).collect(),
        iat_ms,
        record: Vec::new(),
        sig: String::new(),
    }
}

/// A live enrolment of `[key; 32]` named "alice", enrolled at `enrolled_at_ms`, with `account`
/// and an authority of `rank`; revoked at `enrolled_at_ms` when `revoked`.
pub(crate) fn enrolment(
    key: u8,
    account: Option<&str>,
    rank: u8,
    enrolled_at_ms: u64,
    revoked: bool,
) -> Enrolment {
    Enrolment {
        host_pubkey: [key; 32],
        host_name: "alice".into(),
        owner_fp: "fp".into(),
        account: account.map(str::to_string),
        authorized_by: "host-key".into(),
        authority_rank: rank,
        enrolled_at_ms,
        revoked_at_ms: revoked.then_some(enrolled_at_ms),
        org: None,
        client_id: None,
    }
}
