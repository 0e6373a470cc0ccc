//! S3-compatible blob storage through the `object_store` crate (feature `aws`), for labs that
//! outgrow one machine. Same content addressing and key layout as the local store:
//! `<prefix>/blobs/<2 hex>/<62 hex>`.
//!
//! A put streams the input in parts to a temporary key while hashing it, then copies it to its
//! content address (skipped when that exists) and deletes the temporary key, so a blob is
//! either wholly at its address or absent. Reads are ranged GETs of fixed-size chunks, so
//! memory stays bounded. The trait is synchronous: this store drives its own Tokio runtime, so
//! call it from blocking code (`spawn_blocking` inside async code), never from an async task.

use std::io::Read;
use std::sync::Arc;

use glassbox_schemas::{Blake3Hash, BlobHash};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, WriteMultipart};

use crate::blob::{BlobStore, PutOutcome, blob_rel_path};
use crate::error::Error;

/// Part size for uploads and chunk size for ranged reads (S3's minimum part is 5 MiB).
const PART: usize = 8 << 20;

/// Blobs in an S3-compatible bucket.
#[derive(Debug)]
pub struct S3BlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    name: String,
    rt: tokio::runtime::Runtime,
}

/// Where the bucket is and how to reach it.
#[derive(Debug, Clone)]
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

impl S3BlobStore {
    /// Connects (lazily: the first request reaches the endpoint).
    pub fn new(cfg: &S3Config) -> Result<Self, Error> {
        let name = format!("s3://{}/{}", cfg.bucket, cfg.prefix);
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        Ok(Self {
            store: Arc::new(store),
            prefix: cfg.prefix.trim_matches('/').to_string(),
            name,
            rt,
        })
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
}

impl BlobStore for S3BlobStore {
    fn put(&self, reader: &mut dyn Read) -> Result<PutOutcome, Error> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| self.err(e))?;
        let tmp = self.key(&format!("blobs/.tmp-{}", hex::encode(nonce)));
        let mut hasher = blake3::Hasher::new();
        let mut total = 0u64;
        self.rt.block_on(async {
            let upload = self
                .store
                .put_multipart(&tmp)
                .await
                .map_err(|e| self.err(e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
            let mut buf = vec![0u8; PART];
            loop {
                let n = reader.read(&mut buf).map_err(|e| self.err(e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                total += n as u64;
                w.wait_for_capacity(2).await.map_err(|e| self.err(e))?;
                w.write(&buf[..n]);
            }
            w.finish().await.map_err(|e| self.err(e))?;
            Ok::<(), Error>(())
        })?;
        let hash = BlobHash(Blake3Hash::from(hasher.finalize()));
        let dest = self.key(&blob_rel_path(&hash));
        let existed = self.has(&hash)?;
        self.rt.block_on(async {
            if !existed {
                self.store
                    .copy(&tmp, &dest)
                    .await
                    .map_err(|e| self.err(e))?;
            }
            self.store.delete(&tmp).await.map_err(|e| self.err(e))
        })?;
        Ok(PutOutcome {
            hash,
            bytes: total,
            existed,
        })
    }

    fn get(&self, hash: &BlobHash) -> Result<Box<dyn Read + Send>, Error> {
        let key = self.key(&blob_rel_path(hash));
        let meta = self
            .rt
            .block_on(self.store.head(&key))
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => Error::BlobNotFound {
                    hash: hash.to_string(),
                    store: self.name.clone(),
                },
                other => self.err(other),
            })?;
        Ok(Box::new(RangedReader {
            store: Arc::clone(&self.store),
            key,
            size: meta.size,
            pos: 0,
            buf: Vec::new(),
            buf_pos: 0,
            name: self.name.clone(),
        }))
    }

    fn has(&self, hash: &BlobHash) -> Result<bool, Error> {
        match self
            .rt
            .block_on(self.store.head(&self.key(&blob_rel_path(hash))))
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    fn list(&self) -> Result<Vec<BlobHash>, Error> {
        let prefix = self.key("blobs");
        let listing = self
            .rt
            .block_on(self.store.list_with_delimiter(Some(&prefix)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for dir in listing.common_prefixes {
            let inner = self
                .rt
                .block_on(self.store.list_with_delimiter(Some(&dir)))
                .map_err(|e| self.err(e))?;
            for obj in inner.objects {
                let parts: Vec<&str> = obj.location.as_ref().rsplitn(3, '/').collect();
                if let [rest, two, ..] = parts.as_slice() {
                    if let Ok(h) = format!("blake3:{two}{rest}").parse::<BlobHash>() {
                        out.push(h);
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// Streams an object by ranged GETs of [`PART`] bytes, each on a small private runtime.
struct RangedReader {
    store: Arc<dyn ObjectStore>,
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
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let bytes = rt
                .block_on(self.store.get_range(&self.key, self.pos..end))
                .map_err(|e| std::io::Error::other(format!("{}: {e}", self.name)))?;
            self.buf = bytes.to_vec();
            self.buf_pos = 0;
            self.pos = end;
        }
        let n = out.len().min(self.buf.len() - self.buf_pos);
        out[..n].copy_from_slice(&self.buf[self.buf_pos..self.buf_pos + n]);
        self.buf_pos += n;
        Ok(n)
    }
}
