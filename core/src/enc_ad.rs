//! Encryption-key advertisements (docs/protocol.md §3): the v1 pair and the v2 signed, expiring ad,
//! stored side by side and only when signed by the host key; looked up by key (v2) or by an
//! unambiguous name (v1), and answered merged.

use relay_store::{EncAd, EncAdV2, EncAds, Enrolment};
use serde_json::{json, Map, Value};

use super::{Caller, Relay, RelayError, Reply};
use relay_wire::enc_ad::{check_ad, summarize, AdOwner, AdSummary};
use relay_wire::keys::{b64, parse_pubkey, verify_canonical};
use relay_wire::records::enc_ad_statement;

/// Longest v1 `enc_pub` string accepted (mbx-relay bound; the reference has none).
const MAX_ENC_PUB: usize = 256;

/// How an enc ad is looked up.
#[derive(Debug, Clone, Copy)]
pub enum EncLookup<'a> {
    /// By the host's public key (base64).
    Key(&'a str),
    /// By the host's name.
    Name(&'a str),
}

impl Relay {
    /// `POST /v1/relay/enc-key {"enc_pub","sig"}` by an authenticated caller. Leaves the v2 ad
    /// alone.
    ///
    /// # Errors
    /// 400 `enc_pub and sig required`; 401 `bad enc-key signature`; 503 store failure.
    pub async fn put_enc_ad(&self, caller: &Caller, body: &Value) -> Reply {
        let text = |k: &str| {
            body.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let (Some(enc_pub), Some(sig)) = (text("enc_pub"), text("sig")) else {
            return Err(RelayError::bad_request("enc_pub and sig required"));
        };
        if enc_pub.len() > MAX_ENC_PUB {
            return Err(RelayError::bad_request(format!(
                "enc_pub over {MAX_ENC_PUB} characters"
            )));
        }
        let name = &caller.enrolment.host_name;
        if !verify_canonical(&caller.key, &enc_ad_statement(name, enc_pub), sig) {
            return Err(RelayError::unauthorized("bad enc-key signature"));
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

    /// `POST /v2/relay/enc-key {"ad","sig"}`: every check of docs/protocol.md §3 in its order, then
    /// the ad replaces the caller's stored v2 ad (last valid write wins). Leaves the v1 pair alone.
    ///
    /// # Errors
    /// 400 `enc-key ad refused: <reason>` (nothing stored); 401 `bad relay hop` when the key was
    /// revoked before the commit; 503 store failure.
    pub async fn put_enc_ad_v2(&self, caller: &Caller, body: &Value) -> Reply {
        let now = self.now_ms();
        let owner = AdOwner {
            key: &caller.key,
            name: &caller.enrolment.host_name,
        };
        let ad = check_ad(body, owner, i64::try_from(now).unwrap_or(i64::MAX))
            .map_err(|r| RelayError::bad_request(r.message()))?;
        let ad = EncAdV2 {
            host_pubkey: caller.key,
            record: ad.canonical.into_bytes(),
            sig: ad.sig,
            at_ms: now,
        };
        if !self.write(self.store.put_enc_ad_v2(ad)).await? {
            // Revoked by a rotation since the hop was checked: as if the hop had come later.
            return Err(RelayError::bad_hop());
        }
        Ok(json!({ "ok": true }))
    }

    /// `GET /v2/relay/enc-key?pubkey=K` / `GET /v1/relay/enc-key?pubkey=K|host=NAME`: the merged
    /// answer of a live key's ads (see [`fetch_answer`]).
    ///
    /// # Errors
    /// 404 `unknown host` (the only fetch error docs/protocol.md names) when there is nothing to look
    /// up, no live key is found, the name is ambiguous, or the key has neither ad; 503 store
    /// failure.
    pub fn get_enc_ad(&self, caller: &Caller, lookup: Option<EncLookup<'_>>) -> Reply {
        let unknown = || RelayError::not_found("unknown host");
        let enrolment = match lookup {
            None => return Err(unknown()),
            Some(EncLookup::Key(k)) => {
                let pk = parse_pubkey(k).ok_or_else(unknown)?;
                self.store
                    .enrolment(&pk)?
                    .filter(|e| e.revoked_at_ms.is_none())
                    .ok_or_else(unknown)?
            }
            Some(EncLookup::Name(name)) => self.resolve_name(caller, name)?.ok_or_else(unknown)?,
        };
        let ads = self.store.enc_ads(&enrolment.host_pubkey)?;
        fetch_answer(&enrolment, &ads).ok_or_else(unknown)
    }

    /// `you.enc_ad` of the info document for `caller`.
    ///
    /// # Errors
    /// 503 store failure.
    pub fn you_enc_ad(&self, caller: &Caller) -> Reply {
        Ok(you_enc_ad(&self.store.enc_ads(&caller.key)?))
    }

    /// The one live enrolment a v1 name designates: the only one carrying it, or the only one
    /// inside the caller's proven account. `None` when unknown or ambiguous.
    ///
    /// # Errors
    /// 503 store failure.
    pub(crate) fn resolve_name(
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
    pub(crate) fn name_candidates(&self, name: &str) -> Result<Option<Vec<Enrolment>>, RelayError> {
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
pub(crate) fn pick_one(caller: &Caller, candidates: Option<Vec<Enrolment>>) -> Option<Enrolment> {
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

/// The fetch answer (docs/protocol.md §3): `{"host","host_pubkey","enc_pub","sig"?,"ad"?,"ad_sig"?}`.
/// The top-level pair is the v1 one when there is one (name = the enrolled name), else the v2
/// ad's; `sig` only with a v1 pair, `ad` (keys sorted) and `ad_sig` only with a v2 ad. Expired
/// v2 ads are served too. `None` when neither ad is stored.
fn fetch_answer(enrolment: &Enrolment, ads: &EncAds) -> Option<Value> {
    let v2 = ads.v2.as_ref().and_then(stored_ad);
    let mut out = Map::new();
    match (&ads.v1, &v2) {
        (Some(v1), _) => {
            out.insert("host".into(), json!(enrolment.host_name));
            out.insert("host_pubkey".into(), json!(b64(&enrolment.host_pubkey)));
            out.insert("enc_pub".into(), json!(v1.enc_pub));
            out.insert("sig".into(), json!(v1.sig));
        }
        (None, Some((_, s, _))) => {
            out.insert("host".into(), json!(s.host));
            out.insert("host_pubkey".into(), json!(b64(&enrolment.host_pubkey)));
            out.insert("enc_pub".into(), json!(s.enc_pub));
        }
        (None, None) => return None,
    }
    if let Some((ad, _, sig)) = v2 {
        out.insert("ad".into(), ad);
        out.insert("ad_sig".into(), json!(sig));
    }
    Some(Value::Object(out))
}

/// `you.enc_ad`: `null` with neither ad, else `{"enc_pub","exp","v1"}`, each `null` when missing.
fn you_enc_ad(ads: &EncAds) -> Value {
    let v2 = ads.v2.as_ref().and_then(stored_ad);
    let v1 = ads.v1.as_ref().map(|a| a.enc_pub.as_str());
    if v1.is_none() && v2.is_none() {
        return Value::Null;
    }
    let (enc_pub, exp) = match &v2 {
        Some((_, s, _)) => (Some(s.enc_pub.as_str()), Some(s.exp.as_str())),
        None => (None, None),
    };
    json!({ "enc_pub": enc_pub, "exp": exp, "v1": v1 })
}

/// A stored v2 ad as served: the record as a JSON value, its reported fields and its signature.
/// A record that does not read back (never written by this relay) counts as absent.
fn stored_ad(ad: &EncAdV2) -> Option<(Value, AdSummary, &str)> {
    let text = std::str::from_utf8(&ad.record).ok()?;
    let (value, summary) = summarize(text)?;
    Some((value, summary, ad.sig.as_str()))
}
