//! Binary keys and postcard values of every partition.
//!
//! Keys are ordered bytes: raw 32-byte keys and big-endian integers, so one target's queue,
//! dedup rows and usage rows are each one contiguous range.
//!
//! | partition | key | value |
//! |---|---|---|
//! | meta | ascii name (`epoch`, ...) | postcard scalar |
//! | enrolments | `0x00` ++ host key | [`Enrolment`] |
//! | enrolments (name index) | `0x01` ++ lower(name) ++ `0x00` ++ host key | empty |
//! | enrolments (last seen) | `0x02` ++ host key | UTC day number (u32); absent: seen at enrolment |
//! | enc_ads | host key | [`EncAd`] (v1) |
//! | enc_ads | host key ++ `0x02` | [`EncAdV2`] |
//! | sender_lists | target | [`SenderList`] |
//! | items | target ++ seq | [`ItemRecord`] |
//! | dedup | target ++ sender ++ item_id | [`DedupRow`] |
//! | seqs | target | head seq (u64) |
//! | acked | target | acked_through (u64) |
//! | usage | `0x00` ++ target / `0x01` ++ target ++ sender / `0x02` ++ account | [`Usage`] |
//! | expiry | `i` ++ expires_at ++ target ++ seq | empty |
//! | ops | n (u64) | [`StoredOp`] (schema < 4: [`LegacyOp`]) |
//! | dedup_expiry | `d` ++ gone_at ++ dedup key (only once the item left its queue) | empty |
//! | sender_index | sender ++ target (the target's list names the sender) | empty |

use serde::{Deserialize, Serialize};

use relay_store::{ItemKind, Key32, Result, StoreError};

/// Meta keys.
pub(crate) mod meta_key {
    pub(crate) const EPOCH: &[u8] = b"epoch";
    pub(crate) const RELAY_PUBKEY: &[u8] = b"relay_pubkey";
    pub(crate) const SCHEMA_VERSION: &[u8] = b"schema_version";
    pub(crate) const HEARTBEAT: &[u8] = b"heartbeat";
    pub(crate) const CREATED: &[u8] = b"created";
    pub(crate) const LIVE_ENROLMENTS: &[u8] = b"live_enrolments";
    pub(crate) const REVOKED_ENROLMENTS: &[u8] = b"revoked_enrolments";
    pub(crate) const OPS_NEXT: &[u8] = b"ops_next";
    /// Hash of the newest relay-log entry (the chain's head).
    pub(crate) const OPS_HEAD: &[u8] = b"ops_head";
    /// Seq and hash of the last dropped relay-log entry (where the chain starts).
    pub(crate) const OPS_CHECKPOINT: &[u8] = b"ops_checkpoint";
    /// Enrolment entries in the relay log (`relay_store::rules::log::ENROLMENT_KINDS`): derived from
    /// the `ops` rows, counted at open when absent.
    pub(crate) const OPS_ENROL_HELD: &[u8] = b"ops_enrol_held";
}

const ENROL_TAG: u8 = 0x00;
const NAME_TAG: u8 = 0x01;
const SEEN_TAG: u8 = 0x02;
const INVITE_TAG: u8 = 0x03;
const DENY_TAG: u8 = 0x04;
const USAGE_TARGET: u8 = 0x00;
const USAGE_SENDER: u8 = 0x01;
const USAGE_ACCOUNT: u8 = 0x02;
pub(crate) const EXPIRY_ITEM: u8 = b'i';
pub(crate) const EXPIRY_DEDUP: u8 = b'd';

/// One queued item as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ItemRecord {
    pub kind: ItemKind,
    pub item_id: String,
    pub sender: Key32,
    /// Exactly the bytes the sender gave.
    #[serde(with = "relay_store::serde_bytes")]
    pub wire: Vec<u8>,
    pub wire_hash: [u8; 32],
    /// Decoded byte count charged to quotas (= wire.len()).
    pub bytes: u64,
    pub accepted_at_ms: u64,
    pub expires_at_ms: u64,
    /// The proven account charged for this item (the target's, at insert time).
    pub account: Option<String>,
}

/// One relay-log entry as stored (schema 4): its seq is the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredOp {
    pub at_ms: u64,
    pub kind: String,
    pub detail: String,
    /// SHA-256(previous hash ++ canonical bytes), see `ops::oplog`.
    pub hash: [u8; 32],
}

/// A relay-log entry as schema 1-3 stored it (no hash); only the schema-4 migration reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LegacyOp {
    pub at_ms: u64,
    pub kind: String,
    pub detail: String,
}

