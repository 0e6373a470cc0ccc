//! S3-compatible blob storage through the `object_store` crate (feature `aws`), for labs that
//! outgrow one machine. Same content addressing and key layout as the local store:
//! `<prefix>/blobs/<2 hex>/<62 hex>`. Tested against moto's S3 server (`ledger/tests/s3_moto.rs`);
//! AWS, MinIO and other S3-compatible servers speak the same requests.
//!
//! How a put keeps memory bounded and never exposes half a blob:
//! - **small** (the whole input fits in one [`PART`]): hash it in memory, `HEAD` its address,
//!   and `PUT` it only when absent (an existing blob costs one `HEAD`);
//! - **large stream**: the content address is unknown until the last byte, so the bytes stream
//!   as a multipart upload to a temporary key (`blobs/.tmp-<random>`), hashed on the way; then
//!   the temporary object is copied server-side to its address (skipped when that exists) and
//!   deleted. Copies above [`S3_COPY_LIMIT`] (S3's single-request copy limit, 5 GiB) are done
//!   as a streamed re-upload instead. At most two parts are in flight, so memory stays below
//!   four parts whatever the size;
//! - **large file** ([`BlobStore::put_file`]): the file is hashed first, so an existing blob
//!   costs one read and one `HEAD` and uploads nothing; otherwise it is uploaded straight to its
//!   address as a multipart upload, hashed again while uploading, and the upload is completed
//!   only if the hashes agree (a file that changed meanwhile is refused and the upload
//!   aborted). S3 makes a multipart object visible only on completion, so no temp key is needed.
//!
//! Reads are ranged `GET`s of [`PART`] bytes. The [`BlobStore`] trait is synchronous: this store
//! drives a two-thread [`PrivateRuntime`], so it can be called from any thread. Not here: bucket creation, credentials discovery beyond the environment.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use glassbox_schemas::{Blake3Hash, BlobHash};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload, WriteMultipart};

use crate::blob::{BlobStore, PutOutcome, blob_rel_path};
use crate::error::Error;
use crate::private_runtime::PrivateRuntime;

/// Part size for uploads and chunk size for ranged reads (S3's minimum part is 5 MiB).
pub const PART: usize = 8 << 20;
/// Largest object S3 copies in one `CopyObject` request.
pub const S3_COPY_LIMIT: u64 = 5 << 30;
/// Parts uploading at once.
const IN_FLIGHT: usize = 2;

/// Blobs in an S3-compatible bucket.
#[derive(Debug)]
pub struct S3BlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    name: String,
    rt: Arc<PrivateRuntime>,
    copy_limit: u64,
}

/// Where the bucket is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// Endpoint URL (`http://127.0.0.1:9000` for MinIO or moto; AWS when `None`).
    pub endpoint: Option<String>,
    /// Bucket name.
    pub bucket: String,
    /// Key prefix inside the bucket (may be empty).
    pub prefix: String,
    /// Region.
    pub region: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

impl S3Config {
    /// The config for `bucket`/`prefix` from environment variables, read through `env` (so
    /// tests need not mutate the process environment): `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`),
    /// `AWS_REGION` (or `AWS_DEFAULT_REGION`, default `us-east-1`), `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` (both required).
    pub fn from_env(
        bucket: &str,
        prefix: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let need =
            |key: &str| {
                env(key).filter(|v| !v.is_empty()).ok_or_else(|| Error::ObjectStore {
                store: format!("s3://{bucket}/{prefix}"),
                reason: format!(
                    "environment variable {key} is not set; export the bucket's credentials \
                     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_ENDPOINT_URL for a \
                     non-AWS server)"
                ),
            })
            };
        Ok(Self {
            endpoint: env("AWS_ENDPOINT_URL")
                .or_else(|| env("AWS_ENDPOINT"))
                .filter(|v| !v.is_empty()),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            region: env("AWS_REGION")
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "us-east-1".into()),
            access_key_id: need("AWS_ACCESS_KEY_ID")?,
            secret_access_key: need("AWS_SECRET_ACCESS_KEY")?,
        })
    }
}

