//! Rules of the logical backup (format 6): a backup of one store restores into a new store of
//! the backend with every record kind intact (invites and deny entries included), a new epoch
//! and a logged restore; dedup, seqs, queues and the dedup horizons behave as they did before;
//! a format-5 file (no invites, deny entries, enrolment org or client) still restores.

use std::path::PathBuf;

use super::support::*;
use super::Backend;
use crate::backup::{self, Record, RecordKind};
use crate::{
    Clock as _, DenyEntry, DenyOutcome, DenySubject, EncAd, EncAdV2, EnrolOutcome, EnrolRequest,
    HostFilter, InsertOutcome, Invite, InviteClaim, InviteOutcome, Key32, LogVerdict, RelayStore,
    RevokeOutcome, RevokeRequest, SenderList, SenderListOutcome,
};

/// A file under the system's temp dir, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> TempFile {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        TempFile(std::env::temp_dir().join(format!(
            "relay-conformance-{tag}-{}-{nanos}.mbxbak",
            std::process::id()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Everything a restore must bring back, read through the interface.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    relay_pubkey: Option<Key32>,
    heartbeat_ms: Option<u64>,
    created_ms: u64,
    hosts: Vec<crate::HostRow>,
    live: u64,
    ads: Vec<crate::EncAds>,
    list: Option<SenderList>,
    pages: Vec<crate::Page>,
    cursors: Vec<crate::Cursor>,
    dedup: Vec<Option<crate::DedupRow>>,
    usage: Vec<crate::Usage>,
}

fn seen(s: &dyn RelayStore, keys: &[Key32], ids: &[(Key32, &str, Key32)]) -> Seen {
    let meta = s.meta().expect("meta");
    let mut hosts = Vec::new();
    s.hosts(&HostFilter::default(), &mut |r| {
        hosts.push(r.clone());
        Ok(())
    })
    .expect("hosts");
    Seen {
        relay_pubkey: meta.relay_pubkey,
        heartbeat_ms: meta.heartbeat_ms,
        created_ms: meta.created_ms,
        hosts,
        live: s.live_enrolment_count().expect("count"),
        ads: keys.iter().map(|k| s.enc_ads(k).expect("ads")).collect(),
        list: s.sender_list(&keys[1]).expect("list"),
        pages: keys
            .iter()
            .map(|k| s.pull(k, 0, 1000, u64::MAX).expect("pull"))
            .collect(),
        cursors: keys.iter().map(|k| s.cursor(k).expect("cursor")).collect(),
        dedup: ids
            .iter()
            .map(|(snd, id, t)| s.dedup(snd, id, t).expect("dedup"))
            .collect(),
        usage: vec![
            s.usage_target(&keys[1]).expect("usage"),
            s.usage_sender(&keys[0], &keys[1]).expect("usage"),
            s.usage_account("acct").expect("usage"),
        ],
    }
}

