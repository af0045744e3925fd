//! docs/protocol.md §3 "Encryption-key advertisements" v2 (signed, expiring ads), the merged fetch
//! answer on both GET paths, `you.enc_ad` in info, rotation and kill -9, against the real binary.
//! Each test is named after the rule it proves.
use crate::common;

use common::{backend_tests, Backend};

use std::time::Duration;

use common::*;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{b64, SigningKey};
use serde_json::{json, Value};

const DAY: i64 = 86_400_000;

fn enc_pub() -> String {
    b64(&random_bytes(32))
}

/// Percent-encodes the base64 characters that are not safe in a query value.
fn urlencode(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// A v2 ad of `host` with the given enc key, `iat` and `exp` (ms, printed as `toISOString`).
fn ad(host: &Host, enc: &str, iat_ms: i64, exp_ms: i64) -> Value {
    json!({"v": 2, "type": "enc-ad", "host": host.name, "host_pubkey": host.pubkey(),
           "enc_pub": enc, "iat": iso(iat_ms), "exp": iso(exp_ms)})
}

/// A fresh 30-day ad, as agentmbx 0.5.7+ hosts publish it.
fn fresh_ad(host: &Host, enc: &str) -> Value {
    let now = now_ms();
    ad(host, enc, now, now + 30 * DAY)
}

/// The host key's signature over canonical(ad).
fn sign(key: &SigningKey, ad: &Value) -> String {
    key.sign(canonical_json(ad).as_bytes())
}

/// `POST /v2/relay/enc-key {"ad","sig"}` with `host`'s hop and any body.
fn post_v2(relay: &Relay, host: &Host, body: &Value) -> Response {
    host.post_json(relay, "/v2/relay/enc-key", body)
}

/// Publishes `ad` signed by the host key.
fn publish_v2(relay: &Relay, host: &Host, ad: &Value) -> Response {
    post_v2(relay, host, &json!({"ad": ad, "sig": sign(&host.key, ad)}))
}

/// Asserts `400 {"error":"enc-key ad refused: <reason>"}`.
fn assert_refused(r: &Response, reason: &str) {
    r.assert_error(400, &format!("enc-key ad refused: {reason}"));
}

/// The fetch answers of `target` as seen by `asker`, on all three paths (v2 by key, v1 by key,
/// v1 by name); asserts they are identical and returns one of them.
fn fetch_all(relay: &Relay, asker: &Host, target: &Host) -> Response {
    let q = urlencode(&target.pubkey());
    let v2 = asker.get(relay, &format!("/v2/relay/enc-key?pubkey={q}"));
    let v1 = asker.call_v1(relay, "GET", &format!("/v1/relay/enc-key?pubkey={q}"), b"");
    let by_name = asker.call_v1(
        relay,
        "GET",
        &format!("/v1/relay/enc-key?host={}", target.name),
        b"",
    );
    for other in [&v1, &by_name] {
        assert_eq!(other.status, v2.status, "{} vs {}", other.text(), v2.text());
        assert_eq!(other.body, v2.body, "every GET path gives the same answer");
    }
    v2
}

fn you_enc_ad(relay: &Relay, host: &Host) -> Value {
    host.info(relay)["you"]["enc_ad"].clone()
}

// ----- publish: success, last write wins, independence -----

fn v2_ad_published_is_served_with_ad_and_ad_sig_and_no_sig(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "v2-only");
    let b = Host::enrolled(&relay, "asker");
    let ep = enc_pub();
    let ad = fresh_ad(&a, &ep);
    assert_eq!(publish_v2(&relay, &a, &ad).ok(), json!({"ok": true}));
    let r = fetch_all(&relay, &b, &a).ok();
    assert_eq!(
        r,
        json!({"host": "v2-only", "host_pubkey": a.pubkey(), "enc_pub": ep,
               "ad": ad, "ad_sig": sign(&a.key, &ad)})
    );
    assert_keys(&r, &["host", "host_pubkey", "enc_pub", "ad", "ad_sig"]);
}

