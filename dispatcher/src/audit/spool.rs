//! The bounded on-disk spool of audit rows (issue 5 "Durability: nothing lost"): where
//! rows wait while the database is unreachable, and what a dispatcher replays at its next
//! start.
//!
//! Layout: a directory (`--audit-spool-dir`) of append-only files named
//! `<20-digit sequence>.jsonl`, one [`AuditRow`] as JSON per line, oldest sequence first.
//! Rows are already built (hashed, redacted, sealed), so the spool holds nothing the table
//! would not. Every append is written whole and `fsync`ed before it counts; a crash in the
//! middle of an append leaves at most one partial line at the end of the newest file,
//! which reading skips. A file is deleted only after its rows are in the database
//! ([`Spool::remove`], called by the writer). A directory is used by one process at a time
//! (an exclusive lock on `<dir>/.lock`).
//!
//! Bounded by bytes (`--audit-spool-max-bytes`): an append that would pass the bound is
//! refused whole with [`SpoolError::Full`] and writes nothing.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::row::AuditRow;

/// Extension of spool files.
const EXT: &str = "jsonl";
/// A spool file is closed and a new one started past this many bytes (so replay reads
/// and deletes in pieces of about this size).
pub const FILE_ROLL_BYTES: u64 = 4 * 1024 * 1024;

/// Errors of the spool. They name the path and what was done.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The append of `needed` bytes would pass the bound (`used` of `max` bytes in use).
    #[error(
        "audit spool full: {needed} more bytes would pass the bound ({used} of {max} bytes used)"
    )]
    Full { needed: u64, used: u64, max: u64 },
    /// File system error on `path`.
    #[error("audit spool {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error("audit spool {0} is in use by another process (lock on .lock is held)")]
    Locked(PathBuf),
    /// A row could not be encoded (should not happen: rows are plain data).
    #[error("audit spool: cannot encode a row: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SpoolError + 'a {
    move |source| SpoolError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// One spool file in the index.
#[derive(Debug, Clone)]
struct SpoolFile {
    seq: u64,
    bytes: u64,
    rows: u64,
}

/// The rows of the oldest spool file, read for replay.
#[derive(Debug)]
pub struct SpooledBatch {
    /// Sequence of the file; pass it to [`Spool::remove`] once the rows are written.
    pub seq: u64,
    /// Its complete, readable rows, in append order.
    pub rows: Vec<AuditRow>,
    /// Lines that could not be read back: a partial last line (crash mid-append) or a
    /// corrupt line. Those rows are lost; the caller counts and logs them.
    pub unreadable: u64,
}

/// The spool of one dispatcher. Not `Sync`-shared: the audit writer owns it and does
/// its blocking file I/O off the async threads.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    /// Oldest first; the open file, if any, is the last one.
    files: VecDeque<SpoolFile>,
    /// The newest file, open for appends (never a file found at open: it may end in a
    /// partial line).
    current: Option<File>,
    next_seq: u64,
    bytes: u64,
    rows: u64,
    /// Held for the spool's lifetime: the directory's exclusive lock.
    _lock: File,
}

