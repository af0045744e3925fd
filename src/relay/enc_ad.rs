//! Encryption-key advertisements (PROTOCOL.md §3): stored only when signed by the host key, and
//! looked up by key (v2) or by an unambiguous name (v1).

use relay_keyspace::{EncAd, Enrolment};
use serde_json::{json, Value};

use super::{expect_object, str_field, Caller, Relay, RelayError, Reply};
use crate::wire::keys::{b64, parse_pubkey, verify_canonical};
use crate::wire::records::enc_ad_statement;

/// Longest `enc_pub` string accepted.
const MAX_ENC_PUB: usize = 256;

/// How an enc ad is looked up.
#[derive(Debug, Clone, Copy)]
pub enum EncLookup<'a> {
    Key(&'a str),
    Name(&'a str),
}

impl Relay {
    /// `POST /v1/relay/enc-key {"enc_pub","sig"}` by an authenticated caller.
    ///
    /// # Errors
    /// 400 malformed; 401 bad signature; 503 store failure.
    pub async fn put_enc_ad(&self, caller: &Caller, body: &Value) -> Reply {
        let obj = expect_object(body)?;
        let enc_pub = str_field(obj, "enc_pub")?;
        if enc_pub.is_empty() || enc_pub.len() > MAX_ENC_PUB {
            return Err(RelayError::bad_request("bad enc_pub"));
        }
        let sig = str_field(obj, "sig")?;
        let name = &caller.enrolment.host_name;
        if !verify_canonical(&caller.key, &enc_ad_statement(name, enc_pub), sig) {
            return Err(RelayError::unauthorized("bad signature"));
        }
        let ad = EncAd {
            host_pubkey: caller.key,
            enc_pub: enc_pub.to_owned(),
            sig: sig.to_owned(),
            at_ms: self.now_ms(),
        };
        self.write(self.store.put_enc_ad(ad)).await?;
        Ok(json!({ "ok": true }))
    }

    /// `GET /v2/relay/enc-key?pubkey=K` / `GET /v1/relay/enc-key?pubkey=K|host=NAME`.
    ///
    /// # Errors
    /// 404 `unknown host` when nothing (or nothing unambiguous) is found; 400 with neither query.
    pub fn get_enc_ad(&self, caller: &Caller, lookup: Option<EncLookup<'_>>) -> Reply {
        let unknown = || RelayError::not_found("unknown host");
        let enrolment = match lookup {
            None => return Err(RelayError::bad_request("pubkey or host required")),
            Some(EncLookup::Key(k)) => {
                let pk = parse_pubkey(k).ok_or_else(unknown)?;
                self.store
                    .enrolment(&pk)?
                    .filter(|e| e.revoked_at_ms.is_none())
                    .ok_or_else(unknown)?
            }
            Some(EncLookup::Name(name)) => self.resolve_name(caller, name)?.ok_or_else(unknown)?,
        };
        let ad = self
            .store
            .enc_ad(&enrolment.host_pubkey)?
            .ok_or_else(unknown)?;
        Ok(json!({
            "host": enrolment.host_name,
            "host_pubkey": b64(&enrolment.host_pubkey),
            "enc_pub": ad.enc_pub,
            "sig": ad.sig,
        }))
    }

    /// The one live enrolment a v1 name designates: the only one carrying it, or the only one
    /// inside the caller's proven account. `None` when unknown or ambiguous.
    ///
    /// # Errors
    /// 503 store failure.
    pub fn resolve_name(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<Option<Enrolment>, RelayError> {
        Ok(pick_one(caller, self.name_candidates(name)?))
    }

    /// Live enrolments carrying `name`; `None` when the name is crowded (over `max_per_name`).
    ///
    /// # Errors
    /// 503 store failure.
    pub fn name_candidates(&self, name: &str) -> Result<Option<Vec<Enrolment>>, RelayError> {
        let live = self
            .store
            .live_enrolments_by_name(name, self.limits.max_per_name + 1)?;
        let live: Vec<_> = live
            .into_iter()
            .filter(|e| e.revoked_at_ms.is_none())
            .collect();
        Ok(if live.len() > self.limits.max_per_name {
            None
        } else {
            Some(live)
        })
    }
}

/// The one enrolment among a name's live `candidates` (`None` = crowded): the only one, or the
/// only one inside the caller's proven account.
pub fn pick_one(caller: &Caller, candidates: Option<Vec<Enrolment>>) -> Option<Enrolment> {
    let mut live = candidates?;
    if live.len() == 1 {
        return live.pop();
    }
    let account = caller.enrolment.account.as_deref()?;
    let mut mine: Vec<_> = live
        .into_iter()
        .filter(|e| e.account.as_deref() == Some(account))
        .collect();
    if mine.len() == 1 {
        mine.pop()
    } else {
        None
    }
}