fn v2_last_valid_write_wins_even_with_an_older_iat(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "lww");
    let b = Host::enrolled(&relay, "asker");
    let now = now_ms();
    let newer = ad(&a, &enc_pub(), now, now + 30 * DAY);
    let older = ad(&a, &enc_pub(), now - 10 * DAY, now + 20 * DAY);
    publish_v2(&relay, &a, &newer).ok();
    publish_v2(&relay, &a, &older).ok();
    let r = fetch_all(&relay, &b, &a).ok();
    assert_eq!(r["ad"], older, "the older iat replaced the newer one");
    assert_eq!(r["enc_pub"], older["enc_pub"]);
    // A refused write changes nothing.
    let bad = ad(&a, &enc_pub(), now, now - 1);
    assert_refused(&publish_v2(&relay, &a, &bad), "expired");
    assert_eq!(fetch_all(&relay, &b, &a).ok()["ad"], older);
}

fn v2_extra_signed_fields_are_kept_and_served(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "extras");
    let b = Host::enrolled(&relay, "asker");
    let mut ad = fresh_ad(&a, &enc_pub());
    ad["epoch"] = json!("relay-epoch-1");
    ad["zz_nested"] = json!({"b": [1, 2.5, "x"], "a": null, "é": true});
    ad["0"] = json!("digit key");
    publish_v2(&relay, &a, &ad).ok();
    let r = fetch_all(&relay, &b, &a).ok();
    assert_eq!(r["ad"], ad);
    // What is served still verifies: the signature is over canonical(served ad).
    assert_eq!(r["ad_sig"], json!(sign(&a.key, &r["ad"])));
    // Keys of the served ad come sorted.
    let text = fetch_all(&relay, &b, &a).text();
    let at = text.find("\"ad\":").expect("ad in answer");
    let keys = ["\"0\"", "\"enc_pub\"", "\"epoch\"", "\"exp\"", "\"host\""];
    let pos: Vec<usize> = keys
        .iter()
        .map(|k| at + text[at..].find(k).expect("key present"))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "sorted keys: {text}");
}

fn v1_and_v2_publishes_leave_each_other_alone_and_the_v1_pair_is_on_top(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "both");
    let b = Host::enrolled(&relay, "asker");
    let (ep1, ep2) = (enc_pub(), enc_pub());
    a.publish_enc(&relay, &ep1).ok();
    let ad = fresh_ad(&a, &ep2);
    publish_v2(&relay, &a, &ad).ok();
    let v1_sig = a
        .key
        .sign(canonical_json(&json!({"v": 1, "host": "both", "enc_pub": ep1})).as_bytes());
    let expected = json!({"host": "both", "host_pubkey": a.pubkey(), "enc_pub": ep1, "sig": v1_sig,
                          "ad": ad, "ad_sig": sign(&a.key, &ad)});
    assert_eq!(fetch_all(&relay, &b, &a).ok(), expected);
    // Republishing v1 keeps the v2 ad, and the other way round.
    let ep3 = enc_pub();
    a.publish_enc(&relay, &ep3).ok();
    let r = fetch_all(&relay, &b, &a).ok();
    assert_eq!((r["enc_pub"].clone(), r["ad"].clone()), (json!(ep3), ad));
    let ad2 = fresh_ad(&a, &enc_pub());
    publish_v2(&relay, &a, &ad2).ok();
    let r = fetch_all(&relay, &b, &a).ok();
    assert_eq!((r["enc_pub"].clone(), r["ad"].clone()), (json!(ep3), ad2));
}

fn v1_only_host_gets_exactly_host_host_pubkey_enc_pub_sig(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "old-host");
    let b = Host::enrolled(&relay, "asker");
    let ep = enc_pub();
    a.publish_enc(&relay, &ep).ok();
    let sig = a
        .key
        .sign(canonical_json(&json!({"v": 1, "host": "old-host", "enc_pub": ep})).as_bytes());
    let r = fetch_all(&relay, &b, &a);
    assert_eq!(
        r.json(),
        json!({"host": "old-host", "host_pubkey": a.pubkey(), "enc_pub": ep, "sig": sig})
    );
    assert_keys(&r.json(), &["host", "host_pubkey", "enc_pub", "sig"]);
}

