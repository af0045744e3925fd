//! The host's durable state, on fjall directly (the engine the relay uses), in `<dir>/state`.
//!
//! Keyspaces: `meta` (host name, relay config, caches, counters), `peers`, `outbox` (+ `outbox_idx`
//! by item id and target), `inbox`, `quarantine`, `checkpoints` (received_through per relay and
//! relay key), `alerts`, `peer_ads` (the newest v2 enc-key ad accepted per peer key). Values are
//! postcard records. Every multi-record change goes through one [`Batch`], committed atomically
//! with `PersistMode::SyncAll`: when `commit` returns, the change survives a crash.

use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::client::Endpoint;
use super::HostError;
use relay_wire::accept::wire_hash_hex;

/// Upper bound on rows returned by one listing, so a huge store cannot exhaust memory.
pub(crate) const MAX_LIST: usize = 1_000_000;

/// What kind of relay item an outbox row carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ItemKind {
    /// A sealed agentmbx envelope.
    Envelope,
    /// A T218 delivery receipt (advisory: done once the relay accepted it).
    Receipt,
}

impl ItemKind {
    /// The relay's name for the kind.
    pub(crate) fn wire_name(self) -> &'static str {
        match self {
            ItemKind::Envelope => "envelope",
            ItemKind::Receipt => "receipt",
        }
    }
}

/// Where an outbox row stands (spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RowState {
    /// Plaintext envelope waiting for the peer's verified enc key to be sealed.
    Draft,
    /// Wire bytes persisted; waiting for a valid accept from the relay.
    Pending,
    /// The relay signed an accept; waiting for the target's delivery receipt.
    RelayAccepted,
    /// Settled: delivery receipt arrived (envelopes) or relay accepted (receipts).
    Done,
    /// The sender's own deadline passed without a delivery receipt.
    Unconfirmed,
    /// The relay's signed expiry notice arrived.
    Expired,
}

impl RowState {
    /// Whether the row still needs work from this host.
    pub(crate) fn active(self) -> bool {
        matches!(
            self,
            RowState::Draft | RowState::Pending | RowState::RelayAccepted
        )
    }
    /// Short name for listings.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RowState::Draft => "draft",
            RowState::Pending => "pending",
            RowState::RelayAccepted => "relay-accepted",
            RowState::Done => "done",
            RowState::Unconfirmed => "unconfirmed",
            RowState::Expired => "expired",
        }
    }
}

/// The relay's signed accept for a row, kept as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Acceptance {
    pub seq: u64,
    pub epoch: String,
    /// canonical(accept) as verified.
    pub accept: String,
    pub sig: String,
    /// When this host recorded it (ms).
    pub accepted_at: u64,
}

/// One outbox row: one item for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutRow {
    pub id: u64,
    pub kind: ItemKind,
    pub item_id: String,
    pub(crate) target_name: String,
    pub target_pubkey: String,
    pub subject: String,
    /// The plaintext envelope (JSON) while in `Draft`; cleared once sealed.
    pub draft: Option<String>,
    /// The exact wire bytes, persisted before the first push and reused on every retry.
    pub wire: Option<Vec<u8>>,
    pub wire_hash: String,
    pub state: RowState,
    pub attempts: u32,
    pub next_at: u64,
    pub(crate) created_at: u64,
    pub last_error: Option<String>,
    pub acceptance: Option<Acceptance>,
    /// accepted_at + retention + 24 h (envelopes in `RelayAccepted`).
    pub deadline: Option<u64>,
    pub(crate) settled_at: Option<u64>,
    pub note: Option<String>,
}

impl OutRow {
    /// A new envelope row for `peer`, in `Draft` with its plaintext envelope: the next sync seals
    /// and pushes it.
    pub(crate) fn draft_envelope(
        id: u64,
        item_id: String,
        peer: &Peer,
        subject: &str,
        draft: String,
        now: u64,
    ) -> OutRow {
        OutRow {
            subject: subject.to_string(),
            draft: Some(draft),
            state: RowState::Draft,
            ..OutRow::fresh(id, ItemKind::Envelope, item_id, peer, now)
        }
    }