/// An [`ItemRecord`] read in place: the id, wire bytes and account borrow the stored value, so
/// pull copies the wire once (into its page) and ack copies nothing. Same field order and types
/// as [`ItemRecord`] (postcard is positional); a test holds the two together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct ItemView<'a> {
    pub kind: ItemKind,
    pub item_id: &'a str,
    pub sender: Key32,
    pub wire: &'a [u8],
    /// Decoded only to reach the fields after it.
    #[allow(dead_code)]
    pub wire_hash: [u8; 32],
    pub bytes: u64,
    pub accepted_at_ms: u64,
    pub expires_at_ms: u64,
    #[serde(borrow)]
    pub account: Option<&'a str>,
}

/// A stored [`Enrolment`](relay_store::Enrolment) read in place for a liveness check: the
/// strings borrow the stored value, so the two checks of every insert (sender, target) allocate
/// nothing. Same field order and types as `Enrolment` (postcard is positional); a test holds
/// the two together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct EnrolmentView<'a> {
    /// Decoded only to reach the fields after it (so are the others not `pub`).
    #[allow(dead_code)]
    host_pubkey: Key32,
    #[allow(dead_code)]
    host_name: &'a str,
    #[allow(dead_code)]
    owner_fp: &'a str,
    #[serde(borrow)]
    pub account: Option<&'a str>,
    #[allow(dead_code)]
    authorized_by: &'a str,
    #[allow(dead_code)]
    authority_rank: u8,
    #[allow(dead_code)]
    enrolled_at_ms: u64,
    pub revoked_at_ms: Option<u64>,
}

/// Encode a value.
pub(crate) fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    enc_with_capacity(v, 64)
}

/// Encode an item record into a buffer of about its size (postcard's growing buffer would
/// reallocate some eight times for a 1 KiB wire).
pub(crate) fn enc_item(rec: &ItemRecord) -> Vec<u8> {
    const FIXED: usize = 128; // kind, sender, wire hash, counters, length prefixes
    let strings = rec.item_id.len() + rec.account.as_ref().map_or(0, String::len);
    enc_with_capacity(rec, rec.wire.len() + strings + FIXED)
}

/// [`enc`] into a buffer that starts with `capacity` bytes.
fn enc_with_capacity<T: Serialize>(v: &T, capacity: usize) -> Vec<u8> {
    // postcard into a Vec cannot fail for our plain types
    postcard::to_extend(v, Vec::with_capacity(capacity)).unwrap_or_default()
}

/// Decode an enrolment row (rows written before `org` and `client_id` read with both `None`:
/// [`relay_store::Enrolment::from_stored`]).
pub(crate) fn dec_enrolment(bytes: &[u8]) -> Result<relay_store::Enrolment> {
    relay_store::Enrolment::from_stored(bytes)
        .map_err(|e| StoreError::Corrupt(format!("bad enrolment record: {e}")))
}

/// Decode a value (owned, or borrowing `bytes` like [`ItemView`]), naming the partition when it
/// is damaged.
pub(crate) fn dec<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("bad {what} record: {e}")))
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

fn key32(b: &[u8]) -> Option<Key32> {
    b.try_into().ok()
}

fn be64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// Lower-case form used by the name index.
pub(crate) fn fold_name(name: &str) -> String {
    name.to_lowercase()
}

pub(crate) fn enrol_key(pk: &Key32) -> Vec<u8> {
    cat(&[&[ENROL_TAG], pk])
}

/// Bounds of the by-key enrolment rows: from the first (included) to the name index (excluded).
pub(crate) fn enrol_rows() -> (Vec<u8>, Vec<u8>) {
    (vec![ENROL_TAG], vec![NAME_TAG])
}

pub(crate) fn enrol_key_parse(k: &[u8]) -> Option<Key32> {
    match k.split_first() {
        Some((&ENROL_TAG, rest)) => key32(rest),
        _ => None,
    }
}

/// The prefix of every index row of a name.
pub(crate) fn name_prefix(name: &str) -> Vec<u8> {
    cat(&[&[NAME_TAG], fold_name(name).as_bytes(), &[0]])
}

pub(crate) fn name_key(name: &str, pk: &Key32) -> Vec<u8> {
    cat(&[&name_prefix(name), pk])
}

/// The host key at the end of a name index row.
pub(crate) fn name_key_pk(k: &[u8]) -> Option<Key32> {
    k.len().checked_sub(32).and_then(|at| key32(&k[at..]))
}

