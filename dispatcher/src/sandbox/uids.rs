//! One uid per run in flight (CONTRACT §10.1 "nor to another run's files"), for a command
//! runner that runs as root: runs switch to `base`, `base + 1`, …, `base + size - 1`, never
//! two runs at once on the same uid, so one run cannot read another's private directory,
//! its stdin pipe through `/proc/<pid>/fd`, or signal its processes.
//!
//! Before a uid is handed out again it is swept: a process switched to that uid sends
//! `SIGKILL` to every process that uid can signal (`kill -KILL -1`), so nothing a run left
//! behind — even a process that escaped its supervisor — outlives it into the next run on
//! that uid; then every file or directory that uid owns at the top of the shared scratch
//! directories (the runs' temp root, `/tmp`, `/var/tmp`, `/dev/shm`) is removed, so no
//! file planted by one run is read by the next run on that uid. A uid whose sweep fails is
//! never handed out again (the runner refuses runs once none is left: fail-closed).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The free uids of a runner.
#[derive(Debug)]
pub struct UidPool {
    free: Mutex<Vec<u32>>,
    /// Directories any uid may write to; what a swept uid owns at their top is removed.
    scratch: Vec<PathBuf>,
}

/// The world-writable directories a run could leave files in, besides the runs' temp root.
const SHARED_SCRATCH: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// `base` and `size` do not give a range of uids that hooks may run as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--run-as-uid {base} with --max-runs {size}: runs take the uids {base}..{base}+{size}, which must be above 0 and below 4294967295"
)]
pub struct BadUidRange {
    pub base: u32,
    pub size: usize,
}

impl UidPool {
    /// The pool of `size` uids from `base` (refused when it would hold uid 0 or overflow);
    /// `tmp_root` is where the runs' private directories are made.
    pub fn new(base: u32, size: usize, tmp_root: &Path) -> Result<UidPool, BadUidRange> {
        let bad = BadUidRange { base, size };
        let size32 = u32::try_from(size).map_err(|_| bad.clone())?;
        if base == 0 || size == 0 || base.checked_add(size32).is_none_or(|end| end == u32::MAX) {
            return Err(bad);
        }
        // Popped from the end: the lowest uids first.
        let mut scratch = vec![tmp_root.to_path_buf()];
        for d in SHARED_SCRATCH.map(PathBuf::from) {
            if !scratch.contains(&d) {
                scratch.push(d);
            }
        }
        Ok(UidPool {
            free: Mutex::new((base..base + size32).rev().collect()),
            scratch,
        })
    }

    /// A uid no other run holds, or `None` when every one is taken (or lost to a failed
    /// sweep).
    pub fn take(&self) -> Option<u32> {
        self.lock().pop()
    }

    /// Sweeps `uid` (see the module docs) and, when that worked, makes it free again.
    pub async fn give_back(&self, uid: u32) {
        let swept = match sweep(uid).await {
            Ok(()) => {
                let scratch = self.scratch.clone();
                tokio::task::spawn_blocking(move || remove_owned(&scratch, uid))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
            }
            Err(e) => Err(e),
        };
        match swept {
            Ok(()) => self.lock().push(uid),
            Err(e) => tracing::error!(
                uid, error = %e,
                "command runner: could not sweep a run's uid; it is not used again"
            ),
        }
    }

    /// How many uids are free.
    pub fn free(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes what `uid` owns at the top of each of `dirs` (never following a symlink; a
/// directory that does not exist is skipped).
fn remove_owned(dirs: &[PathBuf], uid: u32) -> std::io::Result<()> {
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.uid() != uid {
                continue;
            }
            let path = entry.path();
            let removed = if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::other(format!("{}: {e}", path.display())));
                }
            }
        }
    }
    Ok(())
}

/// Kills every process of `uid`: `sh -c 'kill -KILL -1'` switched to `uid` (and gid `uid`,
/// no supplementary groups) signals every process it may, which is exactly that uid's.
async fn sweep(uid: u32) -> std::io::Result<()> {
    let status = tokio::process::Command::new("sh")
        .args(["-c", "kill -KILL -1 2>/dev/null; exit 0"])
        .env_clear()
        .env("PATH", crate::handlers::command::SAFE_PATH)
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("sweep exited with {status}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_must_hold_no_root_and_not_overflow() {
        assert!(UidPool::new(0, 4, Path::new("/tmp")).is_err());
        assert!(UidPool::new(1, 0, Path::new("/tmp")).is_err());
        assert!(UidPool::new(u32::MAX - 2, 4, Path::new("/tmp")).is_err());
        assert!(
            UidPool::new(u32::MAX - 4, 4, Path::new("/tmp")).is_err(),
            "u32::MAX is (uid_t)-1"
        );
        let e = UidPool::new(0, 4, Path::new("/tmp"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--run-as-uid 0") && e.contains("--max-runs 4"),
            "{e}"
        );
    }

    #[test]
    fn uids_are_handed_out_once_each_lowest_first() {
        let p = UidPool::new(100_000, 3, Path::new("/tmp")).unwrap();
        assert_eq!(
            [p.take(), p.take(), p.take(), p.take()],
            [Some(100_000), Some(100_001), Some(100_002), None]
        );
        assert_eq!(p.free(), 0);
    }

    #[test]
    fn the_sweep_removes_only_what_the_uid_owns_at_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let me = unsafe { libc::geteuid() };
        std::fs::write(dir.path().join("mine"), "x").unwrap();
        std::fs::create_dir_all(dir.path().join("mine-dir/deep")).unwrap();
        std::fs::write(dir.path().join("mine-dir/deep/f"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).unwrap();
        remove_owned(
            &[dir.path().to_path_buf(), dir.path().join("absent")],
            me + 1,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            3,
            "another uid's: kept"
        );
        remove_owned(&[dir.path().to_path_buf()], me).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(
            std::path::Path::new("/etc/hostname").exists(),
            "a link is not followed"
        );
    }
}