/// Backup -> restore keeps every record kind (enrolments live and revoked with last seen, both
/// enc ads, a sender list, queued items with their seqs and metadata, dedup rows with their
/// horizons, cursors, usage, the relay log with its chain); the restore rotates the epoch and
/// is logged; the restored store answers duplicates with the original seqs, refuses
/// conflicts, prunes dedup rows exactly when the original would, and hands out higher seqs.
pub fn a_backup_restores_every_record_kind_with_a_new_epoch(b: &dyn Backend) {
    // Now: a restore logs itself at the wall clock's time and drops entries past the log's
    // retention (400 days) then, as every relay-log append does.
    let t0 = crate::SystemClock.now_ms();
    let clock = TestClock::new(t0);
    let s = b.open(clock.clone());
    let (a, t, gone, relay) = (key(1), key(2), key(3), key(900));
    s.pin_relay_pubkey(relay).wait().expect("pin");
    s.heartbeat(t0 + 5).wait().expect("heartbeat");
    let acct = s.enrol(token_enrol(a, "Alpha")).wait().expect("enrol");
    assert_eq!(acct, crate::EnrolOutcome::Enrolled);
    enrol(&*s, t, "target");
    put_invite_and_deny(&*s, t0);
    enrol(&*s, gone, "gone");
    s.record_seen(vec![(a, crate::utc_day(t0))])
        .wait()
        .expect("seen");
    s.put_enc_ad(EncAd {
        host_pubkey: a,
        enc_pub: "enc-pub-a".into(),
        sig: "sig-a".into(),
        at_ms: t0,
    })
    .wait()
    .expect("ad");
    assert!(s
        .put_enc_ad_v2(EncAdV2 {
            host_pubkey: a,
            record: b"{\"v\":2}".to_vec(),
            sig: "sig2-a".into(),
            at_ms: t0,
        })
        .wait()
        .expect("ad v2"));
    let list = SenderList {
        target: t,
        senders: vec![a, key(7)],
        iat_ms: t0,
        record: b"{\"list\":1}".to_vec(),
        sig: "list-sig".into(),
    };
    assert_eq!(
        s.put_sender_list(list).wait().expect("list"),
        SenderListOutcome::Stored
    );
    // Items: m1 to t (acked below: its dedup horizon starts), m2 to t and a (a is charged to
    // its account), m3 to t.
    let m1 = stored_seqs(&insert(&*s, a, "m1", &[(t, b"one")]))[0].seq;
    clock.advance(3);
    let m2 = stored_seqs(&insert(&*s, a, "m2", &[(t, b"two"), (a, b"two-a")]));
    clock.advance(3);
    insert(&*s, key(7), "m3", &[(t, b"three")]);
    clock.advance(10);
    let acked_at = clock.now_ms();
    s.ack(&t, m1).wait().expect("ack");
    let revoked = s
        .revoke_key(
            RevokeRequest {
                key: gone,
                revoke: true,
                purge: false,
                quotas: big_quotas(),
                retention_ms: 14 * 24 * 3600 * 1000,
                admin_uid: 1,
                reason: "test".into(),
            },
            notice_fn(relay),
        )
        .wait()
        .expect("revoke");
    assert!(matches!(revoked, RevokeOutcome::Done(r) if r.revoked));
    s.log_op("note", "before the backup").wait().expect("log");

    let keys = [a, t, gone];
    let ids = [(a, "m1", t), (a, "m2", t), (a, "m2", a), (key(7), "m3", t)];
    let before = seen(&*s, &keys, &ids);
    assert_eq!(before.pages[1].items.len(), 2, "m2 and m3 queued for t");
    let old_epoch = s.meta().expect("meta").epoch;
    let old_ops = s.ops(1000).expect("ops");

    let file = TempFile::new("roundtrip");
    let summary = {
        let mut out = std::fs::File::create(&file.0).expect("create the backup file");
        s.backup_to(&mut out, &mut |_| {}).expect("backup")
    };
    assert_eq!(summary.format_version, backup::LOGICAL_FORMAT_VERSION);
    assert_eq!(summary.relay_pubkey, Some(relay));
    assert_eq!(summary.epoch, old_epoch);
    assert_eq!(backup::verify(&file.0).expect("verify"), summary);
    for kind in RecordKind::ALL {
        let n = summary
            .counts
            .iter()
            .find(|(name, _)| name == kind.name())
            .map_or(0, |c| c.1);
        assert!(
            n > 0,
            "the backup holds no {} record: {summary:?}",
            kind.name()
        );
    }
    assert!(
        matches!(summary.log, LogVerdict::Intact { entries, .. } if entries == old_ops.len() as u64),
        "{:?}",
        summary.log
    );
    s.close().expect("close");

    clock.advance(1_000);
    let r = b.restore(&file.0, clock.clone());
    let after = seen(&*r, &keys, &ids);
    assert_eq!(after, before, "a restore brings every record back");
    let meta = r.meta().expect("meta");
    assert_ne!(meta.epoch, old_epoch, "a restore rotates the epoch");
    let ops = r.ops(1000).expect("ops");
    assert_eq!(ops[0].kind, "restore");
    assert!(ops[0].detail.contains(&meta.epoch), "{}", ops[0].detail);
    assert_eq!(
        &ops[1..],
        &old_ops[..],
        "the relay log comes back entry for entry"
    );
    assert!(
        matches!(r.verify_log().expect("verify"), LogVerdict::Intact { entries, .. } if entries == old_ops.len() as u64 + 1)
    );

    // Dedup answers duplicates (queued and acked alike) with the original seq; another hash
    // is a conflict.
    let dup = stored_seqs(&insert(&*r, a, "m2", &[(t, b"two"), (a, b"two-a")]));
    assert!(dup.iter().all(|d| d.duplicate));
    assert_eq!(
        dup.iter().map(|d| d.seq).collect::<Vec<_>>(),
        m2.iter().map(|d| d.seq).collect::<Vec<_>>()
    );
    let dup1 = stored_seqs(&insert(&*r, a, "m1", &[(t, b"one")]));
    assert_eq!((dup1[0].seq, dup1[0].duplicate), (m1, true));
    assert!(matches!(
        insert(&*r, a, "m2", &[(t, b"other")]),
        InsertOutcome::Conflict { .. }
    ));
    // The horizon of m1 runs from its ack, not from the restore: a cutoff at the ack keeps it,
    // one just past it prunes it (and only it: m2 and m3 are queued).
    let q = big_quotas();
    let swept = r
        .sweep(
            clock.now_ms(),
            acked_at,
            q,
            14 * 24 * 3600 * 1000,
            100,
            notice_fn(relay),
        )
        .wait()
        .expect("sweep");
    assert_eq!(swept.dedup_pruned, 0, "{swept:?}");
    let swept = r
        .sweep(
            clock.now_ms(),
            acked_at + 1,
            q,
            14 * 24 * 3600 * 1000,
            100,
            notice_fn(relay),
        )
        .wait()
        .expect("sweep");
    assert_eq!((swept.dedup_pruned, swept.expired), (1, 0), "{swept:?}");
    assert_eq!(r.dedup(&a, "m1", &t).expect("dedup"), None);
    // A new item lands above every seq handed out before.
    let head = before.cursors[1].head_seq;
    let next = stored_seqs(&insert(&*r, a, "m4", &[(t, b"four")]))[0];
    assert!(
        next.seq > head && !next.duplicate,
        "{} after {head}",
        next.seq
    );
    // The invite and the deny entry came back: the entry refuses, the invite admits one key.
    let now = clock.now_ms();
    assert!(r
        .denied(&[DenySubject::Client("denied-client".into())], now)
        .expect("denied"));
    assert!(r
        .denied(&[DenySubject::Host(key(66))], now)
        .expect("denied"));
    assert_eq!(
        r.enrol(invited(key(12))).wait().expect("enrol"),
        EnrolOutcome::Enrolled
    );
    assert_eq!(
        r.enrol(invited(key(13))).wait().expect("enrol"),
        EnrolOutcome::InviteRefused,
        "the invite is single-use after a restore too"
    );
    r.close().expect("close");
}

