//! The relay side of the admin socket: an owner-only Unix socket in the store directory through
//! which `relay-tool` takes online backups and reads the store while the relay holds its lock.
//!
//! Every blocking store call runs in `spawn_blocking`; its output reaches the socket through a
//! bounded channel, so a slow or vanished client stalls (then aborts) only its own request.

use std::collections::VecDeque;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_store::{BackupSummary, Clock, DumpOptions, SharedStore, SystemClock};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use super::line::one_line;
use super::proto::{frame_header, Request, MAX_FRAME, MAX_REQUEST_LINE, SOCKET_NAME};
use super::report::{backup_log_detail, log_verdict_json, op_json, stats_json, summary_json};
use relay_core::Revoker;

/// Requests served at once; more get `error busy` (a backup holds a snapshot and a thread).
const MAX_CONCURRENT: usize = 4;
/// Time a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client may take to accept one frame before its request is abandoned.
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
/// Size of the chunks the blocking side hands to the socket writer.
const CHUNK: usize = 64 * 1024;
/// Streamed backups remembered until their client says it kept them (`backup-kept`); the
/// oldest is forgotten beyond this (a client that never confirms costs nothing more).
const MAX_UNCONFIRMED_BACKUPS: usize = 8;

/// Start serving the admin socket at `<store_dir>/admin.sock` for `store`.
///
/// A leftover socket from an earlier run is removed (the caller holds the store lock, so no other
/// relay can be using it). The socket is created mode 0600 inside a private 0700 directory and
/// then moved into place, so it is never reachable by others, even briefly. Only peers with this
/// process's uid are served. The socket file is removed when the task ends or is aborted.
/// Must be called from inside a tokio runtime.
///
/// # Errors
/// When the store directory is missing or unwritable, when `admin.sock` exists and is not a
/// socket, or when the socket path is too long for a Unix socket address.
pub fn spawn(store: SharedStore, store_dir: &Path) -> io::Result<JoinHandle<()>> {
    spawn_with(store, store_dir, None, None)
}