pub(crate) fn is_name_key(k: &[u8]) -> bool {
    k.first() == Some(&NAME_TAG)
}

/// `0x02 ++ host key`: the UTC day a live key was last seen (hop or push to it).
pub(crate) fn seen_key(pk: &Key32) -> [u8; 33] {
    let mut k = [SEEN_TAG; 33];
    k[1..].copy_from_slice(pk);
    k
}

pub(crate) fn seen_key_parse(k: &[u8]) -> Option<Key32> {
    match k.split_first() {
        Some((&SEEN_TAG, rest)) => key32(rest),
        _ => None,
    }
}

/// `0x03 ++ sha256(code)`: an unredeemed invite (`relay_store::Invite`).
pub(crate) fn invite_key(hash: &relay_store::InviteHash) -> [u8; 33] {
    let mut k = [INVITE_TAG; 33];
    k[1..].copy_from_slice(hash);
    k
}

/// The prefix of every invite row.
pub(crate) const INVITE_PREFIX: [u8; 1] = [INVITE_TAG];

pub(crate) fn is_invite_key(k: &[u8]) -> bool {
    k.first() == Some(&INVITE_TAG)
}

/// `0x04 ++ 0x00 ++ host key` or `0x04 ++ 0x01 ++ client id`: a deny-list entry
/// (`relay_store::DenyEntry`).
pub(crate) fn deny_key(subject: &relay_store::DenySubject) -> Vec<u8> {
    match subject {
        relay_store::DenySubject::Host(k) => cat(&[&[DENY_TAG, 0], k]),
        relay_store::DenySubject::Client(c) => cat(&[&[DENY_TAG, 1], c.as_bytes()]),
    }
}

/// The prefix of every deny-list row.
pub(crate) const DENY_PREFIX: [u8; 1] = [DENY_TAG];

pub(crate) fn is_deny_key(k: &[u8]) -> bool {
    k.first() == Some(&DENY_TAG)
}

/// The first key after every enrolment row (`0x00 ++ host key`): the end of a scan over them.
pub(crate) const ENROL_END: [u8; 1] = [ENROL_TAG + 1];

/// The kind byte after the host key of a v2 enc ad row (a v1 row is the bare host key).
const ENC_AD_V2_TAG: u8 = 0x02;

/// Which enc ad an `enc_ads` row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncAdKey {
    V1(Key32),
    V2(Key32),
}

/// `host key ++ 0x02`: the v2 ad of a key, beside (and independent of) its v1 row.
pub(crate) fn enc_ad_v2_key(pk: &Key32) -> [u8; 33] {
    let mut k = [ENC_AD_V2_TAG; 33];
    k[..32].copy_from_slice(pk);
    k
}

pub(crate) fn enc_ad_key_parse(k: &[u8]) -> Option<EncAdKey> {
    match k.len() {
        32 => key32(k).map(EncAdKey::V1),
        33 if k[32] == ENC_AD_V2_TAG => key32(&k[..32]).map(EncAdKey::V2),
        _ => None,
    }
}

