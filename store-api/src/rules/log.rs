//! The relay log's rules, one statement for every backend (a backup moves a log between
//! them): the chain, entry `n` storing `hash_n = SHA-256(hash_{n-1} ++ canonical_n)`, where
//! `canonical_n` is `seq u64 | at_ms u64 | len(kind) u32 | kind | len(detail) u32 | detail`
//! (integers big-endian) and the first entry of a log chains from 32 zero bytes ([`next_hash`],
//! checked by [`ChainCheck`]); which appends happen ([`admission`]); and its retention ([`Trim`]:
//! age, count cap, enrolment entries at most half of it).

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

/// An entry a rule asks the backend to append to the relay log (in the same operation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's kind ("enrol", "rotate-key", ...).
    pub kind: &'static str,
    /// Human-readable detail: fingerprints, names, counts; never keys or wire bytes.
    pub detail: String,
}

/// Whether an append of an entry of some kind happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Append it.
    Append,
    /// An enrolment entry finding the enrolment budget full: append it only when the oldest
    /// entry is an enrolment one (it then leaves for the new one). Otherwise the enrolment is not
    /// logged one by one: its enrolment row (with its time and authority) is the record, and
    /// `relay-tool hosts` lists it. (The backend reads the oldest entry only then.)
    IfOldestIsEnrolment,
}

/// Whether an entry of `kind` is appended, `held` enrolment entries being in the log.
pub fn admission(kind: &str, held: u64, keep: LogRetention) -> Admission {
    if is_enrolment_entry(kind) && held >= enrolment_budget(keep) {
        Admission::IfOldestIsEnrolment
    } else {
        Admission::Append
    }
}

/// Whether the oldest entry (of `oldest_kind`) leaves the log for the enrolment budget alone.
fn drop_for_enrolment_budget(held: u64, keep: LogRetention, oldest_kind: &str) -> bool {
    held > enrolment_budget(keep) && is_enrolment_entry(oldest_kind)
}

/// Most old entries one append drops (bounds its work; each append adds one entry, so a log
/// over its bounds still shrinks by up to this many per append).
pub const MAX_DROP_PER_APPEND: u64 = 64;

/// Which of the oldest entries leave the log after an append, decided one entry at a time from
/// the oldest on: an entry leaves while the log holds more than `keep.max_entries` (at least 1),
/// while it is older than `keep.max_age_ms` before now (0: no age bound), or while it is an
/// enrolment entry over the enrolment budget; never the newest, at most
/// [`MAX_DROP_PER_APPEND`] per append. The backend deletes each entry that leaves; the last one
/// becomes the checkpoint the chain then starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trim {
    first: u64,
    next: u64,
    cutoff: u64,
    keep: LogRetention,
    held: u64,
    dropped: u64,
}

impl Trim {
    /// After appending an entry of `appended` kind at `now_ms`: the log holds the entries
    /// `first..next` (`first`: one past the checkpoint, or 0); `held_before`: the enrolment
    /// entries it held before the append.
    pub fn after_append(
        appended: &str,
        first: u64,
        next: u64,
        now_ms: u64,
        keep: LogRetention,
        held_before: u64,
    ) -> Trim {
        let held = held_before + u64::from(is_enrolment_entry(appended));
        let cutoff = match keep.max_age_ms {
            0 => 0,
            age => now_ms.saturating_sub(age),
        };
        Trim {
            first,
            next,
            cutoff,
            keep,
            held,
            dropped: 0,
        }
    }

    /// The seq of the oldest entry, to hand to [`Trim::leaves`]; `None` once no more may leave
    /// (only the newest is left, or this append dropped its most).
    pub fn oldest(&self) -> Option<u64> {
        let more = self.next.saturating_sub(self.first) > 1 && self.dropped < MAX_DROP_PER_APPEND;
        more.then_some(self.first)
    }

    /// Whether the oldest entry, dated `at_ms` and of `kind`, leaves the log (then the next one
    /// becomes the oldest). False once [`Trim::oldest`] is `None`: stop at the first `false`.
    pub fn leaves(&mut self, at_ms: u64, kind: &str) -> bool {
        if self.oldest().is_none() {
            return false;
        }
        let count = self.next - self.first;
        let leaves = count > self.keep.max_entries.max(1)
            || at_ms < self.cutoff
            || drop_for_enrolment_budget(self.held, self.keep, kind);
        if leaves {
            if is_enrolment_entry(kind) {
                self.held = self.held.saturating_sub(1);
            }
            self.first += 1;
            self.dropped += 1;
        }
        leaves
    }

