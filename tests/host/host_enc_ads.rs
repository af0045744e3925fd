//! The host side of v2 enc-key ads (docs/protocol.md §3 "Encryption-key advertisements") through the
//! real `mbx-relay host` commands against the real relay: hosts that meet only through the relay's
//! v2 ads exchange mail; a sender refuses an expired ad until the peer republishes, refuses an
//! older ad than the newest it accepted (rollback guard), and still reaches a v1-only peer.
//!
//! `MBX_HOST_ENC_ADS=v2` makes a host publish the v2 ad only (so the v1 pair cannot be what a
//! sender used: the relay's answer is checked to carry no v1 pair), `MBX_HOST_ENC_ADS=v1` makes it
//! publish like an agentmbx 0.5.6 host, and `MBX_HOST_ENC_AD_LIFETIME_MS` shortens the ad's life.

use crate::host_util;

use std::time::Duration;

use host_util::{host_key, pair, past_backoff, relay_client, sync_until, HostCli, RelayProc};
use mbx_host::client::Answer;
use mbx_host::sender::encode_query;
use relay_wire::seal::EncSecret;
use relay_wire::time::iso_ms;
use serde_json::{json, Value};

fn set_env(h: &mut HostCli, k: &str, v: &str) {
    h.env.retain(|(name, _)| name != k);
    h.env.push((k.into(), v.into()));
}

/// `GET /v2/relay/enc-key?pubkey=` of `target`, asked as `asker` (an enrolled host).
fn fetch_ads(relay: &RelayProc, asker: &HostCli, target: &HostCli) -> Answer {
    let key = host_key(asker);
    let client = relay_client(relay, &asker.name, &key);
    let q = format!("pubkey={}", encode_query(&target.pubkey()));
    client.get("/v2/relay/enc-key", Some(&q), true).unwrap()
}

/// POST a v2 ad signed by `host`'s own key, as `host`.
fn post_ad(relay: &RelayProc, host: &HostCli, ad: &Value) -> Answer {
    let key = host_key(host);
    let sig = key.sign_canonical(ad);
    let client = relay_client(relay, &host.name, &key);
    client
        .post("/v2/relay/enc-key", &json!({"ad": ad, "sig": sig}), true)
        .unwrap()
}

/// The `last_error` of the host's only active outbox row.
fn waiting_reason(h: &HostCli) -> String {
    let st = h.status();
    let active = st["active"].as_array().unwrap();
    assert_eq!(active.len(), 1, "{st}");
    active[0]["last_error"].as_str().unwrap_or("").to_string()
}

