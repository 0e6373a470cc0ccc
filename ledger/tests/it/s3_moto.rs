//! The S3 blob store against a real S3-compatible server on loopback: moto in server mode
//! (`pip install 'moto[server]'`, which CI's `.ci/run` does). Each test starts its own
//! `moto_server` on a free port (`tests/e2e/support/moto.rs` at the repository root), creates a
//! bucket, and drives `S3BlobStore` through the `BlobStore` trait exactly as the local
//! store is driven. A missing `moto_server` fails the test with the install command; it never
//! skips. Not here: AWS itself, credentials discovery.
#![cfg(feature = "aws")]

use std::io::Read;

use glassbox_ledger::blob::BlobStore;
use glassbox_ledger::s3::{PART, S3BlobStore, S3Config};
use glassbox_ledger::store::open_store_with_env;
use glassbox_ledger::{Error, LocalBlobStore};
use glassbox_schemas::{Blake3Hash, BlobHash};

#[path = "../../../tests/e2e/support/moto.rs"]
mod moto;
use moto::{Moto, create_bucket, raw_keys, start_moto};

fn config(moto: &Moto, bucket: &str, prefix: &str) -> S3Config {
    S3Config {
        endpoint: Some(moto.endpoint.clone()),
        bucket: bucket.into(),
        prefix: prefix.into(),
        region: "us-east-1".into(),
        access_key_id: "testing".into(),
        secret_access_key: "testing".into(),
    }
}

fn read_all(store: &dyn BlobStore, hash: &BlobHash) -> Vec<u8> {
    let mut out = Vec::new();
    store
        .get(hash)
        .expect("get")
        .read_to_end(&mut out)
        .expect("read");
    out
}

/// Deterministic, non-repeating bytes (so a part boundary bug changes the hash).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

#[test]
fn small_and_multipart_blobs_round_trip_with_local_store_addresses() {
    let moto = start_moto();
    create_bucket(&moto, "lab");
    let store = S3BlobStore::new(&config(&moto, "lab", "team/lab1")).unwrap();
    let local_dir = tempfile::tempdir().unwrap();
    let local = LocalBlobStore::new(local_dir.path());

    // Small (one request), exactly one part, and multipart (three parts, the last short).
    for (len, seed) in [(0usize, 0u8), (1000, 1), (PART, 2), (2 * PART + 12_345, 3)] {
        let data = pattern(len, seed);
        let put = store.put(&mut data.as_slice()).unwrap();
        assert_eq!(put.hash.0, Blake3Hash::of(&data), "len {len}");
        assert_eq!(put.bytes, len as u64);
        assert!(!put.existed, "len {len}");
        // Same address as the local store gives the same bytes.
        assert_eq!(local.put(&mut data.as_slice()).unwrap().hash, put.hash);
        assert!(store.has(&put.hash).unwrap());
        assert_eq!(read_all(&store, &put.hash), data, "len {len}");
        // A second put is a no-op that reports the existing blob.
        let again = store.put(&mut data.as_slice()).unwrap();
        assert_eq!(again.hash, put.hash);
        assert!(again.existed, "len {len}");
    }
    let listed = store.list().unwrap();
    assert_eq!(listed, local.list().unwrap());
    assert_eq!(listed.len(), 4);

    // Keys follow `<prefix>/blobs/<2 hex>/<62 hex>` and no temporary upload is left behind.
    let keys = raw_keys(&moto, "lab");
    assert_eq!(keys.len(), 4, "{keys:?}");
    for h in &listed {
        let hex = h.0.to_hex();
        let want = format!("team/lab1/blobs/{}/{}", &hex[..2], &hex[2..]);
        assert!(keys.contains(&want), "{want} not in {keys:?}");
    }

    let missing = BlobHash(Blake3Hash::of(b"never stored"));
    assert!(!store.has(&missing).unwrap());
    match store.get(&missing) {
        Err(Error::BlobNotFound { hash, store }) => {
            assert_eq!(hash, missing.to_string());
            assert_eq!(store, "s3://lab/team/lab1");
        }
        other => panic!("expected BlobNotFound, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn put_file_skips_the_upload_of_an_existing_blob_and_large_copies_stream() {
    let moto = start_moto();
    create_bucket(&moto, "files");
    // Copy limit 0: every finished temporary upload takes the streamed re-upload path that
    // S3 needs above 5 GiB.
    let store = S3BlobStore::new(&config(&moto, "files", ""))
        .unwrap()
        .with_copy_limit(0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    let data = pattern(PART + 777, 9);
    std::fs::write(&path, &data).unwrap();

    let first = store.put_file(&path).unwrap();
    assert!(!first.existed);
    assert_eq!(first.hash.0, Blake3Hash::of(&data));
    assert_eq!(read_all(&store, &first.hash), data);
    let second = store.put_file(&path).unwrap();
    assert!(second.existed);
    assert_eq!(second.hash, first.hash);

    let other = pattern(2 * PART + 1, 4);
    let put = store.put(&mut other.as_slice()).unwrap();
    assert!(!put.existed);
    assert_eq!(read_all(&store, &put.hash), other);
    let keys = raw_keys(&moto, "files");
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("blobs/")), "{keys:?}");
}

#[test]
fn open_store_reads_s3_locations_from_the_environment() {
    let moto = start_moto();
    create_bucket(&moto, "envbucket");
    let endpoint = moto.endpoint.clone();
    let env = move |key: &str| match key {
        "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
        "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("testing".into()),
        _ => None,
    };
    let store = open_store_with_env("s3://envbucket/some/prefix", &env).unwrap();
    assert_eq!(store.describe(), "s3://envbucket/some/prefix");
    let put = store.put(&mut &b"hello"[..]).unwrap();
    assert_eq!(read_all(store.as_ref(), &put.hash), b"hello");
    let hex = put.hash.0.to_hex();
    assert_eq!(
        raw_keys(&moto, "envbucket"),
        vec![format!("some/prefix/blobs/{}/{}", &hex[..2], &hex[2..])]
    );

    // No credentials: a clear error naming the variable, before any request.
    let err = open_store_with_env("s3://envbucket/x", &|_| None)
        .err()
        .expect("missing credentials must fail");
    assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
}

#[test]
fn usable_from_inside_a_tokio_runtime_and_sizes_blobs() {
    let moto = start_moto();
    create_bucket(&moto, "runtime");
    let store: std::sync::Arc<dyn BlobStore> =
        std::sync::Arc::new(S3BlobStore::new(&config(&moto, "runtime", "p")).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let big = pattern(PART + 1234, 9);
    let (small_hash, big_hash) = rt.block_on(async {
        // Straight from an async task (where Runtime::block_on would panic) ...
        let small = store.put(&mut &b"from a task"[..]).unwrap().hash;
        // ... and from the blocking pool, a multipart upload and a ranged read.
        let s2 = store.clone();
        let big2 = big.clone();
        let big_hash = tokio::task::spawn_blocking(move || {
            let h = s2.put(&mut big2.as_slice()).unwrap().hash;
            assert_eq!(read_all(s2.as_ref(), &h), big2);
            h
        })
        .await
        .unwrap();
        assert_eq!(read_all(store.as_ref(), &small), b"from a task");
        (small, big_hash)
    });
    assert_eq!(store.size(&small_hash).unwrap(), Some(11));
    assert_eq!(store.size(&big_hash).unwrap(), Some(big.len() as u64));
    let absent = BlobHash(Blake3Hash::of(b"never stored"));
    assert_eq!(store.size(&absent).unwrap(), None);
    assert!(!store.has(&absent).unwrap());
}

#[test]
fn dropped_inside_a_runtime_without_panicking() {
    let moto = start_moto();
    create_bucket(&moto, "drop");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = S3BlobStore::new(&config(&moto, "drop", "")).unwrap();
        let h = store.put(&mut &b"x"[..]).unwrap().hash;
        let reader = store.get(&h).unwrap();
        drop(store);
        drop(reader);
    });
}

