//! The relay log's chain, one statement for every backend (a backup moves a log between
//! them): entry `n` stores `hash_n = SHA-256(hash_{n-1} ++ canonical_n)`, where `canonical_n`
//! is `seq u64 | at_ms u64 | len(kind) u32 | kind | len(detail) u32 | detail` (integers
//! big-endian); the first entry of a log chains from 32 zero bytes.

use sha2::{Digest, Sha256};

use crate::{LogCheckpoint, LogRetention, LogVerdict};

/// The relay-log kinds enrolment traffic writes (anyone may enrol, under any number of keys).
/// They share the log with the entries an operator audits (revoke, purge, restore, epoch and key
/// rotations, idle expiry, backups, migrations) but within a budget of their own, so churn never
/// pushes those out (issue 24 item 8). The PostgreSQL schema spells the same list in SQL.
pub const ENROLMENT_KINDS: [&str; 2] = ["enrol", "re-enrol"];

/// Whether entries of `kind` count against the enrolment budget.
pub fn is_enrolment_entry(kind: &str) -> bool {
    ENROLMENT_KINDS.contains(&kind)
}

/// Enrolment entries a log bounded by `keep` holds at most: half its count cap (100,000 of the
/// default 200,000). The other half is the room every other entry keeps whatever enrolments do:
/// an entry of another kind leaves the log by count only after more than that many other
/// entries of other kinds came after it.
pub fn enrolment_budget(keep: LogRetention) -> u64 {
    keep.max_entries.max(1) / 2
}

/// Whether an append of an enrolment entry happens, `held` enrolment entries being in the log:
/// within the budget; or at it, when the oldest entry is an enrolment one (it then leaves for
/// the new one). Otherwise the enrolment is not logged one by one: its enrolment row (with
/// its time and authority) is the record, and `relay-tool hosts` lists it.
pub fn enrolment_entry_fits(held: u64, keep: LogRetention, oldest_is_enrolment: bool) -> bool {
    held < enrolment_budget(keep) || oldest_is_enrolment
}

/// Whether the oldest entry (of `oldest_kind`) leaves the log for the enrolment budget alone.
pub fn drop_for_enrolment_budget(held: u64, keep: LogRetention, oldest_kind: &str) -> bool {
    held > enrolment_budget(keep) && is_enrolment_entry(oldest_kind)
}

/// The canonical bytes of an entry (what its hash covers besides the previous hash).
pub fn canonical(seq: u64, at_ms: u64, kind: &str, detail: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + kind.len() + detail.len());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&at_ms.to_be_bytes());
    for s in [kind, detail] {
        // Kinds and details are short texts we write; a length over u32 cannot occur.
        b.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    b
}

/// `SHA-256(prev ++ canonical(entry))`.
pub fn chain_hash(prev: &[u8; 32], seq: u64, at_ms: u64, kind: &str, detail: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(canonical(seq, at_ms, kind, detail));
    h.finalize().into()
}

/// Recomputes a chain from its checkpoint, fed the entries in seq order; remembers the first
/// entry that does not match. Serves every backend's `verify_log` and backup verification.
#[derive(Debug, Clone)]
pub struct ChainCheck {
    checkpoint: Option<LogCheckpoint>,
    expect: u64,
    prev: [u8; 32],
    entries: u64,
    broken: Option<(u64, String)>,
}

impl ChainCheck {
    /// A check starting at `checkpoint` (`None`: at seq 0 from the zero hash).
    pub fn new(checkpoint: Option<LogCheckpoint>) -> ChainCheck {
        ChainCheck {
            checkpoint,
            expect: checkpoint.map_or(0, |c| c.seq + 1),
            prev: checkpoint.map_or([0; 32], |c| c.hash),
            entries: 0,
            broken: None,
        }
    }

    /// Check the next entry. False once the chain is broken.
    pub fn entry(
        &mut self,
        seq: u64,
        at_ms: u64,
        kind: &str,
        detail: &str,
        hash: &[u8; 32],
    ) -> bool {
        if self.broken.is_some() {
            return false;
        }
        let expect = self.expect;
        if seq != expect {
            let why = if seq > expect {
                format!("entry {expect} is missing (the next stored entry is {seq})")
            } else {
                format!("entry {seq} is out of place (entry {expect} was expected)")
            };
            return self.fail(expect, why);
        }
        let computed = chain_hash(&self.prev, seq, at_ms, kind, detail);
        if &computed != hash {
            return self.fail(
                seq,
                format!(
                    "entry {seq} ({kind} at {at_ms} ms) does not match its hash: it was edited or \
                     moved, or the entry before it was removed or changed"
                ),
            );
        }
        self.prev = computed;
        self.expect = seq + 1;
        self.entries += 1;
        true
    }

    /// Record that the entry expected next cannot be read (`why`). False, as a broken chain.
    pub fn fail_next(&mut self, why: String) -> bool {
        if self.broken.is_none() {
            self.broken = Some((self.expect, why));
        }
        false
    }

    fn fail(&mut self, seq: u64, why: String) -> bool {
        self.broken = Some((seq, why));
        false
    }

    /// The verdict, given the head recorded in meta (`next`: the seq the next entry gets).
    pub fn finish(self, next: Option<u64>, head: Option<[u8; 32]>) -> LogVerdict {
        if let Some((seq, why)) = self.broken {
            return LogVerdict::Broken { seq, why };
        }
        let next = next.unwrap_or(0);
        if self.expect < next {
            return LogVerdict::Broken {
                seq: self.expect,
                why: format!(
                    "entries {} to {} are missing: the log ends before them but its head records them",
                    self.expect,
                    next - 1
                ),
            };
        }
        if self.expect > next {
            return LogVerdict::Broken {
                seq: next,
                why: format!(
                    "entry {next} is present but the head records the log ending before it"
                ),
            };
        }
        let recorded = head.unwrap_or([0; 32]);
        let reached = if self.entries == 0 && self.checkpoint.is_none() {
            [0; 32]
        } else {
            self.prev
        };
        if recorded != reached {
            return LogVerdict::Broken {
                seq: next.saturating_sub(1),
                why: "the newest entry's hash differs from the head recorded in meta".into(),
            };
        }
        LogVerdict::Intact {
            entries: self.entries,
            checkpoint: self.checkpoint,
        }
    }
}