fn neither_ad_is_404_unknown_host(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "silent");
    let b = Host::enrolled(&relay, "asker");
    fetch_all(&relay, &b, &a).assert_error(404, "unknown host");
    // A refused v2 publish stores nothing.
    let mut bad = fresh_ad(&a, &enc_pub());
    bad["host"] = json!("someone-else");
    assert_refused(&publish_v2(&relay, &a, &bad), "wrong peer");
    fetch_all(&relay, &b, &a).assert_error(404, "unknown host");
}

fn fetch_without_a_usable_lookup_is_404_unknown_host(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "lookup");
    publish_v2(&relay, &a, &fresh_ad(&a, &enc_pub())).ok();
    for path in [
        "/v2/relay/enc-key",
        "/v2/relay/enc-key?pubkey=",
        "/v2/relay/enc-key?pubkey=not-a-key",
        // The v2 path looks up by key only.
        "/v2/relay/enc-key?host=lookup",
    ] {
        a.get(&relay, path).assert_error(404, "unknown host");
    }
    for path in ["/v1/relay/enc-key", "/v1/relay/enc-key?host=nobody"] {
        a.call_v1(&relay, "GET", path, b"")
            .assert_error(404, "unknown host");
    }
    // `pubkey` wins over `host` when both are given.
    let other = Host::enrolled(&relay, "other");
    let q = urlencode(&a.pubkey());
    let r = other
        .call_v1(
            &relay,
            "GET",
            &format!("/v1/relay/enc-key?host=other&pubkey={q}"),
            b"",
        )
        .ok();
    assert_eq!(r["host_pubkey"], json!(a.pubkey()));
}

fn expired_v2_ad_is_still_served_and_shown_in_info(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "short");
    let b = Host::enrolled(&relay, "asker");
    let now = now_ms();
    let ad = ad(&a, &enc_pub(), now, now + 1_500);
    publish_v2(&relay, &a, &ad).ok();
    std::thread::sleep(Duration::from_millis(1_700));
    assert!(now_ms() > now + 1_500, "the ad has expired");
    assert_eq!(fetch_all(&relay, &b, &a).ok()["ad"], ad);
    assert_eq!(
        you_enc_ad(&relay, &a),
        json!({"enc_pub": ad["enc_pub"], "exp": ad["exp"], "v1": null})
    );
    // Republishing it now is refused as expired (the stored one stays).
    assert_refused(&publish_v2(&relay, &a, &ad), "expired");
}

fn v2_dates_accept_offsets_no_offset_and_a_bare_date(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "dates");
    let b = Host::enrolled(&relay, "asker");
    let now = now_ms();
    let today = iso(now)[..10].to_string();
    let in_30 = iso(now + 30 * DAY);
    let forms = [
        (iso(now), in_30.clone()),
        // RFC 3339 with an offset (same instant as iso(now)), exp without an offset (UTC).
        (
            shift_to_plus_0130(now),
            in_30.trim_end_matches('Z').to_string(),
        ),
        // A bare date (midnight UTC today), exp with a negative offset.
        (
            today,
            iso(now + 30 * DAY - 5 * 3_600_000).replace('Z', "-05:00"),
        ),
    ];
    for (iat, exp) in forms {
        let mut ad = fresh_ad(&a, &enc_pub());
        ad["iat"] = json!(iat);
        ad["exp"] = json!(exp);
        assert_eq!(
            publish_v2(&relay, &a, &ad).ok(),
            json!({"ok": true}),
            "{iat} / {exp}"
        );
        // Served exactly as sent.
        assert_eq!(fetch_all(&relay, &b, &a).ok()["ad"], ad);
    }
}

/// `now` as local time at +01:30 (`2026-11-29T15:30:00.000+01:30` for 14:00Z).
fn shift_to_plus_0130(now: i64) -> String {
    let local = iso(now + 90 * 60_000);
    format!("{}+01:30", local.trim_end_matches('Z'))
}

// ----- every refusal reason, its text, and the check order -----

fn refused_unsigned_when_sig_is_missing_null_or_empty(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "unsigned");
    let ad = fresh_ad(&a, &enc_pub());
    for body in [
        json!({"ad": ad}),
        json!({"ad": ad, "sig": null}),
        json!({"ad": ad, "sig": ""}),
        json!({}),
    ] {
        assert_refused(&post_v2(&relay, &a, &body), "unsigned");
    }
}