    /// A new receipt row for `peer`, `Pending` with its wire bytes fixed at creation.
    pub(crate) fn receipt(
        id: u64,
        item_id: String,
        peer: &Peer,
        wire: Vec<u8>,
        now: u64,
    ) -> OutRow {
        OutRow {
            wire_hash: wire_hash_hex(&wire),
            wire: Some(wire),
            ..OutRow::fresh(id, ItemKind::Receipt, item_id, peer, now)
        }
    }

    /// The fields every new row starts with: due now, never tried, no wire yet.
    fn fresh(id: u64, kind: ItemKind, item_id: String, peer: &Peer, now: u64) -> OutRow {
        OutRow {
            id,
            kind,
            item_id,
            target_name: peer.name.clone(),
            target_pubkey: peer.pubkey.clone(),
            subject: String::new(),
            draft: None,
            wire: None,
            wire_hash: String::new(),
            state: RowState::Pending,
            attempts: 0,
            next_at: now,
            created_at: now,
            last_error: None,
            acceptance: None,
            deadline: None,
            settled_at: None,
            note: None,
        }
    }
}

/// A received message (dedup by id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InboxRow {
    pub id: String,
    pub from: String,
    pub sender_pubkey: String,
    pub subject: String,
    pub body: String,
    pub ts: String,
    pub relay_seq: u64,
    pub received_at: u64,
    /// The outbox row of the delivery receipt sent back for it.
    pub(crate) receipt_row: Option<u64>,
}

/// An item the receiver refused, never dropped silently (spec §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuarantineRow {
    pub relay: String,
    pub epoch: String,
    pub seq: u64,
    pub item_id: String,
    pub kind: String,
    pub sender: String,
    pub reason: String,
    pub wire: Vec<u8>,
    pub at: u64,
}

/// A message for the owner (undelivered, unconfirmed, relay key changed, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Alert {
    pub at: u64,
    pub kind: String,
    pub text: String,
}

/// A pinned peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Peer {
    pub name: String,
    pub pubkey: String,
}

/// The v2 enc-key ad this host last had taken by the relay (recorded after the relay's 200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PublishedAd {
    /// The enrolment it was published under (relay URL, relay key, epoch, host key).
    pub scope: String,
    pub enc_pub: String,
    pub iat_ms: u64,
    pub exp_ms: u64,
}

/// The newest v2 enc-key ad a sender accepted for one peer (its rollback guard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PeerAd {
    pub iat_ms: u64,
    pub exp_ms: u64,
    pub enc_pub: String,
}

/// The relay this host uses, with its pinned key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RelayConfig {
    pub url: String,
    pub relay_pubkey: String,
    /// A different key the relay presented; relay use stops until the owner confirms it.
    pub offered_key: Option<String>,
    /// The last epoch seen.
    pub epoch: Option<String>,
    pub retention_ms: u64,
    pub max_batch: u64,
    pub max_pull: u64,
}

/// The receive position for one (relay URL, relay key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    pub received_through: u64,
    pub acked_through: u64,
}

const META_NAME: &str = "name";
const META_RELAY: &str = "relay";
const META_RELAY_CA: &str = "relay_ca";
const META_ENROLLED: &str = "enrolled";
const META_ENROL_INVITE: &str = "enrol_invite";
const META_ENROL_TOKEN_FILE: &str = "enrol_token_file";
const META_PUBLISHED: &str = "published";
const META_PUBLISHED_AD: &str = "published_ad";
const META_NEXT_ROW: &str = "next_row";
const META_RECEIPT_SEQ: &str = "receipt_seq";
const META_NEXT_ALERT: &str = "next_alert";

fn enc<T: Serialize>(v: &T) -> Result<Vec<u8>, HostError> {
    postcard::to_stdvec(v).map_err(|e| HostError::Store(format!("encode: {e}")))
}

fn dec<T: DeserializeOwned>(b: &[u8], what: &str) -> Result<T, HostError> {
    postcard::from_bytes(b).map_err(|e| HostError::Store(format!("damaged {what} record: {e}")))
}

