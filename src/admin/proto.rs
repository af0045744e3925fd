//! The admin socket's wire format, shared by the relay (server) and `relay-tool` (client).
//!
//! One request per connection:
//! - client → relay: one request line (at most [`MAX_REQUEST_LINE`] bytes, `\n`-terminated):
//!   `backup`, `backup-kept CHECKSUM [file TEXT...]`, `stats`, `log [LIMIT]`, `dump [partition NAME] [with-wire]`, `log-verify`,
//!   `hosts [name NAME] [revoked] [idle-for MS]`, `revoke TARGET [purge] [reason TEXT...]`,
//!   `purge TARGET [reason TEXT...]`, `invite HASH CREATED_MS EXPIRES_MS [note TEXT...]`,
//!   `deny host TARGET|client ID TTL_MS [note TEXT...]`;
//! - relay → client: a status line, `ok\n` or `error <reason>\n` (then the connection closes);
//!   after `ok`, a stream of frames (a 4-byte big-endian length, then that many bytes, each at
//!   most [`MAX_FRAME`]), an empty frame marking the end, and a final line `done <json>\n` or
//!   `error <reason>\n` saying whether the stream is complete.
//!
//! The final line exists because a stream cut short must never pass for a complete one.

use relay_keyspace::PARTITIONS;

use super::line::one_line;

/// The socket's file name inside the store directory.
pub(crate) const SOCKET_NAME: &str = "admin.sock";
/// Longest request line accepted (bytes, newline included).
pub(crate) const MAX_REQUEST_LINE: usize = 1024;
/// Largest data frame either side writes or accepts.
pub(crate) const MAX_FRAME: usize = 256 * 1024;
/// Longest status or final line accepted by the client.
pub(crate) const MAX_STATUS_LINE: usize = 64 * 1024;
/// Most relay-log entries a `log` request returns (newest first).
pub const MAX_LOG_LIMIT: usize = 1000;

/// One admin request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Stream one consistent backup file. The relay log records it only on
    /// [`Request::BackupKept`]: a stream is not yet a backup anyone kept.
    Backup,
    /// The client kept the backup this relay streamed with this checksum: written, fsync'd and
    /// verified (or, streamed on, every byte passed on and its whole-stream checksum matched).
    /// The relay then records it in its relay log (`mbx_relay_last_backup_timestamp_seconds`).
    BackupKept {
        /// The streamed backup's checksum (64 hex digits, the `done` line's `checksum`).
        checksum: String,
        /// Where the client kept it (a file name, or `stdout`), for the log entry.
        file: String,
    },
    /// Whole-store figures, one JSON object.
    Stats,
    /// The relay log, newest first, as JSON lines.
    Log {
        /// Most entries to send.
        limit: usize,
    },
    /// The store as JSON lines (the keyspace's dump format).
    Dump {
        /// Only this partition (by name).
        partition: Option<String>,
        /// Include wire bytes (base64).
        with_wire: bool,
    },
    /// The enrolments as JSON lines, one per enrolment ([`super::hosts`]).
    Hosts(super::hosts::HostsQuery),
    /// Recompute the relay log's hash chain; the verdict is the final line's JSON.
    LogVerify,
    /// Revoke and/or purge one key (`revoke`: revoke, purge if `purge`; `purge`: purge only).
    Revoke(crate::admin::revoke::Action),
    /// The relay processes serving the store ([`relay_store::ProcessRow`]), as JSON lines.
    Processes,
    /// Store an enrolment invite (its code's hash only).
    Invite(relay_store::Invite),
    /// Add a deny-list entry (a host entry revokes the host too).
    Deny(crate::admin::deny::DenyAction),
}

impl Request {
    /// The request line (without the newline) that [`Request::parse`] reads back.
    pub(crate) fn to_line(&self) -> String {
        match self {
            Request::Backup => "backup".to_string(),
            Request::BackupKept { checksum, file } if file.is_empty() => {
                format!("backup-kept {checksum}")
            }
            Request::BackupKept { checksum, file } => {
                format!("backup-kept {checksum} file {}", one_line(file))
            }
            Request::Stats => "stats".to_string(),
            Request::Processes => "processes".to_string(),
            Request::Log { limit } => format!("log {limit}"),
            Request::Dump {
                partition,
                with_wire,
            } => {
                let mut line = "dump".to_string();
                if let Some(p) = partition {
                    line.push_str(" partition ");
                    line.push_str(p);
                }
                if *with_wire {
                    line.push_str(" with-wire");
                }
                line
            }
            Request::Hosts(q) => format!("hosts{}", q.to_words()),
            Request::LogVerify => "log-verify".to_string(),
            Request::Revoke(a) => {
                let mut line = if a.revoke { "revoke " } else { "purge " }.to_string();
                line.push_str(&a.target);
                if a.revoke && a.purge {
                    line.push_str(" purge");
                }
                if !a.reason.is_empty() {
                    line.push_str(" reason ");
                    line.push_str(&one_line(&a.reason));
                }
                line
            }
            Request::Invite(i) => format!("invite {}", super::invite::to_words(i)),
            Request::Deny(a) => format!("deny {}", super::deny::to_words(a)),
        }
    }