fn refused_malformed_for_each_shape_rule(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "shapes");
    let b = Host::enrolled(&relay, "asker");
    let good = fresh_ad(&a, &enc_pub());
    let cases: Vec<(&str, Value)> = vec![
        ("v", json!("2")),
        ("v", json!(1)),
        ("type", json!("enc-key")),
        ("host", json!(7)),
        ("host_pubkey", json!(null)),
        ("iat", json!(now_ms())),
        ("exp", json!(["2030-01-01"])),
        ("enc_pub", json!(b64(&random_bytes(31)))),
        ("enc_pub", json!(b64(&random_bytes(33)))),
        (
            "enc_pub",
            json!(format!("{}==", &b64(&random_bytes(32))[..42])),
        ),
        (
            "enc_pub",
            json!(format!("{}_=", &b64(&random_bytes(32))[..42])),
        ),
        ("host", json!("h".repeat(256))),
        ("iat", json!(format!("{}{}", iso(now_ms()), " ".repeat(17)))),
        ("exp", json!("0".repeat(41))),
    ];
    for (field, value) in cases {
        let mut ad = good.clone();
        ad[field] = value;
        assert_refused(&publish_v2(&relay, &a, &ad), "malformed");
    }
    for missing in ["v", "type", "host", "host_pubkey", "enc_pub", "iat", "exp"] {
        let mut ad = good.clone();
        ad.as_object_mut().map(|o| o.remove(missing));
        assert_refused(&publish_v2(&relay, &a, &ad), "malformed");
    }
    for not_object in [json!(null), json!("ad"), json!([good.clone()]), json!(2)] {
        assert_refused(
            &post_v2(&relay, &a, &json!({"ad": not_object, "sig": "c2ln"})),
            "malformed",
        );
    }
    assert_refused(&post_v2(&relay, &a, &json!({"sig": "c2ln"})), "malformed");
    fetch_all(&relay, &b, &a).assert_error(404, "unknown host");
}

fn refused_malformed_when_the_canonical_record_is_over_65536_bytes(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "big");
    let b = Host::enrolled(&relay, "asker");
    let mut ad = fresh_ad(&a, &enc_pub());
    ad["pad"] = json!("");
    let base = canonical_json(&ad).len();
    ad["pad"] = json!("p".repeat(65_536 - base));
    assert_eq!(canonical_json(&ad).len(), 65_536);
    assert_eq!(publish_v2(&relay, &a, &ad).ok(), json!({"ok": true}));
    assert_eq!(fetch_all(&relay, &b, &a).ok()["ad"], ad);
    let mut over = ad.clone();
    over["pad"] = json!("p".repeat(65_536 - base + 1));
    assert_refused(&publish_v2(&relay, &a, &over), "malformed");
    assert_eq!(fetch_all(&relay, &b, &a).ok()["ad"], ad, "nothing stored");
}

fn refused_wrong_peer_for_another_key_or_another_name(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "Peer-A");
    let other = Host::enrolled(&relay, "peer-b");
    let good = fresh_ad(&a, &enc_pub());
    let mut cases = Vec::new();
    let mut x = good.clone();
    x["host_pubkey"] = json!(other.pubkey());
    cases.push(x);
    let mut x = good.clone();
    x["host_pubkey"] = json!(random_pubkey());
    cases.push(x);
    for name in ["peer-a", "PEER-A", "peer-b", "Peer-A ", ""] {
        let mut x = good.clone();
        x["host"] = json!(name);
        cases.push(x);
    }
    for ad in cases {
        // Signed by the caller: only the peer check fails.
        assert_refused(&publish_v2(&relay, &a, &ad), "wrong peer");
    }
    // Another enrolled host cannot post an ad about a.
    assert_refused(&publish_v2(&relay, &other, &good), "wrong peer");
    assert_eq!(publish_v2(&relay, &a, &good).ok(), json!({"ok": true}));
}