impl S3BlobStore {
    /// Connects (lazily: the first request reaches the endpoint).
    pub fn new(cfg: &S3Config) -> Result<Self, Error> {
        let prefix = cfg.prefix.trim_matches('/').to_string();
        let name = format!("s3://{}/{prefix}", cfg.bucket);
        let err = |e: &dyn std::fmt::Display| Error::ObjectStore {
            store: name.clone(),
            reason: e.to_string(),
        };
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&cfg.bucket)
            .with_region(&cfg.region)
            .with_access_key_id(&cfg.access_key_id)
            .with_secret_access_key(&cfg.secret_access_key);
        if let Some(ep) = &cfg.endpoint {
            b = b
                .with_endpoint(ep)
                .with_allow_http(ep.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let store = b.build().map_err(|e| err(&e))?;
        // Two workers: uploads of earlier parts proceed while the caller's thread reads and
        // hashes the next one.
        let rt = PrivateRuntime::new("glassbox-s3", 2).map_err(|e| err(&e))?;
        Ok(Self {
            store: Arc::new(store),
            prefix,
            name,
            rt: Arc::new(rt),
            copy_limit: S3_COPY_LIMIT,
        })
    }

    /// Lowers the size above which a finished temporary upload is re-uploaded instead of
    /// copied server-side (default [`S3_COPY_LIMIT`]; servers with a lower limit, and tests of
    /// that path, set it).
    pub fn with_copy_limit(mut self, bytes: u64) -> Self {
        self.copy_limit = bytes;
        self
    }

    fn key(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::ObjectStore {
            store: self.name.clone(),
            reason: e.to_string(),
        }
    }

    /// Runs a future on the private runtime, from any thread.
    fn block_on<T: Send>(
        &self,
        f: impl Future<Output = Result<T, Error>> + Send,
    ) -> Result<T, Error> {
        self.rt.drive(f)
    }

    /// A streaming reader of the object at `key`, `size` bytes long.
    fn reader(&self, key: ObjectPath, size: u64) -> RangedReader {
        RangedReader {
            store: Arc::clone(&self.store),
            rt: Arc::clone(&self.rt),
            key,
            size,
            pos: 0,
            buf: Vec::new(),
            buf_pos: 0,
            name: self.name.clone(),
        }
    }

    fn head_exists(&self, key: &ObjectPath) -> Result<bool, Error> {
        self.block_on(async {
            match self.store.head(key).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(self.err(e)),
            }
        })
    }

    /// Single-request put of a small blob already in memory.
    fn put_small(&self, data: Vec<u8>) -> Result<PutOutcome, Error> {
        let hash = BlobHash(Blake3Hash::of(&data));
        let bytes = data.len() as u64;
        let dest = self.key(&blob_rel_path(&hash));
        if self.head_exists(&dest)? {
            return Ok(PutOutcome {
                hash,
                bytes,
                existed: true,
            });
        }
        self.block_on(async {
            self.store
                .put(&dest, PutPayload::from(data))
                .await
                .map_err(|e| self.err(e))
        })?;
        Ok(PutOutcome {
            hash,
            bytes,
            existed: false,
        })
    }

    /// Streams `first` then the rest of `reader` as a multipart upload to `key`, hashing every
    /// byte; calls `accept(hash)` before completing and aborts the upload when it refuses.
    fn upload_hashed(
        &self,
        key: &ObjectPath,
        first: &[u8],
        reader: &mut dyn Read,
        accept: &dyn Fn(&Blake3Hash) -> Result<(), Error>,
    ) -> Result<(Blake3Hash, u64), Error> {
        let upload =
            self.block_on(async { self.store.put_multipart(key).await.map_err(|e| self.err(e)) })?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut hasher = blake3::Hasher::new();
        let mut total = 0u64;
        // The caller's thread reads and hashes; the runtime uploads up to IN_FLIGHT parts
        // meanwhile. (The reader stays on this thread: it need not be `Send`.)
        let send = |w: &mut WriteMultipart, chunk: &[u8]| {
            self.block_on(async {
                w.wait_for_capacity(IN_FLIGHT)
                    .await
                    .map_err(|e| self.err(e))?;
                w.write(chunk);
                Ok(())
            })
        };
        let mut buf = vec![0u8; PART];
        let result: Result<(), Error> = (|| {
            if !first.is_empty() {
                hasher.update(first);
                total += first.len() as u64;
                send(&mut w, first)?;
            }
            loop {
                let n = fill(reader, &mut buf).map_err(|e| self.err(e))?;
                if n == 0 {
                    return Ok(());
                }
                hasher.update(&buf[..n]);
                total += n as u64;
                send(&mut w, &buf[..n])?;
            }
        })();
        let digest: Blake3Hash = hasher.finalize().into();
        match result.and_then(|()| accept(&digest)) {
            Ok(()) => {
                self.block_on(async { w.finish().await.map_err(|e| self.err(e)) })?;
                Ok((digest, total))
            }
            Err(e) => {
                // Best effort: the error that stopped the upload is the one to report.
                let _ = self.block_on(async { w.abort().await.map_err(|e| self.err(e)) });
                Err(e)
            }
        }
    }

