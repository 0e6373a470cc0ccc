//! The log copied into a bucket ([`Mirror`]), with a directory standing in for the bucket: the
//! bucket audits as the log at every step, whichever of two integrators copied last, holds exactly the tiles its checkpoint needs (a
//! partial is deleted once superseded), never sees a tile path rewritten with other bytes, and
//! a bucket that holds another log (another lab's, a fork, a copy ahead of the local log) is
//! refused with nothing written. The same against S3 (moto) is in `s3_moto.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::bucket::DirBucket;
use glassbox_ledger::tiles::tiles_for_size;
use glassbox_ledger::{Bucket, DirSource, Error, LabDir, LockMode, Mirror, audit};

use crate::fixture::{entry_bytes, new_lab};
use crate::store::{assert_immutable, tile_files};

fn bucket_at(dir: &Path) -> DirBucket {
    DirBucket(DirSource {
        root: dir.to_path_buf(),
    })
}

fn append(lab: &LabDir, from: u64, n: u64, salt: usize) {
    let w = lab.writer(LockMode::FailFast).unwrap();
    w.append_batch((from..from + n).map(|i| entry_bytes(i, salt)).collect())
        .unwrap();
}

fn audits(root: &Path, lab: &LabDir) -> u64 {
    let src = DirSource {
        root: root.to_path_buf(),
    };
    audit(&src, &lab.verifier_key().unwrap(), AuditOptions::default())
        .unwrap()
        .unwrap_or_else(|f| panic!("the bucket does not audit: {f}"))
        .checkpoint
        .checkpoint
        .size
        .0
}

