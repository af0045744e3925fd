//! The v2 encryption-key advertisement (docs/protocol.md §3 "Encryption-key advertisements"): a
//! signed, expiring `{"v":2,"type":"enc-ad","host","host_pubkey","enc_pub","iat","exp"}` record,
//! checked in the protocol's order, and the closed set of reasons it is refused for.

use serde_json::{Map, Value};

use super::canonical::canonical_json;
use super::keys::{b64, verify};
use super::time::parse_date_loose;

/// Longest canonical(ad) stored (mbx-relay is stricter than the reference, which bounds it only
/// by the request body cap).
pub const MAX_AD_BYTES: usize = 65_536;
/// Longest `host` (UTF-16 code units, as JavaScript counts `length`).
pub(crate) const MAX_HOST_CHARS: usize = 255;
/// Longest `iat` / `exp` string (UTF-16 code units).
pub(crate) const MAX_DATE_CHARS: usize = 40;
/// How far ahead of the relay clock `iat` may be.
pub(crate) const MAX_IAT_AHEAD_MS: i64 = 300_000;
/// Longest accepted lifetime `exp - iat` (exactly this is accepted).
pub const MAX_LIFETIME_MS: i64 = 90 * 86_400_000;

/// Why an ad was refused: the whole closed set, in check order. [`AdRefusal::reason`] is the
/// wire text after `enc-key ad refused: `.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdRefusal {
    /// `sig` is missing, null or `""`.
    Unsigned,
    /// The ad's shape, size or dates are not what the protocol requires.
    Malformed,
    /// The ad names another key or another host name than the caller's.
    WrongPeer,
    /// The signature over canonical(ad) does not verify with the caller's key.
    BadSignature,
    /// `iat` is more than five minutes ahead of the relay clock.
    NotYetValid,
    /// `exp` is now or in the past.
    Expired,
    /// `exp - iat` is over 90 days.
    LifetimeOverMaximum,
}

impl AdRefusal {
    /// The reason as the protocol spells it.
    pub fn reason(self) -> &'static str {
        match self {
            AdRefusal::Unsigned => "unsigned",
            AdRefusal::Malformed => "malformed",
            AdRefusal::WrongPeer => "wrong peer",
            AdRefusal::BadSignature => "bad signature",
            AdRefusal::NotYetValid => "not yet valid",
            AdRefusal::Expired => "expired",
            AdRefusal::LifetimeOverMaximum => "lifetime over the maximum",
        }
    }

    /// The whole `error` text of the 400 answer.
    pub fn message(self) -> String {
        format!("enc-key ad refused: {}", self.reason())
    }
}

/// The caller an ad must belong to: its host key and its enrolled name.
#[derive(Debug, Clone, Copy)]
pub struct AdOwner<'a> {
    /// The caller's host key.
    pub key: &'a [u8; 32],
    /// The caller's enrolled name.
    pub name: &'a str,
}

/// An ad that passed every check: what is stored and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedAd {
    /// canonical(ad), exactly what the signature covers (extra signed fields included).
    pub canonical: String,
    /// The signature string as received.
    pub sig: String,
}

/// The fields of an ad the relay reports back (`you.enc_ad`, the fetch answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdSummary {
    /// The host name the ad names.
    pub host: String,
    /// The advertised X25519 key (base64).
    pub enc_pub: String,
    /// When the ad expires, as signed.
    pub exp: String,
}