/// [`spawn`] for a serving relay: with its [`Revoker`] the socket also serves `revoke` and
/// `purge` (without one they are refused: expiry notices need the relay key), and `stats` also
/// reports its `--max-enrolments`.
///
/// # Errors
/// As [`spawn`].
pub(crate) fn spawn_with(
    store: SharedStore,
    store_dir: &Path,
    revoker: Option<Revoker>,
    max_enrolments: Option<u64>,
) -> io::Result<JoinHandle<()>> {
    let path = store_dir.join(SOCKET_NAME);
    relay_os::private::remove_stale_socket(&path)?;
    let listener = relay_os::private::bind_private_socket(store_dir, &path)?;
    let meta = std::fs::symlink_metadata(&path)?;
    let guard = SocketFile {
        path: path.clone(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    tracing::info!(socket = %path.display(), "admin socket listening");
    let ctx = Arc::new(Ctx {
        store,
        revoker,
        max_enrolments,
        streamed: Mutex::default(),
    });
    Ok(tokio::spawn(accept_loop(listener, ctx, guard)))
}

/// Removes the socket file when the server task ends, unless another relay has replaced it.
struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if m.dev() == self.dev && m.ino() == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// What every connection is served from.
struct Ctx {
    store: SharedStore,
    revoker: Option<Revoker>,
    /// The serving relay's `--max-enrolments`, for `stats`.
    max_enrolments: Option<u64>,
    /// Backups streamed whose client has not yet said it kept them, newest last.
    streamed: Mutex<VecDeque<BackupSummary>>,
}

impl Ctx {
    fn streamed(&self) -> std::sync::MutexGuard<'_, VecDeque<BackupSummary>> {
        self.streamed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn accept_loop(listener: UnixListener, ctx: Arc<Ctx>, _guard: SocketFile) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
    // SAFETY: geteuid has no preconditions and cannot fail.
    let my_uid = unsafe { libc::geteuid() };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "admin socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ctx = ctx.clone();
        let slot = slots.clone().try_acquire_owned();
        tokio::spawn(async move {
            let mut stream = stream;
            // The admin's uid, for the relay log (only this process's own user is served).
            let uid = match stream.peer_cred() {
                Ok(cred) if cred.uid() == my_uid => cred.uid(),
                _ => {
                    tracing::warn!("admin socket: refused a peer with another uid");
                    let _ = send_line(&mut stream, "error permission denied: not the relay's user")
                        .await;
                    return;
                }
            };
            let Ok(_slot) = slot else {
                let _ = send_line(&mut stream, "error busy: too many admin requests at once").await;
                return;
            };
            serve(ctx, uid, stream).await;
        });
    }
}

/// One connection: read the request line, answer `ok` + stream + final line, or one error line.
async fn serve(ctx: Arc<Ctx>, uid: u32, mut stream: UnixStream) {
    let request = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut stream)).await {
        Ok(Ok(line)) => Request::parse(&line),
        Ok(Err(why)) => Err(why),
        Err(_) => Err("no request line within 10 s".to_string()),
    };
    let request = match request {
        Ok(r) => r,
        Err(why) => {
            let _ = send_line(&mut stream, &format!("error {}", one_line(&why))).await;
            return;
        }
    };
    if send_line(&mut stream, "ok").await.is_err() {
        return;
    }
    let name = request.to_line();
    let started = std::time::Instant::now();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(8);
    let job = tokio::task::spawn_blocking(move || {
        let mut out = BufWriter::with_capacity(CHUNK, ChannelWriter { tx });
        let result = run(&ctx, uid, &request, &mut out);
        let flushed = out
            .flush()
            .map_err(|e| format!("writing to the admin client: {e}"));
        result.and_then(|v| flushed.map(|()| v))
    });
    while let Some(chunk) = rx.recv().await {
        if let Err(e) = send_frames(&mut stream, &chunk).await {
            tracing::warn!(request = %name, error = %e, "admin client went away mid-stream");
            drop(rx); // the blocking side's next write fails and it stops
            let _ = job.await;
            return;
        }
    }
    let last = match job.await {
        Ok(Ok(v)) => {
            tracing::info!(request = %name, ms = started.elapsed().as_millis() as u64, "admin request served");
            format!("done {v}")
        }
        Ok(Err(why)) => {
            tracing::warn!(request = %name, error = %why, "admin request failed");
            format!("error {}", one_line(&why))
        }
        Err(_) => "error internal error in the relay (see its log)".to_string(),
    };
    let end = async {
        stream.write_all(&frame_header(0)).await?;
        stream.write_all(last.as_bytes()).await?;
        stream.write_all(b"\n").await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, end).await;
}

/// Read bytes up to the first newline, refusing more than [`MAX_REQUEST_LINE`].
async fn read_request(stream: &mut UnixStream) -> Result<Vec<u8>, String> {
    let mut line = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading request: {e}"))?;
        if n == 0 {
            return Err("connection closed before a complete request line".to_string());
        }
        if let Some(pos) = buf[..n].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..=pos]);
            return Ok(line);
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > MAX_REQUEST_LINE {
            return Err(format!("request line longer than {MAX_REQUEST_LINE} bytes"));
        }
    }
}

async fn send_line(stream: &mut UnixStream, line: &str) -> io::Result<()> {
    let write = async {
        stream.write_all(line.as_bytes()).await?;
        stream.write_all(b"\n").await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

async fn send_frames(stream: &mut UnixStream, data: &[u8]) -> io::Result<()> {
    for piece in data.chunks(MAX_FRAME) {
        let write = async {
            stream.write_all(&frame_header(piece.len())).await?;
            stream.write_all(piece).await
        };
        tokio::time::timeout(WRITE_TIMEOUT, write)
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))?;
    }
    Ok(())
}