#[test]
fn the_bucket_is_the_log_at_every_checkpoint_and_keeps_only_the_tiles_it_needs() {
    let (_d, lab) = new_lab();
    let b = tempfile::tempdir().unwrap();
    let bucket = bucket_at(b.path());
    // Two integrators taking turns (a server and a CLI process with the key), each copying
    // what it integrated: neither may trust what it last saw of the bucket.
    let mirrors = [Mirror::new(), Mirror::new()];
    let vkey = lab.verifier_key().unwrap();
    let mut seen = BTreeMap::new();
    let mut next = 0u64;
    let mut k = 0u64;
    // Batches of 1 to 300 entries across several full bundles and a level-1 tile.
    while next < 1_300 {
        let n = 1 + (k * 37) % 300;
        k += 1;
        append(&lab, next, n, 0);
        next += n;
        let mirror = &mirrors[usize::from(k % 3 == 0)];
        let r = mirror.sync(&bucket, lab.root(), &vkey).unwrap();
        assert_eq!(r.size, next);
        assert_eq!(mirror.published(), Some(next));
        assert_immutable(
            &mut seen,
            &tile_files(&b.path().join("log")),
            &format!("the bucket after {next} entries"),
        );
        assert_eq!(audits(b.path(), &lab), next);
        let stored: BTreeSet<String> = tile_files(&b.path().join("log")).into_keys().collect();
        let needed: BTreeSet<String> = tiles_for_size(next).iter().map(|t| t.path()).collect();
        assert_eq!(stored, needed, "after {next} entries");
    }
    assert_eq!(
        std::fs::read(b.path().join("log/checkpoint")).unwrap(),
        std::fs::read(lab.log_dir().join("checkpoint")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(b.path().join("vkey"))
            .unwrap()
            .trim(),
        vkey.to_string()
    );
    // A new process looks at the bucket, finds it current, and writes nothing.
    let again = Mirror::new().sync(&bucket, lab.root(), &vkey).unwrap();
    assert_eq!((again.size, again.written), (next, 0));
}

#[test]
fn a_bucket_behind_is_caught_up_and_one_holding_another_log_is_refused_untouched() {
    let (_d, lab) = new_lab();
    let vkey = lab.verifier_key().unwrap();
    append(&lab, 0, 5, 0);
    // A copy of the lab at 5 entries; then the lab grows on to 300 and is mirrored.
    let stale = tempfile::tempdir().unwrap();
    copy_dir(lab.root(), stale.path());
    let stale = LabDir::open(stale.path()).unwrap();
    let b = tempfile::tempdir().unwrap();
    let bucket = bucket_at(b.path());
    Mirror::new().sync(&bucket, lab.root(), &vkey).unwrap();
    append(&lab, 5, 295, 0);
    // An integrator killed between a copy's tiles and its checkpoint left partials of a size
    // the bucket never published (and the log may never reach).
    bucket
        .write("log/tile/0/000.p/77", vec![7; 77 * 32])
        .unwrap();
    bucket
        .write("log/tile/entries/000.p/77", vec![0; 9])
        .unwrap();
    // A new integrator finds the bucket at 5, brings it to 300 and sweeps the leftovers.
    let r = Mirror::new().sync(&bucket, lab.root(), &vkey).unwrap();
    assert_eq!(r.size, 300);
    assert!(r.written >= 3 && r.deleted >= 3, "{r:?}");
    let stored: BTreeSet<String> = tile_files(&b.path().join("log")).into_keys().collect();
    let needed: BTreeSet<String> = tiles_for_size(300).iter().map(|t| t.path()).collect();
    assert_eq!(stored, needed);
    assert_eq!(audits(b.path(), &lab), 300);
    let before = tile_files(&b.path().join("log"));
    let checkpoint = std::fs::read(b.path().join("log/checkpoint")).unwrap();

    // The stale copy (5 entries) must not publish over the bucket's 300.
    match Mirror::new().sync(&bucket, stale.root(), &vkey) {
        Err(Error::BucketConflict { reason, .. }) => {
            assert!(reason.contains("300") && reason.contains('5'), "{reason}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // A fork: the stale copy grows to 400 with other entries than the lab's.
    append(&stale, 5, 395, 7);
    match Mirror::new().sync(&bucket, stale.root(), &vkey) {
        Err(Error::BucketConflict { reason, .. }) => {
            assert!(reason.contains("size 300 has root"), "{reason}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Another lab altogether.
    let (_o, other) = new_lab();
    append(&other, 0, 400, 0);
    match Mirror::new().sync(&bucket, other.root(), &other.verifier_key().unwrap()) {
        Err(Error::BucketConflict { reason, .. }) => assert!(reason.contains("vkey"), "{reason}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        tile_files(&b.path().join("log")),
        before,
        "a refused copy wrote tiles"
    );
    assert_eq!(
        std::fs::read(b.path().join("log/checkpoint")).unwrap(),
        checkpoint
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

#[test]
fn an_integrator_on_a_new_host_restores_the_log_from_the_bucket_and_carries_on() {
    let (_d, lab) = new_lab();
    let vkey = lab.verifier_key().unwrap();
    let b = tempfile::tempdir().unwrap();
    let bucket = bucket_at(b.path());
    append(&lab, 0, 600, 0);
    Mirror::new().sync(&bucket, lab.root(), &vkey).unwrap();
    // The new host: the signing key only.
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(host.path().join("keys")).unwrap();
    std::fs::copy(lab.key_path(), host.path().join("keys/ledger.key")).unwrap();
    let restored = glassbox_ledger::bucket::restore(&bucket, host.path(), &vkey).unwrap();
    assert_eq!(restored, Some(600));
    let moved = LabDir::open(host.path()).unwrap();
    assert_eq!(audits(moved.root(), &moved), 600);
    // It appends on from there, and publishes to the same bucket: the same log as if the
    // first host had carried on.
    append(&moved, 600, 100, 0);
    append(&lab, 600, 100, 0);
    assert_eq!(
        Mirror::new()
            .sync(&bucket, moved.root(), &vkey)
            .unwrap()
            .size,
        700
    );
    assert_eq!(audits(b.path(), &lab), 700);
    assert_eq!(
        std::fs::read(b.path().join("log/tile/0/002.p/188")).unwrap(),
        std::fs::read(lab.log_dir().join("tile/0/002.p/188")).unwrap()
    );
    // A second restore into a host that has a log is refused; a bucket without a log restores
    // nothing; a tampered tile in the bucket fails the restore's audit and leaves no log.
    assert!(matches!(
        glassbox_ledger::bucket::restore(&bucket, host.path(), &vkey),
        Err(Error::LabExists { .. })
    ));
    let empty = tempfile::tempdir().unwrap();
    let nowhere = tempfile::tempdir().unwrap();
    assert_eq!(
        glassbox_ledger::bucket::restore(&bucket_at(empty.path()), nowhere.path(), &vkey).unwrap(),
        None
    );
    let tile = b.path().join("log/tile/0/000");
    let mut bytes = std::fs::read(&tile).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&tile, bytes).unwrap();
    let third = tempfile::tempdir().unwrap();
    match glassbox_ledger::bucket::restore(&bucket, third.path(), &vkey) {
        Err(Error::BucketConflict { reason, .. }) => {
            assert!(reason.contains("does not audit"), "{reason}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!third.path().join("log/checkpoint").exists());
}
