//! docs/protocol.md §4 (expiry notices) beyond the basic sweep: one notice per expired target, told
//! once, notices and receipts expire silently, no notice for a sender that is no longer enrolled.
use crate::common;

use common::{backend_tests, Backend};

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn kinds(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["kind"].as_str().unwrap().to_string())
        .collect()
}

fn one_notice_per_expired_target_told_once_and_notices_expire_silently(backend: Backend) {
    let relay = backend.start_generous(&["--retention", "2s", "--sweep-interval", "1s"]);
    let relay_pk = relay.pubkey();
    let s = Host::enrolled(&relay, "ex-s");
    let a = Host::enrolled(&relay, "ex-a");
    let b = Host::enrolled(&relay, "ex-b");
    let env = envelope_item(&s, &[&a, &b]);
    assert_eq!(s.push_one(&relay, &env)["status"], json!("accepted"));
    let id = env["item_id"].as_str().unwrap();
    let mut max_seen = 0;
    let notices = wait_for(Duration::from_secs(20), || {
        let mine = s.pull_all(&relay, 0);
        max_seen = max_seen.max(mine.len());
        (mine.len() == 2).then_some(mine)
    })
    .expect("two notices for the sender");
    assert_eq!(kinds(&notices), vec!["expired", "expired"]);
    let mut ids: Vec<String> = notices
        .iter()
        .map(|n| n["item_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut want = vec![
        format!("expired:{id}:{}", a.pubkey()),
        format!("expired:{id}:{}", b.pubkey()),
    ];
    want.sort();
    assert_eq!(ids, want);
    assert!(notices
        .iter()
        .all(|n| n["sender_pubkey"] == json!(relay_pk)));
    assert!(a.pull_all(&relay, 0).is_empty() && b.pull_all(&relay, 0).is_empty());
    // Later sweeps never tell again, and the notices themselves expire without a notice.
    let gone = wait_for(Duration::from_secs(20), || {
        let mine = s.pull_all(&relay, 0);
        max_seen = max_seen.max(mine.len());
        mine.is_empty().then_some(())
    });
    assert!(gone.is_some(), "notices expire after the retention");
    assert_eq!(max_seen, 2, "never more than one notice per expired target");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        s.pull_all(&relay, 0).is_empty(),
        "expired notices go silently"
    );
    assert!(a.pull_all(&relay, 0).is_empty() && b.pull_all(&relay, 0).is_empty());
}

fn no_notice_for_a_sender_that_is_no_longer_enrolled(backend: Backend) {
    let relay = backend.start_generous(&["--retention", "2s", "--sweep-interval", "1s"]);
    let s = Host::enrolled(&relay, "gone-s");
    let a = Host::enrolled(&relay, "gone-a");
    let witness = Host::enrolled(&relay, "gone-w");
    assert_eq!(
        s.push_one(&relay, &envelope_item(&s, &[&a]))["status"],
        json!("accepted")
    );
    // A still-enrolled witness sender shows when the sweep has run.
    assert_eq!(
        witness.push_one(&relay, &envelope_item(&witness, &[&a]))["status"],
        json!("accepted")
    );
    let s2 = Host::new("gone-s");
    relay
        .post_json(
            "/v2/relay/rotate",
            &rotation("gone-s", &s.key, &s2.key, None, None),
        )
        .ok();
    wait_for(Duration::from_secs(20), || {
        (witness.pull_all(&relay, 0).len() == 1).then_some(())
    })
    .expect("the witness is told");
    assert!(a.pull_all(&relay, 0).is_empty());
    std::thread::sleep(Duration::from_millis(1200));
    let got = s2.pull_all(&relay, 0);
    assert!(
        got.is_empty(),
        "no notice for a revoked sender key: {got:?}"
    );
}

fn no_notice_when_the_senders_own_queue_is_full(backend: Backend) {
    // Retention 4 s, queues hold one item. The sender's own queue is filled (by a peer) one
    // second before its item to the target expires; that peer item lives 3 s longer, so the
    // sweep that expires the target's item finds the sender's queue full and tells nothing.
    let relay = backend.start_generous(&[
        "--retention",
        "4s",
        "--sweep-interval",
        "1s",
        "--max-queue-items",
        "1",
    ]);
    let s = Host::enrolled(&relay, "qf-s");
    let t = Host::enrolled(&relay, "qf-t");
    let p = Host::enrolled(&relay, "qf-p");
    let t0 = Instant::now();
    assert_eq!(
        s.push_one(&relay, &envelope_item(&s, &[&t]))["status"],
        json!("accepted")
    );
    std::thread::sleep(Duration::from_millis(3000).saturating_sub(t0.elapsed()));
    let filler = envelope_item(&p, &[&s]);
    assert_eq!(p.push_one(&relay, &filler)["status"], json!("accepted"));
    let filled_at = t0.elapsed();
    assert!(
        filled_at < Duration::from_millis(3900),
        "filled the sender's queue too late: {filled_at:?}"
    );
    wait_for(Duration::from_secs(20), || {
        t.pull_all(&relay, 0).is_empty().then_some(())
    })
    .expect("the target's item expires");
    let swept_by = t0.elapsed();
    // The filler (accepted at >= 3 s) cannot have expired before 7 s: the queue was full.
    assert!(
        swept_by < filled_at + Duration::from_secs(4),
        "sweep too slow to decide ({swept_by:?}); the test needs the sweep within 4 s of expiry"
    );
    // Until the filler itself is gone, and two sweeps after, the sender hears nothing.
    let mut seen = Vec::new();
    wait_for(Duration::from_secs(20), || {
        let mine = s.pull_all(&relay, 0);
        seen.extend(mine.iter().map(|i| i["kind"].as_str().unwrap().to_string()));
        mine.is_empty().then_some(())
    })
    .expect("the filler expires too");
    std::thread::sleep(Duration::from_millis(2200));
    seen.extend(kinds(&s.pull_all(&relay, 0)));
    assert!(
        seen.iter().all(|k| k == "envelope"),
        "no expiry notice when the sender's own queue was full: {seen:?}"
    );
}

fn a_sender_with_an_allowlist_is_still_told(backend: Backend) {
    // Notices come from the relay key; a sender's own allowlist does not stop them.
    let relay = backend.start_generous(&["--retention", "2s", "--sweep-interval", "1s"]);
    let s = Host::enrolled(&relay, "al-s");
    let t = Host::enrolled(&relay, "al-t");
    s.publish_senders(&relay, &[t.pubkey()], now_ms()).ok();
    let it = envelope_item(&s, &[&t]);
    assert_eq!(s.push_one(&relay, &it)["status"], json!("accepted"));
    let notices = wait_for(Duration::from_secs(20), || {
        let mine = s.pull_all(&relay, 0);
        (!mine.is_empty()).then_some(mine)
    })
    .expect("the sender is told");
    assert_eq!(kinds(&notices), vec!["expired"]);
    assert_eq!(
        notices[0]["item_id"],
        json!(format!(
            "expired:{}:{}",
            it["item_id"].as_str().unwrap(),
            t.pubkey()
        ))
    );
}

backend_tests! {
    one_notice_per_expired_target_told_once_and_notices_expire_silently,
    no_notice_for_a_sender_that_is_no_longer_enrolled,
    no_notice_when_the_senders_own_queue_is_full,
    a_sender_with_an_allowlist_is_still_told,
}
