//! `relay-tool backup`: one consistent snapshot to a file (the logical format 5 of
//! `relay_store::backup`, which every backend restores), online (through the running relay) or
//! with the store opened here (a directory store: offline; a PostgreSQL store: beside its
//! relays, one REPEATABLE READ snapshot). The file appears under its name only once it is
//! complete, fsync'd and verified. FILE `-` streams the backup to stdout instead (a pipe into
//! compression or object storage), its summary on stderr; the stream is summed as it passes.
//! The relay log records a backup only once it was kept that way (online: the tool tells the
//! relay, `backup-kept`), so the last-backup metric never counts a backup that failed.

use std::path::Path;

use mbx_relay::admin::proto::Request;
use mbx_relay::admin::report::backup_log_detail;
use mbx_relay::store_open::verify_backup_file as verify_backup;
use relay_store::BackupSummary;

use crate::access::{self, Via};
use crate::fail::{Code, Failure};
use crate::files::AtomicFile;
use crate::progress::{self, Counting};
use crate::show;
use crate::stream_sum::Summed;

/// Run the command; prints the counts and checksum on success (one JSON object with `json`).
/// An existing FILE is refused (exit 2) unless `force`, before the store is asked for anything.
///
/// # Errors
/// FILE exists, store access, I/O on the file, the relay's refusal, or a written file that
/// does not verify.
pub(crate) fn run(
    target: &access::Target,
    file: &Path,
    force: bool,
    json: bool,
) -> Result<(), Failure> {
    if file == Path::new("-") {
        return to_stdout(target, json);
    }
    refuse_existing(file, force)?;
    let via = access::relay_or_store(target, &Request::Backup)?;
    let mut out = AtomicFile::create(file)?;
    let bar = progress::bytes("backing up");
    let (summary, how) = match via {
        Via::Relay(mut reply) => {
            let mut counting = Counting {
                inner: &mut out,
                bar: &bar,
                written: 0,
            };
            let copied = std::io::copy(&mut reply, &mut counting);
            bar.finish_and_clear();
            copied.map_err(|e| Failure::io("cannot stream the backup into", out.tmp_path(), &e))?;
            let done = reply
                .finish()
                .map_err(|e| Failure::from(e).context("the relay could not finish the backup"))?;
            out.sync()?;
            let summary = check(&out, done["checksum"].as_str().unwrap_or(""))?;
            out.commit()?;
            record_kept(target, &summary.checksum, &file.display().to_string())?;
            (
                summary,
                "online, through the running relay (recorded in its relay log)",
            )
        }
        Via::Local(store) => {
            // The store's figures give the size to come (the relay log's entries aside), so
            // this bar has a total and the time left; the online stream above has neither.
            bar.finish_and_clear();
            let records = progress::bytes_of("backing up", estimated_bytes(&store));
            let hidden = indicatif::ProgressBar::hidden();
            let written = {
                let mut counting = Counting {
                    inner: &mut out,
                    bar: &hidden,
                    written: 0,
                };
                store.backup_to(&mut counting, &mut |n| progress::advance(&records, n))
            };
            records.finish_and_clear();
            let summary = written?;
            out.sync()?;
            let checked = check(&out, &summary.checksum)?;
            out.commit()?;
            let (detail, how) = if target.shared() {
                (
                    format!("backup by relay-tool to {}", file.display()),
                    "from the database beside its relays (recorded in the relay log)",
                )
            } else {
                (
                    format!("offline backup by relay-tool to {}", file.display()),
                    "offline, no relay was running (recorded in the relay log)",
                )
            };
            let detail = backup_log_detail(&checked, &detail);
            store.log_op("backup", &detail).wait().map_err(|e| {
                Failure::from(e).context("backup written, but recording it in the relay log failed")
            })?;
            access::close(store)?;
            (checked, how)
        }
    };
    if json {
        let mut v = show::summary_json(&summary);
        v["file"] = file.display().to_string().into();
        v["how"] = how.into();
        println!("{v}");
    } else {
        println!("backup written: {} ({how})", file.display());
        print!("{}", show::summary(&summary));
    }
    Ok(())
}

