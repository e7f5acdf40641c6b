//! File primitives for persistence: atomic replacement (temp file, fsync,
//! rename, fsync of the directory; `tempfile`'s `persist` does not fsync),
//! the stack lock (an OS file lock the kernel releases when the holder
//! dies, on a file that records the holder), and I/O counters.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Bytes written and fsyncs issued (read by the scale harness).
#[derive(Debug, Default)]
pub struct IoCounters {
    bytes: AtomicU64,
    fsyncs: AtomicU64,
}

impl IoCounters {
    /// Counts bytes written.
    pub fn wrote(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts one fsync (file or directory).
    pub fn synced(&self) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Fsyncs issued so far.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }
}

/// Files at least this large are read by two threads (see [`read`]).
const PARALLEL_READ_MIN: usize = 1 << 20;

/// Reads a whole file, as `std::fs::read`. A large one is read in two
/// halves by two threads with positioned reads: most of a large read is
/// the kernel copying into fresh pages, which then runs on two cores. A
/// file that changes length while it is read is read again the plain way.
/// (A base checkpoint is not read whole: see [`OpenFile`].)
///
/// # Errors
/// The OS error.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    OpenFile::open(path)?.read_all()
}

/// A file open for reading, with its length when it was opened. A large
/// base checkpoint is decoded from it through small windows
/// ([`CheckpointFile::from_windows`](crate::model::CheckpointFile::from_windows)),
/// never held whole in memory.
#[derive(Debug)]
pub struct OpenFile {
    file: File,
    len: usize,
}

impl OpenFile {
    /// Opens `path`.
    ///
    /// # Errors
    /// The OS error.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(0);
        Ok(Self { file, len })
    }

    /// Whether the file still ends where it did when it was opened
    /// (nothing can be read past that length).
    pub fn unchanged(&self) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .metadata()
                .is_ok_and(|m| m.len() == self.len as u64)
                && matches!(self.file.read_at(&mut [0u8; 1], self.len as u64), Ok(0))
        }
        #[cfg(not(unix))]
        {
            false
        }
    }

    /// The whole file, as [`read`] reads it.
    ///
    /// # Errors
    /// The OS error.
    pub fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let len = self.len;
        #[cfg(unix)]
        if len >= PARALLEL_READ_MIN {
            if let Some(bytes) = read_in_halves(&self.file, len) {
                return Ok(bytes);
            }
        }
        let mut file = &self.file;
        file.seek(SeekFrom::Start(0))?;
        let mut bytes = Vec::with_capacity(len);
        file.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

impl crate::model::checkpoint::ReadAt for OpenFile {
    fn len(&self) -> usize {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], at: usize) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, at as u64)
        }
        #[cfg(not(unix))]
        {
            let _ = (buf, at);
            Err(std::io::ErrorKind::Unsupported.into())
        }
    }
}

/// [`read`]'s two threads over `len` bytes of `file`: `None` when the
/// file changed length while it was read, or a read failed (the plain
/// read then tells).
#[cfg(unix)]
fn read_in_halves(file: &File, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0u8; len];
    let half = len / 2;
    let (head, tail) = bytes.split_at_mut(half);
    let whole = std::thread::scope(|scope| {
        let tail = std::thread::Builder::new()
            .name("keel-read".into())
            .spawn_scoped(scope, || file.read_exact_at(tail, half as u64));
        let head = file.read_exact_at(head, 0);
        let tail = tail.map(|t| t.join());
        // Nothing past the length read: the file did not grow meanwhile.
        let end = file.read_at(&mut [0u8; 1], len as u64);
        head.is_ok() && matches!(tail, Ok(Ok(Ok(())))) && matches!(end, Ok(0))
    });
    whole.then_some(bytes)
}

/// Makes a directory entry change (create, rename) durable.
///
/// # Errors
/// The OS error.
pub fn sync_dir(dir: &Path, counters: &IoCounters) -> std::io::Result<()> {
    File::open(dir)?.sync_all()?;
    counters.synced();
    Ok(())
}