/// An enrolment of `pk` by a token authority: account, org and client recorded.
fn token_enrol(pk: Key32, name: &str) -> EnrolRequest {
    EnrolRequest {
        org: Some("org-1".into()),
        client_id: Some("client-1".into()),
        ..enrol_req(pk, name, Some("acct"), 1)
    }
}

/// The invite code hash [`put_invite_and_deny`] stores.
const INVITE_HASH: [u8; 32] = [0x5A; 32];

/// A new key's enrolment redeeming the stored invite.
fn invited(pk: Key32) -> EnrolRequest {
    EnrolRequest {
        invite: InviteClaim::Presented(INVITE_HASH),
        ..enrol_req(pk, "guest", None, 0)
    }
}

/// Store an invite and two deny entries (a client, a host key) that outlive the test.
fn put_invite_and_deny(s: &dyn RelayStore, now: u64) {
    let day = 24 * 3600 * 1000;
    let invite = Invite {
        hash: INVITE_HASH,
        created_ms: now,
        expires_ms: now + day,
        note: "for bob".into(),
    };
    assert_eq!(
        s.put_invite(invite, 10).wait().expect("invite"),
        InviteOutcome::Issued
    );
    for subject in [
        DenySubject::Client("denied-client".into()),
        DenySubject::Host(key(66)),
    ] {
        let entry = DenyEntry {
            subject,
            added_ms: now,
            expires_ms: now + day,
            note: "revoked".into(),
        };
        assert_eq!(
            s.put_deny(entry, 10).wait().expect("deny"),
            DenyOutcome::Added
        );
    }
}