fn refused_bad_signature(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "badsig");
    let ad = fresh_ad(&a, &enc_pub());
    let mut tampered = ad.clone();
    tampered["enc_pub"] = json!(enc_pub());
    for sig in [
        json!(sign(&SigningKey::generate(), &ad)),
        json!(sign(&a.key, &tampered)),
        json!("AAAA"),
        json!("not base64!"),
        json!(5),
        json!({"sig": "x"}),
    ] {
        assert_refused(
            &post_v2(&relay, &a, &json!({"ad": ad, "sig": sig})),
            "bad signature",
        );
    }
}

fn refused_malformed_when_a_date_does_not_parse(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "baddate");
    for (field, value) in [
        ("iat", "yesterday"),
        ("exp", "2026-13-01T00:00:00Z"),
        ("iat", ""),
        ("exp", "2026-11-29T14:00:00+5"),
    ] {
        let mut ad = fresh_ad(&a, &enc_pub());
        ad[field] = json!(value);
        assert_refused(&publish_v2(&relay, &a, &ad), "malformed");
    }
}

fn refused_not_yet_valid_when_iat_is_over_five_minutes_ahead(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "future");
    let now = now_ms();
    let ad = ad(&a, &enc_pub(), now + 6 * 60_000, now + 30 * DAY);
    assert_refused(&publish_v2(&relay, &a, &ad), "not yet valid");
    // Four minutes ahead is within the allowance.
    let ad = ad_at(&a, now + 4 * 60_000, now + 30 * DAY);
    assert_eq!(publish_v2(&relay, &a, &ad).ok(), json!({"ok": true}));
}

fn ad_at(host: &Host, iat: i64, exp: i64) -> Value {
    ad(host, &enc_pub(), iat, exp)
}

fn refused_expired_when_exp_is_not_after_now(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "stale");
    let now = now_ms();
    for exp in [now - 1, now - 30 * DAY] {
        assert_refused(
            &publish_v2(&relay, &a, &ad_at(&a, now - DAY, exp)),
            "expired",
        );
    }
}

fn refused_lifetime_over_the_maximum_beyond_ninety_days_and_exactly_ninety_is_accepted(
    backend: Backend,
) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "long");
    let now = now_ms();
    assert_refused(
        &publish_v2(&relay, &a, &ad_at(&a, now, now + 90 * DAY + 1)),
        "lifetime over the maximum",
    );
    assert_eq!(
        publish_v2(&relay, &a, &ad_at(&a, now, now + 90 * DAY)).ok(),
        json!({"ok": true})
    );
    // exp before iat is not checked (only exp > now and the lifetime).
    assert_eq!(
        publish_v2(&relay, &a, &ad_at(&a, now + 60_000, now + 30_000)).ok(),
        json!({"ok": true})
    );
}

fn the_first_failing_check_in_protocol_order_decides(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "order");
    let now = now_ms();
    let good = fresh_ad(&a, &enc_pub());
    // 1 unsigned beats 2 malformed.
    assert_refused(
        &post_v2(&relay, &a, &json!({"ad": "not an object", "sig": ""})),
        "unsigned",
    );
    // 2 malformed beats 3 wrong peer.
    let mut x = good.clone();
    x["host"] = json!("someone");
    x["type"] = json!("other");
    assert_refused(&publish_v2(&relay, &a, &x), "malformed");
    // 3 wrong peer beats 4 bad signature.
    let mut x = good.clone();
    x["host_pubkey"] = json!(random_pubkey());
    assert_refused(
        &post_v2(&relay, &a, &json!({"ad": x, "sig": "AAAA"})),
        "wrong peer",
    );
    // 4 bad signature beats 5 an unparseable date.
    let mut x = good.clone();
    x["iat"] = json!("junk");
    assert_refused(
        &post_v2(&relay, &a, &json!({"ad": x, "sig": "AAAA"})),
        "bad signature",
    );
    // 5 malformed date beats 7 expired.
    let mut x = ad_at(&a, now, now - DAY);
    x["iat"] = json!("junk");
    assert_refused(&publish_v2(&relay, &a, &x), "malformed");
    // 6 not yet valid beats 7 expired and 8 lifetime.
    assert_refused(
        &publish_v2(&relay, &a, &ad_at(&a, now + 200 * DAY, now - DAY)),
        "not yet valid",
    );
    // 7 expired beats 8 lifetime.
    assert_refused(
        &publish_v2(&relay, &a, &ad_at(&a, now - 200 * DAY, now - 1)),
        "expired",
    );
}