/// A blocking `Write` that hands its bytes to the async socket writer.
struct ChannelWriter {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min(CHUNK);
        self.tx
            .blocking_send(buf[..n].to_vec())
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "admin client went away"))?;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Run one request against the store (blocking); the JSON goes on the final `done` line.
fn run(ctx: &Ctx, uid: u32, request: &Request, out: &mut dyn Write) -> Result<Value, String> {
    let store = &ctx.store;
    match request {
        Request::Backup => {
            let summary = store
                .backup_to(out, &mut |_| {})
                .map_err(|e| e.to_string())?;
            out.flush()
                .map_err(|e| format!("writing to the admin client: {e}"))?;
            // Not a backup yet: the relay log records it once the client kept it
            // (`backup-kept`), so the last-backup metric never counts a file that was not
            // fsync'd and verified.
            let answer = summary_json(&summary);
            let mut streamed = ctx.streamed();
            if streamed.len() >= MAX_UNCONFIRMED_BACKUPS {
                streamed.pop_front();
            }
            streamed.push_back(summary);
            Ok(answer)
        }
        Request::BackupKept { checksum, file } => {
            let summary = {
                let mut streamed = ctx.streamed();
                let at = streamed.iter().position(|s| &s.checksum == checksum);
                at.and_then(|i| streamed.remove(i)).ok_or_else(|| {
                    format!(
                        "no backup with checksum {checksum} awaits its record here (streamed by \
                         another relay process, before a restart, or already recorded); nothing recorded"
                    )
                })?
            };
            let how = if file.is_empty() {
                "online backup through the admin socket, kept by relay-tool".to_string()
            } else {
                format!("online backup through the admin socket, kept by relay-tool as {file}")
            };
            store
                .log_op("backup", &backup_log_detail(&summary, &how))
                .wait()
                .map_err(|e| format!("recording the backup in the relay log failed: {e}"))?;
            Ok(json!({ "recorded": true, "checksum": summary.checksum }))
        }
        Request::Stats => {
            let stats = store.stats().map_err(|e| e.to_string())?;
            let v = stats_json(&stats, ctx.max_enrolments, SystemClock.now_ms());
            write_line(out, &v)?;
            Ok(json!({}))
        }
        Request::Processes => {
            let now = SystemClock.now_ms();
            let rows = store.processes().map_err(|e| e.to_string())?;
            for row in &rows {
                write_line(out, &super::report::process_json(row, now))?;
            }
            Ok(json!({ "processes": rows.len() }))
        }
        Request::Log { limit } => {
            let ops = store.ops(*limit).map_err(|e| e.to_string())?;
            for op in &ops {
                write_line(out, &op_json(op))?;
            }
            Ok(json!({ "entries": ops.len() }))
        }
        Request::Dump {
            partition,
            with_wire,
        } => {
            let opts = DumpOptions {
                partition: partition.clone(),
                with_wire: *with_wire,
            };
            let counts = store.dump(out, &opts).map_err(|e| e.to_string())?;
            Ok(json!({ "counts": counts }))
        }
        Request::Revoke(action) => {
            let revoker = ctx
                .revoker
                .as_ref()
                .ok_or("this admin socket cannot revoke or purge (no relay key)")?;
            let done = super::revoke::run(store.as_ref(), revoker, action, uid)?;
            tracing::warn!(
                key = %done["fingerprint"].as_str().unwrap_or("-"),
                revoked = %done["revoked"],
                purged_items = %done["purged_items"],
                notices = %done["notices"],
                uid,
                "admin {}", if action.revoke { "revoked a key" } else { "purged a queue" }
            );
            Ok(done)
        }
        Request::Hosts(q) => {
            super::hosts::write_hosts(store.as_ref(), q, SystemClock.now_ms(), out)
                .map_err(|e| e.to_string())
        }
        Request::LogVerify => {
            let verdict = store.verify_log().map_err(|e| e.to_string())?;
            Ok(log_verdict_json(&verdict))
        }
        Request::Deny(action) => {
            let revoker = ctx
                .revoker
                .as_ref()
                .ok_or("this admin socket cannot deny hosts (no relay key)")?;
            let done =
                super::deny::run(store.as_ref(), revoker, action, uid, SystemClock.now_ms())?;
            tracing::warn!(deny = %done["deny"].as_str().unwrap_or("-"),
                key = %done["fingerprint"].as_str().unwrap_or("-"),
                revoked = %done["revoked"], uid, "admin added a deny-list entry");
            Ok(done)
        }
        Request::Invite(invite) => {
            let done = super::invite::run(store.as_ref(), invite)?;
            tracing::info!(invite = %done["invite"].as_str().unwrap_or("-"), uid, "admin issued an enrolment invite");
            Ok(done)
        }
    }
}

fn write_line(out: &mut dyn Write, v: &Value) -> Result<(), String> {
    writeln!(out, "{v}").map_err(|e| format!("writing to the admin client: {e}"))
}

#[cfg(test)]
mod tests {
    use relay_store::RelayStore;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    use relay_keyspace::{OpenOptions, Store};

