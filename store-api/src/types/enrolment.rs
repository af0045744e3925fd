//! Enrolments: requests, outcomes, rotation, last seen, the host listing and idle expiry.

use crate::{Key32, Usage};

/// One enrolment, keyed by host key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Enrolment {
    /// The host's signing key: the enrolment's identity.
    pub host_pubkey: Key32,
    /// The name as enrolled (case kept); lookups are case-insensitive.
    pub host_name: String,
    /// The host's own unproven owner claim; decides nothing.
    pub owner_fp: String,
    /// A proven account (from a strong authority), if any.
    pub account: Option<String>,
    /// Which authority enrolled it ("host-key", ...).
    pub authorized_by: String,
    /// Strength of that authority; a weaker one never overwrites a stronger one's account.
    pub authority_rank: u8,
    /// When it was enrolled.
    pub enrolled_at_ms: u64,
    /// When it was revoked (never undone); `None` while live.
    pub revoked_at_ms: Option<u64>,
}

/// What `enrol` is asked to record.
#[derive(Debug, Clone)]
pub struct EnrolRequest {
    /// The key to enrol.
    pub host_pubkey: Key32,
    /// The name it asks for.
    pub host_name: String,
    /// The host's unproven owner claim.
    pub owner_fp: String,
    /// A proven account, if the authority proved one.
    pub account: Option<String>,
    /// Which authority admitted it.
    pub authorized_by: String,
    /// That authority's strength.
    pub authority_rank: u8,
    /// Cap on live enrolments (a new key beyond it is refused).
    pub max_live: u64,
    /// Whether a new key must redeem an invite in this enrolment's commit (the invite
    /// authority); a key with a live enrolment redeems nothing and needs none.
    pub invite: InviteClaim,
}

/// What an enrolment says about invites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InviteClaim {
    /// No invite is needed (every authority but the invite authority).
    #[default]
    NotNeeded,
    /// A new key needs one and presented none.
    Missing,
    /// A new key redeems the invite with this hash.
    Presented(InviteHash),
}

/// How `enrol` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrolOutcome {
    /// New enrolment recorded.
    Enrolled,
    /// The key was already enrolled and live; nothing weaker overwrote anything.
    AlreadyEnrolled,
    /// The key is revoked and stays revoked.
    Revoked,
    /// Another live key has this name inside the same proven account.
    NameTaken,
    /// `max_live` live enrolments exist already.
    Capacity,
    /// A new key presented no invite where one is needed, or its invite is not stored (never
    /// issued, redeemed already) or has expired.
    InviteRefused,
}

/// The SHA-256 of an invite code: the store keeps only this, never the code.
pub type InviteHash = [u8; 32];

/// A single-use enrolment invite (`relay-tool invite`): redeemed by the first new enrolment
/// that presents its code before `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Invite {
    /// SHA-256 of the code; the code itself is never stored.
    pub hash: InviteHash,
    /// When it was issued.
    pub created_ms: u64,
    /// After this it admits nobody.
    pub expires_ms: u64,
    /// The operator's note (who it is for), at most [`crate::MAX_REASON_CHARS`] characters.
    pub note: String,
}

/// How `put_invite` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InviteOutcome {
    /// Stored.
    Issued,
    /// [`MAX_INVITES`] unexpired invites are stored already.
    Full,
}

/// Most unexpired invites stored at once (an operator's tool issues them; the bound keeps the
/// prune in `put_invite` one bounded scan).
pub const MAX_INVITES: u64 = 10_000;

/// How a key rotation (rebind) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebindOutcome {
    /// Queue moved: `moved` items re-sequenced under the new key.
    Moved {
        /// How many.
        moved: u64,
    },
    /// The old key has no live enrolment: nothing moved.
    OldNotEnrolled,
    /// The new key is revoked: it may never receive a queue.
    NewRevoked,
}

/// Milliseconds in a UTC day: the resolution of "last seen".
pub const DAY_MS: u64 = 86_400_000;

/// The UTC day number (days since the Unix epoch) of a time.
pub fn utc_day(ms: u64) -> u32 {
    u32::try_from(ms / DAY_MS).unwrap_or(u32::MAX)
}

/// When a host was last seen at day resolution: the start of its last-seen day, or its
/// enrolment time when that is later or no day is recorded (a missing row: seen at enrolment).
pub fn last_seen_ms(enrolled_at_ms: u64, last_seen_day: Option<u32>) -> u64 {
    last_seen_day.map_or(enrolled_at_ms, |d| {
        (u64::from(d) * DAY_MS).max(enrolled_at_ms)
    })
}

/// One enrolment as `relay-tool hosts` lists it, read from one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    /// The enrolment as stored.
    pub enrolment: Enrolment,
    /// The UTC day it was last seen (a hop by it, a push to it); `None`: not since enrolment.
    pub last_seen_day: Option<u32>,
    /// Its queue (the usage counters).
    pub queue: Usage,
    /// When its v1 enc ad was stored, if it has one.
    pub enc_ad_v1_at_ms: Option<u64>,
    /// When its v2 enc ad was stored, if it has one.
    pub enc_ad_v2_at_ms: Option<u64>,
}

impl HostRow {
    /// See [`last_seen_ms`].
    pub fn last_seen_ms(&self) -> u64 {
        last_seen_ms(self.enrolment.enrolled_at_ms, self.last_seen_day)
    }
}

/// Which enrolments `hosts` lists (all conditions must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    /// Only this name (case-insensitive, whole name).
    pub name: Option<String>,
    /// Only revoked keys.
    pub revoked_only: bool,
    /// Only keys last seen at or before this time (ms).
    pub seen_at_or_before_ms: Option<u64>,
}

impl HostFilter {
    /// Whether `row` passes.
    pub fn matches(&self, row: &HostRow) -> bool {
        let name_ok = self
            .name
            .as_ref()
            .is_none_or(|n| n.to_lowercase() == row.enrolment.host_name.to_lowercase());
        let revoked_ok = !self.revoked_only || row.enrolment.revoked_at_ms.is_some();
        let idle_ok = self
            .seen_at_or_before_ms
            .is_none_or(|t| row.last_seen_ms() <= t);
        name_ok && revoked_ok && idle_ok
    }
}

/// What one idle-expiry call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdleReport {
    /// Enrolment rows looked at.
    pub scanned: u64,
    /// Live enrolments deleted (idle, empty queue).
    pub expired: u64,
    /// Where the next call continues (`None`: the scan reached the end).
    pub next: Option<Key32>,
}
