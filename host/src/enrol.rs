//! Enrolment (host-key challenge) and publication (enc-key ads v1 and v2, sender allowlist),
//! spec §2 and §8, docs/protocol.md §3.
//!
//! The enrolled flag is a cache keyed by (relay URL, relay key, epoch, host key), never a
//! permanent short-circuit: a new epoch or a 401 makes the host enrol again. The v1 pair and the
//! allowlist are cached by the enrolment key plus the published content, so a new peer or a
//! re-enrolment republishes (and so does a relay whose `you.enc_ad` lacks our v1 key). The v2 ad
//! expires: it is recorded with its times and republished daily, on any key or epoch change, and
//! whenever the relay's `you.enc_ad` shows it missing, stale, for another key or expiring.

use std::path::Path;

use serde_json::{json, Value};

use super::client::Answer;
use super::enc_ad::{own_ad, republish_reason, RelayView};
use super::store::PublishedAd;
use super::sync::{Session, NOT_ENROLLED};
use super::{now_ms, HostError};
use relay_wire::records::{enc_ad_statement, enrol_statement};
use relay_wire::time::iso_ms;

/// Map a 401 to the re-enrolment signal, any other non-200 to a relay error naming `what`.
pub(crate) fn expect_ok(a: &Answer, what: &str) -> Result<(), HostError> {
    match a.status {
        200 => Ok(()),
        401 => Err(HostError::Relay(NOT_ENROLLED.into())),
        _ => Err(HostError::Relay(format!("{what}: {}", a.error()))),
    }
}

