//! Read access to a lab's published layout (`log/...`, `blobs/...`, `vkey`) from a directory or
//! over HTTP(S), so one audit serves local labs, published git mirrors and web servers alike.
//!
//! A [`LogSource`] only fetches bytes by relative path; it trusts nothing and checks nothing
//! (that is `audit`). Paths are the lab layout: `log/checkpoint`, `log/tile/0/000.p/5`,
//! `blobs/ab/<62 hex>`; an HTTP source appends them to its base URL.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use crate::blob::BlobStore;
use crate::error::Error;

/// Where a lab's public files are read from.
pub trait LogSource {
    /// Opens a file for streaming; `Ok(None)` when it does not exist.
    fn open(&self, rel: &str) -> Result<Option<Box<dyn Read + '_>>, Error>;

    /// Reads a whole (small) file; `Ok(None)` when it does not exist.
    fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, Error> {
        match self.open(rel)? {
            None => Ok(None),
            Some(mut r) => {
                let mut out = Vec::new();
                r.read_to_end(&mut out)
                    .map_err(|e| self.read_error(rel, e))?;
                Ok(Some(out))
            }
        }
    }

    /// Names the source and the file for messages (a path or a URL).
    fn locate(&self, rel: &str) -> String;

    /// An error while reading `rel`.
    fn read_error(&self, rel: &str, e: io::Error) -> Error;
}

/// A lab directory (or a published copy of one).
#[derive(Debug, Clone)]
pub struct DirSource {
    /// The lab directory.
    pub root: PathBuf,
}

impl LogSource for DirSource {
    fn open(&self, rel: &str) -> Result<Option<Box<dyn Read + '_>>, Error> {
        let path = self.root.join(rel);
        match File::open(&path) {
            Ok(f) => Ok(Some(Box::new(io::BufReader::with_capacity(1 << 20, f)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot open", path)(e)),
        }
    }

    fn locate(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    fn read_error(&self, rel: &str, e: io::Error) -> Error {
        Error::io("cannot read", self.root.join(rel))(e)
    }
}

/// The same layout served over HTTP(S) (`<base>/log/checkpoint`, ...).
#[derive(Debug)]
pub struct HttpSource {
    base: String,
    agent: ureq::Agent,
}

impl HttpSource {
    /// A source rooted at `base` (`https://lab.example/` or `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(120)))
            .build()
            .into();
        Self {
            base: base.trim_end_matches('/').to_string(),
            agent,
        }
    }
}

impl LogSource for HttpSource {
    fn open(&self, rel: &str) -> Result<Option<Box<dyn Read + '_>>, Error> {
        let url = self.locate(rel);
        let resp = self.agent.get(&url).call().map_err(|e| Error::Http {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        match resp.status().as_u16() {
            200 => Ok(Some(Box::new(resp.into_body().into_reader()))),
            404 => Ok(None),
            code => Err(Error::Http {
                url,
                reason: format!("HTTP status {code}"),
            }),
        }
    }

    fn locate(&self, rel: &str) -> String {
        format!("{}/{}", self.base, rel)
    }

    fn read_error(&self, rel: &str, e: io::Error) -> Error {
        Error::Http {
            url: self.locate(rel),
            reason: e.to_string(),
        }
    }
}

/// A source whose blobs (`blobs/<2 hex>/<62 hex>`) come from a blob store — the object store a
/// lab keeps them in — and everything else (`log/`, `vkey`, `blobs/OMITTED`) from `inner`.
pub struct WithBlobStore<S> {
    /// The log's files.
    pub inner: S,
    /// The blobs.
    pub blobs: Box<dyn BlobStore>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for WithBlobStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithBlobStore")
            .field("inner", &self.inner)
            .field("blobs", &self.blobs.describe())
            .finish()
    }
}

/// The hash a `blobs/<2 hex>/<62 hex>` path names.
fn blob_of(rel: &str) -> Option<glassbox_schemas::BlobHash> {
    let rest = rel.strip_prefix("blobs/")?;
    let (two, tail) = rest.split_once('/')?;
    if two.len() != 2 || tail.len() != 62 {
        return None;
    }
    format!("blake3:{two}{tail}").parse().ok()
}

impl<S: LogSource> LogSource for WithBlobStore<S> {
    fn open(&self, rel: &str) -> Result<Option<Box<dyn Read + '_>>, Error> {
        match blob_of(rel) {
            Some(hash) => match self.blobs.get(&hash) {
                Ok(r) => Ok(Some(r)),
                Err(Error::BlobNotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            },
            None => self.inner.open(rel),
        }
    }

    fn locate(&self, rel: &str) -> String {
        match blob_of(rel) {
            Some(_) => format!("{}/{rel}", self.blobs.describe().trim_end_matches('/')),
            None => self.inner.locate(rel),
        }
    }

    fn read_error(&self, rel: &str, e: io::Error) -> Error {
        match blob_of(rel) {
            Some(_) => Error::ObjectStore {
                store: self.blobs.describe(),
                reason: format!("cannot read {rel}: {e}"),
            },
            None => self.inner.read_error(rel, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::LocalBlobStore;

    #[test]
    fn blobs_come_from_the_store_and_the_rest_from_the_directory() {
        let lab = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(lab.path().join("log")).unwrap();
        std::fs::write(lab.path().join("log/checkpoint"), b"note").unwrap();
        let store = LocalBlobStore::new(elsewhere.path());
        let put = store.put(&mut &b"payload"[..]).unwrap();
        let src = WithBlobStore {
            inner: DirSource {
                root: lab.path().to_path_buf(),
            },
            blobs: Box::new(store),
        };
        let rel = crate::blob::blob_rel_path(&put.hash);
        assert_eq!(src.read(&rel).unwrap().unwrap(), b"payload");
        assert_eq!(src.read("log/checkpoint").unwrap().unwrap(), b"note");
        let absent = format!("blobs/ab/{}", "c".repeat(62));
        assert!(src.read(&absent).unwrap().is_none());
        assert!(
            src.locate(&rel)
                .starts_with(&elsewhere.path().display().to_string())
        );
    }
}
