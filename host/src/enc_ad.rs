//! The v2 encryption-key ad (docs/protocol.md §3 "Encryption-key advertisements"), both sides of it:
//! the ad this host publishes (signed, 30-day lifetime, refreshed daily, reconciled against the
//! relay's `you.enc_ad`), and the check a sender applies to a peer's enc-key answer before sealing
//! for that key (signed by the pinned key, current, not older than the newest already accepted).
//!
//! Pure functions over values and the clock: the session code in `enrol.rs` and `sender.rs` does
//! the HTTP and the store writes. A peer's ad passes the relay's own checks
//! ([`relay_wire::enc_ad::check_ad`], with the pinned key as the owner) before the sender's.

use serde_json::{json, Value};

use super::client::Answer;
use super::store::{PeerAd, PublishedAd};
use relay_wire::enc_ad::{check_ad, AdOwner, AdRefusal, MAX_LIFETIME_MS};
use relay_wire::keys::{parse_pubkey, verify_canonical};
use relay_wire::records::enc_ad_statement;
use relay_wire::time::{iso_ms, parse_date_loose};

/// Milliseconds in a day.
pub(crate) const DAY_MS: u64 = 86_400_000;
/// Lifetime of the ads this host publishes (agentmbx hosts use 30 days).
pub(crate) const AD_LIFETIME_MS: u64 = 30 * DAY_MS;
/// Longest lifetime the relay accepts; a configured lifetime is capped to it.
pub(crate) const MAX_AD_LIFETIME_MS: u64 = MAX_LIFETIME_MS as u64;
/// Republish when the recorded ad is this old (the daily refresh)...
pub(crate) const REFRESH_AFTER_MS: u64 = DAY_MS;
/// ...or when it expires within this much time.
pub(crate) const RENEW_BEFORE_MS: u64 = DAY_MS;

/// Which enc-key ads this host publishes (`MBX_HOST_ENC_ADS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum AdKinds {
    /// The v1 pair and the v2 ad (the default: every agentmbx release can reach this host).
    #[default]
    Both,
    /// The v1 pair only, as an agentmbx 0.5.6 host does.
    V1Only,
    /// The v2 ad only (0.5.6 peers cannot reach this host).
    V2Only,
}

impl AdKinds {
    /// `both`, `v1` or `v2`.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "both" => Some(AdKinds::Both),
            "v1" => Some(AdKinds::V1Only),
            "v2" => Some(AdKinds::V2Only),
            _ => None,
        }
    }
    /// Whether the v1 pair is published.
    pub(crate) fn v1(self) -> bool {
        self != AdKinds::V2Only
    }
    /// Whether the v2 ad is published.
    pub(crate) fn v2(self) -> bool {
        self != AdKinds::V1Only
    }
}

/// The ad this host signs: `{"v":2,"type":"enc-ad","host","host_pubkey","enc_pub","iat","exp"}`,
/// `iat` = now and `exp` = now + lifetime, as `toISOString()` prints them.
pub(crate) fn own_ad(
    host: &str,
    host_pubkey: &str,
    enc_pub: &str,
    now: u64,
    lifetime_ms: u64,
) -> Value {
    json!({
        "v": 2, "type": "enc-ad", "host": host, "host_pubkey": host_pubkey, "enc_pub": enc_pub,
        "iat": iso_ms(now), "exp": iso_ms(now.saturating_add(lifetime_ms)),
    })
}

/// What the relay says it holds for this host, from `you.enc_ad` of signed info.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum RelayView {
    /// No signed `you` (not enrolled yet) or a relay without `you.enc_ad`: nothing to reconcile.
    #[default]
    Unknown,
    /// The relay's v2 ad for us (`enc_pub`, `exp`, each `None` when missing) and its v1 key.
    Known {
        enc_pub: Option<String>,
        exp: Option<String>,
        v1: Option<String>,
    },
}