fn inbox_bodies(h: &HostCli) -> Vec<String> {
    h.ok(&["inbox"])["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn hosts_that_met_only_through_the_relays_v2_ads_exchange_mail() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (mut a, mut b) = pair(tmp.path(), &relay);
    for h in [&mut a, &mut b] {
        set_env(h, "MBX_HOST_ENC_ADS", "v2");
    }
    for h in [&a, &b] {
        let r = h.sync();
        assert_eq!(r["enc_ad"], "published (none recorded)", "{r}");
    }
    // The relay holds a v2 ad and no v1 pair for either: a v2 ad is the only key a sender can use.
    for (asker, target) in [(&a, &b), (&b, &a)] {
        let ans = fetch_ads(&relay, asker, target);
        assert_eq!(ans.status, 200, "{:?}", ans.body);
        assert!(ans.body.get("sig").is_none(), "a v1 pair: {}", ans.body);
        assert_eq!(ans.body["ad"]["type"], "enc-ad");
        assert_eq!(ans.body["ad"]["host_pubkey"], json!(target.pubkey()));
        let iat = ans.body["ad"]["iat"].as_str().unwrap();
        let exp = ans.body["ad"]["exp"].as_str().unwrap();
        let ms = |s: &str| relay_wire::time::parse_iso_strict(s).unwrap();
        assert_eq!(ms(exp) - ms(iat), 30 * 86_400_000, "a 30-day lifetime");
    }
    // A second pass finds the ad current on the relay (you.enc_ad) and does not republish.
    assert!(a.sync()["enc_ad"].is_null());

    a.send("beta", "hello", "sealed for beta's v2 key");
    assert_eq!(a.sync()["relay_accepted"], 1);
    b.send("alpha", "re: hello", "sealed for alpha's v2 key");
    assert!(sync_until(&[&b, &a], 6, || {
        a.count("envelope_done") == 1 && b.count("envelope_done") == 1
    }));
    assert_eq!(inbox_bodies(&b), ["sealed for beta's v2 key"]);
    assert_eq!(inbox_bodies(&a), ["sealed for alpha's v2 key"]);
    // Each sender remembers the ad it used (the rollback guard's newest iat).
    let seen = a.status()["peer_enc_ads"]["beta"].clone();
    assert_eq!(
        seen["iat"],
        fetch_ads(&relay, &a, &b).body["ad"]["iat"],
        "{seen}"
    );
}

#[test]
fn a_sender_refuses_an_expired_v2_ad_until_the_peer_republishes() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, mut b) = pair(tmp.path(), &relay);
    // beta publishes both kinds, its v2 ad living 1.5 s; the valid v1 pair must not be a way round.
    set_env(&mut b, "MBX_HOST_ENC_AD_LIFETIME_MS", "1500");
    b.sync();
    a.sync();
    std::thread::sleep(Duration::from_millis(1_600));
    let ans = fetch_ads(&relay, &a, &b);
    assert!(ans.body.get("sig").is_some() && ans.body.get("ad").is_some());

    a.send("beta", "late", "waits for a current ad");
    let r = a.sync();
    assert_eq!(
        (r["sealed"].as_u64(), r["pushed"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    let why = waiting_reason(&a);
    assert!(
        why.contains("expired") && why.contains("republish"),
        "{why}"
    );
    assert_eq!(a.count("envelope_draft"), 1, "the row waits, not dropped");
    past_backoff();
    assert_eq!(a.sync()["sealed"], 0, "still expired");

    // beta's next pass sees its ad expiring (you.enc_ad) and republishes a 30-day one.
    b.env.clear();
    let r = b.sync();
    assert_eq!(r["enc_ad"], "published (expiring within a day)", "{r}");
    past_backoff();
    let r = a.sync();
    assert_eq!(
        (r["sealed"].as_u64(), r["relay_accepted"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert!(sync_until(&[&b, &a], 6, || a.count("envelope_done") == 1));
    assert_eq!(inbox_bodies(&b), ["waits for a current ad"]);
}

#[test]
fn the_rollback_guard_refuses_an_older_ad_than_the_newest_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.send("beta", "one", "first");
    assert!(sync_until(&[&a, &b], 6, || a.count("envelope_done") == 1));
    let newest = a.status()["peer_enc_ads"]["beta"]["iat"]
        .as_str()
        .unwrap()
        .to_string();

    // An older ad, validly signed by beta's key for another (say, retired) enc key, replaces the
    // stored one on the relay (last write wins there): a relay or a thief replaying it.
    let now = mbx_host::now_ms();
    let old = json!({"v": 2, "type": "enc-ad", "host": "beta", "host_pubkey": b.pubkey(),
        "enc_pub": EncSecret::generate().public_b64(), "iat": iso_ms(now - 3_600_000),
        "exp": iso_ms(now + 10 * 86_400_000)});
    let ans = post_ad(&relay, &b, &old);
    assert_eq!(ans.status, 200, "{:?}", ans.body);
    assert_eq!(fetch_ads(&relay, &a, &b).body["ad"], old);

    a.send("beta", "two", "second");
    let r = a.sync();
    assert_eq!(r["sealed"], 0, "{r}");
    let why = waiting_reason(&a);
    assert!(why.contains("rollback"), "{why}");
    assert_eq!(
        a.status()["peer_enc_ads"]["beta"]["iat"],
        json!(newest),
        "the guard keeps the newest"
    );

    // beta's pass sees another enc key in its you.enc_ad and republishes; alpha then seals.
    let r = b.sync();
    assert_eq!(
        r["enc_ad"], "published (relay holds another enc key)",
        "{r}"
    );
    past_backoff();
    assert_eq!(a.sync()["sealed"], 1);
    assert!(sync_until(&[&b, &a], 6, || a.count("envelope_done") == 2));
    assert_eq!(inbox_bodies(&b), ["first", "second"]);
}

#[test]
fn a_v1_only_peer_still_gets_mail() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, mut b) = pair(tmp.path(), &relay);
    set_env(&mut b, "MBX_HOST_ENC_ADS", "v1");
    let r = b.sync();
    assert!(r["enc_ad"].is_null(), "{r}");
    a.sync();
    let ans = fetch_ads(&relay, &a, &b);
    assert_eq!(ans.status, 200, "{:?}", ans.body);
    assert!(
        ans.body.get("ad").is_none(),
        "beta published like 0.5.6: {}",
        ans.body
    );
    assert!(ans.body.get("sig").is_some());

    a.send("beta", "old peer", "through the v1 pair");
    assert!(sync_until(&[&a, &b], 6, || a.count("envelope_done") == 1));
    assert_eq!(inbox_bodies(&b), ["through the v1 pair"]);
    assert!(a.status()["peer_enc_ads"].get("beta").is_none());
}

#[test]
fn a_crash_between_publishing_the_ad_and_recording_it_just_republishes() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    a.sync();
    b.crash_at(&["sync"], "host-after-enc-ad-before-record");
    assert!(b.status()["enc_ad"].is_null(), "nothing recorded");
    let first = fetch_ads(&relay, &a, &b).body["ad"].clone();
    assert_eq!(first["type"], "enc-ad", "the relay took it");
    let r = b.sync();
    assert_eq!(r["enc_ad"], "published (none recorded)", "{r}");
    let rec = b.status()["enc_ad"].clone();
    let stored = fetch_ads(&relay, &a, &b).body["ad"].clone();
    assert_eq!(rec["exp"], stored["exp"], "the record names the stored ad");
    assert!(b.sync()["enc_ad"].is_null(), "and stands");
    a.send("beta", "after", "the crash");
    assert!(sync_until(&[&a, &b], 6, || a.count("envelope_done") == 1));
}