/// The integrator's copy of the log in a real bucket: an auditor reads it straight from the
/// bucket, over the bucket's plain HTTP URL (no server of the lab's) and through the S3 API,
/// blobs included; superseded partial tiles are gone from the bucket.
#[test]
fn the_log_copied_to_a_bucket_audits_over_its_http_url_and_the_s3_api() {
    use glassbox_ledger::audit::AuditOptions;
    use glassbox_ledger::tiles::tiles_for_size;
    use glassbox_ledger::{HttpSource, LabDir, LockMode, LogSource, Mirror, audit};

    let moto = start_moto();
    create_bucket(&moto, "public");
    moto::allow_public_read(&moto, "public", "labs/one");
    let store = S3BlobStore::new(&config(&moto, "public", "labs/one")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (lab, _) = LabDir::init(dir.path(), "test.example/bucket").unwrap();
    let vkey = lab.verifier_key().unwrap();
    let mirror = Mirror::new();
    let bucket = glassbox_ledger::BlobStore::bucket(&store).expect("an S3 store is a bucket");
    let mut size = 0u64;
    for n in [3u64, 250, 10, 300] {
        let w = lab.writer(LockMode::FailFast).unwrap();
        let entries: Vec<Vec<u8>> = (size..size + n)
            .map(|i| {
                let put = store.put(&mut format!("blob {i}").as_bytes()).unwrap();
                crate::fixture::blob_entry(i, &put)
                    .to_canonical_bytes()
                    .unwrap()
            })
            .collect();
        w.append_batch(entries).unwrap();
        size += n;
        assert_eq!(mirror.sync(bucket, lab.root(), &vkey).unwrap().size, size);
    }
    // A partial a killed integrator left behind is swept by the next integrator's first copy.
    bucket
        .write("log/tile/entries/001.p/99", b"left behind".to_vec())
        .unwrap();
    let next = Mirror::new().sync(bucket, lab.root(), &vkey).unwrap();
    assert_eq!((next.written, next.deleted), (0, 1));
    let http = HttpSource::new(&format!("{}/public/labs/one/", moto.endpoint));
    let sources: [(&str, &dyn LogSource); 2] = [("http", &http), ("s3", &store)];
    for (how, src) in sources {
        let report = audit(src, &vkey, AuditOptions::default())
            .unwrap()
            .unwrap_or_else(|f| panic!("{how}: {f}"));
        assert_eq!(report.checkpoint.checkpoint.size.0, size, "{how}");
        assert_eq!(report.blobs, size, "{how}");
    }
    let mut tiles: Vec<String> = raw_keys(&moto, "public")
        .into_iter()
        .filter_map(|k| k.strip_prefix("labs/one/log/tile/").map(str::to_string))
        .collect();
    tiles.sort();
    let mut needed: Vec<String> = tiles_for_size(size)
        .iter()
        .map(|t| t.path()[5..].to_string())
        .collect();
    needed.sort();
    assert_eq!(tiles, needed);
}