impl RelayView {
    /// Read `you.enc_ad` of an info document.
    pub(crate) fn from_info(info: &Value) -> Self {
        let Some(ad) = info.get("you").and_then(|y| y.get("enc_ad")) else {
            return RelayView::Unknown;
        };
        let s = |k: &str| ad.get(k).and_then(Value::as_str).map(str::to_string);
        RelayView::Known {
            enc_pub: s("enc_pub"),
            exp: s("exp"),
            v1: s("v1"),
        }
    }

    /// Whether the relay is known to hold a v1 pair for a key other than `enc_pub` (or none).
    pub(crate) fn lacks_v1(&self, enc_pub: &str) -> bool {
        matches!(self, RelayView::Known { v1, .. } if v1.as_deref() != Some(enc_pub))
    }
}

/// Why this host publishes its v2 ad now (printed in the sync report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Republish {
    /// Nothing recorded (first pass, or re-enrolment cleared it).
    NotPublished,
    /// The relay, its key, the epoch or our host key changed since the recorded publication.
    ScopeChanged,
    /// Our enc key is not the one recorded.
    EncKeyChanged,
    /// The recorded ad is a day old.
    Daily,
    /// The recorded ad expires within a day.
    Expiring,
    /// The relay holds no v2 ad for us.
    MissingOnRelay,
    /// The relay's v2 ad for us names another enc key.
    OtherKeyOnRelay,
    /// The relay holds another ad of ours than the recorded one (its `exp` differs).
    StaleOnRelay,
}

impl Republish {
    /// Short name for the sync report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Republish::NotPublished => "none recorded",
            Republish::ScopeChanged => "relay, epoch or host key changed",
            Republish::EncKeyChanged => "enc key changed",
            Republish::Daily => "daily refresh",
            Republish::Expiring => "expiring within a day",
            Republish::MissingOnRelay => "missing on the relay",
            Republish::OtherKeyOnRelay => "relay holds another enc key",
            Republish::StaleOnRelay => "relay holds a stale ad",
        }
    }
}

/// Whether (and why) to publish a fresh v2 ad; `None` when the recorded one stands.
pub(crate) fn republish_reason(
    recorded: Option<&PublishedAd>,
    scope: &str,
    enc_pub: &str,
    view: &RelayView,
    now: u64,
) -> Option<Republish> {
    let Some(r) = recorded else {
        return Some(Republish::NotPublished);
    };
    if r.scope != scope {
        return Some(Republish::ScopeChanged);
    }
    if r.enc_pub != enc_pub {
        return Some(Republish::EncKeyChanged);
    }
    if now.saturating_sub(r.iat_ms) >= REFRESH_AFTER_MS {
        return Some(Republish::Daily);
    }
    if r.exp_ms.saturating_sub(now) < RENEW_BEFORE_MS {
        return Some(Republish::Expiring);
    }
    match view {
        RelayView::Unknown => None,
        RelayView::Known { enc_pub: None, .. } => Some(Republish::MissingOnRelay),
        RelayView::Known {
            enc_pub: Some(k), ..
        } if k != enc_pub => Some(Republish::OtherKeyOnRelay),
        RelayView::Known { exp, .. } => {
            let relay_exp = exp.as_deref().and_then(parse_date_loose);
            match relay_exp {
                Some(e) if e == r.exp_ms as i64 => None,
                Some(e) if e.saturating_sub(now as i64) < RENEW_BEFORE_MS as i64 => {
                    Some(Republish::Expiring)
                }
                _ => Some(Republish::StaleOnRelay),
            }
        }
    }
}