fn no_hop_is_401_before_the_body_is_parsed_and_bad_json_is_400(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "json");
    relay
        .post("/v2/relay/enc-key", b"{not json")
        .assert_error(401, "bad relay hop");
    let r = a.call(&relay, "POST", "/v2/relay/enc-key", b"{not json");
    r.assert_some_error(400);
    // Another host's key in the hop headers, signed by a: still the hop that fails.
    let stranger = Host::new("stranger");
    stranger
        .post_json(
            &relay,
            "/v2/relay/enc-key",
            &json!({"ad": fresh_ad(&stranger, &enc_pub())}),
        )
        .assert_error(401, "bad relay hop");
}

fn v2_publish_body_over_8_mib_is_413(backend: Backend) {
    const CAP: usize = 8 * 1024 * 1024;
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "cap-v2");
    let over = format!("{{}}{}", " ".repeat(CAP + 1 - 2));
    // Signed over another body: the relay must refuse while reading, before any check.
    let hop = Hop {
        signed_body: Some("{}".into()),
        ..Hop::default()
    };
    a.call_with(
        &relay,
        "POST",
        "/v2/relay/enc-key",
        over.as_bytes(),
        &hop,
        &[],
    )
    .assert_error(413, "request body too large");
    relay.assert_alive();
}

// ----- v1 publish texts -----

fn v1_publish_answers_enc_pub_and_sig_required_and_bad_enc_key_signature(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "v1texts");
    let ep = enc_pub();
    for body in [
        json!({"enc_pub": ep}),
        json!({"sig": "AAAA"}),
        json!({"enc_pub": "", "sig": "AAAA"}),
        json!({"enc_pub": ep, "sig": ""}),
        json!({"enc_pub": 5, "sig": "AAAA"}),
        json!([]),
    ] {
        a.post_json(&relay, "/v1/relay/enc-key", &body)
            .assert_error(400, "enc_pub and sig required");
    }
    let wrong = SigningKey::generate()
        .sign(canonical_json(&json!({"v": 1, "host": "v1texts", "enc_pub": ep})).as_bytes());
    a.post_json(
        &relay,
        "/v1/relay/enc-key",
        &json!({"enc_pub": ep, "sig": wrong}),
    )
    .assert_error(401, "bad enc-key signature");
}

// ----- info: you.enc_ad -----

fn you_enc_ad_is_null_then_shows_v1_and_v2_each_null_when_missing(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let v1_first = Host::enrolled(&relay, "v1-first");
    let v2_first = Host::enrolled(&relay, "v2-first");
    for h in [&v1_first, &v2_first] {
        let info = h.info(&relay);
        assert!(info["you"].as_object().unwrap().contains_key("enc_ad"));
        assert_eq!(info["you"]["enc_ad"], Value::Null, "neither ad");
    }
    let ep1 = enc_pub();
    v1_first.publish_enc(&relay, &ep1).ok();
    assert_eq!(
        you_enc_ad(&relay, &v1_first),
        json!({"enc_pub": null, "exp": null, "v1": ep1})
    );
    let ad = fresh_ad(&v2_first, &enc_pub());
    publish_v2(&relay, &v2_first, &ad).ok();
    assert_eq!(
        you_enc_ad(&relay, &v2_first),
        json!({"enc_pub": ad["enc_pub"], "exp": ad["exp"], "v1": null})
    );
    let ep2 = enc_pub();
    v2_first.publish_enc(&relay, &ep2).ok();
    assert_eq!(
        you_enc_ad(&relay, &v2_first),
        json!({"enc_pub": ad["enc_pub"], "exp": ad["exp"], "v1": ep2})
    );
    // Unsigned info has no `you` at all.
    assert!(relay.info().get("you").is_none());
}

// ----- rotation, revocation, durability -----

