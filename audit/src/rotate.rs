//! A log file rotated as kube-apiserver's audit log is (lumberjack): when a write would take the
//! file past `max_size`, the file is renamed to `<name>-<UTC time>.<ext>` (time as
//! `2006-01-02T15-04-05.000`) and a new one is started; then backups beyond `max_backups` (the
//! oldest first) and backups older than `max_age` (by the time in their name) are removed.
//! Zero means no limit for each of the three. Writes are buffered; the caller flushes.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The time format of backup names (lumberjack's `backupTimeFormat`).
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S.%3f";
/// Buffer in front of the file.
const BUFFER: usize = 64 << 10;

/// When to rotate and what to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before the file would grow past this many bytes (0: never).
    pub max_size: u64,
    /// Keep at most this many backups (0: all).
    pub max_backups: usize,
    /// Remove backups older than this (`None`: keep them).
    pub max_age: Option<Duration>,
}

/// The open log file.
pub struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    /// Bytes in the file, buffered ones included.
    size: u64,
    rotation: Rotation,
}

/// Opens `path` for appending, creating it and its folder (mode 0600 and 0700, as upstream).
fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

impl RotatingFile {
    /// Opens (or creates) the log file at `path`.
    pub fn open(path: &Path, rotation: Rotation) -> std::io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir)?;
        }
        let file = open(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(BUFFER, file),
            size,
            rotation,
        })
    }

    /// Appends one line (`line` ends with its newline), rotating first if it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        let max = self.rotation.max_size;
        if max > 0 {
            if len > max {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("write length {len} exceeds maximum file size {max}"),
                ));
            }
            if self.size + len > max {
                self.rotate()?;
            }
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    /// Writes the buffered lines to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }

    /// Renames the current file to a backup name, starts a new one and removes old backups.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let backup = self.free_backup_name();
        std::fs::rename(&self.path, &backup)?;
        self.file = BufWriter::with_capacity(BUFFER, open(&self.path)?);
        self.size = 0;
        if let Err(e) = self.remove_old_backups() {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove old audit log backups");
        }
        Ok(())
    }

    /// `name-<now>.ext`; when that exists (two rotations in one millisecond), a later
    /// millisecond, so no backup is ever overwritten.
    fn free_backup_name(&self) -> PathBuf {
        let mut time = jiff::Timestamp::now();
        loop {
            let candidate = self.backup_name(time);
            if !candidate.exists() {
                return candidate;
            }
            time = time
                .checked_add(jiff::SignedDuration::from_millis(1))
                .unwrap_or(time);
        }
    }

    fn backup_name(&self, time: jiff::Timestamp) -> PathBuf {
        let (stem, ext) = self.stem_and_ext();
        let name = format!("{stem}-{}{ext}", time.strftime(BACKUP_TIME));
        self.path.with_file_name(name)
    }

    /// The file name without and with its extension (`audit`, `.log`).
    fn stem_and_ext(&self) -> (String, String) {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
            _ => (name, String::new()),
        }
    }

    /// The backups in the folder with their times, newest first.
    pub fn backups(&self) -> std::io::Result<Vec<(jiff::Timestamp, PathBuf)>> {
        let (stem, ext) = self.stem_and_ext();
        let prefix = format!("{stem}-");
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => dir.to_path_buf(),
            None => PathBuf::from("."),
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let time = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(ext.as_str()))
                .and_then(|time| jiff::civil::DateTime::strptime(BACKUP_TIME, time).ok())
                .and_then(|time| time.to_zoned(jiff::tz::TimeZone::UTC).ok());
            if let Some(time) = time {
                found.push((time.timestamp(), entry.path()));
            }
        }
        found.sort_by_key(|b| std::cmp::Reverse(b.0));
        Ok(found)
    }

    /// Removes backups beyond `max_backups` and older than `max_age`.
    fn remove_old_backups(&self) -> std::io::Result<()> {
        let Rotation {
            max_backups,
            max_age,
            ..
        } = self.rotation;
        if max_backups == 0 && max_age.is_none() {
            return Ok(());
        }
        let cutoff = max_age.and_then(|age| {
            let age = jiff::SignedDuration::try_from(age).ok()?;
            jiff::Timestamp::now().checked_sub(age).ok()
        });
        for (i, (time, path)) in self.backups()?.into_iter().enumerate() {
            let surplus = max_backups > 0 && i >= max_backups;
            let expired = cutoff.is_some_and(|cutoff| time < cutoff);
            if surplus || expired {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .expect("read")
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn rotates_by_size_and_keeps_n_backups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("logs/audit.log");
        let rotation = Rotation {
            max_size: 100,
            max_backups: 2,
            max_age: None,
        };
        let mut file = RotatingFile::open(&path, rotation).expect("open");
        // 30-byte lines: three fit in 100 bytes, the fourth starts a new file.
        for i in 0..10 {
            file.write_line(format!("{i:029}\n").as_bytes())
                .expect("write");
        }
        file.flush().expect("flush");
        let backups = file.backups().expect("backups");
        assert_eq!(backups.len(), 2, "{backups:?}");
        for (_, backup) in &backups {
            let name = backup
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            assert!(
                name.starts_with("audit-") && name.ends_with(".log"),
                "{name}"
            );
            assert_eq!(
                name.len(),
                "audit-2006-01-02T15-04-05.000.log".len(),
                "{name}"
            );
            assert_eq!(lines(backup).len(), 3, "{name}");
        }
        // Lines 0-2 went to the removed backup, 3-5 and 6-8 to the kept ones, 9 is current.
        assert_eq!(lines(&path), [format!("{:029}", 9)]);
        assert!(lines(&backups[0].1)[0].ends_with('6'));
        assert!(lines(&backups[1].1)[0].ends_with('3'));
    }

    #[test]
    fn too_long_lines_are_refused_and_zero_never_rotates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit");
        let small = Rotation {
            max_size: 10,
            max_backups: 0,
            max_age: None,
        };
        let mut file = RotatingFile::open(&path, small).expect("open");
        let err = file.write_line(&[b'x'; 11]).expect_err("too long");
        assert_eq!(
            err.to_string(),
            "write length 11 exceeds maximum file size 10"
        );
        let never = Rotation {
            max_size: 0,
            ..small
        };
        let mut file = RotatingFile::open(&path, never).expect("open");
        for _ in 0..100 {
            file.write_line(b"0123456789\n").expect("write");
        }
        file.flush().expect("flush");
        assert_eq!(lines(&path).len(), 100);
        assert!(file.backups().expect("backups").is_empty());
    }

    #[test]
    fn old_backups_are_removed_by_age() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let old = dir.path().join("audit-2001-02-03T04-05-06.789.log");
        std::fs::write(&old, "old\n").expect("write");
        let unrelated = dir.path().join("audit-notatime.log");
        std::fs::write(&unrelated, "keep\n").expect("write");
        let rotation = Rotation {
            max_size: 8,
            max_backups: 0,
            max_age: Some(Duration::from_secs(86_400)),
        };
        let mut file = RotatingFile::open(&path, rotation).expect("open");
        let backups = file.backups().expect("backups");
        assert_eq!(backups.len(), 1);
        assert_eq!(backups[0].0.to_string(), "2001-02-03T04:05:06.789Z");
        for _ in 0..3 {
            file.write_line(b"1234567\n").expect("write");
        }
        assert!(!old.exists(), "expired backup removed");
        assert!(unrelated.exists(), "names without a time are not backups");
        assert_eq!(file.backups().expect("backups").len(), 2);
    }
}
