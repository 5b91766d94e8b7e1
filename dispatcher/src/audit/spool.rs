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
//! Owner-only: the directory is created `0700` and every file in it (spool files and
//! `.lock`) `0600` — the rows hold tenants' session ids and redacted errors. Spool
//! files left by an earlier run with wider modes are narrowed to `0600` at open (best
//! effort). An existing directory keeps its mode (it may be a mount point the
//! dispatcher does not own); its files are owner-only either way.
//!
//! Bounded by bytes (`--audit-spool-max-bytes`): an append writes every row of the batch
//! that still fits under the bound, in order, and skips (without writing) each row that
//! would pass it; [`Appended`] says how many rows were written and how many refused, so
//! the caller drops and counts exactly those. The whole bound is usable: the spool is
//! refused only rows for which there is really no room left.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

use super::row::AuditRow;

/// Extension of spool files.
const EXT: &str = "jsonl";
/// A spool file is closed and a new one started past this many bytes (so replay reads
/// and deletes in pieces of about this size).
pub const FILE_ROLL_BYTES: u64 = 4 * 1024 * 1024;
/// Mode of the spool directory when the spool creates it: owner only.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the spool creates (spool files, `.lock`): owner read/write only.
pub const FILE_MODE: u32 = 0o600;

/// Options that create (or open) a file with [`FILE_MODE`] on Unix.
fn owner_only() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    o.mode(FILE_MODE);
    o
}

/// What [`Spool::append`] did with a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Appended {
    /// Rows written and `fsync`ed.
    pub rows: usize,
    /// Rows not written: each would have passed the bound. The caller drops them.
    pub refused: usize,
    /// Bytes (JSON line) of the smallest refused row; 0 when none was refused.
    pub refused_min_bytes: u64,
}