    /// Parse a request line (trailing `\n` / `\r\n` allowed).
    ///
    /// # Errors
    /// A short reason naming what is wrong; never panics on any input.
    pub fn parse(line: &[u8]) -> Result<Request, String> {
        if line.len() > MAX_REQUEST_LINE {
            return Err(format!("request line longer than {MAX_REQUEST_LINE} bytes"));
        }
        let text = std::str::from_utf8(line).map_err(|_| "request is not UTF-8".to_string())?;
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        let mut words = text.split(' ');
        let verb = words.next().unwrap_or("");
        let rest: Vec<&str> = words.collect();
        match verb {
            "backup" if rest.is_empty() => Ok(Request::Backup),
            "backup-kept" => parse_backup_kept(&rest),
            "stats" if rest.is_empty() => Ok(Request::Stats),
            "processes" if rest.is_empty() => Ok(Request::Processes),
            "log" => match rest.as_slice() {
                [] => Ok(Request::Log {
                    limit: MAX_LOG_LIMIT,
                }),
                [n] => match n.parse::<usize>() {
                    Ok(limit) if (1..=MAX_LOG_LIMIT).contains(&limit) => Ok(Request::Log { limit }),
                    _ => Err(format!("log limit must be 1..={MAX_LOG_LIMIT}")),
                },
                _ => Err("usage: log [LIMIT]".to_string()),
            },
            "dump" => parse_dump(&rest),
            "hosts" => super::hosts::HostsQuery::parse(&rest).map(Request::Hosts),
            "log-verify" if rest.is_empty() => Ok(Request::LogVerify),
            "revoke" | "purge" => parse_revoke(verb == "revoke", &rest),
            "invite" => super::invite::parse(&rest).map(Request::Invite),
            "deny" => super::deny::parse(&rest).map(Request::Deny),
            "backup" | "stats" | "log-verify" | "processes" => Err(format!("{verb} takes no arguments")),
            _ => Err(
                "unknown request (expected backup, backup-kept, stats, log, dump, hosts, log-verify, revoke, purge, processes, invite or deny)"
                    .to_string(),
            ),
        }
    }
}

fn parse_dump(words: &[&str]) -> Result<Request, String> {
    let mut partition = None;
    let mut with_wire = false;
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "partition" if partition.is_none() => {
                let name = words.get(i + 1).ok_or("partition needs a name")?;
                partition = Some(check_partition(name)?);
                i += 2;
            }
            "with-wire" if !with_wire => {
                with_wire = true;
                i += 1;
            }
            _ => return Err("usage: dump [partition NAME] [with-wire]".to_string()),
        }
    }
    Ok(Request::Dump {
        partition,
        with_wire,
    })
}

/// `CHECKSUM [file TEXT...]` (64 lower-case hex digits; the file name is the rest).
fn parse_backup_kept(words: &[&str]) -> Result<Request, String> {
    let usage = || "usage: backup-kept CHECKSUM [file TEXT...]".to_string();
    let (checksum, rest) = words.split_first().ok_or_else(usage)?;
    if checksum.len() != 64
        || !checksum
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err("backup-kept: the checksum must be 64 lower-case hex digits".to_string());
    }
    let file = match rest.split_first() {
        None => String::new(),
        Some((&"file", text)) if !text.is_empty() => text.join(" "),
        _ => return Err(usage()),
    };
    Ok(Request::BackupKept {
        checksum: (*checksum).to_string(),
        file,
    })
}

/// `TARGET [purge] [reason TEXT...]` (`purge` only after `revoke`; the reason is the rest).
fn parse_revoke(revoke: bool, words: &[&str]) -> Result<Request, String> {
    let usage = || {
        if revoke {
            "usage: revoke TARGET [purge] [reason TEXT...]".to_string()
        } else {
            "usage: purge TARGET [reason TEXT...]".to_string()
        }
    };
    let (target, mut rest) = match words.split_first() {
        Some((t, rest)) if !t.is_empty() => (t.to_string(), rest),
        _ => return Err(usage()),
    };
    let mut purge = !revoke;
    if revoke && rest.first() == Some(&"purge") {
        purge = true;
        rest = &rest[1..];
    }
    let reason = match rest.split_first() {
        None => String::new(),
        Some((&"reason", text)) if !text.is_empty() => text.join(" "),
        _ => return Err(usage()),
    };
    Ok(Request::Revoke(crate::admin::revoke::Action {
        target,
        revoke,
        purge,
        reason,
    }))
}