/// `backup -`: the stream on stdout, the summary (or with `json` its JSON object) on stderr. No
/// file is left to verify here: the stream carries its checksums, and `relay-tool verify`
/// checks the stored copy. A terminal is refused (a backup is binary).
fn to_stdout(target: &access::Target, json: bool) -> Result<(), Failure> {
    use std::io::{IsTerminal as _, Write as _};
    if std::io::stdout().is_terminal() {
        return Err(Failure::new(
            Code::Usage,
            "backup -: stdout is a terminal; pipe it (`| zstd > relay.mbxbak.zst`) or give a FILE",
        ));
    }
    let via = access::relay_or_store(target, &Request::Backup)?;
    let mut out = Summed::new(std::io::BufWriter::with_capacity(
        1 << 20,
        std::io::stdout().lock(),
    ));
    let write_err =
        |e: std::io::Error| Failure::new(Code::Store, format!("writing the backup to stdout: {e}"));
    let (mut v, how) = match via {
        Via::Relay(mut reply) => {
            std::io::copy(&mut reply, &mut out).map_err(write_err)?;
            out.flush().map_err(write_err)?;
            let done = reply
                .finish()
                .map_err(|e| Failure::from(e).context("the relay could not finish the backup"))?;
            let checksum = done["checksum"].as_str().unwrap_or("");
            passed_whole(&out, checksum)?;
            record_kept(target, checksum, "stdout")?;
            (
                done,
                "online, through the running relay (recorded in its relay log)",
            )
        }
        Via::Local(store) => {
            let summary = store.backup_to(&mut out, &mut |_| {})?;
            out.flush().map_err(write_err)?;
            passed_whole(&out, &summary.checksum)?;
            let detail = if target.shared() {
                "backup by relay-tool to stdout"
            } else {
                "offline backup by relay-tool to stdout"
            };
            let detail = backup_log_detail(&summary, detail);
            store.log_op("backup", &detail).wait().map_err(|e| {
                Failure::from(e).context("backup written, but recording it in the relay log failed")
            })?;
            access::close(store)?;
            (
                show::summary_json(&summary),
                "with the store opened here (recorded in the relay log)",
            )
        }
    };
    if json {
        v["file"] = "-".into();
        v["how"] = how.into();
        eprintln!("{v}");
    } else {
        eprintln!(
            "backup written to stdout ({how}), checksum {}",
            v["checksum"].as_str().unwrap_or("-")
        );
    }
    Ok(())
}

/// The stream passed to stdout ends with the whole-stream sum the writer made (`checksum`).
fn passed_whole<W: std::io::Write>(out: &Summed<W>, checksum: &str) -> Result<(), Failure> {
    if out.matches(checksum) {
        Ok(())
    } else {
        Err(Failure::new(
            Code::Backup,
            "the stream passed to stdout is not what was written (checksums differ); not recorded as a backup",
        ))
    }
}

/// Tell the relay that streamed it that its backup was kept (fsync'd and verified, or passed
/// on whole): only then does its relay log record the backup, which
/// `mbx_relay_last_backup_timestamp_seconds` reports.
fn record_kept(target: &access::Target, checksum: &str, file: &str) -> Result<(), Failure> {
    let request = Request::BackupKept {
        checksum: checksum.to_string(),
        file: file.to_string(),
    };
    let recorded = match target.ask_relay(&request) {
        Ok(Some(reply)) => reply.finish().map(|_| ()).map_err(Failure::from),
        Ok(None) => Err(Failure::new(Code::Store, "the relay no longer answers")),
        Err(f) => Err(f),
    };
    recorded.map_err(|f| {
        f.context(&format!(
            "backup kept as {file}, but the relay did not record it in its relay log"
        ))
    })
}

/// An existing FILE (or a link there) is kept unless `--force`: a backup named like
/// yesterday's must not silently replace it.
fn refuse_existing(file: &Path, force: bool) -> Result<(), Failure> {
    match std::fs::symlink_metadata(file) {
        Ok(m) if m.is_dir() => Err(Failure::new(
            Code::Usage,
            format!(
                "{} is a directory; give a file name for the backup",
                file.display()
            ),
        )),
        Ok(_) if !force => Err(Failure::new(
            Code::Usage,
            format!(
                "{} exists; refusing to overwrite it (give --force to replace it)",
                file.display()
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Failure::io("cannot check", file, &e)),
    }
}

/// Bytes a backup of `store` will take, from its figures: the queued bytes plus a record's
/// framing and keys per row (0 when the figures cannot be read: the bar then grows as it goes).
fn estimated_bytes(store: &relay_store::SharedStore) -> u64 {
    /// About what one row costs beside its payload (keys, seqs, times, framing, checksum).
    const PER_RECORD: u64 = 160;
    store.stats().map_or(0, |s| {
        let rows = s.live_enrolments
            + s.revoked_enrolments
            + s.queued.items
            + s.dedup_rows
            + s.enc_ads_v1
            + s.enc_ads_v2;
        s.queued.bytes + rows * PER_RECORD
    })
}

/// Verify what was just written, and that it is what the writer produced (its checksum), before
/// it may take the final name.
fn check(out: &AtomicFile, expected_checksum: &str) -> Result<BackupSummary, Failure> {
    let summary = verify_backup(out.tmp_path()).map_err(|e| {
        Failure::from(e).context("the backup just written does not verify (nothing was kept)")
    })?;
    if summary.checksum != expected_checksum {
        return Err(Failure::new(
            Code::Backup,
            "the file on disk is not what was written (checksums differ; nothing was kept)",
        ));
    }
    Ok(summary)
}
