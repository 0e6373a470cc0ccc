//! The auditor's memory: the last checkpoint (and verifier key) this machine verified for each
//! log origin, so the next `glassbox verify` can demand that the log only grew.
//!
//! Stored under `$GLASSBOX_STATE_DIR`, else `$XDG_STATE_HOME/glassbox`, else
//! `~/.local/state/glassbox`, one pair of files per origin. This is the auditor's state, never
//! the lab's: it lives on the auditor's machine and nothing here is published.

use std::fs;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::error::Error;

/// Checkpoints seen before, by origin.
#[derive(Debug, Clone)]
pub struct SeenCheckpoints {
    dir: PathBuf,
}

/// What was remembered about one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The verifier key used then.
    pub vkey: String,
    /// The signed checkpoint note verified then.
    pub note: Vec<u8>,
}

impl SeenCheckpoints {
    /// The default location (see the module docs).
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("GLASSBOX_STATE_DIR") {
            return PathBuf::from(d);
        }
        if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
            return PathBuf::from(d).join("glassbox");
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        home.join(".local").join("state").join("glassbox")
    }

    /// Memory kept in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn stem(&self, origin: &str) -> PathBuf {
        let h = Sha256::digest(origin.as_bytes());
        self.dir.join("checkpoints").join(hex::encode(&h[..16]))
    }

    /// What was remembered for `origin`, if anything.
    pub fn load(&self, origin: &str) -> Result<Option<Seen>, Error> {
        let stem = self.stem(origin);
        let note_path = stem.with_extension("checkpoint");
        let vkey_path = stem.with_extension("vkey");
        if !note_path.exists() {
            return Ok(None);
        }
        let note = fs::read(&note_path).map_err(Error::io("cannot read", &note_path))?;
        let vkey = fs::read_to_string(&vkey_path).map_err(Error::io("cannot read", &vkey_path))?;
        Ok(Some(Seen {
            vkey: vkey.trim().to_string(),
            note,
        }))
    }

    /// Remembers a verified checkpoint.
    pub fn save(&self, origin: &str, seen: &Seen) -> Result<(), Error> {
        let stem = self.stem(origin);
        let parent = stem
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.clone());
        fs::create_dir_all(&parent).map_err(Error::io("cannot create", &parent))?;
        for (ext, bytes) in [
            ("vkey", format!("{}\n", seen.vkey).into_bytes()),
            ("checkpoint", seen.note.clone()),
        ] {
            let p = stem.with_extension(ext);
            let tmp = stem.with_extension(format!("{ext}.tmp"));
            fs::write(&tmp, &bytes).map_err(Error::io("cannot write", &tmp))?;
            fs::rename(&tmp, &p).map_err(Error::io("cannot rename into", &p))?;
        }
        Ok(())
    }
}
