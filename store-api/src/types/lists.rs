//! Encryption-key ads, sender lists, and what admitting a push reads.

use crate::{Enrolment, Key32};

/// A signed encryption-key advertisement, stored as received.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAd {
    pub host_pubkey: Key32,
    pub enc_pub: String,
    pub sig: String,
    pub at_ms: u64,
}

/// A signed, expiring v2 encryption-key advertisement, stored as received: the relay checked
/// it; the store keeps its canonical record and signature byte for byte. Independent of the v1
/// [`EncAd`] of the same key (each publish leaves the other alone).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAdV2 {
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
    pub v1: Option<EncAd>,
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
    pub target: Key32,
    pub senders: Vec<Key32>,
    pub iat_ms: u64,
    /// The list record's canonical JSON bytes and its signature, kept for audit and dumps.
    pub record: Vec<u8>,
    pub sig: String,
}

/// What admitting a push to one target reads: its enrolment (live or revoked) and its sender
/// list ([`crate::RelayStore::admissions`]). The list may be left unread (`None`) when the
/// enrolment is missing or revoked, since the push is refused then whatever it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    pub enrolment: Option<Enrolment>,
    pub senders: Option<SenderList>,
}

/// How `put_sender_list` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderListOutcome {
    Stored,
    /// An equal or newer list (by `iat_ms`) is stored already; nothing changed.
    NotNewer,
}
