//! The backup file reader: `relay_keyspace::verify_backup` (and, for files it accepts,
//! `restore_backup` into a fresh directory) on mutated backups, written to a temporary file.
//!
//! Input: first byte picks a mode; the rest is the file. Mode 0 writes it as is (checksums
//! mostly fail early). Modes 1 and 2 first repair every checksum the harness can find by walking
//! the documented layout (mode 2 also rewrites the trailer counts), so mutations of lengths,
//! partitions, keys, values and the header reach the code behind the checksums.
//! Oracles: no panic, no unbounded allocation; an accepted file's summary matches its size and
//! restoring it either works or fails with an error (never a panic).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use relay_keyspace::{restore_backup, verify_backup};
use sha2::{Digest, Sha256};

const MAGIC_LEN: usize = 8;
/// Partitions of the newest backup format (3); older formats list fewer.
const MAX_PARTS: usize = 13;

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes(s.try_into().ok()?) as usize)
}

fn put_crc(b: &mut [u8], from: usize, to: usize) -> Option<()> {
    let crc = crc32fast::hash(b.get(from..to)?);
    b.get_mut(to..to + 4)?.copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// Repair checksums (and with `counts`, the trailer counts) along the backup layout:
/// magic | format u32 | crc | header_len u32 | header | crc | records (0x01 pid klen vlen
/// head-crc key val crc) | 0xFF n counts[n] sha256. Stops where the bytes no longer fit it.
fn repair(b: &mut [u8], counts: bool) -> Option<()> {
    put_crc(b, 0, MAGIC_LEN + 4)?;
    let h = MAGIC_LEN + 8;
    let hlen = u32_at(b, h)?;
    put_crc(b, h, h.checked_add(4 + hlen)?)?;
    let mut off = h + 8 + hlen;
    let mut seen = [0u64; MAX_PARTS];
    loop {
        match *b.get(off)? {
            0x01 => {
                let pid = usize::from(*b.get(off + 1)?);
                let klen = u32_at(b, off + 2)?;
                let vlen = u32_at(b, off + 6)?;
                put_crc(b, off, off + 10)?;
                let data = off + 14;
                let end = data.checked_add(klen)?.checked_add(vlen)?;
                put_crc(b, data, end)?;
                if let Some(c) = seen.get_mut(pid) {
                    *c += 1;
                }
                off = end + 4;
            }
            0xFF => {
                let n = usize::from(*b.get(off + 1)?);
                if counts && n <= MAX_PARTS {
                    for (i, c) in seen.iter().take(n).enumerate() {
                        let at = off + 2 + 8 * i;
                        b.get_mut(at..at + 8)?.copy_from_slice(&c.to_le_bytes());
                    }
                }
                let sum_at = off + 2 + 8 * n;
                let sum: [u8; 32] = Sha256::digest(b.get(..sum_at)?).into();
                b.get_mut(sum_at..sum_at + 32)?.copy_from_slice(&sum);
                return Some(());
            }
            _ => return None,
        }
    }
}

fn scratch() -> &'static (tempfile::TempDir, PathBuf) {
    static S: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    S.get_or_init(|| {
        let d = mbx_relay_fuzz::scratch_dir("mbx-fuzz-backup-");
        let p = d.path().join("input.bak");
        (d, p)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut file = rest.to_vec();
    match mode % 3 {
        1 => drop(repair(&mut file, false)),
        2 => drop(repair(&mut file, true)),
        _ => {}
    }
    let (dir, path) = scratch();
    std::fs::write(path, &file).expect("write the input file");
    let Ok(summary) = verify_backup(path) else {
        return;
    };
    assert_eq!(summary.file_bytes, file.len() as u64);
    let target = dir.path().join("restored");
    let _ = std::fs::remove_dir_all(&target);
    let _ = restore_backup(path, &target);
    let _ = std::fs::remove_dir_all(&target);
});