/// A format-5 file (written before invites, deny entries and the enrolment's org and client
/// were backed up) verifies and restores into this backend: its enrolments without org and
/// client, and no invite or deny entry.
pub fn a_format_5_backup_still_restores(b: &dyn Backend) {
    let clock = TestClock::new(crate::SystemClock.now_ms());
    let s = b.open(clock.clone());
    let (a, t) = (key(1), key(2));
    let enrolled = s.enrol(token_enrol(a, "alpha")).wait().expect("enrol");
    assert_eq!(enrolled, EnrolOutcome::Enrolled);
    enrol(&*s, t, "target");
    put_invite_and_deny(&*s, clock.now_ms());
    stored_seqs(&insert(&*s, a, "m1", &[(t, b"body")]));
    let six = TempFile::new("format6");
    {
        let mut out = std::fs::File::create(&six.0).expect("create the backup file");
        s.backup_to(&mut out, &mut |_| {}).expect("backup");
    }
    let before = s.enrolment(&a).expect("enrolment").expect("enrolled");
    s.close().expect("close");

    let five = TempFile::new("format5");
    let format5 = |kind: RecordKind, body: Vec<u8>| match kind {
        RecordKind::Invite | RecordKind::Deny => Vec::new(),
        RecordKind::Enrolment => {
            let Ok(Record::Enrolment(r)) = Record::decode(kind, &body, 6) else {
                panic!("an enrolment record")
            };
            let e = r.enrolment;
            let old = (
                (
                    e.host_pubkey,
                    e.host_name,
                    e.owner_fp,
                    e.account,
                    e.authorized_by,
                    e.authority_rank,
                    e.enrolled_at_ms,
                    e.revoked_at_ms,
                ),
                r.last_seen_day,
            );
            vec![postcard::to_stdvec(&old).expect("encode")]
        }
        _ => vec![body],
    };
    rewrite_as(&six.0, &five.0, 5, &format5);
    let summary = backup::verify(&five.0).expect("a format-5 file verifies");
    assert_eq!(summary.format_version, 5);
    assert_eq!(summary.counts.len(), 10, "{:?}", summary.counts);

    let r = b.restore(&five.0, clock.clone());
    let e = r.enrolment(&a).expect("enrolment").expect("restored");
    assert_eq!(
        e,
        crate::Enrolment {
            org: None,
            client_id: None,
            ..before
        }
    );
    assert_eq!(r.pull(&t, 0, 10, u64::MAX).expect("pull").items.len(), 1);
    let now = clock.now_ms();
    assert!(!r
        .denied(&[DenySubject::Host(key(66))], now)
        .expect("denied"));
    assert_eq!(
        r.enrol(invited(key(12))).wait().expect("enrol"),
        EnrolOutcome::InviteRefused
    );
    r.close().expect("close");
}

/// What [`rewrite`] writes in place of one record body.
type Rewrite<'a> = dyn Fn(RecordKind, Vec<u8>) -> Vec<Vec<u8>> + 'a;

/// A copy of the backup `src` with every record body passed through `each` (which
/// answers the bodies to write in its place: none, itself, several, another), every frame's
/// checksums, the trailer's counts and the whole-file sha256 recomputed: damage only the
/// reader's rules can see.
fn rewrite(
    src: &std::path::Path,
    dst: &std::path::Path,
    each: &dyn Fn(RecordKind, Vec<u8>) -> Vec<Vec<u8>>,
) {
    rewrite_as(src, dst, backup::LOGICAL_FORMAT_VERSION, each);
}

