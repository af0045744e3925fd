//! Enrolment (host-key challenge) and publication (enc-key ad, sender allowlist), spec §2 and §8.
//!
//! The enrolled flag is a cache keyed by (relay URL, relay key, epoch, host key), never a
//! permanent short-circuit: a new epoch or a 401 makes the host enrol again. Publication is cached
//! by the enrolment key plus the published content, so a new peer or a re-enrolment republishes.

use serde_json::{json, Value};

use super::client::Answer;
use super::sync::{Session, NOT_ENROLLED};
use super::{now_ms, HostError};
use crate::wire::records::{enc_ad_statement, enrol_statement};
use crate::wire::time::iso_ms;

/// Map a 401 to the re-enrolment signal, any other non-200 to a relay error naming `what`.
pub fn expect_ok(a: &Answer, what: &str) -> Result<(), HostError> {
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

    /// Enrol with the host-key challenge unless the cache says this (relay, key, epoch, host) is done.
    ///
    /// # Errors
    /// The relay refused the challenge or the enrolment, or could not be reached.
    pub fn ensure_enrolled(&mut self) -> Result<(), HostError> {
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
        let body = json!({"host": self.name, "pubkey": me, "owner_fp": "", "sig": sig});
        let a = self.client.post("/v1/relay/enrol", &body, false)?;
        if a.status != 200 {
            return Err(HostError::Relay(format!("enrolment: {}", a.error())));
        }
        let mut b = self.store.batch();
        b.set_enrolled(Some(&key))?;
        b.set_published(None)?;
        b.commit()?;
        self.report.enrolled = true;
        Ok(())
    }

    /// Publish the signed enc-key ad and the sender allowlist (the pinned peers), unless already
    /// published for this enrolment with the same content.
    ///
    /// # Errors
    /// 401 (re-enrol), another refusal, or an unreachable relay.
    pub fn publish(&mut self) -> Result<(), HostError> {
        let mut senders: Vec<String> = self.store.peers()?.into_iter().map(|p| p.pubkey).collect();
        senders.sort();
        senders.dedup();
        let enc_pub = self.id.enc.public_b64();
        let key = format!("{}|{}|{}", self.enrol_key(), enc_pub, senders.join(","));
        if self.store.published()?.as_deref() == Some(key.as_str()) {
            return Ok(());
        }
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
}