/// Checks a `POST /v2/relay/enc-key` body `{"ad","sig"}` in the protocol's order; the first
/// failure decides. `now_ms` is the relay clock.
///
/// # Errors
/// The [`AdRefusal`] of the first failed check.
pub fn check_ad(body: &Value, owner: AdOwner<'_>, now_ms: i64) -> Result<CheckedAd, AdRefusal> {
    let sig = body.get("sig").map_or(Some(""), sig_text);
    if sig == Some("") {
        return Err(AdRefusal::Unsigned);
    }
    let ad_value = body.get("ad").ok_or(AdRefusal::Malformed)?;
    let ad = ad_value.as_object().ok_or(AdRefusal::Malformed)?;
    let fields = shape(ad)?;
    let canonical = canonical_json(ad_value);
    if canonical.len() > MAX_AD_BYTES {
        return Err(AdRefusal::Malformed);
    }
    if fields.host_pubkey != b64(owner.key) || fields.host != owner.name {
        return Err(AdRefusal::WrongPeer);
    }
    // A non-string signature counts as given (it is not empty) but can never verify.
    let sig = sig.ok_or(AdRefusal::BadSignature)?;
    if !verify(owner.key, canonical.as_bytes(), sig) {
        return Err(AdRefusal::BadSignature);
    }
    // ISO-8601 / RFC 3339 with or without an offset, a bare date, and whatever else
    // `Date.parse` takes, as the reference reads them.
    let iat = parse_date_loose(fields.iat).ok_or(AdRefusal::Malformed)?;
    let exp = parse_date_loose(fields.exp).ok_or(AdRefusal::Malformed)?;
    if iat > now_ms.saturating_add(MAX_IAT_AHEAD_MS) {
        return Err(AdRefusal::NotYetValid);
    }
    if exp <= now_ms {
        return Err(AdRefusal::Expired);
    }
    if exp.saturating_sub(iat) > MAX_LIFETIME_MS {
        return Err(AdRefusal::LifetimeOverMaximum);
    }
    Ok(CheckedAd {
        canonical,
        sig: sig.to_owned(),
    })
}

/// `sig` read as a string: `null` is `""`; any other non-string is `None` (present, unverifiable).
fn sig_text(v: &Value) -> Option<&str> {
    match v {
        Value::Null => Some(""),
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// The string fields of a well-shaped ad.
struct Fields<'a> {
    host: &'a str,
    host_pubkey: &'a str,
    iat: &'a str,
    exp: &'a str,
}

/// Check 2 of the protocol (all but the size bound): version, type, string fields, `enc_pub`
/// form and the length bounds.
fn shape(ad: &Map<String, Value>) -> Result<Fields<'_>, AdRefusal> {
    let text = |k: &str| {
        ad.get(k)
            .and_then(Value::as_str)
            .ok_or(AdRefusal::Malformed)
    };
    if ad.get("v").and_then(Value::as_f64) != Some(2.0) || ad.get("type") != Some(&"enc-ad".into())
    {
        return Err(AdRefusal::Malformed);
    }
    let f = Fields {
        host: text("host")?,
        host_pubkey: text("host_pubkey")?,
        iat: text("iat")?,
        exp: text("exp")?,
    };
    let enc_pub = text("enc_pub")?;
    if !is_enc_pub(enc_pub)
        || js_length(f.host) > MAX_HOST_CHARS
        || js_length(f.iat) > MAX_DATE_CHARS
        || js_length(f.exp) > MAX_DATE_CHARS
    {
        return Err(AdRefusal::Malformed);
    }
    Ok(f)
}