/// [`rewrite`] into a file of `format` (its format field, and the trailer's count of kinds).
fn rewrite_as(
    src: &std::path::Path,
    dst: &std::path::Path,
    format: u32,
    each: &dyn Fn(RecordKind, Vec<u8>) -> Vec<Vec<u8>>,
) {
    use sha2::Digest;
    let b = std::fs::read(src).expect("read the backup");
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
    let header_end = 16 + 4 + u32_at(16) + 4;
    let mut out = b[..header_end].to_vec();
    out[8..12].copy_from_slice(&format.to_le_bytes());
    let crc = crc32fast::hash(&out[..12]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    let kinds = if format <= 5 {
        10
    } else {
        RecordKind::ALL.len()
    };
    let mut counts = [0u64; RecordKind::ALL.len()];
    let mut i = header_end;
    while b[i] == 0x01 {
        let kind = RecordKind::ALL[usize::from(b[i + 1])];
        let len = u32_at(i + 2);
        let body = b[i + 10..i + 10 + len].to_vec();
        i += 10 + len + 4;
        for body in each(kind, body) {
            let mut frame = vec![0x01, kind as u8];
            frame.extend_from_slice(&u32::try_from(body.len()).expect("len").to_le_bytes());
            let head_crc = crc32fast::hash(&frame);
            frame.extend_from_slice(&head_crc.to_le_bytes());
            frame.extend_from_slice(&body);
            frame.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            out.extend_from_slice(&frame);
            counts[kind as usize] += 1;
        }
    }
    assert_eq!(b[i], 0xFF, "the trailer follows the records");
    out.extend_from_slice(&[0xFF, kinds as u8]);
    for n in &counts[..kinds] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    let sum: [u8; 32] = sha2::Sha256::digest(&out).into();
    out.extend_from_slice(&sum);
    std::fs::write(dst, out).expect("write the crafted backup");
}

/// Issue 24 item 5: a backup whose item records each repeat 4 times (checksums recomputed)
/// would restore with queue usage that never drains; repeated dedup rows, and an item larger
/// than any relay accepts, are no honest store's either. `verify` (what `relay-tool verify`
/// runs) and the backend's restore refuse each as damage, naming it, through the one reader;
/// the untouched backup verifies and restores.
pub fn a_backup_with_repeated_items_or_dedup_rows_or_an_oversized_item_is_refused(b: &dyn Backend) {
    let clock = TestClock::new(crate::SystemClock.now_ms());
    let s = b.open(clock.clone());
    let (a, t) = (key(1), key(2));
    enrol(&*s, a, "alpha");
    enrol(&*s, t, "target");
    for id in ["m1", "m2", "m3"] {
        stored_seqs(&insert(&*s, a, id, &[(t, b"body"), (a, b"body-a")]));
    }
    let good = TempFile::new("good");
    {
        let mut out = std::fs::File::create(&good.0).expect("create the backup file");
        s.backup_to(&mut out, &mut |_| {}).expect("backup");
    }
    s.close().expect("close");
    backup::verify(&good.0).expect("the untouched backup verifies");

    let four = |want: RecordKind| {
        move |kind: RecordKind, body: Vec<u8>| {
            if kind == want {
                vec![body; 4]
            } else {
                vec![body]
            }
        }
    };
    let first_item = std::cell::Cell::new(true);
    let oversized = |kind: RecordKind, body: Vec<u8>| match Record::decode(
        kind,
        &body,
        backup::LOGICAL_FORMAT_VERSION,
    ) {
        Ok(Record::Item(mut it)) if first_item.replace(false) => {
            it.wire = vec![b'x'; crate::MAX_ITEM_BYTES_ACCEPTED as usize + 1];
            vec![Record::Item(it).encode_into(Vec::new())]
        }
        _ => vec![body],
    };
    let items4 = four(RecordKind::Item);
    let dedup4 = four(RecordKind::Dedup);
    let cases: [(&str, &Rewrite<'_>, &str); 3] = [
        ("items4", &items4, "repeats"),
        ("dedup4", &dedup4, "repeats"),
        ("oversized", &oversized, "over the"),
    ];
    for (tag, each, why) in cases {
        let bad = TempFile::new(tag);
        rewrite(&good.0, &bad.0, each);
        let damage = |e: crate::BackupError, by: &str| match e {
            crate::BackupError::Damaged { why: w, .. } => {
                assert!(w.contains(why), "{tag}: {by} refused it, but as {w:?}");
            }
            other => panic!("{tag}: {by} refused it as {other}, not as damage"),
        };
        damage(
            backup::verify(&bad.0).expect_err("verify must refuse it"),
            "verify",
        );
        damage(
            b.try_restore(&bad.0)
                .expect_err("the restore must refuse it"),
            "the restore",
        );
    }
    b.try_restore(&good.0)
        .expect("the untouched backup restores");
}