    /// Moves a finished temporary object to `dest`: a server-side copy up to the copy limit,
    /// a streamed re-upload above it.
    fn promote(&self, tmp: &ObjectPath, dest: &ObjectPath, bytes: u64) -> Result<(), Error> {
        if bytes <= self.copy_limit {
            return self
                .block_on(async { self.store.copy(tmp, dest).await.map_err(|e| self.err(e)) });
        }
        self.block_on(async {
            let upload = self
                .store
                .put_multipart(dest)
                .await
                .map_err(|e| self.err(e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
            let copied: Result<(), Error> = async {
                let mut pos = 0u64;
                while pos < bytes {
                    let end = (pos + PART as u64).min(bytes);
                    let chunk = self
                        .store
                        .get_range(tmp, pos..end)
                        .await
                        .map_err(|e| self.err(e))?;
                    if chunk.is_empty() {
                        return Err(self.err(format!("{tmp} ended at byte {pos} of {bytes}")));
                    }
                    pos += chunk.len() as u64;
                    w.wait_for_capacity(IN_FLIGHT)
                        .await
                        .map_err(|e| self.err(e))?;
                    w.write(&chunk);
                }
                Ok(())
            }
            .await;
            match copied {
                Ok(()) => w.finish().await.map(drop).map_err(|e| self.err(e)),
                Err(e) => {
                    let _ = w.abort().await;
                    Err(e)
                }
            }
        })
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(reader: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl BlobStore for S3BlobStore {
    fn put(&self, reader: &mut dyn Read) -> Result<PutOutcome, Error> {
        let mut first = vec![0u8; PART];
        let n = fill(reader, &mut first).map_err(|e| self.err(e))?;
        if n < PART {
            first.truncate(n);
            return self.put_small(first);
        }
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| self.err(e))?;
        let tmp = self.key(&format!("blobs/.tmp-{}", hex::encode(nonce)));
        let (digest, bytes) = self.upload_hashed(&tmp, &first, reader, &|_| Ok(()))?;
        drop(first);
        let hash = BlobHash(digest);
        let dest = self.key(&blob_rel_path(&hash));
        let existed = self.head_exists(&dest)?;
        let promoted = if existed {
            Ok(())
        } else {
            self.promote(&tmp, &dest, bytes)
        };
        let deleted =
            self.block_on(async { self.store.delete(&tmp).await.map_err(|e| self.err(e)) });
        promoted?;
        deleted?;
        Ok(PutOutcome {
            hash,
            bytes,
            existed,
        })
    }

    fn put_file(&self, path: &Path) -> Result<PutOutcome, Error> {
        let open = || std::fs::File::open(path).map_err(Error::io("cannot open", path));
        let size = open()?
            .metadata()
            .map_err(Error::io("cannot stat", path))?
            .len();
        if size < PART as u64 {
            let mut data = Vec::with_capacity(size as usize);
            open()?
                .read_to_end(&mut data)
                .map_err(Error::io("cannot read", path))?;
            return self.put_small(data);
        }
        // First pass: the address, so an existing blob uploads nothing.
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; PART];
        let mut f = open()?;
        loop {
            let n = fill(&mut f, &mut buf).map_err(Error::io("cannot read", path))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        drop(buf);
        let expected = BlobHash(hasher.finalize().into());
        let dest = self.key(&blob_rel_path(&expected));
        if self.head_exists(&dest)? {
            return Ok(PutOutcome {
                hash: expected,
                bytes: size,
                existed: true,
            });
        }
        // Second pass: upload straight to the address, completing only if the bytes sent hash
        // to it.
        let mut f = open()?;
        let (_, bytes) = self.upload_hashed(&dest, &[], &mut f, &|got| {
            if *got == expected.0 {
                Ok(())
            } else {
                Err(Error::ObjectStore {
                    store: self.name.clone(),
                    reason: format!(
                        "{} changed while it was being stored (hashed {expected}, uploaded \
                         blake3:{}); the upload was aborted, try again",
                        path.display(),
                        got.to_hex()
                    ),
                })
            }
        })?;
        Ok(PutOutcome {
            hash: expected,
            bytes,
            existed: false,
        })
    }

    fn get(&self, hash: &BlobHash) -> Result<Box<dyn Read + Send>, Error> {
        let key = self.key(&blob_rel_path(hash));
        let meta = self.block_on(async {
            self.store.head(&key).await.map_err(|e| match e {
                object_store::Error::NotFound { .. } => Error::BlobNotFound {
                    hash: hash.to_string(),
                    store: self.name.clone(),
                },
                other => self.err(other),
            })
        })?;
        Ok(Box::new(self.reader(key, meta.size)))
    }

    fn size(&self, hash: &BlobHash) -> Result<Option<u64>, Error> {
        let key = self.key(&blob_rel_path(hash));
        self.block_on(async {
            match self.store.head(&key).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.err(e)),
            }
        })
    }

    fn list(&self) -> Result<Vec<BlobHash>, Error> {
        let prefix = self.key("blobs");
        self.block_on(async {
            // One flat, paginated listing (1,000 keys per request) instead of one per shard.
            let mut stream = self.store.list(Some(&prefix));
            let mut out = Vec::new();
            while let Some(obj) = stream.next().await {
                let obj = obj.map_err(|e| self.err(e))?;
                let parts: Vec<&str> = obj.location.as_ref().rsplitn(3, '/').collect();
                if let [rest, two, ..] = parts.as_slice() {
                    // Temporary uploads and stray keys do not parse as hashes and are skipped.
                    if let Ok(h) = format!("blake3:{two}{rest}").parse::<BlobHash>() {
                        out.push(h);
                    }
                }
            }
            out.sort();
            Ok(out)
        })
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn bucket(&self) -> Option<&dyn crate::source::Bucket> {
        Some(self)
    }
}

/// The bucket's prefix is the lab's whole public layout: `log/...` and `vkey` beside the blobs.
impl crate::source::LogSource for S3BlobStore {
    fn open(
        &self,
        rel: &str,
        limit: crate::source::ReadLimit,
    ) -> Result<Option<Box<dyn Read + '_>>, Error> {
        let key = self.key(rel);
        let meta = self.block_on(async {
            match self.store.head(&key).await {
                Ok(meta) => Ok(Some(meta)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.err(e)),
            }
        })?;
        let Some(meta) = meta else {
            return Ok(None);
        };
        if meta.size > limit.max {
            return Err(Error::TooLarge {
                location: self.locate(rel),
                limit: limit.max,
                what: limit.what,
            });
        }
        Ok(Some(Box::new(self.reader(key, meta.size))))
    }

    fn locate(&self, rel: &str) -> String {
        format!("{}/{rel}", self.name.trim_end_matches('/'))
    }

    fn read_error(&self, rel: &str, e: std::io::Error) -> Error {
        self.err(format!("cannot read {rel}: {e}"))
    }
}

impl crate::source::Bucket for S3BlobStore {
    fn write(&self, rel: &str, bytes: Vec<u8>) -> Result<(), Error> {
        let key = self.key(rel);
        self.block_on(async {
            self.store
                .put(&key, PutPayload::from(bytes))
                .await
                .map(drop)
                .map_err(|e| self.err(e))
        })
    }

    fn files(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let under = self.key(prefix.trim_end_matches('/'));
        let root = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        self.block_on(async {
            let mut stream = self.store.list(Some(&under));
            let mut out = Vec::new();
            while let Some(obj) = stream.next().await {
                let obj = obj.map_err(|e| self.err(e))?;
                if let Some(rel) = obj.location.as_ref().strip_prefix(&root) {
                    out.push(rel.to_string());
                }
            }
            Ok(out)
        })
    }

    fn remove(&self, rel: &str) -> Result<(), Error> {
        let key = self.key(rel);
        self.block_on(async {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.err(e)),
            }
        })
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

/// Streams an object by ranged GETs of [`PART`] bytes on the store's runtime.
struct RangedReader {
    store: Arc<dyn ObjectStore>,
    rt: Arc<PrivateRuntime>,
    key: ObjectPath,
    size: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_pos: usize,
    name: String,
}

impl Read for RangedReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf_pos == self.buf.len() {
            if self.pos >= self.size {
                return Ok(0);
            }
            let end = (self.pos + PART as u64).min(self.size);
            let (store, key, range) = (&self.store, &self.key, self.pos..end);
            let bytes = self
                .rt
                .drive(async move { store.get_range(key, range).await })
                .map_err(|e| std::io::Error::other(format!("{}: {e}", self.name)))?;
            if bytes.is_empty() {
                return Err(std::io::Error::other(format!(
                    "{}: object {} ended at byte {} of {}",
                    self.name, self.key, self.pos, self.size
                )));
            }
            self.pos += bytes.len() as u64;
            self.buf = bytes.to_vec();
            self.buf_pos = 0;
        }
        let n = out.len().min(self.buf.len() - self.buf_pos);
        out[..n].copy_from_slice(&self.buf[self.buf_pos..self.buf_pos + n]);
        self.buf_pos += n;
        Ok(n)
    }
}
