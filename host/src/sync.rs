//! One sync pass against the relay, and the state every step shares ([`Session`]): check the pinned
//! relay key and the epoch, enrol if needed, publish the enc ad and allowlist, seal and push due
//! rows, pull and receive, checkpoint, ack, push the delivery receipts, and enforce deadlines.
//!
//! Epoch handling lives here because every step can learn of a new epoch (info, push accepts,
//! pull answers, 409s): [`Session::new_epoch`] makes senders re-push and receivers re-pull.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::client::{Endpoint, RelayClient};
use super::enc_ad::{AdKinds, RelayView, AD_LIFETIME_MS, MAX_AD_LIFETIME_MS};
use super::identity::Identity;
use super::store::{Checkpoint, HostStore, RelayConfig, RowState};
use super::{now_ms, HostError};
use relay_wire::keys::{fingerprint, parse_pubkey};

/// Grace after retention before a relay-accepted row without a delivery receipt is unconfirmed.
pub(crate) const DEADLINE_GRACE_MS: u64 = 24 * 3_600_000;
/// Bound on pages pulled in one pass.
pub(crate) const MAX_PAGES: usize = 10_000;
/// Bound on enrol-and-retry rounds in one pass (401 answers).
const MAX_REENROL: usize = 2;

/// Timing and publication knobs (environment: `MBX_HOST_TIMEOUT_MS`, `MBX_HOST_BACKOFF_MS`,
/// `MBX_HOST_BACKOFF_CAP_MS`, `MBX_HOST_DEADLINE_GRACE_MS`, `MBX_HOST_ENC_ADS`,
/// `MBX_HOST_ENC_AD_LIFETIME_MS`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncOptions {
    pub timeout: Duration,
    pub(crate) backoff_base_ms: u64,
    pub(crate) backoff_cap_ms: u64,
    /// Grace after retention before the sender's own deadline (spec: 24 h).
    pub(crate) grace_ms: u64,
    /// Which enc-key ads to publish (`both`, `v1` as a 0.5.6 host, `v2`).
    pub enc_ads: AdKinds,
    /// Lifetime of the published v2 ad (30 days; capped at the relay's 90).
    pub(crate) ad_lifetime_ms: u64,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            timeout: Duration::from_secs(30),
            backoff_base_ms: 1_000,
            backoff_cap_ms: 300_000,
            grace_ms: DEADLINE_GRACE_MS,
            enc_ads: AdKinds::default(),
            ad_lifetime_ms: AD_LIFETIME_MS,
        }
    }
}

impl SyncOptions {
    /// Defaults overridden by the environment variables above (ignored when not numbers).
    pub(crate) fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        let d = SyncOptions::default();
        SyncOptions {
            timeout: var("MBX_HOST_TIMEOUT_MS")
                .map(Duration::from_millis)
                .unwrap_or(d.timeout),
            backoff_base_ms: var("MBX_HOST_BACKOFF_MS").unwrap_or(d.backoff_base_ms),
            backoff_cap_ms: var("MBX_HOST_BACKOFF_CAP_MS").unwrap_or(d.backoff_cap_ms),
            grace_ms: var("MBX_HOST_DEADLINE_GRACE_MS").unwrap_or(d.grace_ms),
            enc_ads: std::env::var("MBX_HOST_ENC_ADS")
                .ok()
                .and_then(|v| AdKinds::parse(&v))
                .unwrap_or(d.enc_ads),
            ad_lifetime_ms: var("MBX_HOST_ENC_AD_LIFETIME_MS")
                .unwrap_or(d.ad_lifetime_ms)
                .clamp(1, MAX_AD_LIFETIME_MS),
        }
    }

    /// Wait before attempt `attempts + 1`: base × 2^attempts, capped.
    pub(crate) fn backoff(&self, attempts: u32) -> u64 {
        self.backoff_base_ms
            .saturating_mul(1u64 << attempts.min(30))
            .min(self.backoff_cap_ms)
    }
}

