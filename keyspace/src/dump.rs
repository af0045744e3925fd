//! A JSON-lines dump of every partition from one snapshot: one object per record with the
//! partition name, the decoded key fields and the decoded value fields. In keys, binary fields
//! are lowercase hex (sortable, as stored); in values, host keys are base64 as on the wire and
//! hashes hex. Wire bytes are left out unless asked for (then base64, as `wire_b64`). A record
//! that does not decode shows its raw bytes as `{"hex": ...}` (keys) or fails the dump (values).

use std::io::Write;

use base64::Engine as _;
use fjall::Readable;
use serde_json::{json, Value};

use crate::codec::{self, hex, meta_key, EncAdKey, ItemRecord, StoredOp, UsageScope};
use crate::parts::Part;
use crate::reader::SnapView;
use relay_store::{DedupRow, DumpOptions, EncAd, EncAdV2, Result, SenderList, StoreError, Usage};

/// Write every partition as JSON lines (one object per record) from one snapshot.
/// Returns the record count per partition written.
///
/// # Errors
/// `Corrupt` for an unknown partition name or a damaged record, `Io` when `out` fails.
pub(crate) fn dump(
    v: &SnapView,
    out: &mut dyn Write,
    opts: &DumpOptions,
) -> Result<Vec<(String, u64)>> {
    let parts: Vec<Part> = match &opts.partition {
        Some(name) => vec![Part::by_name(name)
            .ok_or_else(|| StoreError::Corrupt(format!("no partition named {name:?}")))?],
        None => Part::ALL.to_vec(),
    };
    let mut counts = Vec::new();
    for p in parts {
        let mut n = 0u64;
        for g in v.snap.iter(v.parts.ks(p)) {
            let (k, val) = g.into_inner().map_err(crate::engine_error)?;
            let line = json!({
                "partition": p.name(),
                "key": key_json(p, &k),
                "value": value_json(p, &k, &val, opts.with_wire)?,
            });
            let mut s = line.to_string();
            s.push('\n');
            out.write_all(s.as_bytes())
                .map_err(|source| StoreError::Io {
                    context: "writing the dump".into(),
                    source,
                })?;
            n += 1;
        }
        counts.push((p.name().to_string(), n));
    }
    Ok(counts)
}

fn raw(k: &[u8]) -> Value {
    json!({ "hex": hex(k) })
}

fn key_json(p: Part, k: &[u8]) -> Value {
    let parsed = match p {
        Part::Meta => std::str::from_utf8(k).ok().map(|s| json!({ "name": s })),
        Part::Enrolments => match codec::enrol_key_parse(k) {
            Some(pk) => Some(json!({ "host_pubkey": hex(&pk) })),
            None if codec::is_name_key(k) => codec::name_key_pk(k).map(|pk| {
                let name = String::from_utf8_lossy(&k[1..k.len() - 33]).into_owned();
                json!({ "name_index": name, "host_pubkey": hex(&pk) })
            }),
            None => codec::seen_key_parse(k).map(|pk| json!({ "last_seen": hex(&pk) })),
        },
        Part::EncAds => codec::enc_ad_key_parse(k).map(|a| match a {
            EncAdKey::V1(pk) => json!({ "host_pubkey": hex(&pk), "kind": "v1" }),
            EncAdKey::V2(pk) => json!({ "host_pubkey": hex(&pk), "kind": "v2" }),
        }),
        Part::SenderLists | Part::Seqs | Part::Acked => Some(json!({ "host_pubkey": hex(k) })),
        Part::Items => {
            codec::item_key_parse(k).map(|(t, s)| json!({ "target": hex(&t), "seq": s }))
        }
        Part::Dedup => codec::dedup_key_parse(k)
            .map(|(t, s, id)| json!({ "target": hex(&t), "sender": hex(&s), "item_id": id })),
        Part::Usage => codec::usage_key_parse(k).map(|s| match s {
            UsageScope::Target(t) => json!({ "target": hex(&t) }),
            UsageScope::Sender { target, sender } => {
                json!({ "target": hex(&target), "sender": hex(&sender) })
            }
            UsageScope::Account(a) => json!({ "account": a }),
        }),
        Part::Expiry => codec::expiry_item_parse(k)
            .map(|(e, t, s)| json!({ "item_expires_at": e, "target": hex(&t), "seq": s })),
        Part::DedupExpiry => codec::expiry_dedup_parse(k).and_then(|(at, d)| {
            codec::dedup_key_parse(d).map(|(t, s, id)| {
                json!({ "dedup_gone_at": at, "target": hex(&t), "sender": hex(&s), "item_id": id })
            })
        }),
        Part::Ops => codec::ops_key_parse(k).map(|n| json!({ "n": n })),
        Part::SenderIndex => codec::sender_index_parse(k)
            .map(|(s, t)| json!({ "sender": hex(&s), "target": hex(&t) })),
    };
    parsed.unwrap_or_else(|| raw(k))
}