    /// How many entries left the log.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The enrolment entries left in the log.
    pub fn held(&self) -> u64 {
        self.held
    }
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

/// The hash of the entry appended as `seq` to a log whose head hash is `head` (`None`: nothing
/// was appended yet, and the entry chains from 32 zero bytes).
pub fn next_hash(
    head: Option<[u8; 32]>,
    seq: u64,
    at_ms: u64,
    kind: &str,
    detail: &str,
) -> [u8; 32] {
    chain_hash(&head.unwrap_or([0; 32]), seq, at_ms, kind, detail)
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

#[cfg(test)]
mod tests {
    use super::*;

    const KEEP: LogRetention = LogRetention {
        max_age_ms: 1_000,
        max_entries: 10,
    };

    /// The seqs that leave a log `first..next` of entries `(at_ms, kind)` (indexed from
    /// `first`) after an append of `appended` at `now_ms`, and the enrolment entries left.
    fn trim(
        entries: &[(u64, &str)],
        appended: &str,
        now_ms: u64,
        keep: LogRetention,
        held_before: u64,
    ) -> (Vec<u64>, u64) {
        let next = u64::try_from(entries.len()).unwrap();
        let mut t = Trim::after_append(appended, 0, next, now_ms, keep, held_before);
        let mut gone = Vec::new();
        while let Some(seq) = t.oldest() {
            let (at, kind) = entries[usize::try_from(seq).unwrap()];
            if !t.leaves(at, kind) {
                break;
            }
            gone.push(seq);
        }
        assert_eq!(t.dropped(), u64::try_from(gone.len()).unwrap());
        (gone, t.held())
    }

    #[test]
    fn the_log_keeps_at_most_its_entry_cap() {
        let entries = vec![(5_000, "revoke"); 12];
        let (gone, _) = trim(&entries, "revoke", 5_000, KEEP, 0);
        assert_eq!(gone, vec![0, 1], "12 entries, a cap of 10");
        let (gone, _) = trim(&entries[..10], "revoke", 5_000, KEEP, 0);
        assert!(gone.is_empty(), "the cap is inclusive");
    }

    #[test]
    fn entries_older_than_the_age_bound_leave_and_zero_means_no_age_bound() {
        let entries = [
            (3_000, "purge"),
            (3_999, "purge"),
            (4_000, "purge"),
            (5_000, "purge"),
        ];
        let (gone, _) = trim(&entries, "purge", 5_000, KEEP, 0);
        assert_eq!(gone, vec![0, 1], "older than 1 s before now leaves");
        let ageless = LogRetention {
            max_age_ms: 0,
            max_entries: 10,
        };
        assert!(trim(&entries, "purge", 5_000, ageless, 0).0.is_empty());
    }

    #[test]
    fn the_newest_entry_always_stays() {
        let entries = [(1, "purge"), (2, "purge")];
        let (gone, _) = trim(&entries, "purge", 1_000_000, KEEP, 0);
        assert_eq!(gone, vec![0]);
        let zero_cap = LogRetention {
            max_age_ms: 0,
            max_entries: 0,
        };
        assert_eq!(trim(&entries, "purge", 9, zero_cap, 0).0, vec![0]);
    }

    #[test]
    fn one_append_drops_at_most_its_share_of_old_entries() {
        let entries = vec![(0, "purge"); 200];
        let (gone, _) = trim(&entries, "purge", 1_000_000, KEEP, 0);
        assert_eq!(gone.len(), usize::try_from(MAX_DROP_PER_APPEND).unwrap());
    }

    #[test]
    fn enrolment_entries_hold_at_most_half_the_log() {
        assert_eq!(enrolment_budget(LogRetention::default()), 100_000);
        // 6 enrolment entries (the one appended among them) in a log capped at 10: budget 5.
        let mut entries = vec![(5_000, "enrol"); 2];
        entries.extend([(5_000, "revoke"), (5_000, "enrol")]);
        entries.extend([(5_000, "re-enrol"), (5_000, "enrol"), (5_000, "enrol")]);
        let (gone, held) = trim(&entries, "enrol", 5_000, KEEP, 5);
        assert_eq!(
            gone,
            vec![0],
            "the oldest enrolment entry leaves for the budget"
        );
        assert_eq!(held, 5);
        let (gone, held) = trim(&entries[2..], "enrol", 5_000, KEEP, 5);
        assert!(
            gone.is_empty(),
            "an entry of another kind is not pushed out by enrolments"
        );
        assert_eq!(held, 6);
    }

    #[test]
    fn an_enrolment_entry_at_a_full_budget_is_appended_only_in_place_of_an_older_one() {
        assert_eq!(admission("enrol", 4, KEEP), Admission::Append);
        assert_eq!(
            admission("re-enrol", 5, KEEP),
            Admission::IfOldestIsEnrolment
        );
        assert_eq!(
            admission("revoke", 99, KEEP),
            Admission::Append,
            "audit entries always go in"
        );
    }

    #[test]
    fn each_entry_chains_from_the_one_before_and_the_first_from_zero() {
        let first = next_hash(None, 0, 1, "enrol", "a");
        assert_eq!(first, chain_hash(&[0; 32], 0, 1, "enrol", "a"));
        let second = next_hash(Some(first), 1, 2, "revoke", "b");
        assert_eq!(second, chain_hash(&first, 1, 2, "revoke", "b"));
        assert_ne!(
            canonical(1, 2, "ab", "c"),
            canonical(1, 2, "a", "bc"),
            "lengths keep fields apart"
        );
    }

    #[test]
    fn a_chain_is_intact_from_its_checkpoint_to_its_head_and_broken_where_edited() {
        let cp = LogCheckpoint {
            seq: 4,
            hash: [7; 32],
        };
        let h5 = next_hash(Some(cp.hash), 5, 1, "enrol", "a");
        let h6 = next_hash(Some(h5), 6, 2, "revoke", "b");
        let mut c = ChainCheck::new(Some(cp));
        assert!(c.entry(5, 1, "enrol", "a", &h5) && c.entry(6, 2, "revoke", "b", &h6));
        assert_eq!(
            c.finish(Some(7), Some(h6)),
            LogVerdict::Intact {
                entries: 2,
                checkpoint: Some(cp)
            }
        );
        let mut c = ChainCheck::new(Some(cp));
        assert!(!c.entry(5, 1, "enrol", "edited", &h5));
        assert!(matches!(
            c.finish(Some(7), Some(h6)),
            LogVerdict::Broken { seq: 5, .. }
        ));
        let mut c = ChainCheck::new(Some(cp));
        assert!(!c.entry(6, 2, "revoke", "b", &h6), "entry 5 is missing");
        let mut c = ChainCheck::new(Some(cp));
        assert!(c.entry(5, 1, "enrol", "a", &h5));
        assert!(
            matches!(
                c.finish(Some(7), Some(h6)),
                LogVerdict::Broken { seq: 6, .. }
            ),
            "the head records an entry the log lacks"
        );
    }
}
