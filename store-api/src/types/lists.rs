//! Encryption-key ads, sender lists, and what admitting a push reads.

use crate::{Enrolment, Key32};

/// A signed encryption-key advertisement, stored as received.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAd {
    /// The advertising host.
    pub host_pubkey: Key32,
    /// The v1 encryption public key, as received.
    pub enc_pub: String,
    /// The host's signature over it, as received.
    pub sig: String,
    /// When the relay stored it.
    pub at_ms: u64,
}

/// A signed, expiring v2 encryption-key advertisement, stored as received: the relay checked
/// it; the store keeps its canonical record and signature byte for byte. Independent of the v1
/// [`EncAd`] of the same key (each publish leaves the other alone).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAdV2 {
    /// The advertising host.
    pub host_pubkey: Key32,
    /// canonical(ad) exactly as signed (extra signed fields included).
    pub record: Vec<u8>,
    /// The signature string as received.
    pub sig: String,
    /// When the relay stored it.
    pub at_ms: u64,
}

/// Both enc ads of one key, read from one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncAds {
    /// The v1 ad, if stored.
    pub v1: Option<EncAd>,
    /// The v2 ad, if stored.
    pub v2: Option<EncAdV2>,
}

impl EncAds {
    /// Neither ad is stored.
    pub fn is_empty(&self) -> bool {
        self.v1.is_none() && self.v2.is_none()
    }
}

/// A target's sender allowlist, as signed by the target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SenderList {
    /// The target whose list it is.
    pub target: Key32,
    /// The keys allowed to push to it.
    pub senders: Vec<Key32>,
    /// When the target signed it: only a newer list replaces it.
    pub iat_ms: u64,
    /// The list record's canonical JSON bytes and its signature, kept for audit and dumps.
    pub record: Vec<u8>,
    /// The target's signature over `record`.
    pub sig: String,
}

/// What admitting a push to one target reads: its enrolment (live or revoked) and its sender
/// list ([`crate::RelayStore::admissions`]). The list may be left unread (`None`) when the
/// enrolment is missing or revoked, since the push is refused then whatever it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    /// The target's enrolment, if any.
    pub enrolment: Option<Enrolment>,
    /// Its sender list, if read and stored.
    pub senders: Option<SenderList>,
}

/// How `put_sender_list` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderListOutcome {
    /// The list is stored and replaced the older one.
    Stored,
    /// An equal or newer list (by `iat_ms`) is stored already; nothing changed.
    NotNewer,
}