fn rotation_removes_both_ads_of_the_old_key_and_revoked_keys_are_never_served(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let old = Host::enrolled(&relay, "rotating");
    let asker = Host::enrolled(&relay, "asker");
    old.publish_enc(&relay, &enc_pub()).ok();
    publish_v2(&relay, &old, &fresh_ad(&old, &enc_pub())).ok();
    fetch_all(&relay, &asker, &old).ok();
    let new = Host {
        name: old.name.clone(),
        key: SigningKey::generate(),
    };
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation(&old.name, &old.key, &new.key, None, None),
    );
    assert_eq!(r.ok(), json!({"moved": 0}));
    let q = urlencode(&old.pubkey());
    asker
        .get(&relay, &format!("/v2/relay/enc-key?pubkey={q}"))
        .assert_error(404, "unknown host");
    asker
        .call_v1(&relay, "GET", &format!("/v1/relay/enc-key?pubkey={q}"), b"")
        .assert_error(404, "unknown host");
    // The name now designates the new key, which has published nothing yet.
    fetch_all(&relay, &asker, &new).assert_error(404, "unknown host");
    // The new key publishes its own v2 ad; the old key cannot publish any more.
    let ad = fresh_ad(&new, &enc_pub());
    publish_v2(&relay, &new, &ad).ok();
    assert_eq!(fetch_all(&relay, &asker, &new).ok()["ad"], ad);
    publish_v2(&relay, &old, &fresh_ad(&old, &enc_pub())).assert_error(401, "bad relay hop");
}

fn kill9_keeps_both_ads_and_you_enc_ad(backend: Backend) {
    let mut relay = backend.start(GENEROUS);
    let a = Host::enrolled(&relay, "durable");
    let b = Host::enrolled(&relay, "asker");
    let ep = enc_pub();
    a.publish_enc(&relay, &ep).ok();
    let mut ad = fresh_ad(&a, &enc_pub());
    ad["extra"] = json!({"kept": [1, 2]});
    publish_v2(&relay, &a, &ad).ok();
    let before = fetch_all(&relay, &b, &a).ok();
    let you_before = you_enc_ad(&relay, &a);

    relay.restart(); // SIGKILL right after the 200s, then the same store

    assert_eq!(fetch_all(&relay, &b, &a).ok(), before);
    assert_eq!(before["ad"], ad);
    assert_eq!(before["enc_pub"], json!(ep));
    assert_eq!(you_enc_ad(&relay, &a), you_before);
}

backend_tests! {
    v2_ad_published_is_served_with_ad_and_ad_sig_and_no_sig,
    v2_last_valid_write_wins_even_with_an_older_iat,
    v1_and_v2_publishes_leave_each_other_alone_and_the_v1_pair_is_on_top,
    you_enc_ad_is_null_then_shows_v1_and_v2_each_null_when_missing,
    rotation_removes_both_ads_of_the_old_key_and_revoked_keys_are_never_served,
    kill9_keeps_both_ads_and_you_enc_ad,
    ;
    postgres ignored:
    v2_extra_signed_fields_are_kept_and_served,
    v1_only_host_gets_exactly_host_host_pubkey_enc_pub_sig,
    neither_ad_is_404_unknown_host,
    fetch_without_a_usable_lookup_is_404_unknown_host,
    expired_v2_ad_is_still_served_and_shown_in_info,
    v2_dates_accept_offsets_no_offset_and_a_bare_date,
    refused_unsigned_when_sig_is_missing_null_or_empty,
    refused_malformed_for_each_shape_rule,
    refused_malformed_when_the_canonical_record_is_over_65536_bytes,
    refused_wrong_peer_for_another_key_or_another_name,
    refused_bad_signature,
    refused_malformed_when_a_date_does_not_parse,
    refused_not_yet_valid_when_iat_is_over_five_minutes_ahead,
    refused_expired_when_exp_is_not_after_now,
    refused_lifetime_over_the_maximum_beyond_ninety_days_and_exactly_ninety_is_accepted,
    the_first_failing_check_in_protocol_order_decides,
    no_hop_is_401_before_the_body_is_parsed_and_bad_json_is_400,
    v2_publish_body_over_8_mib_is_413,
    v1_publish_answers_enc_pub_and_sig_required_and_bad_enc_key_signature,
}