/// Replaces `path` with `bytes` atomically and durably: a temp file in the
/// same directory is written and fsynced, renamed over `path`, and the
/// directory is fsynced. With `backup`, the previous file is first kept as
/// `<path>.bak` (by a hard link, so `path` itself never goes missing).
///
/// # Errors
/// The OS error; `path` then still holds its previous contents.
pub fn atomic_write(
    path: &Path,
    bytes: &[u8],
    backup: bool,
    counters: &IoCounters,
) -> std::io::Result<()> {
    atomic_write_with(path, backup, counters, |w| w.write_all(bytes))
}

/// [`atomic_write`] of what `write` writes, streamed to the temp file
/// through a buffer rather than built in memory first.
///
/// # Errors
/// The OS error, or `write`'s; `path` then still holds its previous
/// contents.
pub fn atomic_write_with(
    path: &Path,
    backup: bool,
    counters: &IoCounters,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    /// Counts the bytes written through it.
    struct Counting<W> {
        inner: W,
        bytes: usize,
    }
    impl<W: Write> Write for Counting<W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.bytes += n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }
    // A bare file name's parent is "", which cannot be opened to fsync.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".keel-tmp-")
        .tempfile_in(dir)?;
    let written = {
        let mut out = Counting {
            inner: std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut()),
            bytes: 0,
        };
        write(&mut out)?;
        out.flush()?;
        out.bytes
    };
    tmp.as_file().sync_all()?;
    counters.wrote(written);
    counters.synced();
    if backup && path.exists() {
        let bak = backup_path(path);
        let _ = std::fs::remove_file(&bak);
        std::fs::hard_link(path, &bak).or_else(|_| std::fs::copy(path, &bak).map(|_| ()))?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir, counters)
}

/// The backup of a file: `<path>.bak`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".bak");
    PathBuf::from(s)
}

/// Who holds a stack's lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's process ID.
    pub pid: u32,
    /// The host it runs on.
    pub host: String,
    /// The command it runs.
    pub command: String,
    /// When it took the lock (RFC 3339).
    pub started: String,
}

impl Holder {
    /// This process, running `command`.
    pub fn me(command: &str) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown-host".into());
        Self {
            pid: std::process::id(),
            host,
            command: command.to_owned(),
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

/// Why a stack could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another operation holds the lock.
    #[error("the stack is locked by another operation: `{}` (pid {} on {}, since {}); wait for it to finish (a crashed holder's lock is released by the OS)", .0.command, .0.pid, .0.host, .0.started)]
    Held(Holder),
    /// The lock is held by a process that did not say who it is.
    #[error("the stack is locked by another operation (holder unknown: {0})")]
    HeldUnknown(String),
    /// The lock file could not be opened.
    #[error("cannot open the lock file {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A held stack lock; dropping it releases the lock.
#[derive(Debug)]
pub struct StackLock {
    file: File,
    path: PathBuf,
}

impl StackLock {
    /// Takes the lock at `path` at once (never waits), recording `holder`.
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder when another process has it.
    pub fn acquire(path: &Path, holder: &Holder) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(match serde_json::from_str::<Holder>(&text) {
                    Ok(h) => LockError::Held(h),
                    Err(_) => LockError::HeldUnknown(text.trim().to_owned()),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let text = serde_json::to_vec_pretty(holder).unwrap_or_default();
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&text).map_err(io)?;
        file.sync_data().map_err(io)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StackLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_at_every_size_around_the_parallel_threshold() {
        let dir = tempfile::tempdir().unwrap();
        for len in [
            0,
            1,
            PARALLEL_READ_MIN - 1,
            PARALLEL_READ_MIN,
            PARALLEL_READ_MIN + 1,
            3 * PARALLEL_READ_MIN + 7,
        ] {
            // Every byte differs from its neighbours, so a half read at the
            // wrong offset shows.
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let path = dir.path().join(format!("f{len}"));
            std::fs::write(&path, &bytes).unwrap();
            assert!(read(&path).unwrap() == bytes, "{len} bytes");
        }
        let missing = read(&dir.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }
}