fn engine(e: fjall::Error) -> HostError {
    HostError::Store(format!("store engine: {e}"))
}

/// The open host store (one process at a time: fjall holds a lock file).
pub(crate) struct HostStore {
    db: Database,
    meta: Keyspace,
    peers: Keyspace,
    outbox: Keyspace,
    outbox_idx: Keyspace,
    inbox: Keyspace,
    quarantine: Keyspace,
    checkpoints: Keyspace,
    alerts: Keyspace,
    peer_ads: Keyspace,
    /// The host directory, named in the commands printed as next steps.
    dir: PathBuf,
    next_row: u64,
    next_alert: u64,
    receipt_seq: u64,
}

/// One atomic, durable change across keyspaces. Counters allocated through it are persisted with it.
pub(crate) struct Batch<'a> {
    store: &'a mut HostStore,
    batch: OwnedWriteBatch,
    next_row: u64,
    next_alert: u64,
    receipt_seq: u64,
}

impl HostStore {
    /// Open the state under `<dir>/state` (created on first use) of a host directory `init`
    /// made, refusing one other users can reach ([`super::hostdir::require`]).
    ///
    /// # Errors
    /// Not a host directory, a loose mode, engine failures (including another process holding
    /// the store) and damaged counters.
    pub(crate) fn open(dir: &Path) -> Result<Self, HostError> {
        super::hostdir::require(dir)?;
        let state = super::hostdir::create_state(dir)?;
        let db = Database::builder(state)
            .worker_threads(1)
            .open()
            .map_err(|e| {
                HostError::Store(format!("cannot open host store in {}: {e}", dir.display()))
            })?;
        let ks = |name: &str| {
            db.keyspace(name, KeyspaceCreateOptions::default)
                .map_err(engine)
        };
        let mut s = HostStore {
            meta: ks("meta")?,
            peers: ks("peers")?,
            outbox: ks("outbox")?,
            outbox_idx: ks("outbox_idx")?,
            inbox: ks("inbox")?,
            quarantine: ks("quarantine")?,
            checkpoints: ks("checkpoints")?,
            alerts: ks("alerts")?,
            peer_ads: ks("peer_ads")?,
            db,
            dir: dir.to_path_buf(),
            next_row: 1,
            next_alert: 1,
            receipt_seq: 0,
        };
        s.next_row = s.meta_get::<u64>(META_NEXT_ROW)?.unwrap_or(1);
        s.next_alert = s.meta_get::<u64>(META_NEXT_ALERT)?.unwrap_or(1);
        s.receipt_seq = s.meta_get::<u64>(META_RECEIPT_SEQ)?.unwrap_or(0);
        Ok(s)
    }

    fn get<T: DeserializeOwned>(
        ks: &Keyspace,
        key: &[u8],
        what: &str,
    ) -> Result<Option<T>, HostError> {
        match ks.get(key).map_err(engine)? {
            Some(v) => Ok(Some(dec(&v, what)?)),
            None => Ok(None),
        }
    }

    fn list<T: DeserializeOwned>(ks: &Keyspace, what: &str) -> Result<Vec<T>, HostError> {
        let mut out = Vec::new();
        for g in ks.iter().take(MAX_LIST) {
            let (_, v) = g.into_inner().map_err(engine)?;
            out.push(dec(&v, what)?);
        }
        Ok(out)
    }

    fn meta_get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, HostError> {
        Self::get(&self.meta, key.as_bytes(), key)
    }