/// Errors of the spool. They name the path and what was done. (A full spool is not an
/// error: [`Spool::append`] reports the rows it refused in [`Appended`].)
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
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
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(DIR_MODE);
        builder.create(dir).map_err(io("create directory", dir))?;
        let lock_path = dir.join(".lock");
        let lock = owner_only()
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
            narrow_mode(&path);
            let data = std::fs::read(&path).map_err(io("read", &path))?;
            let rows = data.iter().filter(|b| **b == b'\n').count() as u64;
            files.push(SpoolFile {
                seq,
                bytes: data.len() as u64,
                rows,
            });
        }
        files.sort_by_key(|f| f.seq);
        narrow_mode(&lock_path);
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

    /// [`Spool::open`], waiting up to `wait` while another process holds the directory's
    /// lock (retrying every 200 ms): a dispatcher whose predecessor on the same volume is
    /// still shutting down (flushing its queue into this spool) starts once it is gone,
    /// instead of failing. [`SpoolError::Locked`] when it is still held after `wait`.
    pub fn open_waiting(
        dir: &Path,
        max_bytes: u64,
        wait: std::time::Duration,
    ) -> Result<Spool, SpoolError> {
        use backon::{BlockingRetryable, ConstantBuilder};
        const EVERY: std::time::Duration = std::time::Duration::from_millis(200);
        // at least `wait` in all: the last retry starts no earlier than the deadline
        let tries =
            usize::try_from(wait.as_millis().div_ceil(EVERY.as_millis())).unwrap_or(usize::MAX);
        let mut logged = false;
        (|| Spool::open(dir, max_bytes))
            .retry(
                ConstantBuilder::new()
                    .with_delay(EVERY)
                    .with_max_times(tries),
            )
            .when(|e| matches!(e, SpoolError::Locked(_)))
            .notify(|_, _| {
                if !std::mem::replace(&mut logged, true) {
                    tracing::warn!(
                        spool = %dir.display(),
                        wait_s = wait.as_secs(),
                        "audit spool in use by another process (a predecessor still shutting down?); waiting for it"
                    );
                }
            })
            .call()
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

    /// Appends the rows of `rows` that fit under the bound (one JSON line each, in
    /// order; a row that would pass the bound is skipped, and a smaller one after it may
    /// still fit) to the newest file, starting a new file past [`FILE_ROLL_BYTES`], and
    /// `fsync`s before returning. [`Appended`] counts the rows written and refused. On an
    /// I/O error nothing of this call is kept: the file is cut back to its length before
    /// the append and closed (the next append starts a new file).
    pub fn append(&mut self, rows: &[AuditRow]) -> Result<Appended, SpoolError> {
        let mut done = Appended::default();
        let mut buf = Vec::with_capacity(rows.len().min(1024) * 512);
        for row in rows {
            let start = buf.len();
            serde_json::to_writer(&mut buf, row)?;
            buf.push(b'\n');
            if self.bytes + buf.len() as u64 > self.max_bytes {
                let len = (buf.len() - start) as u64;
                buf.truncate(start);
                done.refused += 1;
                if done.refused_min_bytes == 0 || len < done.refused_min_bytes {
                    done.refused_min_bytes = len;
                }
            } else {
                done.rows += 1;
            }
        }
        if done.rows == 0 {
            return Ok(done);
        }
        let needed = buf.len() as u64;
        let roll = self.files.back().is_none_or(|f| f.bytes >= FILE_ROLL_BYTES);
        if self.current.is_none() || roll {
            let seq = self.next_seq;
            let path = self.path(seq);
            let file = owner_only()
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
        let file = self.current.as_mut().expect("a current file is open");
        let written = file.write_all(&buf).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Never leave a partial line that the next append would run into.
            let _ = file.set_len(last.bytes);
            let _ = file.sync_data();
            let seq = last.seq;
            self.current = None;
            return Err(io("append to", &self.path(seq))(e));
        }
        last.bytes += needed;
        last.rows += done.rows as u64;
        self.bytes += needed;
        self.rows += done.rows as u64;
        Ok(done)
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

/// Narrows a file found in the spool directory to [`FILE_MODE`] if it is open to group
/// or others (spool files of an earlier version were `0644`). Best effort: a file the
/// dispatcher cannot chmod is still replayed.
fn narrow_mode(path: &Path) {
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(FILE_MODE));
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::row::{AuditMetadata, dedup_key};
    use crate::handlers::Outcome;
    use agenthooks_crds::HookEvent;
    use chrono::{TimeZone, Utc};

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
            // A fixed time: `Utc::now()` serializes with 0, 3, 6 or 9 fractional digits
            // (chrono's AutoSi), so line lengths — and the bound tests — would vary.
            created_at: Utc.timestamp_opt(1_764_000_000, 123_456_789).unwrap(),
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
    fn a_batch_larger_than_the_room_left_is_spooled_as_far_as_it_fits() {
        let dir = tempfile::tempdir().unwrap();
        let per = line_len();
        let mut s = Spool::open(dir.path(), per * 4 + per / 2).unwrap();
        let done = s.append(&rows(0..3)).unwrap();
        assert_eq!(
            done,
            Appended {
                rows: 3,
                refused: 0,
                refused_min_bytes: 0
            }
        );
        // Five more: one fits, four do not; only the four are refused.
        let done = s.append(&rows(3..8)).unwrap();
        assert_eq!(
            done,
            Appended {
                rows: 1,
                refused: 4,
                refused_min_bytes: per
            }
        );
        assert_eq!((s.rows(), s.bytes()), (4, per * 4));
        // "Full" is true now: less than a row of room left.
        assert!(s.max_bytes() - s.bytes() < per);
        let done = s.append(&rows(8..9)).unwrap();
        assert_eq!((done.rows, done.refused), (0, 1));
        assert_eq!(s.rows(), 4, "a refused append writes nothing");
        let b = s.oldest().unwrap().unwrap();
        assert_eq!(
            keys(&b),
            ["uid-1:evt-0", "uid-1:evt-1", "uid-1:evt-2", "uid-1:evt-3"]
        );
        assert_eq!(b.unreadable, 0);
        // Space comes back after a replay.
        s.remove(b.seq).unwrap();
        assert_eq!(s.append(&rows(10..12)).unwrap().rows, 2);
        assert_eq!(s.rows(), 2);
    }

    #[test]
    fn one_big_batch_fills_the_whole_bound() {
        // The reviewer's case: a batch far larger than the bound used to be refused whole
        // while the spool was nearly empty.
        let dir = tempfile::tempdir().unwrap();
        let per = line_len();
        let mut s = Spool::open(dir.path(), 64 * 1024).unwrap();
        let done = s.append(&rows(0..500)).unwrap();
        // Lines grow with the event number: the rows that fit are a prefix.
        let mut used = 0;
        let fit = rows(0..500)
            .iter()
            .map(|r| serde_json::to_vec(r).unwrap().len() as u64 + 1)
            .take_while(|len| {
                used += len;
                used <= 64 * 1024
            })
            .count();
        assert!(fit > 100, "{fit}");
        assert_eq!((done.rows, done.refused), (fit, 500 - fit));
        assert_eq!(s.rows(), fit as u64);
        assert!(
            s.max_bytes() - s.bytes() < per + 3,
            "less than one row of room left"
        );
    }

    #[test]
    fn a_smaller_row_after_a_refused_one_still_fits() {
        let dir = tempfile::tempdir().unwrap();
        let per = line_len();
        let mut big = row(1);
        big.error = Some("x".repeat(200));
        let big_len = serde_json::to_vec(&big).unwrap().len() as u64 + 1;
        let mut s = Spool::open(dir.path(), per * 2).unwrap();
        let done = s.append(&[row(0), big, row(2)]).unwrap();
        assert_eq!(
            done,
            Appended {
                rows: 2,
                refused: 1,
                refused_min_bytes: big_len
            }
        );
        let b = s.oldest().unwrap().unwrap();
        assert_eq!(keys(&b), ["uid-1:evt-0", "uid-1:evt-2"]);
    }

    #[cfg(unix)]
    #[test]
    fn the_directory_and_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("spool").join("audit");
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        s.append(&rows(0..2)).unwrap();
        assert_eq!(mode(&dir), 0o700, "spool directory");
        assert_eq!(
            mode(&base.path().join("spool")),
            0o700,
            "parents it created"
        );
        assert_eq!(mode(&dir.join(".lock")), 0o600, ".lock");
        let file = s.path(1);
        assert_eq!(mode(&file), 0o600, "spool file");
        drop(s);
        // A file left world-readable by an earlier version is narrowed at open.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _s = Spool::open(&dir, 1 << 20).unwrap();
        assert_eq!(mode(&file), 0o600, "narrowed at open");
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
    fn open_waiting_takes_the_directory_once_its_holder_lets_go_and_gives_up_after_the_wait() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let held = Spool::open(dir.path(), 1 << 20).unwrap();
        let t = Instant::now();
        assert!(matches!(
            Spool::open_waiting(dir.path(), 1 << 20, Duration::from_millis(500)),
            Err(SpoolError::Locked(_))
        ));
        assert!(
            t.elapsed() >= Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );

        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            drop(held);
        });
        let t = Instant::now();
        let s = Spool::open_waiting(dir.path(), 1 << 20, Duration::from_secs(10)).unwrap();
        let waited = t.elapsed();
        release.join().unwrap();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "took the lock once released: {waited:?}"
        );
        assert_eq!(s.dir(), dir.path());
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
