//! Pull and ack (PROTOCOL.md §3 "Pull", "Ack"): pages bounded by count and bytes, the epoch check,
//! and acks that never pass the head (`BAD_ACK`).

use relay_keyspace::AckOutcome;
use serde_json::{json, Value};

use super::{object, Caller, Relay, RelayError, Reply, Status};
use crate::wire::keys::b64;

/// The query of a pull, as received (each parameter absent or its raw text).
#[derive(Debug, Clone, Copy, Default)]
pub struct PullQuery<'a> {
    pub after: Option<&'a str>,
    pub limit: Option<&'a str>,
    pub epoch: Option<&'a str>,
}

impl Relay {
    /// `after`: missing or empty means 0; otherwise a non-negative integer.
    ///
    /// # Errors
    /// 400 for anything else.
    pub fn parse_after(raw: Option<&str>) -> Result<u64, RelayError> {
        match raw {
            None | Some("") => Ok(0),
            Some(s) => s
                .parse::<u64>()
                .map_err(|_| RelayError::bad_request("bad after")),
        }
    }

    /// 409 `{"error","epoch":CURRENT}` unless `given` is the current epoch.
    fn check_epoch(&self, given: Option<&str>) -> Result<String, RelayError> {
        let current = self.epoch();
        match given {
            Some(e) if e == current => Ok(current),
            _ => Err(RelayError {
                status: Status::Conflict,
                body: json!({ "error": "epoch mismatch", "epoch": current }),
            }),
        }
    }

    /// `GET /v2/relay/items?after&limit&epoch` for the caller's queue.
    ///
    /// # Errors
    /// 400 bad `after`; 409 wrong epoch; 503 store failure.
    pub async fn pull(&self, caller: &Caller, q: PullQuery<'_>) -> Reply {
        let epoch = match q.epoch {
            Some(e) => self.check_epoch(Some(e))?,
            None => self.epoch(),
        };
        let after = Self::parse_after(q.after)?;
        let limit = pull_limit(q.limit, self.limits.max_pull);
        let page = self.read_page(caller.key, after, limit).await?;
        let last_seq = page.items.last().map_or(after, |i| i.seq);
        let items: Vec<Value> = page
            .items
            .iter()
            .map(|i| {
                object([
                    ("seq", json!(i.seq)),
                    ("kind", json!(i.kind.as_str())),
                    ("item_id", Value::String(i.item_id.clone())),
                    ("sender_pubkey", Value::String(b64(&i.sender))),
                    ("wire_b64", Value::String(b64(&i.wire))),
                ])
            })
            .collect();
        Ok(object([
            ("epoch", Value::String(epoch)),
            ("head_seq", json!(page.head_seq)),
            ("items", Value::Array(items)),
            ("last_seq", json!(last_seq)),
            ("more", Value::Bool(page.more)),
        ]))
    }

    /// Read one bounded page off the async workers (a page may be megabytes).
    pub(crate) async fn read_page(
        &self,
        target: relay_keyspace::Key32,
        after: u64,
        limit: usize,
    ) -> Result<relay_keyspace::Page, RelayError> {
        let store = self.store.clone();
        let max_bytes = self.limits.max_pull_bytes;
        tokio::task::spawn_blocking(move || store.pull(&target, after, limit, max_bytes))
            .await
            .map_err(|_| RelayError::unavailable("store read was interrupted"))?
            .map_err(RelayError::from)
    }

    /// `POST /v2/relay/ack {"epoch","through"}`.
    ///
    /// # Errors
    /// 409 wrong epoch; 400 `BAD_ACK` when `through` is not a non-negative integer or is above
    /// the head; 503 store failure.
    pub async fn ack(&self, caller: &Caller, body: &Value) -> Reply {
        let obj = super::expect_object(body)?;
        let epoch = self.check_epoch(obj.get("epoch").and_then(Value::as_str))?;
        let bad_ack = |head_seq: u64| RelayError {
            status: Status::BadRequest,
            body: json!({
                "error": "ack through is not an integer between 0 and head_seq",
                "code": "BAD_ACK",
                "epoch": epoch,
                "head_seq": head_seq,
            }),
        };
        let Some(through) = obj.get("through").and_then(Value::as_u64) else {
            return Err(bad_ack(self.store.cursor(&caller.key)?.head_seq));
        };
        let outcome = self.write(self.store.ack(&caller.key, through)).await?;
        crate::failpoint::hit("relay-ack-after-commit");
        match outcome {
            AckOutcome::Acked {
                acked_through,
                deleted,
                head_seq,
            } => Ok(
                json!({ "acked_through": acked_through, "deleted": deleted, "head_seq": head_seq }),
            ),
            AckOutcome::BeyondHead { head_seq } => Err(bad_ack(head_seq)),
        }
    }
}

/// `limit`: missing, zero or non-numeric means `max`; another is clamped to 1..=max.
pub fn pull_limit(raw: Option<&str>, max: usize) -> usize {
    match raw.map(str::trim).and_then(|s| s.parse::<i128>().ok()) {
        None | Some(0) => max,
        Some(n) if n < 1 => 1,
        Some(n) => usize::try_from(n).unwrap_or(max).min(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_parsing() {
        assert_eq!(pull_limit(None, 500), 500);
        assert_eq!(pull_limit(Some("0"), 500), 500);
        assert_eq!(pull_limit(Some("abc"), 500), 500);
        assert_eq!(pull_limit(Some("-3"), 500), 1);
        assert_eq!(pull_limit(Some("7"), 500), 7);
        assert_eq!(pull_limit(Some("100000"), 500), 500);
    }

    #[test]
    fn after_parsing() {
        assert_eq!(Relay::parse_after(None).unwrap(), 0);
        assert_eq!(Relay::parse_after(Some("")).unwrap(), 0);
        assert_eq!(Relay::parse_after(Some("42")).unwrap(), 42);
        assert!(Relay::parse_after(Some("-1")).is_err());
        assert!(Relay::parse_after(Some("x")).is_err());
    }
}