impl Spool {
    /// Opens (creating) the spool directory `dir` bounded by `max_bytes`, takes its
    /// lock and indexes the files left by an earlier run (their rows count as spooled
    /// and are replayed first). Errors: [`SpoolError::Io`], [`SpoolError::Locked`].
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool, SpoolError> {
        std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        let lock_path = dir.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("open", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SpoolError::Locked(dir.to_owned()));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", &lock_path)(e)),
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io("read directory", dir))? {
            let entry = entry.map_err(io("read directory", dir))?;
            let name = entry.file_name();
            let Some(seq) = name
                .to_str()
                .and_then(|n| n.strip_suffix(&format!(".{EXT}")))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let data = std::fs::read(&path).map_err(io("read", &path))?;
            let rows = data.iter().filter(|b| **b == b'\n').count() as u64;
            files.push(SpoolFile {
                seq,
                bytes: data.len() as u64,
                rows,
            });
        }
        files.sort_by_key(|f| f.seq);
        let next_seq = files.last().map_or(1, |f| f.seq + 1);
        let bytes = files.iter().map(|f| f.bytes).sum();
        let rows = files.iter().map(|f| f.rows).sum();
        Ok(Spool {
            dir: dir.to_owned(),
            max_bytes,
            files: files.into(),
            current: None,
            next_seq,
            bytes,
            rows,
            _lock: lock,
        })
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes in the spool files now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Complete rows in the spool files now.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// No spool file at all.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}.{EXT}"))
    }

    /// Appends `rows` (one JSON line each) to the newest file, starting a new file past
    /// [`FILE_ROLL_BYTES`], and `fsync`s before returning. All or nothing: on
    /// [`SpoolError::Full`] nothing is written; on an I/O error the file is cut back to
    /// its length before the append and closed (the next append starts a new file).
    pub fn append(&mut self, rows: &[AuditRow]) -> Result<(), SpoolError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            serde_json::to_writer(&mut buf, row)?;
            buf.push(b'\n');
        }
        let needed = buf.len() as u64;
        if self.bytes + needed > self.max_bytes {
            return Err(SpoolError::Full {
                needed,
                used: self.bytes,
                max: self.max_bytes,
            });
        }
        let roll = self.files.back().is_none_or(|f| f.bytes >= FILE_ROLL_BYTES);
        if self.current.is_none() || roll {
            let seq = self.next_seq;
            let path = self.path(seq);
            let file = OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .map_err(io("create", &path))?;
            // The new name must survive a crash too.
            if let Ok(d) = File::open(&self.dir) {
                let _ = d.sync_all();
            }
            self.next_seq += 1;
            self.current = Some(file);
            self.files.push_back(SpoolFile {
                seq,
                bytes: 0,
                rows: 0,
            });
        }
        let last = self.files.back_mut().expect("a current file is indexed");
        let path = self.dir.join(format!("{:020}.{EXT}", last.seq));
        let file = self.current.as_mut().expect("a current file is open");
        let written = file.write_all(&buf).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Never leave a partial line that the next append would run into.
            let _ = file.set_len(last.bytes);
            let _ = file.sync_data();
            self.current = None;
            return Err(io("append to", &path)(e));
        }
        last.bytes += needed;
        last.rows += rows.len() as u64;
        self.bytes += needed;
        self.rows += rows.len() as u64;
        Ok(())
    }

    /// Reads the oldest file for replay (`None` when the spool is empty). If it is the
    /// file open for appends, it is closed first, so later appends go to a new file and
    /// what is read is exactly what [`Spool::remove`] deletes.
    pub fn oldest(&mut self) -> Result<Option<SpooledBatch>, SpoolError> {
        let Some(first) = self.files.front() else {
            return Ok(None);
        };
        let seq = first.seq;
        if self.files.len() == 1 {
            self.current = None;
        }
        let path = self.path(seq);
        let data = std::fs::read(&path).map_err(io("read", &path))?;
        let mut rows = Vec::new();
        let mut unreadable = 0;
        let mut rest: &[u8] = &data;
        while !rest.is_empty() {
            match rest.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    match serde_json::from_slice::<AuditRow>(&rest[..end]) {
                        Ok(row) => rows.push(row),
                        Err(_) => unreadable += 1,
                    }
                    rest = &rest[end + 1..];
                }
                None => {
                    // A partial last line: the crash came mid-append.
                    unreadable += 1;
                    break;
                }
            }
        }
        Ok(Some(SpooledBatch {
            seq,
            rows,
            unreadable,
        }))
    }

    /// Deletes spool file `seq` (after its rows were written) and updates the counts.
    /// Unknown sequences are ignored.
    pub fn remove(&mut self, seq: u64) -> Result<(), SpoolError> {
        let Some(i) = self.files.iter().position(|f| f.seq == seq) else {
            return Ok(());
        };
        if i + 1 == self.files.len() {
            self.current = None;
        }
        let path = self.path(seq);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("delete", &path)(e)),
        }
        let f = self.files.remove(i).expect("index checked");
        self.bytes -= f.bytes;
        self.rows -= f.rows;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::row::{AuditMetadata, dedup_key};
    use crate::handlers::Outcome;
    use agenthooks_crds::HookEvent;
    use chrono::Utc;

    fn row(n: usize) -> AuditRow {
        AuditRow {
            id: None,
            hook_uid: "uid-1".into(),
            hook_namespace: "team-a".into(),
            hook_name: "h".into(),
            tenant: "acme".into(),
            session_id: "s".into(),
            event: HookEvent::PreToolUse,
            input_hash: "0".repeat(64),
            decision: Outcome::Allow,
            duration_ms: 1,
            dedup_key: dedup_key("uid-1", &format!("evt-{n}")),
            error: None,
            error_detail: None,
            metadata: AuditMetadata::default().to_value(),
            created_at: Utc::now(),
        }
    }

    fn rows(range: std::ops::Range<usize>) -> Vec<AuditRow> {
        range.map(row).collect()
    }

    fn keys(b: &SpooledBatch) -> Vec<String> {
        b.rows.iter().map(|r| r.dedup_key.clone()).collect()
    }

    fn line_len() -> u64 {
        serde_json::to_vec(&row(0)).unwrap().len() as u64 + 1
    }

    #[test]
    fn append_then_replay_oldest_first_and_delete_after_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(s.is_empty());
        s.append(&rows(0..3)).unwrap();
        assert_eq!(s.rows(), 3);
        // The open file is sealed by reading it: the next append starts a new file.
        let first = s.oldest().unwrap().unwrap();
        assert_eq!(keys(&first), ["uid-1:evt-0", "uid-1:evt-1", "uid-1:evt-2"]);
        assert_eq!(first.unreadable, 0);
        s.append(&rows(3..5)).unwrap();
        assert_eq!(s.rows(), 5);
        // Not removed yet: the oldest is still the first file.
        let again = s.oldest().unwrap().unwrap();
        assert_eq!(again.seq, first.seq);
        s.remove(first.seq).unwrap();
        assert_eq!(s.rows(), 2);
        assert!(!s.path(first.seq).exists());
        let second = s.oldest().unwrap().unwrap();
        assert_eq!(keys(&second), ["uid-1:evt-3", "uid-1:evt-4"]);
        s.remove(second.seq).unwrap();
        assert!(s.is_empty());
        assert_eq!((s.rows(), s.bytes()), (0, 0));
        assert!(s.oldest().unwrap().is_none());
    }

    #[test]
    fn bound_refuses_a_whole_append_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let per = line_len();
        let mut s = Spool::open(dir.path(), per * 4).unwrap();
        s.append(&rows(0..3)).unwrap();
        let err = s.append(&rows(3..5)).unwrap_err();
        match err {
            SpoolError::Full { needed, used, max } => {
                assert_eq!((needed, used, max), (per * 2, per * 3, per * 4))
            }
            other => panic!("{other}"),
        }
        assert_eq!((s.rows(), s.bytes()), (3, per * 3));
        // One more fits exactly.
        s.append(&rows(3..4)).unwrap();
        assert_eq!(s.bytes(), per * 4);
        let b = s.oldest().unwrap().unwrap();
        assert_eq!(b.rows.len(), 4);
        // Space comes back after a replay.
        s.remove(b.seq).unwrap();
        s.append(&rows(10..12)).unwrap();
        assert_eq!(s.rows(), 2);
    }

    #[test]
    fn a_partial_last_line_from_a_crash_is_skipped_and_later_files_survive() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
            s.append(&rows(0..2)).unwrap();
        }
        // A crash mid-append: half a line at the end of the newest file.
        let path = dir.path().join(format!("{:020}.jsonl", 1));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        let line = serde_json::to_vec(&row(2)).unwrap();
        f.write_all(&line[..line.len() / 2]).unwrap();
        drop(f);

        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(s.rows(), 2, "only complete lines count");
        // New appends never go into the file with the partial line.
        s.append(&rows(3..4)).unwrap();
        let b = s.oldest().unwrap().unwrap();
        assert_eq!(b.seq, 1);
        assert_eq!(keys(&b), ["uid-1:evt-0", "uid-1:evt-1"]);
        assert_eq!(b.unreadable, 1);
        s.remove(1).unwrap();
        let b = s.oldest().unwrap().unwrap();
        assert_eq!((b.seq, keys(&b)), (2, vec!["uid-1:evt-3".to_string()]));
        assert_eq!(b.unreadable, 0);
    }

    #[test]
    fn files_roll_and_replay_in_sequence_order_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let per_batch = line_len() * 100;
        let batches = (FILE_ROLL_BYTES / per_batch + 2) as usize;
        {
            let mut s = Spool::open(dir.path(), 1 << 30).unwrap();
            for i in 0..batches {
                s.append(&rows(i * 100..(i + 1) * 100)).unwrap();
            }
            assert_eq!(s.files.len(), 2, "rolled past {FILE_ROLL_BYTES} bytes");
        }
        let mut s = Spool::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(s.rows(), (batches * 100) as u64);
        let mut seen = Vec::new();
        while let Some(b) = s.oldest().unwrap() {
            seen.extend(keys(&b));
            s.remove(b.seq).unwrap();
        }
        let want: Vec<String> = (0..batches * 100)
            .map(|n| format!("uid-1:evt-{n}"))
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_second_process_cannot_share_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let _s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(matches!(
            Spool::open(dir.path(), 1 << 20),
            Err(SpoolError::Locked(_))
        ));
    }
}
