//! The whole-stream check of a backup passed on to stdout (`relay-tool backup -`): a file on
//! disk is verified by reading it back, but bytes handed to a pipe cannot be read again, so
//! they are summed as they pass. A backup ends with the SHA-256 of every byte before those 32,
//! so the stream is whole and unaltered when that sum, the last 32 bytes and the writer's
//! checksum agree.

use std::io::{self, Write};

use sha2::{Digest, Sha256};

/// Length of the closing SHA-256.
const SUM: usize = 32;

/// A writer that passes every byte on and sums all but the last [`SUM`] of them.
pub(crate) struct Summed<W> {
    inner: W,
    sha: Sha256,
    /// The last bytes written (at most [`SUM`]), not yet summed.
    tail: Vec<u8>,
}

impl<W: Write> Summed<W> {
    pub(crate) fn new(inner: W) -> Self {
        Summed {
            inner,
            sha: Sha256::new(),
            tail: Vec::with_capacity(2 * SUM),
        }
    }

    /// True when the bytes passed on end with the SHA-256 of the bytes before them and that
    /// sum is `checksum` (lower-case hex).
    pub(crate) fn matches(&self, checksum: &str) -> bool {
        if self.tail.len() != SUM {
            return false;
        }
        let sum: [u8; SUM] = self.sha.clone().finalize().into();
        sum[..] == self.tail[..] && hex(&sum) == checksum
    }

    fn sum(&mut self, passed: &[u8]) {
        if passed.len() >= SUM {
            self.sha.update(&self.tail);
            let (body, last) = passed.split_at(passed.len() - SUM);
            self.sha.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(last);
        } else {
            self.tail.extend_from_slice(passed);
            let over = self.tail.len().saturating_sub(SUM);
            self.sha.update(&self.tail[..over]);
            self.tail.drain(..over);
        }
    }
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(body: &[u8]) -> Vec<u8> {
        let mut s = body.to_vec();
        s.extend_from_slice(&Sha256::digest(body));
        s
    }

    #[test]
    fn a_whole_stream_matches_in_any_write_sizes_and_a_changed_or_cut_one_does_not() {
        let body: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let good = stream(&body);
        let checksum = hex(&Sha256::digest(&body));
        for step in [1, 5, 31, 32, 33, 1000, good.len()] {
            let mut w = Summed::new(Vec::new());
            for piece in good.chunks(step) {
                w.write_all(piece).unwrap();
            }
            assert!(w.matches(&checksum), "write size {step}");
            assert_eq!(w.inner, good);
        }
        let mut changed = good.clone();
        changed[100] ^= 1;
        let mut w = Summed::new(Vec::new());
        w.write_all(&changed).unwrap();
        assert!(!w.matches(&checksum));
        let mut w = Summed::new(Vec::new());
        w.write_all(&good[..good.len() - 1]).unwrap();
        assert!(!w.matches(&checksum));
        let mut w = Summed::new(Vec::new());
        w.write_all(&good).unwrap();
        assert!(!w.matches(&"00".repeat(32)), "another writer's checksum");
    }
}