fn value_json(p: Part, k: &[u8], v: &[u8], with_wire: bool) -> Result<Value> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    Ok(match p {
        Part::Meta => match k {
            meta_key::EPOCH => json!(codec::dec::<String>(v, "meta")?),
            meta_key::RELAY_PUBKEY => json!(b64(&codec::dec::<[u8; 32]>(v, "meta")?)),
            meta_key::SCHEMA_VERSION => json!(codec::dec::<u32>(v, "meta")?),
            meta_key::OPS_HEAD => json!(hex(&codec::dec::<[u8; 32]>(v, "meta")?)),
            meta_key::OPS_CHECKPOINT => {
                let (seq, hash) = codec::dec::<(u64, [u8; 32])>(v, "meta")?;
                json!({ "seq": seq, "hash": hex(&hash) })
            }
            _ => match codec::dec::<u64>(v, "meta") {
                Ok(n) => json!(n),
                Err(_) => raw(v),
            },
        },
        Part::Enrolments if codec::is_name_key(k) => Value::Null,
        Part::Enrolments if codec::is_invite_key(k) => {
            let i: relay_store::Invite = codec::dec(v, "invite")?;
            json!({ "invite": relay_store::log_text::invite_id(&i.hash), "created_ms": i.created_ms,
                    "expires_ms": i.expires_ms, "note": i.note })
        }
        Part::Enrolments if codec::is_deny_key(k) => {
            let e: relay_store::DenyEntry = codec::dec(v, "deny entry")?;
            json!({ "deny": relay_store::log_text::deny_added(&e, 0), "added_ms": e.added_ms,
                    "expires_ms": e.expires_ms })
        }
        Part::Enrolments if codec::seen_key_parse(k).is_some() => {
            json!({ "day": codec::dec::<u32>(v, "last seen")? })
        }
        Part::Enrolments => {
            let e = codec::dec_enrolment(v)?;
            json!({ "host_pubkey": b64(&e.host_pubkey), "host_name": e.host_name, "owner_fp": e.owner_fp,
                    "account": e.account, "authorized_by": e.authorized_by, "authority_rank": e.authority_rank,
                    "enrolled_at_ms": e.enrolled_at_ms, "revoked_at_ms": e.revoked_at_ms,
                    "org": e.org, "client_id": e.client_id })
        }
        Part::EncAds => match codec::enc_ad_key_parse(k) {
            Some(EncAdKey::V2(_)) => {
                let a: EncAdV2 = codec::dec(v, "v2 enc ad")?;
                json!({ "host_pubkey": b64(&a.host_pubkey), "record": String::from_utf8_lossy(&a.record),
                        "sig": a.sig, "at_ms": a.at_ms })
            }
            _ => {
                let a: EncAd = codec::dec(v, "enc ad")?;
                json!({ "host_pubkey": b64(&a.host_pubkey), "enc_pub": a.enc_pub, "sig": a.sig, "at_ms": a.at_ms })
            }
        },
        Part::SenderLists => {
            let l: SenderList = codec::dec(v, "sender list")?;
            let senders: Vec<String> = l.senders.iter().map(|s| b64(s)).collect();
            json!({ "target": b64(&l.target), "senders": senders, "iat_ms": l.iat_ms,
                    "record": String::from_utf8_lossy(&l.record), "sig": l.sig })
        }
        Part::Items => {
            let r: ItemRecord = codec::dec(v, "item")?;
            let mut o = json!({ "kind": r.kind.as_str(), "item_id": r.item_id, "sender": b64(&r.sender),
                    "wire_hash": hex(&r.wire_hash), "bytes": r.bytes, "accepted_at_ms": r.accepted_at_ms,
                    "expires_at_ms": r.expires_at_ms, "account": r.account });
            if with_wire {
                o["wire_b64"] = json!(b64(&r.wire));
            }
            o
        }
        Part::Dedup => {
            let d: DedupRow = codec::dec(v, "dedup")?;
            json!({ "wire_hash": hex(&d.wire_hash), "seq": d.seq, "accepted_at_ms": d.accepted_at_ms })
        }
        Part::Seqs => json!({ "head_seq": codec::dec::<u64>(v, "seqs")? }),
        Part::Acked => json!({ "acked_through": codec::dec::<u64>(v, "acked")? }),
        Part::Usage => {
            let u: Usage = codec::dec(v, "usage")?;
            json!({ "items": u.items, "bytes": u.bytes })
        }
        Part::Expiry | Part::DedupExpiry | Part::SenderIndex => Value::Null,
        Part::Ops => {
            let o: StoredOp = codec::dec(v, "ops")?;
            json!({ "at_ms": o.at_ms, "kind": o.kind, "detail": o.detail, "hash": hex(&o.hash) })
        }
    })
}