/// What one pass did (printed by `sync`).
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct SyncReport {
    pub epoch: String,
    pub enrolled: bool,
    pub sealed: u64,
    pub pushed: u64,
    pub relay_accepted: u64,
    /// Of those, how many the relay answered `duplicate` (an earlier push was committed).
    pub relay_duplicates: u64,
    pub push_failures: u64,
    pub received: u64,
    pub duplicates: u64,
    pub quarantined: u64,
    pub receipts_settled: u64,
    pub expired: u64,
    pub unconfirmed: u64,
    pub epoch_changes: u64,
    /// The v2 enc-key ad in this pass: `published (<why>)`, or why not (absent: still current).
    pub enc_ad: Option<String>,
    pub rewinds: u64,
    pub received_through: u64,
    pub acked_through: u64,
}

/// Everything a pass needs: the store, the keys, the relay config, a signed client.
pub(crate) struct Session<'a> {
    pub store: &'a mut HostStore,
    pub id: &'a Identity,
    pub name: String,
    pub relay: RelayConfig,
    pub relay_pk: [u8; 32],
    /// The relay's URL and CA the client was built from.
    pub endpoint: Endpoint,
    pub client: RelayClient<'a>,
    pub opts: SyncOptions,
    pub report: SyncReport,
    /// `you.enc_ad` of this pass's signed info, to reconcile the published v2 ad against.
    pub(crate) relay_view: RelayView,
    /// In a [`Session::head_start`]: the relay was not checked in this session, so a new epoch or
    /// a rewind ends the step instead of resetting state on its word (the full pass checks first).
    head_start: bool,
}

/// HTTP agents kept between sessions (the daemon's): keyed by what they were built for (relay
/// URL, CA, timeout), at most [`Agents::MAX`] of them.
#[derive(Default)]
pub(crate) struct Agents(Vec<(String, ureq::Agent)>);

impl Agents {
    /// Kinds of session the daemon opens (passes, and `send`'s seal with its shorter timeout).
    const MAX: usize = 2;

    /// `client` on the agent kept for `key`, or kept as the agent for `key`.
    fn share<'k>(&mut self, key: String, client: RelayClient<'k>) -> RelayClient<'k> {
        if let Some((_, agent)) = self.0.iter().find(|(k, _)| *k == key) {
            return client.reusing(agent.clone());
        }
        if self.0.len() >= Self::MAX {
            self.0.remove(0);
        }
        self.0.push((key, client.agent()));
        client
    }
}

impl<'a> Session<'a> {
    /// [`Session::open`] on a kept agent: keep-alive connections outlive the session.
    ///
    /// # Errors
    /// As [`Session::open`].
    pub(crate) fn open_kept(
        store: &'a mut HostStore,
        id: &'a Identity,
        opts: SyncOptions,
        agents: &mut Agents,
    ) -> Result<Self, HostError> {
        let mut s = Self::open(store, id, opts)?;
        let key = format!("{:?}|{:?}", s.endpoint, opts.timeout);
        s.client = agents.share(key, s.client);
        Ok(s)
    }

    /// A session for the configured relay.
    ///
    /// # Errors
    /// No name or relay configured, a damaged pinned key, or a pending unconfirmed key change.
    pub(crate) fn open(
        store: &'a mut HostStore,
        id: &'a Identity,
        opts: SyncOptions,
    ) -> Result<Self, HostError> {
        let name = store.name()?.ok_or_else(|| {
            HostError::Usage(format!(
                "host not initialised; run `{}`",
                store.command("init --name NAME")
            ))
        })?;
        let relay = store.relay()?.ok_or_else(|| {
            HostError::Usage(format!(
                "no relay configured; run `{}`",
                store.command("relay set URL [--key FINGERPRINT] [--ca FILE]")
            ))
        })?;
        let relay_pk = parse_pubkey(&relay.relay_pubkey).ok_or_else(|| {
            HostError::Store(format!(
                "pinned relay key is damaged; run `{}`",
                store.command(&format!("relay set {} --key FINGERPRINT", relay.url))
            ))
        })?;
        if let Some(offered) = relay.offered_key.as_deref().and_then(parse_pubkey) {
            return Err(HostError::RelayKeyChanged {
                confirm: store.command(&format!(
                    "relay set {} --key {}",
                    relay.url,
                    fingerprint(&offered)
                )),
                url: relay.url.clone(),
                pinned_fp: fingerprint(&relay_pk),
                offered_fp: fingerprint(&offered),
            });
        }
        let endpoint = store.endpoint_of(&relay)?;
        let client = RelayClient::new(&endpoint, &name, &id.host, opts.timeout)?;
        Ok(Session {
            endpoint,
            store,
            id,
            name,
            relay,
            relay_pk,
            client,
            opts,
            report: SyncReport::default(),
            relay_view: RelayView::Unknown,
            head_start: false,
        })
    }

