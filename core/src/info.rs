//! `GET /v2/relay/info`: the relay key, epoch, version and limits; a signed hop adds `you`
//! (with `enc_ad`, what the caller has published).

use serde_json::{json, Value};

use super::{Caller, Relay, Reply};
use relay_wire::keys::b64;

impl Relay {
    /// The info document (docs/protocol.md §3), with `you` for an authenticated caller.
    ///
    /// # Errors
    /// 503 when the caller's cursor cannot be read.
    pub fn info(&self, caller: Option<&Caller>) -> Reply {
        let l = &self.limits;
        let mut doc = json!({
            "v": 2,
            "relay_pubkey": self.pubkey_b64,
            "epoch": self.epoch(),
            "version": env!("CARGO_PKG_VERSION"),
            "limits": {
                "max_item_bytes": l.max_item_bytes,
                "max_batch": l.max_batch,
                "max_pull": l.max_pull,
                "max_pull_bytes": l.max_pull_bytes,
                "max_targets": l.max_targets,
                "retention_days": retention_days_value(l.retention_days()),
                "max_queue_items": l.max_queue_items,
                "max_queue_bytes": l.max_queue_bytes,
                "max_sender_items": l.max_sender_items,
                "max_sender_bytes": l.max_sender_bytes,
                "max_owner_items": l.max_account_items,
                "max_owner_bytes": l.max_account_bytes,
            },
        });
        if let Some(c) = caller {
            let cur = self.store.cursor(&c.key)?;
            doc["you"] = json!({
                "host": c.enrolment.host_name,
                "pubkey": b64(&c.key),
                "head_seq": cur.head_seq,
                "acked_through": cur.acked_through,
                "enc_ad": self.you_enc_ad(c)?,
            });
        }
        Ok(doc)
    }
}

/// Whole days print as an integer (`14`), others as a fraction (`0.5`).
fn retention_days_value(days: f64) -> Value {
    if days.fract() == 0.0 && days < 1e15 {
        json!(days as u64)
    } else {
        json!(days)
    }
}
