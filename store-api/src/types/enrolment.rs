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
    /// The proven organisation (an account token's `org`), if any.
    pub org: Option<String>,
    /// The accounts-service client that enrolled it (an account token's `client_id`), if any:
    /// a deny-list entry for that client revokes it.
    pub client_id: Option<String>,
}

/// An enrolment as written before enrolments recorded an organisation and a client (fjall
/// rows written then, backup format 5). Postcard is positional, so such bytes are exactly this
/// layout: [`Enrolment`]'s first eight fields.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct EnrolmentBeforeClient {
    host_pubkey: Key32,
    host_name: String,
    owner_fp: String,
    account: Option<String>,
    authorized_by: String,
    authority_rank: u8,
    enrolled_at_ms: u64,
    revoked_at_ms: Option<u64>,
}

impl From<EnrolmentBeforeClient> for Enrolment {
    fn from(e: EnrolmentBeforeClient) -> Enrolment {
        Enrolment {
            host_pubkey: e.host_pubkey,
            host_name: e.host_name,
            owner_fp: e.owner_fp,
            account: e.account,
            authorized_by: e.authorized_by,
            authority_rank: e.authority_rank,
            enrolled_at_ms: e.enrolled_at_ms,
            revoked_at_ms: e.revoked_at_ms,
            org: None,
            client_id: None,
        }
    }
}

impl Enrolment {
    /// Decode a stored enrolment that is nothing but its postcard bytes: one written before
    /// `org` and `client_id` existed ends where they would start, and reads with both `None`.
    ///
    /// # Errors
    /// The bytes are neither layout.
    pub fn from_stored(bytes: &[u8]) -> Result<Enrolment, postcard::Error> {
        match postcard::from_bytes::<Enrolment>(bytes) {
            Err(postcard::Error::DeserializeUnexpectedEnd) => {
                postcard::from_bytes::<EnrolmentBeforeClient>(bytes).map(Enrolment::from)
            }
            other => other,
        }
    }
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
    /// A proven organisation, if the authority proved one.
    pub org: Option<String>,
    /// The accounts-service client the authority named, if any.
    pub client_id: Option<String>,
    /// Refused (`Denied`, nothing written) when an unexpired deny entry names one of these at
    /// commit time: the check and the enrolment are one commit, so an entry added before it
    /// refuses it and one added after finds it enrolled (and revokes it).
    pub denied_if: Vec<crate::DenySubject>,
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
    /// An unexpired deny entry names one of [`EnrolRequest::denied_if`].
    Denied,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enrolment_stored_before_org_and_client_reads_with_neither() {
        let e = crate::rules::fixtures::enrolment(7, Some("acct"), 2, 1_000, true);
        // The earlier layout: the same fields, in order, without the last two.
        let old = postcard::to_stdvec(&(
            e.host_pubkey,
            &e.host_name,
            &e.owner_fp,
            &e.account,
            &e.authorized_by,
            e.authority_rank,
            e.enrolled_at_ms,
            e.revoked_at_ms,
        ))
        .unwrap();
        assert_eq!(Enrolment::from_stored(&old).unwrap(), e);
        let now = Enrolment {
            org: Some("org".into()),
            client_id: Some("c".into()),
            ..e
        };
        let stored = postcard::to_stdvec(&now).unwrap();
        assert_eq!(Enrolment::from_stored(&stored).unwrap(), now);
        assert!(Enrolment::from_stored(&old[..old.len() - 2]).is_err());
    }
}