    /// Start an atomic change.
    pub(crate) fn batch(&mut self) -> Batch<'_> {
        let batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        Batch {
            next_row: self.next_row,
            next_alert: self.next_alert,
            receipt_seq: self.receipt_seq,
            store: self,
            batch,
        }
    }

    /// The host name given at init.
    pub(crate) fn name(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_NAME)
    }
    /// The relay configuration, if set.
    pub(crate) fn relay(&self) -> Result<Option<RelayConfig>, HostError> {
        self.meta_get(META_RELAY)
    }
    /// The relay's private CA (PEM) from `relay set --ca`, if any.
    pub(crate) fn relay_ca(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_RELAY_CA)
    }
    /// The invite code `relay set --invite` stored, sent with the next enrolment until one
    /// succeeds (then cleared: a code is single use).
    pub(crate) fn enrol_invite(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_ENROL_INVITE)
    }
    /// The account-token file `relay set --token-file` named, read at every enrolment.
    pub(crate) fn enrol_token_file(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_ENROL_TOKEN_FILE)
    }
    /// This host's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
    /// How to reach `relay` as `relay set` stored it (its URL and CA): every client of this
    /// host is built from it.
    pub(crate) fn endpoint_of(&self, relay: &RelayConfig) -> Result<Endpoint, HostError> {
        Ok(Endpoint {
            url: relay.url.clone(),
            ca: self.relay_ca()?,
        })
    }
    /// `mbx-relay host --dir DIR <rest>` for this host's directory (a next step to print).
    pub(crate) fn command(&self, rest: &str) -> String {
        super::hostdir::command(&self.dir, rest)
    }
    /// The enrolment cache key recorded after the last successful enrolment.
    pub(crate) fn enrolled(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_ENROLLED)
    }
    /// The publication cache key (enc ad and allowlist) recorded after the last publication.
    pub(crate) fn published(&self) -> Result<Option<String>, HostError> {
        self.meta_get(META_PUBLISHED)
    }
    /// The v2 enc-key ad recorded as published, if any.
    pub(crate) fn published_ad(&self) -> Result<Option<PublishedAd>, HostError> {
        self.meta_get(META_PUBLISHED_AD)
    }
    /// The newest v2 enc-key ad accepted for the peer with this host key.
    pub(crate) fn peer_ad(&self, pubkey: &str) -> Result<Option<PeerAd>, HostError> {
        Self::get(&self.peer_ads, pubkey.as_bytes(), "peer ad")
    }
    /// A peer by name.
    pub(crate) fn peer(&self, name: &str) -> Result<Option<Peer>, HostError> {
        Self::get(&self.peers, name.as_bytes(), "peer")
    }
    /// All pinned peers, by name.
    pub(crate) fn peers(&self) -> Result<Vec<Peer>, HostError> {
        Self::list(&self.peers, "peer")
    }
    /// The peer pinned with this key.
    pub(crate) fn peer_by_key(&self, pubkey: &str) -> Result<Option<Peer>, HostError> {
        Ok(self.peers()?.into_iter().find(|p| p.pubkey == pubkey))
    }
    /// One outbox row.
    pub(crate) fn row(&self, id: u64) -> Result<Option<OutRow>, HostError> {
        Self::get(&self.outbox, &id.to_be_bytes(), "outbox")
    }
    /// The outbox row for (item id, target key).
    pub(crate) fn row_by_item(
        &self,
        item_id: &str,
        target: &str,
    ) -> Result<Option<OutRow>, HostError> {
        let Some(idb) = self
            .outbox_idx
            .get(idx_key(item_id, target))
            .map_err(engine)?
        else {
            return Ok(None);
        };
        let id: [u8; 8] = idb
            .as_ref()
            .try_into()
            .map_err(|_| HostError::Store("damaged outbox index".into()))?;
        self.row(u64::from_be_bytes(id))
    }
    /// All outbox rows, oldest first.
    pub(crate) fn rows(&self) -> Result<Vec<OutRow>, HostError> {
        Self::list(&self.outbox, "outbox")
    }
    /// A received message by id.
    pub(crate) fn inbox_get(&self, id: &str) -> Result<Option<InboxRow>, HostError> {
        Self::get(&self.inbox, id.as_bytes(), "inbox")
    }
    /// All received messages (ordered by id, which is time-ordered).
    pub(crate) fn inbox(&self) -> Result<Vec<InboxRow>, HostError> {
        Self::list(&self.inbox, "inbox")
    }
    /// All quarantined items.
    pub(crate) fn quarantine(&self) -> Result<Vec<QuarantineRow>, HostError> {
        Self::list(&self.quarantine, "quarantine")
    }
    /// All alerts, oldest first.
    pub(crate) fn alerts(&self) -> Result<Vec<Alert>, HostError> {
        Self::list(&self.alerts, "alert")
    }
    /// A record another host module keeps in `meta` under `x:<key>` (rotation intent, retired keys).
    pub(crate) fn extra<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, HostError> {
        Self::get(&self.meta, format!("x:{key}").as_bytes(), key)
    }
    /// The receive position for (relay URL, relay key).
    pub(crate) fn checkpoint(
        &self,
        url: &str,
        relay_pubkey: &str,
    ) -> Result<Checkpoint, HostError> {
        Ok(
            Self::get(&self.checkpoints, &cp_key(url, relay_pubkey), "checkpoint")?
                .unwrap_or_default(),
        )
    }
}

