//! The insert rule over plain maps: each test is named after the rule it proves.

use super::rows::{QueueState, Rows};
use super::*;
use crate::types::{ItemKind, NewItem, NewTarget, QuotaKind, Quotas, NEVER_EXPIRES};

const S: Key32 = [9; 32];
const A: Key32 = [1; 32];
const B: Key32 = [2; 32];
const NOW: u64 = 1_000;

fn quotas(items: u64) -> Quotas {
    Quotas {
        max_queue_items: items,
        max_queue_bytes: 1 << 20,
        max_sender_items: items,
        max_sender_bytes: 1 << 20,
        max_account_items: items,
        max_account_bytes: 1 << 20,
    }
}

fn req(targets: &[(Key32, u8)], items: u64) -> InsertRequest {
    InsertRequest {
        item: NewItem {
            kind: ItemKind::Envelope,
            item_id: "i1".into(),
            sender: S,
            targets: targets
                .iter()
                .map(|(t, h)| NewTarget {
                    target: *t,
                    wire: vec![0; 10],
                    wire_hash: [*h; 32],
                })
                .collect(),
        },
        quotas: quotas(items),
        retention_ms: 500,
        require_live_sender: false,
    }
}

fn live(keys: &[Key32], account: Option<&str>) -> Rows {
    let mut r = Rows::default();
    for k in keys {
        r.live.insert(*k, account.map(str::to_string));
    }
    r
}

#[test]
fn a_new_item_gets_seq_now_and_expiry_after_retention() {
    let d = decide(&req(&[(A, 1)], 10), NOW, &live(&[A], None)).unwrap();
    assert_eq!(
        d.outcome,
        InsertOutcome::Stored {
            at_ms: NOW,
            targets: vec![TargetSeq {
                seq: NOW,
                duplicate: false
            }]
        }
    );
    assert_eq!(
        d.rows,
        vec![NewRow {
            target: 0,
            seq: NOW,
            bytes: 10,
            expires_at_ms: NOW + 500,
            account: None
        }]
    );
}

#[test]
fn a_live_sender_is_required_only_when_asked() {
    let mut r = req(&[(A, 1)], 10);
    r.require_live_sender = true;
    let d = decide(&r, NOW, &live(&[A], None)).unwrap();
    assert_eq!(d.outcome, InsertOutcome::SenderNotEnrolled);
    assert!(d.rows.is_empty());
    assert!(matches!(
        decide(&r, NOW, &live(&[A, S], None)).unwrap().outcome,
        InsertOutcome::Stored { .. }
    ));
}

#[test]
fn every_target_must_be_live_or_nothing_is_stored() {
    let d = decide(&req(&[(A, 1), (B, 1)], 10), NOW, &live(&[A], None)).unwrap();
    assert_eq!(d.outcome, InsertOutcome::TargetNotEnrolled { target: B });
    assert!(d.rows.is_empty());
}

#[test]
fn a_duplicate_answers_the_stored_seq_and_time_and_writes_nothing() {
    let mut rows = live(&[A], None);
    rows.dedup.insert(
        (A, S, "i1".into()),
        DedupRow {
            wire_hash: [1; 32],
            seq: 42,
            accepted_at_ms: 7,
        },
    );
    let d = decide(&req(&[(A, 1)], 10), NOW, &rows).unwrap();
    assert_eq!(
        d.outcome,
        InsertOutcome::Stored {
            at_ms: 7,
            targets: vec![TargetSeq {
                seq: 42,
                duplicate: true
            }]
        }
    );
    assert!(d.rows.is_empty());
}

#[test]
fn a_conflict_on_one_target_refuses_the_whole_item() {
    let mut rows = live(&[A, B], None);
    rows.dedup.insert(
        (B, S, "i1".into()),
        DedupRow {
            wire_hash: [1; 32],
            seq: 42,
            accepted_at_ms: 7,
        },
    );
    let d = decide(&req(&[(A, 1), (B, 2)], 10), NOW, &rows).unwrap();
    assert_eq!(d.outcome, InsertOutcome::Conflict { target: B });
    assert!(d.rows.is_empty(), "the new row for A is not written either");
}

#[test]
fn quota_refuses_the_whole_item_naming_the_target() {
    let mut rows = live(&[A, B], None);
    rows.queues.insert(
        B,
        QueueState {
            head: 0,
            usage: Usage { items: 3, bytes: 0 },
        },
    );
    let d = decide(&req(&[(A, 1), (B, 1)], 3), NOW, &rows).unwrap();
    assert_eq!(
        d.outcome,
        InsertOutcome::Quota {
            target: B,
            which: QuotaKind::QueueItems
        }
    );
    assert!(d.rows.is_empty());
}

#[test]
fn two_targets_of_one_account_are_both_charged_to_it() {
    let rows = live(&[A, B], Some("acct"));
    let d = decide(&req(&[(A, 1), (B, 1)], 1), NOW, &rows).unwrap();
    assert_eq!(
        d.outcome,
        InsertOutcome::Quota {
            target: B,
            which: QuotaKind::AccountItems
        },
        "the first target's row counts against the account for the second"
    );
    let d = decide(&req(&[(A, 1), (B, 1)], 2), NOW, &rows).unwrap();
    assert_eq!(d.rows.len(), 2);
    assert_eq!(d.rows[1].account.as_deref(), Some("acct"));
}

#[test]
fn a_target_named_twice_is_a_duplicate_of_itself() {
    let d = decide(&req(&[(A, 1), (A, 1)], 10), NOW, &live(&[A], None)).unwrap();
    assert_eq!(
        d.outcome,
        InsertOutcome::Stored {
            at_ms: NOW,
            targets: vec![
                TargetSeq {
                    seq: NOW,
                    duplicate: false
                },
                TargetSeq {
                    seq: NOW,
                    duplicate: true
                }
            ]
        }
    );
    assert_eq!(d.rows.len(), 1);
}

#[test]
fn seqs_follow_the_head_not_a_clock_behind_it() {
    let mut rows = live(&[A], None);
    rows.queues.insert(
        A,
        QueueState {
            head: 5_000,
            usage: Usage::default(),
        },
    );
    let d = decide(&req(&[(A, 1)], 10), NOW, &rows).unwrap();
    assert_eq!(d.rows[0].seq, 5_001);
}

#[test]
fn never_expiring_mail_gets_the_never_expiry() {
    let mut r = req(&[(A, 1)], 10);
    r.retention_ms = NEVER_EXPIRES;
    let d = decide(&r, NOW, &live(&[A], None)).unwrap();
    assert_eq!(d.rows[0].expires_at_ms, NEVER_EXPIRES);
}