    /// This host's public key, base64.
    pub(crate) fn my_pub(&self) -> String {
        self.id.host.public_b64()
    }

    /// The current epoch ("" before the first info answer).
    pub(crate) fn epoch(&self) -> String {
        self.relay.epoch.clone().unwrap_or_default()
    }

    /// The receive position for this relay and relay key.
    pub(crate) fn checkpoint(&self) -> Result<Checkpoint, HostError> {
        self.store
            .checkpoint(&self.relay.url, &self.relay.relay_pubkey)
    }

    /// A new epoch (restore or reset): re-push every relay-accepted row still waiting for its
    /// receipt, restart the receive position at 0, all in one atomic change (spec §5).
    pub(crate) fn new_epoch(&mut self, epoch: &str) -> Result<(), HostError> {
        if self.relay.epoch.as_deref() == Some(epoch) {
            return Ok(());
        }
        if self.head_start {
            return Err(HostError::Relay(CHECK_FIRST.into()));
        }
        let first = self.relay.epoch.is_none();
        self.relay.epoch = Some(epoch.to_string());
        if !first {
            self.report.epoch_changes += 1;
        }
        self.rearm_and_reset(|acc_epoch| acc_epoch != epoch)
    }

    /// The relay went back in time within one epoch (head below our checkpoint, or BAD_ACK):
    /// handled like a new epoch (spec §4), re-pushing every relay-accepted row.
    pub(crate) fn rewind(&mut self) -> Result<(), HostError> {
        if self.head_start {
            return Err(HostError::Relay(CHECK_FIRST.into()));
        }
        self.report.rewinds += 1;
        self.rearm_and_reset(|_| true)
    }

    fn rearm_and_reset(&mut self, stale: impl Fn(&str) -> bool) -> Result<(), HostError> {
        let now = now_ms();
        let rows = self.store.rows()?;
        let relay = self.relay.clone();
        let mut b = self.store.batch();
        for mut r in rows {
            let Some(acc) = &r.acceptance else { continue };
            if r.state == RowState::RelayAccepted && stale(&acc.epoch) {
                r.state = RowState::Pending;
                r.next_at = now;
                r.attempts = 0;
                b.put_row(&r)?;
            }
        }
        b.set_relay(&relay)?;
        b.set_checkpoint(&relay.url, &relay.relay_pubkey, Checkpoint::default())?;
        b.commit()
    }

    /// Read the relay's info (signed, so `you` is included), stop on a changed relay key, and
    /// take in its epoch and limits.
    fn check_info(&mut self) -> Result<(), HostError> {
        let a = self.client.get("/v2/relay/info", None, true)?;
        if a.status != 200 {
            return Err(HostError::Relay(format!("relay info: {}", a.error())));
        }
        let offered = a
            .body
            .get("relay_pubkey")
            .and_then(Value::as_str)
            .unwrap_or("");
        if offered != self.relay.relay_pubkey {
            return self.refuse_key(offered);
        }
        let epoch = a
            .body
            .get("epoch")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if epoch.is_empty() {
            return Err(HostError::Relay("relay info without an epoch".into()));
        }
        self.relay_view = RelayView::from_info(&a.body);
        let before = self.relay.clone();
        let limits = &a.body["limits"];
        if let Some(days) = limits.get("retention_days").and_then(Value::as_f64) {
            self.relay.retention_ms = (days * 86_400_000.0) as u64;
        }
        if let Some(n) = limits.get("max_batch").and_then(Value::as_u64) {
            self.relay.max_batch = n.clamp(1, 1_000);
        }
        if let Some(n) = limits.get("max_pull").and_then(Value::as_u64) {
            self.relay.max_pull = n.clamp(1, 10_000);
        }
        if self.relay.epoch.as_deref() != Some(epoch.as_str()) {
            self.new_epoch(&epoch)?;
        } else if self.relay != before {
            // Only a change is written: an unchanged info costs no fsync (the daemon passes often).
            let relay = self.relay.clone();
            let mut b = self.store.batch();
            b.set_relay(&relay)?;
            b.commit()?;
        }
        Ok(())
    }