/// `target ++ seq`, on the stack (ack builds two per deleted item).
pub(crate) fn item_key(target: &Key32, seq: u64) -> [u8; 40] {
    let mut k = [0u8; 40];
    k[..32].copy_from_slice(target);
    k[32..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub(crate) fn item_key_parse(k: &[u8]) -> Option<(Key32, u64)> {
    if k.len() != 40 {
        return None;
    }
    Some((key32(&k[..32])?, be64(&k[32..])?))
}

pub(crate) fn dedup_key(target: &Key32, sender: &Key32, item_id: &str) -> Vec<u8> {
    cat(&[target, sender, item_id.as_bytes()])
}

/// (target, sender, item_id) of a dedup key.
pub(crate) fn dedup_key_parse(k: &[u8]) -> Option<(Key32, Key32, String)> {
    if k.len() < 64 {
        return None;
    }
    let id = std::str::from_utf8(&k[64..]).ok()?.to_string();
    Some((key32(&k[..32])?, key32(&k[32..64])?, id))
}

/// `i ++ expires_at ++ target ++ seq`, on the stack.
pub(crate) fn expiry_item_key(expires_at: u64, target: &Key32, seq: u64) -> [u8; 49] {
    let mut k = [0u8; 49];
    k[0] = EXPIRY_ITEM;
    k[1..9].copy_from_slice(&expires_at.to_be_bytes());
    k[9..41].copy_from_slice(target);
    k[41..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// (expires_at, target, seq) of an item expiry row.
pub(crate) fn expiry_item_parse(k: &[u8]) -> Option<(u64, Key32, u64)> {
    if k.len() != 49 || k[0] != EXPIRY_ITEM {
        return None;
    }
    Some((be64(&k[1..9])?, key32(&k[9..41])?, be64(&k[41..])?))
}

/// `d ++ gone_at ++ dedup key`: the dedup row's item left its queue (acked, expired, purged or
/// deleted) at `gone_at`; the row may be pruned once `gone_at` is past the dedup horizon.
pub(crate) fn expiry_dedup_key(gone_at: u64, dkey: &[u8]) -> Vec<u8> {
    cat(&[&[EXPIRY_DEDUP], &gone_at.to_be_bytes(), dkey])
}

/// (gone_at, dedup key) of a dedup prune-index row.
pub(crate) fn expiry_dedup_parse(k: &[u8]) -> Option<(u64, &[u8])> {
    if k.len() < 9 + 64 || k[0] != EXPIRY_DEDUP {
        return None;
    }
    Some((be64(&k[1..9])?, &k[9..]))
}

pub(crate) fn usage_target_key(target: &Key32) -> Vec<u8> {
    cat(&[&[USAGE_TARGET], target])
}

pub(crate) fn usage_sender_key(target: &Key32, sender: &Key32) -> Vec<u8> {
    cat(&[&[USAGE_SENDER], target, sender])
}

pub(crate) fn usage_account_key(account: &str) -> Vec<u8> {
    cat(&[&[USAGE_ACCOUNT], account.as_bytes()])
}

/// What a usage key counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum UsageScope {
    Target(Key32),
    Sender { target: Key32, sender: Key32 },
    Account(String),
}

pub(crate) fn usage_key(scope: &UsageScope) -> Vec<u8> {
    match scope {
        UsageScope::Target(t) => usage_target_key(t),
        UsageScope::Sender { target, sender } => usage_sender_key(target, sender),
        UsageScope::Account(a) => usage_account_key(a),
    }
}

pub(crate) fn usage_key_parse(k: &[u8]) -> Option<UsageScope> {
    let (tag, rest) = k.split_first()?;
    match *tag {
        USAGE_TARGET => Some(UsageScope::Target(key32(rest)?)),
        USAGE_SENDER if rest.len() == 64 => Some(UsageScope::Sender {
            target: key32(&rest[..32])?,
            sender: key32(&rest[32..])?,
        }),
        USAGE_ACCOUNT => Some(UsageScope::Account(String::from_utf8(rest.to_vec()).ok()?)),
        _ => None,
    }
}

/// `sender ++ target`: `target`'s sender list names `sender`. One sender's rows are one
/// contiguous range, so a rotation lists the targets naming the old key by prefix.
pub(crate) fn sender_index_key(sender: &Key32, target: &Key32) -> [u8; 64] {
    let mut k = [0u8; 64];
    k[..32].copy_from_slice(sender);
    k[32..].copy_from_slice(target);
    k
}

/// (sender, target) of a sender-index key.
pub(crate) fn sender_index_parse(k: &[u8]) -> Option<(Key32, Key32)> {
    if k.len() != 64 {
        return None;
    }
    Some((key32(&k[..32])?, key32(&k[32..])?))
}

pub(crate) fn ops_key(n: u64) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

pub(crate) fn ops_key_parse(k: &[u8]) -> Option<u64> {
    be64(k)
}

/// The smallest key above every key starting with `prefix` (None: no upper bound).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

pub use relay_store::fingerprint;

/// Lowercase hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-run encoding of `wire` is postcard's encoding of a `u8` sequence.
    #[test]
    fn wire_bytes_encode_like_a_u8_sequence() {
        #[derive(Serialize)]
        struct Plain {
            wire: Vec<u8>,
        }
        #[derive(Serialize, Deserialize)]
        struct Fast {
            #[serde(with = "relay_store::serde_bytes")]
            wire: Vec<u8>,
        }
        let wire: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let a = enc(&Plain { wire: wire.clone() });
        let b = enc(&Fast { wire: wire.clone() });
        assert_eq!(a, b);
        let back: Fast = dec(&b, "test").unwrap();
        assert_eq!(back.wire, wire);
    }

    /// A stored `Enrolment` reads back field for field as an [`EnrolmentView`], with and
    /// without an account and a revocation (whatever org and client follow); a record cut
    /// inside the view's fields is refused.
    #[test]
    fn enrolment_view_reads_enrolments() {
        for (account, revoked) in [(None, None), (Some("acct:é\"x".to_string()), Some(7u64))] {
            let e = relay_store::Enrolment {
                host_pubkey: [4; 32],
                host_name: "Host-é".into(),
                owner_fp: "fp".into(),
                account: account.clone(),
                authorized_by: "host-key".into(),
                authority_rank: 3,
                enrolled_at_ms: 1_700_000_000_000,
                revoked_at_ms: revoked,
                org: account.clone(),
                client_id: Some("client".into()),
            };
            let stored = enc(&e);
            let v: EnrolmentView = dec(&stored, "enrolment").unwrap();
            assert_eq!(
                (v.host_pubkey, v.host_name, v.owner_fp, v.account),
                (
                    e.host_pubkey,
                    e.host_name.as_str(),
                    e.owner_fp.as_str(),
                    account.as_deref()
                )
            );
            assert_eq!(
                (
                    v.authorized_by,
                    v.authority_rank,
                    v.enrolled_at_ms,
                    v.revoked_at_ms
                ),
                (
                    e.authorized_by.as_str(),
                    e.authority_rank,
                    e.enrolled_at_ms,
                    revoked
                )
            );
            // The view stops before `org` and `client_id`: cut inside its own fields, refused.
            let tail = enc(&(&e.org, &e.client_id)).len();
            let cut = &stored[..stored.len() - tail - 1];
            assert!(dec::<EnrolmentView>(cut, "enrolment").is_err());
        }
    }

    /// A stored [`ItemRecord`] reads back field for field as an [`ItemView`], with and without
    /// an account (the last, optional field).
    #[test]
    fn item_view_reads_item_records() {
        for account in [None, Some("acct:é\"x".to_string())] {
            let rec = ItemRecord {
                kind: ItemKind::Receipt,
                item_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
                sender: [3; 32],
                wire: (0..=255u8).cycle().take(700).collect(),
                wire_hash: [9; 32],
                bytes: 700,
                accepted_at_ms: 1_700_000_000_000,
                expires_at_ms: u64::MAX - 1,
                account: account.clone(),
            };
            let stored = enc(&rec);
            let v: ItemView = dec(&stored, "item").unwrap();
            assert_eq!(
                (v.kind, v.item_id, v.sender, v.wire, v.wire_hash),
                (
                    rec.kind,
                    rec.item_id.as_str(),
                    rec.sender,
                    &rec.wire[..],
                    rec.wire_hash
                )
            );
            assert_eq!(
                (v.bytes, v.accepted_at_ms, v.expires_at_ms, v.account),
                (
                    rec.bytes,
                    rec.accepted_at_ms,
                    rec.expires_at_ms,
                    account.as_deref()
                )
            );
            assert!(dec::<ItemView>(&stored[..stored.len() - 1], "item").is_err());
        }
    }

    #[test]
    fn keys_round_trip_and_order() {
        let t = [7u8; 32];
        assert_eq!(item_key_parse(&item_key(&t, 42)), Some((t, 42)));
        assert!(
            item_key(&t, 255) < item_key(&t, 256),
            "seqs must sort numerically"
        );
        let d = dedup_key(&t, &[9u8; 32], "id:1");
        assert_eq!(
            dedup_key_parse(&d),
            Some((t, [9u8; 32], "id:1".to_string()))
        );
        assert_eq!(
            expiry_item_parse(&expiry_item_key(5, &t, 6)),
            Some((5, t, 6))
        );
        assert_eq!(
            expiry_dedup_parse(&expiry_dedup_key(5, &d)),
            Some((5, &d[..]))
        );
        for s in [
            UsageScope::Target(t),
            UsageScope::Sender {
                target: t,
                sender: [1; 32],
            },
            UsageScope::Account("a".into()),
        ] {
            assert_eq!(usage_key_parse(&usage_key(&s)), Some(s));
        }
        assert_eq!(enc_ad_key_parse(&t), Some(EncAdKey::V1(t)));
        assert_eq!(enc_ad_key_parse(&enc_ad_v2_key(&t)), Some(EncAdKey::V2(t)));
        let mut odd = enc_ad_v2_key(&t).to_vec();
        odd[32] = 0x01;
        assert_eq!(enc_ad_key_parse(&odd), None);
        assert_eq!(enc_ad_key_parse(&t[..31]), None);
        assert_eq!(
            sender_index_parse(&sender_index_key(&[1; 32], &t)),
            Some(([1; 32], t))
        );
        assert_eq!(sender_index_parse(&[0; 63]), None);
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
        assert_eq!(fingerprint(b"x").len(), 19);
    }
}