/// Why a sender refuses a peer's enc-key answer (the row waits; the text goes to `last_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 404: the peer published nothing on this relay.
    NoAd,
    /// Another error answer.
    Lookup(String),
    /// The answer is for another host key than the pinned one.
    OtherHost,
    /// The v1 pair does not verify with the pinned key, or carries no valid key.
    V1Invalid,
    /// Only a v1 pair, but a v2 ad of this peer was accepted before (a downgrade).
    V1AfterV2,
    /// The v2 ad fails a check of docs/protocol.md §3 (as the relay checks it, with the pinned key as
    /// the owner): malformed, another host key, not signed by the pinned key, not yet valid, ...
    Invalid(AdRefusal),
    /// `exp` has passed (the ad's `exp`).
    Expired(String),
    /// Older than the newest ad already accepted for this peer (rollback guard).
    Older { iat: String, newest: u64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const V2: &str = "peer's v2 enc-key ad refused";
        match self {
            Refusal::NoAd => f.write_str("peer has no enc key on the relay yet (not enrolled there?)"),
            Refusal::Lookup(e) => write!(f, "enc-key lookup: {e}"),
            Refusal::OtherHost => f.write_str("enc-key ad is for another host key"),
            Refusal::V1Invalid => f.write_str("enc-key ad is not signed by the pinned peer key"),
            Refusal::V1AfterV2 => f.write_str(
                "peer's enc-key answer has only a v1 pair, but a v2 ad of this peer was accepted before (downgrade refused)",
            ),
            Refusal::Invalid(AdRefusal::WrongPeer) => {
                write!(f, "{V2}: wrong peer (it names another host key)")
            }
            Refusal::Invalid(AdRefusal::BadSignature) => {
                write!(f, "{V2}: bad signature (not by the pinned peer key)")
            }
            Refusal::Invalid(why) => write!(f, "{V2}: {}", why.reason()),
            Refusal::Expired(exp) => write!(f, "{V2}: expired (exp {exp}); waiting for the peer to republish"),
            Refusal::Older { iat, newest } => write!(
                f,
                "{V2}: older (iat {iat}) than the newest accepted ({}): rollback refused",
                iso_ms(*newest)
            ),
        }
    }
}

/// The key a sender may seal for, and the v2 ad it came from (to remember as the newest accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerEncKey {
    pub enc: [u8; 32],
    pub ad: Option<PeerAd>,
}

/// Check a peer's enc-key answer against its pinned key `target_pubkey` (`pk` decoded).
///
/// With a v2 ad in the answer, only the v2 ad counts (a refused v2 ad is not replaced by the v1
/// pair beside it: that would defeat its expiry). A v1-only answer is used as a 0.5.6 host's,
/// unless a v2 ad of this peer was accepted before (`newest`).
pub(crate) fn check_answer(
    a: &Answer,
    pk: &[u8; 32],
    target_pubkey: &str,
    newest: Option<&PeerAd>,
    now: u64,
) -> Result<PeerEncKey, Refusal> {
    match a.status {
        200 => {}
        404 => return Err(Refusal::NoAd),
        _ => return Err(Refusal::Lookup(a.error())),
    }
    let s = |k: &str| a.body.get(k).and_then(Value::as_str).unwrap_or("");
    if s("host_pubkey") != target_pubkey {
        return Err(Refusal::OtherHost);
    }
    match a.body.get("ad").filter(|v| !v.is_null()) {
        Some(ad) => {
            let sig = a.body.get("ad_sig").and_then(Value::as_str).unwrap_or("");
            check_v2(ad, sig, pk, newest, now)
        }
        None if newest.is_some() => Err(Refusal::V1AfterV2),
        None => {
            if !verify_canonical(pk, &enc_ad_statement(s("host"), s("enc_pub")), s("sig")) {
                return Err(Refusal::V1Invalid);
            }
            let enc = parse_pubkey(s("enc_pub")).ok_or(Refusal::V1Invalid)?;
            Ok(PeerEncKey { enc, ad: None })
        }
    }
}

