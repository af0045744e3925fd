//! The deny list (spec §8 "Revocation"): entries by host key or by the OAuth `client_id` of the
//! accounts service, each kept until its expiry (at least the longest token lifetime).

use crate::Key32;

/// What a deny entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DenySubject {
    /// A host key (its enrolment is refused and it is revoked when the entry is added).
    Host(Key32),
    /// A `client_id` of the accounts service: tokens naming it are refused.
    Client(String),
}

/// One deny-list entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DenyEntry {
    /// Whom it refuses.
    pub subject: DenySubject,
    /// When it was added.
    pub added_ms: u64,
    /// Refused until this time (its last refused millisecond is `expires_ms - 1`).
    pub expires_ms: u64,
    /// Why (who revoked what), at most [`crate::MAX_REASON_CHARS`] characters.
    pub note: String,
}

/// How `put_deny` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyOutcome {
    /// Stored (or an entry for the same subject renewed).
    Added,
    /// [`MAX_DENY_ENTRIES`] unexpired entries are stored already.
    Full,
}

/// Most unexpired deny entries stored at once (the prune in `put_deny` is one bounded scan).
pub const MAX_DENY_ENTRIES: u64 = 100_000;
/// The longest `client_id` stored.
pub const MAX_CLIENT_ID_CHARS: usize = 256;