/// `^[A-Za-z0-9+/]{43}=$` (which always decodes to 32 bytes).
pub fn is_enc_pub(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 44
        && b[43] == b'='
        && b[..43]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

/// A string's JavaScript `length` (UTF-16 code units).
fn js_length(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The reported fields of a stored canonical record (`None` when it is not an ad object, which a
/// record that passed [`check_ad`] always is).
pub fn summarize(canonical: &str) -> Option<(Value, AdSummary)> {
    let v: Value = serde_json::from_str(canonical).ok()?;
    let o = v.as_object()?;
    let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
    let summary = AdSummary {
        host: s("host")?,
        enc_pub: s("enc_pub")?,
        exp: s("exp")?,
    };
    Some((v, summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SigningKey;
    use crate::time::iso_ms;
    use serde_json::json;

    const NOW: i64 = 1_795_960_800_000; // 2026-11-29T14:00:00Z
    const DAY: i64 = 86_400_000;

    fn ad(key: &SigningKey, iat: i64, exp: i64) -> Value {
        json!({"v": 2, "type": "enc-ad", "host": "alpha", "host_pubkey": key.public_b64(),
               "enc_pub": b64(&[7u8; 32]), "iat": iso_ms(iat as u64), "exp": iso_ms(exp as u64)})
    }

    fn body(key: &SigningKey, ad: &Value) -> Value {
        json!({"ad": ad, "sig": key.sign_canonical(ad)})
    }

    fn check(key: &SigningKey, body: &Value) -> Result<CheckedAd, AdRefusal> {
        let pk = key.public();
        check_ad(
            body,
            AdOwner {
                key: &pk,
                name: "alpha",
            },
            NOW,
        )
    }

    #[test]
    fn a_fresh_thirty_day_ad_is_accepted_and_kept_canonical() {
        let k = SigningKey::generate();
        let mut a = ad(&k, NOW, NOW + 30 * DAY);
        a["note"] = json!("kept");
        let got = check(&k, &body(&k, &a)).expect("accepted");
        assert_eq!(got.canonical, canonical_json(&a));
        assert!(got.canonical.contains("\"note\":\"kept\""));
    }

    #[test]
    fn every_reason_has_its_wire_text() {
        let all = [
            (AdRefusal::Unsigned, "unsigned"),
            (AdRefusal::Malformed, "malformed"),
            (AdRefusal::WrongPeer, "wrong peer"),
            (AdRefusal::BadSignature, "bad signature"),
            (AdRefusal::NotYetValid, "not yet valid"),
            (AdRefusal::Expired, "expired"),
            (AdRefusal::LifetimeOverMaximum, "lifetime over the maximum"),
        ];
        for (r, text) in all {
            assert_eq!(r.reason(), text);
            assert_eq!(r.message(), format!("enc-key ad refused: {text}"));
        }
    }

    #[test]
    fn checks_run_in_protocol_order() {
        let k = SigningKey::generate();
        let good = ad(&k, NOW, NOW + DAY);
        // Unsigned before malformed.
        assert_eq!(
            check(&k, &json!({"ad": 5, "sig": null})),
            Err(AdRefusal::Unsigned)
        );
        assert_eq!(check(&k, &json!({"ad": 5})), Err(AdRefusal::Unsigned));
        assert_eq!(check(&k, &json!([])), Err(AdRefusal::Unsigned));
        // Malformed before wrong peer.
        let mut a = good.clone();
        a["host"] = json!("other");
        a["v"] = json!(1);
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::Malformed));
        // Wrong peer before bad signature.
        let mut a = good.clone();
        a["host"] = json!("ALPHA");
        assert_eq!(
            check(&k, &json!({"ad": a, "sig": "AAAA"})),
            Err(AdRefusal::WrongPeer)
        );
        // Bad signature before an unparseable date.
        let mut a = good.clone();
        a["iat"] = json!("junk");
        assert_eq!(
            check(&k, &json!({"ad": a, "sig": "AAAA"})),
            Err(AdRefusal::BadSignature)
        );
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::Malformed));
        // Not yet valid before expired; expired before lifetime.
        let a = ad(&k, NOW + 10 * 60_000, NOW - 1);
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::NotYetValid));
        let a = ad(&k, NOW - 200 * DAY, NOW);
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::Expired));
    }

    #[test]
    fn lifetime_is_at_most_ninety_days_inclusive() {
        let k = SigningKey::generate();
        let a = ad(&k, NOW, NOW + 90 * DAY);
        assert!(check(&k, &body(&k, &a)).is_ok());
        let a = ad(&k, NOW, NOW + 90 * DAY + 1);
        assert_eq!(
            check(&k, &body(&k, &a)),
            Err(AdRefusal::LifetimeOverMaximum)
        );
        // exp before iat is not checked (only exp > now).
        let a = ad(&k, NOW + 60_000, NOW + 30_000);
        assert!(check(&k, &body(&k, &a)).is_ok());
    }

    #[test]
    fn iat_up_to_five_minutes_ahead_is_accepted() {
        let k = SigningKey::generate();
        let a = ad(&k, NOW + MAX_IAT_AHEAD_MS, NOW + DAY);
        assert!(check(&k, &body(&k, &a)).is_ok());
        let a = ad(&k, NOW + MAX_IAT_AHEAD_MS + 1, NOW + DAY);
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::NotYetValid));
    }

    #[test]
    fn malformed_shapes_are_refused() {
        let k = SigningKey::generate();
        let good = ad(&k, NOW, NOW + DAY);
        let mutations: Vec<(&str, Value)> = vec![
            ("v", json!("2")),
            ("v", json!(3)),
            ("type", json!("enc-key")),
            ("host", json!(1)),
            ("host_pubkey", json!(null)),
            ("iat", json!(NOW)),
            ("exp", json!(true)),
            ("enc_pub", json!(b64(&[1u8; 31]))),
            ("enc_pub", json!(format!("{}A", &b64(&[1u8; 32])[..43]))),
            ("enc_pub", json!(format!("-{}", &b64(&[1u8; 32])[1..]))),
            ("iat", json!("2".repeat(41))),
            ("exp", json!("2".repeat(41))),
        ];
        for (field, value) in mutations {
            let mut a = good.clone();
            a[field] = value.clone();
            assert_eq!(
                check(&k, &body(&k, &a)),
                Err(AdRefusal::Malformed),
                "{field} = {value}"
            );
        }
        for missing in ["v", "type", "host", "host_pubkey", "enc_pub", "iat", "exp"] {
            let mut a = good.clone();
            a.as_object_mut().map(|o| o.remove(missing));
            assert_eq!(
                check(&k, &body(&k, &a)),
                Err(AdRefusal::Malformed),
                "{missing}"
            );
        }
        assert_eq!(
            check(&k, &json!({"ad": [1], "sig": "x"})),
            Err(AdRefusal::Malformed)
        );
        assert_eq!(check(&k, &json!({"sig": "x"})), Err(AdRefusal::Malformed));
        // v = 2.0 is the number 2.
        let mut a = good.clone();
        a["v"] = json!(2.0);
        assert!(check(&k, &body(&k, &a)).is_ok());
    }

    #[test]
    fn host_is_bounded_in_javascript_characters() {
        assert_eq!(js_length("ab"), 2);
        assert_eq!(js_length("é"), 1);
        assert_eq!(js_length("😀"), 2);
        let k = SigningKey::generate();
        let mut a = ad(&k, NOW, NOW + DAY);
        a["host"] = json!("h".repeat(256));
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::Malformed));
    }

    #[test]
    fn canonical_record_over_64_kib_is_malformed() {
        let k = SigningKey::generate();
        let mut a = ad(&k, NOW, NOW + DAY);
        let base = canonical_json(&a).len() + ",\"pad\":\"\"".len();
        a["pad"] = json!("p".repeat(MAX_AD_BYTES - base));
        assert_eq!(canonical_json(&a).len(), MAX_AD_BYTES);
        assert!(check(&k, &body(&k, &a)).is_ok());
        a["pad"] = json!("p".repeat(MAX_AD_BYTES - base + 1));
        assert_eq!(check(&k, &body(&k, &a)), Err(AdRefusal::Malformed));
    }

    #[test]
    fn a_non_string_signature_is_a_bad_signature() {
        let k = SigningKey::generate();
        let a = ad(&k, NOW, NOW + DAY);
        assert_eq!(
            check(&k, &json!({"ad": a, "sig": 5})),
            Err(AdRefusal::BadSignature)
        );
    }

    #[test]
    fn summarize_reads_back_the_stored_record() {
        let k = SigningKey::generate();
        let a = ad(&k, NOW, NOW + DAY);
        let (v, s) = summarize(&canonical_json(&a)).expect("summary");
        assert_eq!(v, a);
        assert_eq!(s.host, "alpha");
        assert_eq!(s.enc_pub, b64(&[7u8; 32]));
        assert_eq!(s.exp, iso_ms((NOW + DAY) as u64));
        assert_eq!(summarize("[]"), None);
        assert_eq!(summarize("not json"), None);
    }
}