/// The v2 checks: the relay's, in its order (shape, the pinned host key, the signature over
/// canonical(ad), dates, not yet valid with 5 minutes' skew, expired, lifetime), then the rollback
/// guard: not older than the newest ad accepted for this peer.
fn check_v2(
    ad: &Value,
    sig: &str,
    pk: &[u8; 32],
    newest: Option<&PeerAd>,
    now: u64,
) -> Result<PeerEncKey, Refusal> {
    let text = |k: &str| ad.get(k).and_then(Value::as_str).unwrap_or("");
    // The host name is the peer's to choose; the pinned key is what must match.
    let owner = AdOwner {
        key: pk,
        name: text("host"),
    };
    let now_i = i64::try_from(now).unwrap_or(i64::MAX);
    check_ad(&json!({"ad": ad, "sig": sig}), owner, now_i).map_err(|why| match why {
        AdRefusal::Expired => Refusal::Expired(text("exp").to_string()),
        why => Refusal::Invalid(why),
    })?;
    let date = |k: &str| {
        parse_date_loose(text(k))
            .and_then(|t| u64::try_from(t).ok())
            .ok_or(Refusal::Invalid(AdRefusal::Malformed))
    };
    let (iat_ms, exp_ms) = (date("iat")?, date("exp")?);
    let enc = parse_pubkey(text("enc_pub")).ok_or(Refusal::Invalid(AdRefusal::Malformed))?;
    if let Some(n) = newest.filter(|n| iat_ms < n.iat_ms) {
        return Err(Refusal::Older {
            iat: text("iat").to_string(),
            newest: n.iat_ms,
        });
    }
    Ok(PeerEncKey {
        enc,
        ad: Some(PeerAd {
            iat_ms,
            exp_ms,
            enc_pub: text("enc_pub").to_string(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::canonical::canonical_json;
    use relay_wire::keys::SigningKey;
    use relay_wire::seal::EncSecret;

    const NOW: u64 = 1_795_960_800_000; // 2026-11-29T14:00:00.000Z
    const MIN: u64 = 60_000;

    struct Peer {
        key: SigningKey,
        v1_enc: EncSecret,
        v2_enc: EncSecret,
    }

    impl Peer {
        fn new() -> Self {
            Peer {
                key: SigningKey::generate(),
                v1_enc: EncSecret::generate(),
                v2_enc: EncSecret::generate(),
            }
        }
        fn pk(&self) -> String {
            self.key.public_b64()
        }
        fn ad(&self, iat: u64, lifetime: u64) -> Value {
            own_ad("beta", &self.pk(), &self.v2_enc.public_b64(), iat, lifetime)
        }
        /// The relay's fetch answer: the v1 pair on top (when `v1`), the ad beside it.
        fn answer(&self, v1: bool, ad: Option<(Value, String)>) -> Answer {
            let mut body = json!({"host": "beta", "host_pubkey": self.pk()});
            if v1 {
                let enc = self.v1_enc.public_b64();
                body["enc_pub"] = json!(enc);
                body["sig"] = json!(self.key.sign_canonical(&enc_ad_statement("beta", &enc)));
            }
            if let Some((ad, sig)) = ad {
                if !v1 {
                    body["enc_pub"] = ad["enc_pub"].clone();
                }
                body["ad"] = ad;
                body["ad_sig"] = json!(sig);
            }
            Answer { status: 200, body }
        }
        fn signed(&self, ad: Value) -> Option<(Value, String)> {
            let sig = self.key.sign_canonical(&ad);
            Some((ad, sig))
        }
        fn check(
            &self,
            a: &Answer,
            newest: Option<&PeerAd>,
            now: u64,
        ) -> Result<PeerEncKey, Refusal> {
            check_answer(a, &self.key.public(), &self.pk(), newest, now)
        }
    }

    fn stamp(iat_ms: u64) -> PeerAd {
        PeerAd {
            iat_ms,
            exp_ms: iat_ms + AD_LIFETIME_MS,
            enc_pub: String::new(),
        }
    }

    #[test]
    fn our_ad_has_the_agentmbx_shape_and_a_30_day_lifetime() {
        let ad = own_ad("alpha", "HOSTKEY", "ENCKEY", NOW, AD_LIFETIME_MS);
        assert_eq!(
            canonical_json(&ad),
            "{\"enc_pub\":\"ENCKEY\",\"exp\":\"2026-12-29T14:00:00.000Z\",\"host\":\"alpha\",\
             \"host_pubkey\":\"HOSTKEY\",\"iat\":\"2026-11-29T14:00:00.000Z\",\"type\":\"enc-ad\",\"v\":2}"
        );
    }

    #[test]
    fn a_valid_v2_ad_is_used_and_preferred_over_the_v1_pair() {
        let p = Peer::new();
        let ad = p.ad(NOW - MIN, AD_LIFETIME_MS);
        for v1 in [true, false] {
            let got = p
                .check(&p.answer(v1, p.signed(ad.clone())), None, NOW)
                .unwrap();
            assert_eq!(got.enc, p.v2_enc.public(), "v1 pair beside it: {v1}");
            let stamp = got.ad.unwrap();
            assert_eq!(
                (stamp.iat_ms, stamp.exp_ms),
                (NOW - MIN, NOW - MIN + AD_LIFETIME_MS)
            );
        }
    }

    #[test]
    fn a_v1_only_peer_is_reachable_through_its_v1_pair() {
        let p = Peer::new();
        let got = p.check(&p.answer(true, None), None, NOW).unwrap();
        assert_eq!((got.enc, got.ad), (p.v1_enc.public(), None));
        let other = Peer::new();
        let forged = Peer {
            key: other.key,
            ..Peer::new()
        };
        let mut a = forged.answer(true, None);
        a.body["host_pubkey"] = json!(p.pk());
        assert_eq!(p.check(&a, None, NOW), Err(Refusal::V1Invalid));
    }

    #[test]
    fn a_v1_only_answer_after_an_accepted_v2_ad_is_a_refused_downgrade() {
        let p = Peer::new();
        let newest = stamp(NOW - MIN);
        assert_eq!(
            p.check(&p.answer(true, None), Some(&newest), NOW),
            Err(Refusal::V1AfterV2)
        );
    }

    #[test]
    fn only_an_ad_the_pinned_key_signed_for_itself_counts() {
        let p = Peer::new();
        let other = SigningKey::generate();
        let ad = p.ad(NOW, AD_LIFETIME_MS);
        let by_other = Some((ad.clone(), other.sign_canonical(&ad)));
        assert_eq!(
            p.check(&p.answer(true, by_other), None, NOW),
            Err(Refusal::Invalid(AdRefusal::BadSignature)),
            "a refused v2 ad is not replaced by the valid v1 pair beside it"
        );
        let mut for_other = ad.clone();
        for_other["host_pubkey"] = json!(other.public_b64());
        assert_eq!(
            p.check(&p.answer(false, p.signed(for_other)), None, NOW),
            Err(Refusal::Invalid(AdRefusal::WrongPeer))
        );
        let (ad2, sig) = p.signed(ad).unwrap();
        let mut tampered = ad2.clone();
        tampered["enc_pub"] = json!(p.v1_enc.public_b64());
        assert_eq!(
            p.check(&p.answer(false, Some((tampered, sig))), None, NOW),
            Err(Refusal::Invalid(AdRefusal::BadSignature))
        );
        let mut a = p.answer(false, p.signed(ad2));
        a.body["host_pubkey"] = json!(other.public_b64());
        assert_eq!(p.check(&a, None, NOW), Err(Refusal::OtherHost));
    }

    #[test]
    fn an_ad_counts_only_while_current() {
        let p = Peer::new();
        let check = |iat: u64, lifetime: u64| {
            p.check(&p.answer(true, p.signed(p.ad(iat, lifetime))), None, NOW)
        };
        assert!(check(NOW + 5 * MIN, AD_LIFETIME_MS).is_ok(), "5 min skew");
        assert_eq!(
            check(NOW + 5 * MIN + 1, AD_LIFETIME_MS),
            Err(Refusal::Invalid(AdRefusal::NotYetValid))
        );
        assert!(check(NOW - 1_000, 1_001).is_ok(), "exp 1 ms ahead");
        assert!(check(NOW, MAX_AD_LIFETIME_MS).is_ok());
        assert_eq!(
            check(NOW, MAX_AD_LIFETIME_MS + 1),
            Err(Refusal::Invalid(AdRefusal::LifetimeOverMaximum))
        );
        assert_eq!(
            check(NOW - 1_000, 1_000),
            Err(Refusal::Expired("2026-11-29T14:00:00.000Z".into())),
            "exp = now"
        );
        assert!(check(NOW - 1_000, 1_000)
            .unwrap_err()
            .to_string()
            .contains("expired"));
    }

    #[test]
    fn an_ad_older_than_the_newest_accepted_is_refused() {
        let p = Peer::new();
        let a = p.answer(false, p.signed(p.ad(NOW - 2 * MIN, AD_LIFETIME_MS)));
        let refused = p.check(&a, Some(&stamp(NOW - 2 * MIN + 1)), NOW);
        assert!(matches!(refused, Err(Refusal::Older { .. })), "{refused:?}");
        assert!(refused.unwrap_err().to_string().contains("rollback"));
        assert!(
            p.check(&a, Some(&stamp(NOW - 2 * MIN)), NOW).is_ok(),
            "the same iat"
        );
        assert!(
            p.check(&a, Some(&stamp(NOW - 3 * MIN)), NOW).is_ok(),
            "a newer one"
        );
    }

    #[test]
    fn a_malformed_ad_is_refused() {
        let p = Peer::new();
        let good = p.ad(NOW, AD_LIFETIME_MS);
        let refused = |ad: &Value| p.check(&p.answer(true, p.signed(ad.clone())), None, NOW);
        let malformed = Err(Refusal::Invalid(AdRefusal::Malformed));
        assert_eq!(refused(&json!("ad")), malformed);
        for (field, value) in [
            ("v", json!("2")),
            ("type", json!("enc-key")),
            ("host", json!(5)),
            ("enc_pub", json!("short")),
            ("iat", json!(NOW)),
            ("exp", json!("soon")),
        ] {
            let mut ad = good.clone();
            ad[field] = value;
            assert_eq!(refused(&ad), malformed, "{ad}");
        }
        let unsigned = p.answer(false, Some((good.clone(), String::new())));
        assert_eq!(
            p.check(&unsigned, None, NOW),
            Err(Refusal::Invalid(AdRefusal::Unsigned))
        );
        // A bare date and an offset are dates too (what the relay accepts).
        let mut a = good.clone();
        a["exp"] = json!("2027-01-01");
        a["iat"] = json!("2026-11-29T15:00:00+01:00");
        assert!(p.check(&p.answer(false, p.signed(a)), None, NOW).is_ok());
    }

    #[test]
    fn error_answers_are_refusals_with_their_text() {
        let p = Peer::new();
        let nf = Answer {
            status: 404,
            body: json!({"error": "unknown host"}),
        };
        assert_eq!(p.check(&nf, None, NOW), Err(Refusal::NoAd));
        let busy = Answer {
            status: 503,
            body: json!({"error": "busy"}),
        };
        assert_eq!(
            p.check(&busy, None, NOW).unwrap_err().to_string(),
            "enc-key lookup: HTTP 503: busy"
        );
    }

    fn recorded(scope: &str, iat_ms: u64, lifetime: u64) -> PublishedAd {
        PublishedAd {
            scope: scope.into(),
            enc_pub: "E".into(),
            iat_ms,
            exp_ms: iat_ms + lifetime,
        }
    }

    fn view(enc_pub: Option<&str>, exp_ms: Option<u64>) -> RelayView {
        RelayView::Known {
            enc_pub: enc_pub.map(str::to_string),
            exp: exp_ms.map(iso_ms),
            v1: None,
        }
    }

    #[test]
    fn the_ad_is_republished_daily_on_changes_and_when_the_relay_disagrees() {
        let r = recorded("S", NOW, AD_LIFETIME_MS);
        let exp = Some(NOW + AD_LIFETIME_MS);
        let why = |rec: Option<&PublishedAd>, scope: &str, enc: &str, v: &RelayView, now: u64| {
            republish_reason(rec, scope, enc, v, now)
        };
        let current = view(Some("E"), exp);
        assert_eq!(why(Some(&r), "S", "E", &current, NOW + DAY_MS - 1), None);
        assert_eq!(why(Some(&r), "S", "E", &RelayView::Unknown, NOW + 1), None);
        assert_eq!(
            why(None, "S", "E", &current, NOW),
            Some(Republish::NotPublished)
        );
        assert_eq!(
            why(Some(&r), "S2", "E", &current, NOW),
            Some(Republish::ScopeChanged)
        );
        assert_eq!(
            why(Some(&r), "S", "E2", &current, NOW),
            Some(Republish::EncKeyChanged)
        );
        assert_eq!(
            why(Some(&r), "S", "E", &current, NOW + DAY_MS),
            Some(Republish::Daily)
        );
        let short = recorded("S", NOW, DAY_MS + 10);
        assert_eq!(
            why(
                Some(&short),
                "S",
                "E",
                &view(Some("E"), Some(NOW + DAY_MS + 10)),
                NOW + 11
            ),
            Some(Republish::Expiring)
        );
        assert_eq!(
            why(Some(&r), "S", "E", &view(None, None), NOW),
            Some(Republish::MissingOnRelay)
        );
        assert_eq!(
            why(Some(&r), "S", "E", &view(Some("X"), exp), NOW),
            Some(Republish::OtherKeyOnRelay)
        );
        assert_eq!(
            why(
                Some(&r),
                "S",
                "E",
                &view(Some("E"), Some(NOW + 5 * DAY_MS)),
                NOW
            ),
            Some(Republish::StaleOnRelay)
        );
        assert_eq!(
            why(Some(&r), "S", "E", &view(Some("E"), Some(NOW + 1_000)), NOW),
            Some(Republish::Expiring),
            "the relay holds an ad of ours that expires within a day"
        );
        assert_eq!(
            why(Some(&r), "S", "E", &view(Some("E"), None), NOW),
            Some(Republish::StaleOnRelay)
        );
    }

    #[test]
    fn the_relay_view_is_read_from_signed_info() {
        assert_eq!(RelayView::from_info(&json!({"v": 2})), RelayView::Unknown);
        assert_eq!(
            RelayView::from_info(&json!({"you": {"host": "a"}})),
            RelayView::Unknown,
            "a relay without you.enc_ad"
        );
        let none = RelayView::from_info(&json!({"you": {"enc_ad": null}}));
        assert_eq!(none, view(None, None));
        assert!(none.lacks_v1("E"));
        let both = RelayView::from_info(
            &json!({"you": {"enc_ad": {"enc_pub": "E", "exp": iso_ms(NOW), "v1": "E"}}}),
        );
        assert_eq!(
            both,
            RelayView::Known {
                enc_pub: Some("E".into()),
                exp: Some(iso_ms(NOW)),
                v1: Some("E".into())
            }
        );
        assert!(!both.lacks_v1("E") && both.lacks_v1("F"));
        assert!(!RelayView::Unknown.lacks_v1("E"));
    }

    #[test]
    fn ad_kinds_parse() {
        assert_eq!(AdKinds::parse("both"), Some(AdKinds::Both));
        assert_eq!(AdKinds::parse("v1"), Some(AdKinds::V1Only));
        assert_eq!(AdKinds::parse("v2"), Some(AdKinds::V2Only));
        assert_eq!(AdKinds::parse("V2"), None);
        assert!(AdKinds::Both.v1() && AdKinds::Both.v2());
        assert!(!AdKinds::V1Only.v2() && !AdKinds::V2Only.v1());
    }
}
