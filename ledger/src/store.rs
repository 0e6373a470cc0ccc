//! Opening a blob store from a location string: a directory, `file:///path`, or
//! `s3://bucket/prefix` (behind the `aws` feature, which the build says it lacks otherwise).
//!
//! Not here: the stores themselves (`crate::blob`, `crate::s3`).

use std::io;
use std::path::PathBuf;

use crate::error::Error;

use crate::blob::{BlobStore, LocalBlobStore};

/// Opens the blob store a location names: `s3://bucket/prefix` (bucket credentials and
/// endpoint from the environment, see [`open_store_with_env`]), `file:///path`, or a plain
/// directory path (the directory that holds the `<2 hex>/` shards, e.g. `<lab>/blobs`).
pub fn open_store(location: &str) -> Result<Box<dyn BlobStore>, Error> {
    open_store_with_env(location, &|key| std::env::var(key).ok())
}

/// [`open_store`] with the environment read through `env`. An S3 location reads
/// `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
/// (`s3::S3Config::from_env`); it needs the `aws` feature, and says so without it.
pub fn open_store_with_env(
    location: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn BlobStore>, Error> {
    if let Some(rest) = location.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(Error::ObjectStore {
                store: location.to_string(),
                reason: "no bucket name; write s3://BUCKET/PREFIX".into(),
            });
        }
        return open_s3(bucket, prefix, env);
    }
    if location.contains("://") && !location.starts_with("file://") {
        return Err(Error::ObjectStore {
            store: location.to_string(),
            reason: "unknown scheme; use a directory path, file:///path or s3://bucket/prefix"
                .into(),
        });
    }
    let dir = PathBuf::from(location.strip_prefix("file://").unwrap_or(location));
    if !dir.is_dir() {
        return Err(Error::io("cannot open blob directory", &dir)(
            io::Error::new(io::ErrorKind::NotFound, "not a directory"),
        ));
    }
    Ok(Box::new(LocalBlobStore::new(dir)))
}

/// Opens the bucket a location names (`s3://bucket/prefix`, credentials and endpoint as for
/// [`open_store_with_env`]) to read or write the lab's public layout there.
pub fn open_bucket_with_env(
    location: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn crate::source::Bucket>, Error> {
    let Some(rest) = location.strip_prefix("s3://") else {
        return Err(Error::ObjectStore {
            store: location.to_string(),
            reason: "not a bucket; write s3://BUCKET/PREFIX".into(),
        });
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::ObjectStore {
            store: location.to_string(),
            reason: "no bucket name; write s3://BUCKET/PREFIX".into(),
        });
    }
    open_s3_bucket(bucket, prefix, env)
}

#[cfg(feature = "aws")]
fn open_s3_bucket(
    bucket: &str,
    prefix: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn crate::source::Bucket>, Error> {
    let cfg = crate::s3::S3Config::from_env(bucket, prefix, env)?;
    Ok(Box::new(crate::s3::S3BlobStore::new(&cfg)?))
}

#[cfg(not(feature = "aws"))]
fn open_s3_bucket(
    bucket: &str,
    prefix: &str,
    _env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn crate::source::Bucket>, Error> {
    Err(no_s3(bucket, prefix))
}

#[cfg(feature = "aws")]
fn open_s3(
    bucket: &str,
    prefix: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn BlobStore>, Error> {
    let cfg = crate::s3::S3Config::from_env(bucket, prefix, env)?;
    Ok(Box::new(crate::s3::S3BlobStore::new(&cfg)?))
}

#[cfg(not(feature = "aws"))]
fn open_s3(
    bucket: &str,
    prefix: &str,
    _env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn BlobStore>, Error> {
    Err(no_s3(bucket, prefix))
}

#[cfg(not(feature = "aws"))]
fn no_s3(bucket: &str, prefix: &str) -> Error {
    Error::ObjectStore {
        store: format!("s3://{bucket}/{prefix}"),
        reason: "this build has no S3 support; rebuild glassbox-ledger with feature `aws`".into(),
    }
}