impl Session<'_> {
    fn enrol_key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.relay.url,
            self.relay.relay_pubkey,
            self.epoch(),
            self.my_pub()
        )
    }

    /// Enrol with the host-key challenge unless the cache says this (relay, key, epoch, host) is
    /// done; with the invite code `relay set --invite` stored, presented as `proof.invite`; with
    /// the account-token file `relay set --token-file` named, its token and the cloud-key
    /// certificate as `proof` (`super::cloud_key`).
    ///
    /// # Errors
    /// The relay refused the challenge or the enrolment, or could not be reached.
    pub(crate) fn ensure_enrolled(&mut self) -> Result<(), HostError> {
        let key = self.enrol_key();
        if self.store.enrolled()?.as_deref() == Some(key.as_str()) {
            return Ok(());
        }
        let me = self.my_pub();
        let a = self.client.post(
            "/v1/relay/challenge",
            &json!({"host": self.name, "pubkey": me}),
            false,
        )?;
        if a.status != 200 {
            return Err(HostError::Relay(format!(
                "enrolment challenge: {}",
                a.error()
            )));
        }
        let challenge = a
            .body
            .get("challenge")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                HostError::Relay("enrolment challenge: no challenge in the answer".into())
            })?;
        let sig = self
            .id
            .host
            .sign_canonical(&enrol_statement(challenge, &self.name, &me, ""));
        let mut body = json!({"host": self.name, "pubkey": me, "owner_fp": "", "sig": sig});
        let invite = self.store.enrol_invite()?;
        if let Some(code) = &invite {
            body["proof"] = json!({ "invite": code });
        }
        if let Some(file) = self.store.enrol_token_file()? {
            let now_s = now_ms() / 1000;
            body["proof"] = super::cloud_key::proof(
                self.store.dir(),
                &self.id.host,
                Path::new(&file),
                &self.relay.url,
                now_s,
            )?;
        }
        let a = self.client.post("/v1/relay/enrol", &body, false)?;
        if a.status != 200 {
            return Err(HostError::Relay(format!("enrolment: {}", a.error())));
        }
        let mut b = self.store.batch();
        b.set_enrolled(Some(&key))?;
        if invite.is_some() {
            b.set_enrol_invite(None)?;
        }
        b.set_published(None)?;
        b.set_published_ad(None)?;
        b.commit()?;
        self.report.enrolled = true;
        Ok(())
    }

    /// Publish the enc-key ads (those `MBX_HOST_ENC_ADS` selects) and the sender allowlist.
    ///
    /// # Errors
    /// 401 (re-enrol), another refusal, or an unreachable relay.
    pub(crate) fn publish(&mut self) -> Result<(), HostError> {
        self.publish_v1_and_allowlist()?;
        self.publish_v2_ad()
    }

    /// The v1 pair and the allowlist (the pinned peers), unless already published for this
    /// enrolment with the same content and the relay still shows our v1 key.
    fn publish_v1_and_allowlist(&mut self) -> Result<(), HostError> {
        let mut senders: Vec<String> = self.store.peers()?.into_iter().map(|p| p.pubkey).collect();
        senders.sort();
        senders.dedup();
        let enc_pub = self.id.enc.public_b64();
        let v1 = self.opts.enc_ads.v1();
        let key = format!(
            "{}|{}|{}",
            self.enrol_key(),
            if v1 { enc_pub.as_str() } else { "-" },
            senders.join(",")
        );
        let v1_lost = v1 && self.relay_view.lacks_v1(&enc_pub);
        if !v1_lost && self.store.published()?.as_deref() == Some(key.as_str()) {
            return Ok(());
        }
        if v1 {
            let sig = self
                .id
                .host
                .sign_canonical(&enc_ad_statement(&self.name, &enc_pub));
            let a = self.client.post(
                "/v1/relay/enc-key",
                &json!({"enc_pub": enc_pub, "sig": sig}),
                true,
            )?;
            expect_ok(&a, "enc-key advertisement")?;
            if let RelayView::Known { v1, .. } = &mut self.relay_view {
                *v1 = Some(enc_pub);
            }
        }
        let list = json!({
            "v": 1, "type": "relay-senders", "host_pubkey": self.my_pub(),
            "senders": senders, "iat": iso_ms(now_ms())
        });
        let sig = self.id.host.sign_canonical(&list);
        let a = self.client.post(
            "/v2/relay/senders",
            &json!({"list": list, "sig": sig}),
            true,
        )?;
        // 409: an equal or newer list is stored (a same-millisecond republish); ours is not newer.
        if a.status != 409 {
            expect_ok(&a, "sender allowlist")?;
        }
        let mut b = self.store.batch();
        b.set_published(Some(&key))?;
        b.commit()
    }

    /// Publish a fresh v2 ad (iat now, exp now + lifetime) when [`republish_reason`] says so, and
    /// record it after the relay's 200 (a crash in between just republishes next pass). A relay
    /// that answers 404 takes no v2 ads: the pass goes on with the v1 pair only.
    fn publish_v2_ad(&mut self) -> Result<(), HostError> {
        if !self.opts.enc_ads.v2() {
            return Ok(());
        }
        let now = now_ms();
        let enc_pub = self.id.enc.public_b64();
        let scope = self.enrol_key();
        let recorded = self.store.published_ad()?;
        let Some(why) =
            republish_reason(recorded.as_ref(), &scope, &enc_pub, &self.relay_view, now)
        else {
            return Ok(());
        };
        let lifetime = self.opts.ad_lifetime_ms;
        let ad = own_ad(&self.name, &self.my_pub(), &enc_pub, now, lifetime);
        let sig = self.id.host.sign_canonical(&ad);
        let a = self
            .client
            .post("/v2/relay/enc-key", &json!({"ad": ad, "sig": sig}), true)?;
        if a.status == 404 {
            self.report.enc_ad =
                Some("not published: the relay takes no v2 enc-key ads (404)".into());
            return Ok(());
        }
        expect_ok(&a, "v2 enc-key ad")?;
        relay_os::failpoint::hit("host-after-enc-ad-before-record");
        let exp_ms = now.saturating_add(lifetime);
        let rec = PublishedAd {
            scope,
            enc_pub: enc_pub.clone(),
            iat_ms: now,
            exp_ms,
        };
        let mut b = self.store.batch();
        b.set_published_ad(Some(&rec))?;
        b.commit()?;
        let v1 = match &self.relay_view {
            RelayView::Known { v1, .. } => v1.clone(),
            RelayView::Unknown => None,
        };
        self.relay_view = RelayView::Known {
            enc_pub: Some(enc_pub),
            exp: Some(iso_ms(exp_ms)),
            v1,
        };
        self.report.enc_ad = Some(format!("published ({})", why.name()));
        Ok(())
    }
}
