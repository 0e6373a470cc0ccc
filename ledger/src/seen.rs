//! The auditor's memory: the last checkpoint (and verifier key) this machine verified for each
//! target it was pointed at, so the next `glassbox verify` can demand that the log only grew
//! and that it is still signed by the same key for the same origin.
//!
//! A log is remembered by the **target the auditor named** (a URL, or a directory's canonical
//! path), never by the origin line the server serves: a server that changes its key or origin
//! under the same URL is then caught instead of being trusted afresh (see
//! [`crate::verify`]). Stored under `$GLASSBOX_STATE_DIR`, else `$XDG_STATE_HOME/glassbox`, else
//! `~/.local/state/glassbox`, in `targets/`, three files per target (the target's text, the
//! key, the note). This is the auditor's state, never the lab's: it lives on the auditor's
//! machine and nothing here is published.

use std::fs;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::error::Error;

/// Checkpoints seen before, by target.
#[derive(Debug, Clone)]
pub struct SeenCheckpoints {
    dir: PathBuf,
}

/// What was remembered about one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The verifier key used then.
    pub vkey: String,
    /// The signed checkpoint note verified then.
    pub note: Vec<u8>,
}

impl Seen {
    /// The origin line of the remembered note.
    pub fn origin(&self) -> String {
        String::from_utf8_lossy(&self.note)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }
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

    fn stem(&self, target: &str) -> PathBuf {
        let h = Sha256::digest(target.as_bytes());
        self.dir.join("targets").join(hex::encode(&h[..16]))
    }

    /// What was remembered for `target` (see [`crate::verify::Target::memory_key`]).
    pub fn load(&self, target: &str) -> Result<Option<Seen>, Error> {
        let stem = self.stem(target);
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

    /// Remembers a verified checkpoint for `target`.
    pub fn save(&self, target: &str, seen: &Seen) -> Result<(), Error> {
        let stem = self.stem(target);
        let parent = stem
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.clone());
        fs::create_dir_all(&parent).map_err(Error::io("cannot create", &parent))?;
        for (ext, bytes) in [
            ("target", format!("{target}\n").into_bytes()),
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

    /// Forgets `target`; true when something was remembered.
    pub fn forget(&self, target: &str) -> Result<bool, Error> {
        let stem = self.stem(target);
        let mut had = false;
        for ext in ["checkpoint", "vkey", "target"] {
            let p = stem.with_extension(ext);
            match fs::remove_file(&p) {
                Ok(()) => had = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("cannot remove", &p)(e)),
            }
        }
        Ok(had)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_by_target_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let seen = SeenCheckpoints::new(dir.path());
        let s = Seen {
            vkey: "lab+01020304+AQ".into(),
            note: b"example.org/lab\n3\nroot\n\nsig\n".to_vec(),
        };
        seen.save("url:https://lab.example", &s).unwrap();
        assert_eq!(
            seen.load("url:https://lab.example").unwrap(),
            Some(s.clone())
        );
        assert_eq!(s.origin(), "example.org/lab");
        assert_eq!(seen.load("url:https://other.example").unwrap(), None);
        assert!(seen.forget("url:https://lab.example").unwrap());
        assert_eq!(seen.load("url:https://lab.example").unwrap(), None);
        assert!(!seen.forget("url:https://lab.example").unwrap());
    }
}
