//! Content-addressed blob storage: BLAKE3 of the raw bytes names each blob.
//!
//! [`BlobStore`] is the storage trait; [`LocalBlobStore`] keeps blobs at
//! `<lab>/blobs/<first 2 hex>/<remaining 62 hex>` (`local`); the S3-compatible backend lives in
//! `s3` behind the `aws` feature; `crate::store` picks a store from a location string (a
//! directory, or `s3://bucket/prefix`). [`copy_verified`] reads a blob back and
//! checks it against its name. This module knows nothing of the log or of entries.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::error::Error;

mod local;
mod with_store;

pub use local::LocalBlobStore;
pub use with_store::WithBlobStore;

/// Bytes read and hashed per step while ingesting (large enough for BLAKE3's SIMD and
/// multithreaded paths, small enough to keep peak memory low).
const CHUNK: usize = 4 << 20;

/// The result of a put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOutcome {
    /// The blob's hash.
    pub hash: BlobHash,
    /// Its size in bytes.
    pub bytes: u64,
    /// It was already stored (nothing was written).
    pub existed: bool,
}

/// Where blobs live.
pub trait BlobStore: Send + Sync {
    /// Streams `reader` into the store; returns its hash. A blob already present is not rewritten.
    fn put(&self, reader: &mut dyn Read) -> Result<PutOutcome, Error>;
    /// Puts a file by path. Stores that can read the file twice override this to hash first
    /// and skip the upload of a blob they already hold.
    fn put_file(&self, path: &Path) -> Result<PutOutcome, Error> {
        let mut f = File::open(path).map_err(Error::io("cannot open", path))?;
        self.put(&mut f)
    }
    /// Puts a file by path, handing its bytes, in order, to `inspect` as they are stored (a
    /// corpus is parsed in the pass that hashes and stores it). If `inspect` refuses them the
    /// put stops and nothing is stored. This default reads the file once through
    /// [`BlobStore::put`]; a local store copies it in the kernel and inspects and hashes the
    /// copy on every core ([`LocalBlobStore::put_file_inspected`]).
    fn put_file_inspected(
        &self,
        path: &Path,
        inspect: &mut dyn Inspect,
    ) -> Result<PutOutcome, Error> {
        let f = File::open(path).map_err(Error::io("cannot open", path))?;
        self.put(&mut InspectingReader::new(f, inspect))
    }
    /// Moves a file into the store (`ledger put --move`, a worker's checkpoint files): the
    /// file's name is gone afterwards and its bytes are the blob. This default stores a copy
    /// and then removes the file; a local store on the same file system renames it instead,
    /// so nothing is copied ([`LocalBlobStore::put_move`]).
    fn put_move(&self, path: &Path) -> Result<PutOutcome, Error> {
        let out = self.put_file(path)?;
        fs::remove_file(path).map_err(Error::io("stored, but cannot remove", path))?;
        Ok(out)
    }
    /// Streams a blob out; `Error::BlobNotFound` when absent.
    fn get(&self, hash: &BlobHash) -> Result<Box<dyn Read + Send>, Error>;
    /// A stored blob's size in bytes; `None` when absent.
    fn size(&self, hash: &BlobHash) -> Result<Option<u64>, Error>;
    /// Whether a blob is stored.
    fn has(&self, hash: &BlobHash) -> Result<bool, Error> {
        Ok(self.size(hash)?.is_some())
    }
    /// Every stored blob's hash, sorted.
    fn list(&self) -> Result<Vec<BlobHash>, Error>;
    /// A human-readable name of the store for messages.
    fn describe(&self) -> String;
    /// The bucket this store keeps its blobs in, when it can hold the lab's whole public
    /// layout (an object-store prefix: the integrator copies the log there, `serve` reads it
    /// back); `None` for a directory of blobs.
    fn bucket(&self) -> Option<&dyn crate::source::Bucket> {
        None
    }
}

/// Sees a blob's bytes, in order, as a put stores them ([`BlobStore::put_file_inspected`]).
/// An error from either method stops the put, and nothing is stored.
pub trait Inspect: Send {
    /// The next bytes.
    fn bytes(&mut self, chunk: &[u8]) -> io::Result<()>;
    /// The end: there are no more bytes.
    fn end(&mut self) -> io::Result<()>;
}

/// A reader that shows what it reads to an [`Inspect`], and its end.
struct InspectingReader<'a> {
    inner: File,
    inspect: &'a mut dyn Inspect,
    ended: bool,
}

impl<'a> InspectingReader<'a> {
    fn new(inner: File, inspect: &'a mut dyn Inspect) -> Self {
        InspectingReader {
            inner,
            inspect,
            ended: false,
        }
    }
}

impl Read for InspectingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.inspect.bytes(&buf[..n])?;
        } else if !self.ended {
            self.ended = true;
            self.inspect.end()?;
        }
        Ok(n)
    }
}

/// The relative path of a blob: `blobs/<2 hex>/<62 hex>`.
pub fn blob_rel_path(hash: &BlobHash) -> String {
    let hex = hash.0.to_hex();
    format!("blobs/{}/{}", &hex[..2], &hex[2..])
}

/// Re-hashes a stream (for audits).
pub fn hash_reader(reader: &mut dyn Read) -> io::Result<(Blake3Hash, u64)> {
    let mut hasher = blake3::Hasher::new();
    let n = io::copy(reader, &mut hasher)?;
    Ok((hasher.finalize().into(), n))
}

/// Copies the blob `hash` from `store` into `out`, hashing as it goes, and fails with the
/// blob named when the bytes read do not hash to its name (the store was tampered with or
/// damaged). The bytes are written before the check: a caller that must not keep bad bytes
/// writes to a temporary file and keeps it only on success ([`get_verified_to`]).
pub fn copy_verified(
    store: &dyn BlobStore,
    hash: &BlobHash,
    out: &mut dyn Write,
) -> Result<u64, Error> {
    let mut reader = store.get(hash)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    let write_err = |e: io::Error| Error::Corrupt {
        path: PathBuf::from(blob_rel_path(hash)),
        reason: format!("cannot write it out: {e}"),
    };
    loop {
        let n = reader.read(&mut buf).map_err(Error::io(
            "cannot read blob",
            Path::new(&blob_rel_path(hash)),
        ))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(write_err)?;
        total += n as u64;
    }
    out.flush().map_err(write_err)?;
    let got = Blake3Hash::from(hasher.finalize());
    if got != hash.0 {
        return Err(Error::Corrupt {
            path: PathBuf::from(blob_rel_path(hash)),
            reason: format!("the stored blob hashes to {got}"),
        });
    }
    Ok(total)
}

/// Writes the blob `hash` to the file `path`, checked against its name: through a temporary
/// file beside it, kept only when the bytes hash to the name, so `path` is never left holding
/// bad bytes.
pub fn get_verified_to(store: &dyn BlobStore, hash: &BlobHash, path: &Path) -> Result<u64, Error> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(Error::io("cannot write in", dir))?;
    let n = copy_verified(store, hash, tmp.as_file_mut())?;
    tmp.persist(path)
        .map_err(|e| Error::io("cannot write", path)(e.error))?;
    Ok(n)
}
