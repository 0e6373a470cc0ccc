//! A log source whose blobs come from a blob store ([`WithBlobStore`]): how an auditor reads a
//! lab whose log is in one place and whose blobs are in an object store.
//!
//! Not here: the sources themselves (`crate::source`).

use std::io::{self, Read};

use crate::error::Error;
use crate::source::{LogSource, ReadLimit};

use super::BlobStore;

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
    fn open(&self, rel: &str, limit: ReadLimit) -> Result<Option<Box<dyn Read + '_>>, Error> {
        match blob_of(rel) {
            Some(hash) => match self.blobs.get(&hash) {
                Ok(r) => Ok(Some(r)),
                Err(Error::BlobNotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            },
            None => self.inner.open(rel, limit),
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
    use crate::source::DirSource;

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
        let any = ReadLimit::blob(1 << 20);
        assert_eq!(src.read(&rel, any).unwrap().unwrap(), b"payload");
        assert_eq!(
            src.read("log/checkpoint", ReadLimit::CHECKPOINT)
                .unwrap()
                .unwrap(),
            b"note"
        );
        let absent = format!("blobs/ab/{}", "c".repeat(62));
        assert!(src.read(&absent, any).unwrap().is_none());
        assert!(
            src.locate(&rel)
                .starts_with(&elsewhere.path().display().to_string())
        );
    }
}