fn idx_key(item_id: &str, target: &str) -> Vec<u8> {
    let mut k = item_id.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(target.as_bytes());
    k
}

fn cp_key(url: &str, relay_pubkey: &str) -> Vec<u8> {
    let mut k = url.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(relay_pubkey.as_bytes());
    k
}

impl Batch<'_> {
    fn put<T: Serialize>(&mut self, ks: &Keyspace, key: &[u8], v: &T) -> Result<(), HostError> {
        let ks = ks.clone();
        self.batch.insert(&ks, key.to_vec(), enc(v)?);
        Ok(())
    }

    /// Read committed state (a batch cannot see its own pending writes).
    pub(crate) fn view(&self) -> &HostStore {
        self.store
    }
    /// Set the host name.
    pub(crate) fn set_name(&mut self, name: &str) -> Result<(), HostError> {
        let m = self.store.meta.clone();
        self.put(&m, META_NAME.as_bytes(), &name.to_string())
    }
    /// Set the relay configuration.
    pub(crate) fn set_relay(&mut self, r: &RelayConfig) -> Result<(), HostError> {
        let m = self.store.meta.clone();
        self.put(&m, META_RELAY.as_bytes(), r)
    }
    /// Record (or clear) the relay's private CA (PEM).
    pub(crate) fn set_relay_ca(&mut self, pem: Option<&str>) -> Result<(), HostError> {
        self.set_cache(META_RELAY_CA, pem)
    }
    /// Record (or clear) the invite code the next enrolment presents.
    pub(crate) fn set_enrol_invite(&mut self, code: Option<&str>) -> Result<(), HostError> {
        self.set_cache(META_ENROL_INVITE, code)
    }
    /// Record (or clear) the account-token file sent with every enrolment.
    pub(crate) fn set_enrol_token_file(&mut self, path: Option<&str>) -> Result<(), HostError> {
        self.set_cache(META_ENROL_TOKEN_FILE, path)
    }
    /// Record (or clear, with `None`) the enrolment cache key.
    pub(crate) fn set_enrolled(&mut self, key: Option<&str>) -> Result<(), HostError> {
        self.set_cache(META_ENROLLED, key)
    }
    /// Record (or clear) the publication cache key.
    pub(crate) fn set_published(&mut self, key: Option<&str>) -> Result<(), HostError> {
        self.set_cache(META_PUBLISHED, key)
    }
    /// Record (or clear) the v2 enc-key ad published.
    pub(crate) fn set_published_ad(&mut self, ad: Option<&PublishedAd>) -> Result<(), HostError> {
        let m = self.store.meta.clone();
        match ad {
            Some(a) => self.put(&m, META_PUBLISHED_AD.as_bytes(), a),
            None => {
                self.batch.remove(&m, META_PUBLISHED_AD.as_bytes().to_vec());
                Ok(())
            }
        }
    }
    /// Remember the newest v2 enc-key ad accepted for a peer key (the caller checked it is newer).
    pub(crate) fn put_peer_ad(&mut self, pubkey: &str, ad: &PeerAd) -> Result<(), HostError> {
        let ks = self.store.peer_ads.clone();
        self.put(&ks, pubkey.as_bytes(), ad)
    }
    fn set_cache(&mut self, name: &str, key: Option<&str>) -> Result<(), HostError> {
        let m = self.store.meta.clone();
        match key {
            Some(k) => self.put(&m, name.as_bytes(), &k.to_string()),
            None => {
                self.batch.remove(&m, name.as_bytes().to_vec());
                Ok(())
            }
        }
    }
    /// Set (or remove, with `None`) a record read by [`HostStore::extra`].
    pub(crate) fn set_extra<T: Serialize>(
        &mut self,
        key: &str,
        v: Option<&T>,
    ) -> Result<(), HostError> {
        let m = self.store.meta.clone();
        let k = format!("x:{key}");
        match v {
            Some(v) => self.put(&m, k.as_bytes(), v),
            None => {
                self.batch.remove(&m, k.into_bytes());
                Ok(())
            }
        }
    }
    /// Pin a peer.
    pub(crate) fn put_peer(&mut self, p: &Peer) -> Result<(), HostError> {
        let ks = self.store.peers.clone();
        self.put(&ks, p.name.as_bytes(), p)
    }
    /// A fresh outbox row id (persisted with this batch).
    pub(crate) fn new_row_id(&mut self) -> u64 {
        let id = self.next_row;
        self.next_row += 1;
        id
    }
    /// The next delivery-receipt seq (persisted with this batch).
    pub(crate) fn new_receipt_seq(&mut self) -> u64 {
        self.receipt_seq += 1;
        self.receipt_seq
    }
    /// Insert or replace an outbox row (and its item index).
    pub(crate) fn put_row(&mut self, r: &OutRow) -> Result<(), HostError> {
        let (ob, ix) = (self.store.outbox.clone(), self.store.outbox_idx.clone());
        self.put(&ob, &r.id.to_be_bytes(), r)?;
        self.batch.insert(
            &ix,
            idx_key(&r.item_id, &r.target_pubkey),
            r.id.to_be_bytes().to_vec(),
        );
        Ok(())
    }
    /// Insert a received message.
    pub(crate) fn put_inbox(&mut self, m: &InboxRow) -> Result<(), HostError> {
        let ks = self.store.inbox.clone();
        self.put(&ks, m.id.as_bytes(), m)
    }
    /// Quarantine a refused item.
    pub(crate) fn put_quarantine(&mut self, q: &QuarantineRow) -> Result<(), HostError> {
        let ks = self.store.quarantine.clone();
        let mut key = cp_key(&q.relay, &q.epoch);
        key.push(0);
        key.extend_from_slice(&q.seq.to_be_bytes());
        key.extend_from_slice(q.item_id.as_bytes());
        self.put(&ks, &key, q)
    }
    /// Raise an alert.
    pub(crate) fn alert(&mut self, at: u64, kind: &str, text: String) -> Result<(), HostError> {
        let id = self.next_alert;
        self.next_alert += 1;
        let ks = self.store.alerts.clone();
        self.put(
            &ks,
            &id.to_be_bytes(),
            &Alert {
                at,
                kind: kind.into(),
                text,
            },
        )
    }
    /// Set the receive position for (relay URL, relay key).
    pub(crate) fn set_checkpoint(
        &mut self,
        url: &str,
        relay_pubkey: &str,
        cp: Checkpoint,
    ) -> Result<(), HostError> {
        let ks = self.store.checkpoints.clone();
        self.put(&ks, &cp_key(url, relay_pubkey), &cp)
    }

    /// Commit atomically and durably (fsync); counters advance only if the commit succeeds.
    ///
    /// # Errors
    /// The engine failed: nothing of this batch may be assumed durable.
    pub(crate) fn commit(mut self) -> Result<(), HostError> {
        let meta = self.store.meta.clone();
        if self.next_row != self.store.next_row {
            self.batch.insert(
                &meta,
                META_NEXT_ROW.as_bytes().to_vec(),
                enc(&self.next_row)?,
            );
        }
        if self.next_alert != self.store.next_alert {
            self.batch.insert(
                &meta,
                META_NEXT_ALERT.as_bytes().to_vec(),
                enc(&self.next_alert)?,
            );
        }
        if self.receipt_seq != self.store.receipt_seq {
            self.batch.insert(
                &meta,
                META_RECEIPT_SEQ.as_bytes().to_vec(),
                enc(&self.receipt_seq)?,
            );
        }
        let (nr, na, rs) = (self.next_row, self.next_alert, self.receipt_seq);
        self.batch.commit().map_err(engine)?;
        self.store.next_row = nr;
        self.store.next_alert = na;
        self.store.receipt_seq = rs;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host directory (`init`'s key files) for the store to open.
    fn host_dir() -> tempfile::TempDir {
        let dir = super::super::hostdir::private_tempdir();
        super::super::identity::Identity::create(dir.path()).unwrap();
        dir
    }

    fn row(id: u64, item: &str) -> OutRow {
        OutRow {
            id,
            kind: ItemKind::Envelope,
            item_id: item.into(),
            target_name: "b".into(),
            target_pubkey: "K".into(),
            subject: "s".into(),
            draft: None,
            wire: Some(b"w".to_vec()),
            wire_hash: "h".into(),
            state: RowState::Pending,
            attempts: 0,
            next_at: 0,
            created_at: 1,
            last_error: None,
            acceptance: None,
            deadline: None,
            settled_at: None,
            note: None,
        }
    }

    #[test]
    fn batches_persist_rows_counters_and_checkpoints_across_reopen() {
        let dir = host_dir();
        {
            let mut s = HostStore::open(dir.path()).unwrap();
            let mut b = s.batch();
            let id = b.new_row_id();
            b.put_row(&row(id, "ITEM")).unwrap();
            assert_eq!(b.new_receipt_seq(), 1);
            b.set_checkpoint(
                "u",
                "k",
                Checkpoint {
                    received_through: 7,
                    acked_through: 5,
                },
            )
            .unwrap();
            b.alert(3, "x", "t".into()).unwrap();
            b.commit().unwrap();
        }
        let mut s = HostStore::open(dir.path()).unwrap();
        assert_eq!(s.row_by_item("ITEM", "K").unwrap().unwrap().id, 1);
        assert_eq!(s.checkpoint("u", "k").unwrap().received_through, 7);
        assert_eq!(s.checkpoint("u", "other").unwrap(), Checkpoint::default());
        assert_eq!(s.alerts().unwrap().len(), 1);
        let mut b = s.batch();
        assert_eq!(b.new_row_id(), 2);
        assert_eq!(b.new_receipt_seq(), 2);
    }

    #[test]
    fn published_and_accepted_enc_ads_survive_reopen_and_can_be_cleared() {
        let dir = host_dir();
        let published = PublishedAd {
            scope: "u|k|e|h".into(),
            enc_pub: "E".into(),
            iat_ms: 1,
            exp_ms: 2,
        };
        let accepted = PeerAd {
            iat_ms: 3,
            exp_ms: 4,
            enc_pub: "P".into(),
        };
        {
            let mut s = HostStore::open(dir.path()).unwrap();
            let mut b = s.batch();
            b.set_published_ad(Some(&published)).unwrap();
            b.put_peer_ad("PEER", &accepted).unwrap();
            b.commit().unwrap();
        }
        let mut s = HostStore::open(dir.path()).unwrap();
        assert_eq!(s.published_ad().unwrap(), Some(published));
        assert_eq!(s.peer_ad("PEER").unwrap(), Some(accepted));
        assert_eq!(s.peer_ad("OTHER").unwrap(), None);
        let mut b = s.batch();
        b.set_published_ad(None).unwrap();
        b.commit().unwrap();
        assert_eq!(s.published_ad().unwrap(), None);
    }

    #[test]
    fn an_uncommitted_batch_changes_nothing() {
        let dir = host_dir();
        let mut s = HostStore::open(dir.path()).unwrap();
        {
            let mut b = s.batch();
            let id = b.new_row_id();
            b.put_row(&row(id, "A")).unwrap();
        }
        assert!(s.rows().unwrap().is_empty());
        let mut b = s.batch();
        assert_eq!(b.new_row_id(), 1);
    }
}