/// Check a partition name against the store's partitions.
///
/// # Errors
/// Names the unknown partition and lists the valid ones.
pub fn check_partition(name: &str) -> Result<String, String> {
    if PARTITIONS.contains(&name) {
        Ok(name.to_string())
    } else {
        let shown: String = name.chars().take(64).collect();
        Err(format!(
            "unknown partition {shown:?} (one of: {})",
            PARTITIONS.join(", ")
        ))
    }
}

/// The 4-byte header of a frame of `len` bytes (0 ends the stream).
pub(crate) fn frame_header(len: usize) -> [u8; 4] {
    // Frames are at most MAX_FRAME, far below u32::MAX.
    (len.min(MAX_FRAME) as u32).to_be_bytes()
}

/// The length a frame header announces.
///
/// # Errors
/// When it exceeds [`MAX_FRAME`] (a peer that is not ours, or a damaged stream).
pub(crate) fn frame_len(header: [u8; 4]) -> Result<usize, String> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        Err(format!(
            "admin stream frame of {len} bytes exceeds {MAX_FRAME}"
        ))
    } else {
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let all = [
            Request::Backup,
            Request::BackupKept {
                checksum: "ab".repeat(32),
                file: String::new(),
            },
            Request::BackupKept {
                checksum: "0f".repeat(32),
                file: "/backups/relay 1.mbxbak".into(),
            },
            Request::Stats,
            Request::Processes,
            Request::Log { limit: 7 },
            Request::Dump {
                partition: None,
                with_wire: false,
            },
            Request::Dump {
                partition: Some("items".into()),
                with_wire: true,
            },
            Request::Dump {
                partition: None,
                with_wire: true,
            },
            Request::Hosts(Default::default()),
            Request::Hosts(super::super::hosts::HostsQuery {
                name: Some("a.b".into()),
                revoked: true,
                idle_for_ms: Some(86_400_000),
            }),
            Request::LogVerify,
            Request::Revoke(crate::admin::revoke::Action {
                target: "ab12-cd34".into(),
                revoke: true,
                purge: true,
                reason: "stolen laptop, see ticket 42".into(),
            }),
            Request::Revoke(crate::admin::revoke::Action {
                target: "ab12".into(),
                revoke: true,
                purge: false,
                reason: String::new(),
            }),
            Request::Revoke(crate::admin::revoke::Action {
                target: "ab12".into(),
                revoke: false,
                purge: true,
                reason: "abuse".into(),
            }),
            Request::Invite(relay_store::Invite {
                hash: [0xab; 32],
                created_ms: 1,
                expires_ms: 86_400_001,
                note: "for bob's laptop".into(),
            }),
            Request::Invite(relay_store::Invite {
                hash: [1; 32],
                created_ms: 0,
                expires_ms: 0,
                note: String::new(),
            }),
        ];
        for r in all {
            let line = format!("{}\n", r.to_line());
            assert_eq!(Request::parse(line.as_bytes()), Ok(r));
        }
        assert_eq!(
            Request::parse(b"log\r\n"),
            Ok(Request::Log {
                limit: MAX_LOG_LIMIT
            })
        );
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        for bad in [
            &b""[..],
            b"\n",
            b"BACKUP",
            b"backup now",
            b"stats x",
            b"log 0",
            b"log 1001",
            b"log -1",
            b"log 1 2",
            b"dump partition",
            b"dump partition nope",
            b"dump with-wire with-wire",
            b"dump partition items partition meta",
            b"\xff\xfe",
            b"dump  items",
            b"log-verify now",
            b"revoke",
            b"revoke ab12 reason",
            b"revoke ab12 nonsense",
            b"purge ab12 purge",
            b"purge",
            b"backup-kept",
            b"backup-kept abc",
            b"backup-kept ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB",
            b"backup-kept abababababababababababababababababababababababababababababababab file",
            b"backup-kept abababababababababababababababababababababababababababababababab x",
        ] {
            let err = Request::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad:?}");
        }
        let long = vec![b'a'; MAX_REQUEST_LINE + 1];
        assert!(Request::parse(&long).unwrap_err().contains("longer"));
    }

    #[test]
    fn frames_are_bounded() {
        assert_eq!(frame_len(frame_header(0)), Ok(0));
        assert_eq!(frame_len(frame_header(MAX_FRAME)), Ok(MAX_FRAME));
        assert!(frame_len(((MAX_FRAME + 1) as u32).to_be_bytes()).is_err());
    }
}