    use super::*;
    use crate::admin::client::{self, ClientError};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn serves_backup_stats_log_and_dump_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), OpenOptions::default()).unwrap();
        let rt = runtime();
        let task = rt
            .block_on(async { spawn(Arc::new(store.clone()), dir.path()) })
            .unwrap();
        let sock = dir.path().join(SOCKET_NAME);
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            !dir.path()
                .join(format!(".adm{}", std::process::id()))
                .exists(),
            "private dir removed"
        );

        let mut reply = client::request(dir.path(), &Request::Backup)
            .unwrap()
            .expect("relay answers");
        let mut bytes = Vec::new();
        reply.read_to_end(&mut bytes).unwrap();
        let done = reply.finish().unwrap();
        let file = dir.path().join("b.bak");
        std::fs::write(&file, &bytes).unwrap();
        let summary = relay_keyspace::verify_backup(&file).unwrap();
        assert_eq!(done["checksum"], summary.checksum.as_str());
        assert_eq!(done["file_bytes"], bytes.len() as u64);

        let newest_log_entry = || {
            let mut reply = client::request(dir.path(), &Request::Log { limit: 5 })
                .unwrap()
                .unwrap();
            let mut log = String::new();
            reply.read_to_string(&mut log).unwrap();
            reply.finish().unwrap();
            log.lines()
                .next()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
        };
        // Streamed is not kept: nothing is recorded until the client says it kept the file.
        assert!(newest_log_entry().is_none_or(|e| e["kind"] != "backup"));
        let kept = |checksum: &str| {
            let request = Request::BackupKept {
                checksum: checksum.to_string(),
                file: "/backups/b.bak".into(),
            };
            client::request(dir.path(), &request)
                .unwrap()
                .unwrap()
                .finish()
        };
        assert!(matches!(
            kept(&"ab".repeat(32)),
            Err(ClientError::Refused(_))
        ));
        kept(&summary.checksum).unwrap();
        let newest = newest_log_entry().unwrap();
        assert_eq!(newest["kind"], "backup");
        let detail = newest["detail"].as_str().unwrap();
        assert!(detail.contains(&summary.checksum), "{detail}");
        assert!(
            detail.contains("kept by relay-tool as /backups/b.bak"),
            "{detail}"
        );
        // Recorded once: a second confirmation of the same stream is refused.
        assert!(matches!(
            kept(&summary.checksum),
            Err(ClientError::Refused(_))
        ));

        let mut reply = client::request(dir.path(), &Request::Stats)
            .unwrap()
            .unwrap();
        let mut stats = String::new();
        reply.read_to_string(&mut stats).unwrap();
        reply.finish().unwrap();
        let stats: Value = serde_json::from_str(stats.trim()).unwrap();
        assert_eq!(stats["epoch"], store.meta().unwrap().epoch.as_str());

        let dump = Request::Dump {
            partition: Some("meta".into()),
            with_wire: false,
        };
        let mut reply = client::request(dir.path(), &dump).unwrap().unwrap();
        let mut lines = String::new();
        reply.read_to_string(&mut lines).unwrap();
        let done = reply.finish().unwrap();
        assert_eq!(done["counts"][0][0], "meta");
        assert_eq!(done["counts"][0][1], lines.lines().count() as u64);

        // A failure part-way reaches the client as a refusal on the final line, never as a
        // complete-looking stream.
        store.clone().close().unwrap();
        let reply = client::request(dir.path(), &Request::Backup)
            .unwrap()
            .unwrap();
        assert!(matches!(reply.finish(), Err(ClientError::Refused(_))));

        task.abort();
        rt.block_on(async {
            let _ = task.await;
        });
        assert!(!sock.exists(), "socket removed when the server stops");
        assert!(client::request(dir.path(), &Request::Stats)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_stale_socket_is_replaced_and_other_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), OpenOptions::default()).unwrap();
        let sock = dir.path().join(SOCKET_NAME);
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        assert!(sock.exists(), "stale socket file");
        let rt = runtime();
        let task = rt
            .block_on(async { spawn(Arc::new(store.clone()), dir.path()) })
            .unwrap();
        assert!(client::request(dir.path(), &Request::Stats)
            .unwrap()
            .is_some());
        task.abort();
        rt.block_on(async {
            let _ = task.await;
        });
        std::fs::write(&sock, b"not a socket").unwrap();
        let err = rt
            .block_on(async { spawn(Arc::new(store.clone()), dir.path()) })
            .unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
    }
}