    /// Record the offered key and an alert, then stop: relay use waits for the owner's confirmation.
    fn refuse_key(&mut self, offered: &str) -> Result<(), HostError> {
        let offered_pk = parse_pubkey(offered)
            .ok_or_else(|| HostError::Relay("relay info carries no valid relay key".into()))?;
        let err = HostError::RelayKeyChanged {
            confirm: self.store.command(&format!(
                "relay set {} --key {}",
                self.relay.url,
                fingerprint(&offered_pk)
            )),
            url: self.relay.url.clone(),
            pinned_fp: fingerprint(&self.relay_pk),
            offered_fp: fingerprint(&offered_pk),
        };
        self.relay.offered_key = Some(offered.to_string());
        let relay = self.relay.clone();
        let mut b = self.store.batch();
        b.set_relay(&relay)?;
        b.alert(now_ms(), "relay-key-changed", err.to_string())?;
        b.commit()?;
        Err(err)
    }

    /// Run one step; on a 401 forget the enrolment, enrol and publish again, and retry.
    fn with_enrolment(
        &mut self,
        step: fn(&mut Self) -> Result<(), HostError>,
    ) -> Result<(), HostError> {
        for _ in 0..MAX_REENROL {
            match step(self) {
                Err(HostError::Relay(m)) if m == NOT_ENROLLED => {
                    let mut b = self.store.batch();
                    b.set_enrolled(None)?;
                    b.set_published(None)?;
                    b.set_published_ad(None)?;
                    b.commit()?;
                    self.ensure_enrolled()?;
                    // A relay that forgot the enrolment forgot the enc ad and allowlist too.
                    self.publish()?;
                }
                other => return other,
            }
        }
        step(self)
    }

    /// The daemon's head start on a pass caused by mail seen (`pull`: pull, receive, ack) or by
    /// a `send`, without the info check first: then the receipts and sends are pushed. The daemon
    /// uses it only after a completed pass (relay key, epoch and enrolment checked moments ago)
    /// and still runs the whole pass at least every second; each step keeps its own checks
    /// (accepts against the pinned key, 401 re-enrolment), and a new epoch or a rewind is not
    /// taken from an unchecked relay: `Ok(false)` then, and the whole pass must follow at once.
    ///
    /// # Errors
    /// As [`Session::run`].
    pub(crate) fn head_start(&mut self, pull: bool) -> Result<bool, HostError> {
        self.head_start = true;
        let steps = (|| {
            if pull {
                self.with_enrolment(Self::pull_all)?;
            }
            self.with_enrolment(Self::seal_drafts)?;
            self.with_enrolment(Self::push_due)
        })();
        self.head_start = false;
        match steps {
            Ok(()) => Ok(true),
            Err(HostError::Relay(m)) if m == CHECK_FIRST => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One full pass. Network failures end the pass early with the error (state stays retryable).
    ///
    /// # Errors
    /// A changed relay key, an unreachable relay, or a store failure.
    pub(crate) fn run(&mut self) -> Result<SyncReport, HostError> {
        self.check_info()?;
        super::trace::mark("info-answered", "-");
        self.ensure_enrolled()?;
        self.with_enrolment(Self::publish)?;
        self.with_enrolment(Self::seal_drafts)?;
        self.with_enrolment(Self::push_due)?;
        self.with_enrolment(Self::pull_all)?;
        self.with_enrolment(Self::push_due)?;
        self.enforce_deadlines()?;
        let cp = self.checkpoint()?;
        self.report.epoch = self.epoch();
        self.report.received_through = cp.received_through;
        self.report.acked_through = cp.acked_through;
        Ok(std::mem::take(&mut self.report))
    }
}

/// How a head start stops at a new epoch or a rewind (never shown: the whole pass follows).
const CHECK_FIRST: &str = "the relay's epoch moved: check the relay first";

/// The message a signed call answered with 401 becomes (triggers re-enrolment).
pub(crate) const NOT_ENROLLED: &str = "relay says this host is not enrolled (401)";
