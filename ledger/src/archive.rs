//! The checkpoint archive: every checkpoint the log writer installed, with the cosignatures it
//! carried, in order — the memory that lets the lab prove *when* an entry was public.
//!
//! C2SP logs serve only their latest checkpoint, but a pre-registration claim ("the forecast
//! was in the log, signed and witnessed, before the run began") needs an old one: a checkpoint
//! whose tree holds the forecast and not the run ([`crate::precedence`]). The writer appends
//! each checkpoint it installs to `<log>/.checkpoints`, one line each: the size, a space, the
//! base64 of the note. Appends are not fsynced (the checkpoint itself is durable); a writer that
//! resumes adds the current checkpoint when the archive's last line is older, so a crash loses
//! at most the intermediate checkpoints of one batch, never the current one. The file is the
//! lab's, not part of the published layout; the notes in it verify on their own.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::checkpoint::SignedCheckpoint;
use crate::error::Error;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The archive's file name in the log directory.
pub const ARCHIVE_FILE: &str = ".checkpoints";

/// The checkpoints a log writer installed, oldest first.
#[derive(Debug, Clone)]
pub struct CheckpointArchive {
    path: PathBuf,
}

impl CheckpointArchive {
    /// The archive of the log in `log_dir`.
    pub fn in_log_dir(log_dir: &Path) -> Self {
        Self {
            path: log_dir.join(ARCHIVE_FILE),
        }
    }

    /// Adds a checkpoint.
    pub fn append(&self, checkpoint: &SignedCheckpoint) -> Result<(), Error> {
        let line = format!(
            "{} {}\n",
            checkpoint.checkpoint.size.0,
            B64.encode(checkpoint.to_bytes())
        );
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(Error::io("cannot open the checkpoint archive", &self.path))?;
        f.write_all(line.as_bytes()).map_err(Error::io(
            "cannot append to the checkpoint archive",
            &self.path,
        ))
    }

    /// The size of the last checkpoint archived, if any (read from the file's tail).
    pub fn last_size(&self) -> Result<Option<u64>, Error> {
        let mut f = match fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::io("cannot open the checkpoint archive", &self.path)(
                    e,
                ));
            }
        };
        let len = f
            .metadata()
            .map_err(Error::io("cannot stat", &self.path))?
            .len();
        // A line is at most a 64 KiB note in base64 plus its size.
        let start = len.saturating_sub(96 * 1024);
        f.seek(SeekFrom::Start(start))
            .map_err(Error::io("cannot seek in", &self.path))?;
        let mut tail = String::new();
        f.read_to_string(&mut tail)
            .map_err(Error::io("cannot read", &self.path))?;
        Ok(tail
            .lines()
            .rev()
            .find_map(|l| l.split_once(' ')?.0.parse().ok()))
    }

    /// The first archived checkpoint whose size is in `(after, at_most]`: the earliest that
    /// holds entry `after` and not entry `at_most`. Lines that do not parse are skipped (a line
    /// cut by a crash); the notes' signatures are the caller's to check.
    pub fn first_between(
        &self,
        after: u64,
        at_most: u64,
    ) -> Result<Option<SignedCheckpoint>, Error> {
        let f = match fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::io("cannot open the checkpoint archive", &self.path)(
                    e,
                ));
            }
        };
        for line in BufReader::new(f).lines() {
            let line = line.map_err(Error::io("cannot read", &self.path))?;
            let Some((size, b64)) = line.split_once(' ') else {
                continue;
            };
            let Ok(size) = size.parse::<u64>() else {
                continue;
            };
            if size <= after {
                continue;
            }
            if size > at_most {
                return Ok(None);
            }
            let Ok(note) = B64.decode(b64) else { continue };
            if let Ok(cp) = SignedCheckpoint::parse(&note) {
                return Ok(Some(cp));
            }
        }
        Ok(None)
    }
}
