//! The log writer and reader on a real lab directory: appends, reopening, group commit under
//! concurrency, the writer lock, bad input, and proofs read back from tiles.

use std::sync::Arc;

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::merkle::{
    LeafIndex, MemoryTree, TreeSize, verify_consistency, verify_inclusion,
};
use glassbox_ledger::{BlobStore, DirSource, Error, LockMode, LogReader, audit};
use glassbox_schemas::record::MAX_ENTRY_BYTES;

use crate::fixture::{entry, entry_bytes, new_lab};

#[test]
fn appends_survive_reopen_and_match_an_in_memory_tree() {
    let (_d, lab) = new_lab();
    let mut all = Vec::new();
    for round in 0..3u64 {
        let w = lab.writer(LockMode::FailFast).unwrap();
        for i in 0..300u64 {
            let bytes = entry_bytes(round * 1000 + i, 0);
            let idx = w.append(bytes.clone()).unwrap();
            assert_eq!(idx.0, all.len() as u64);
            all.push(bytes);
        }
    }
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let r = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    assert_eq!(r.size(), TreeSize(900));
    let mem = MemoryTree::from_entries(all.iter().map(|e| e.as_slice()));
    assert_eq!(r.checkpoint.checkpoint.root, mem.root(TreeSize(900)));
    for i in [0u64, 255, 256, 511, 899] {
        assert_eq!(r.entry(LeafIndex(i)).unwrap(), all[i as usize]);
    }
    for (i, n) in [(0u64, 900u64), (257, 900), (899, 900), (3, 7), (300, 513)] {
        let p = r
            .inclusion_proof(LeafIndex(i), TreeSize(n))
            .unwrap()
            .unwrap();
        verify_inclusion(
            &mem.leaves[i as usize],
            LeafIndex(i),
            TreeSize(n),
            &p,
            &mem.root(TreeSize(n)),
        )
        .unwrap();
    }
    for (m, n) in [
        (1u64, 900u64),
        (256, 900),
        (300, 600),
        (899, 900),
        (512, 768),
    ] {
        let p = r
            .consistency_proof(TreeSize(m), TreeSize(n))
            .unwrap()
            .unwrap();
        verify_consistency(
            TreeSize(m),
            TreeSize(n),
            &mem.root(TreeSize(m)),
            &mem.root(TreeSize(n)),
            &p,
        )
        .unwrap();
    }
    assert!(matches!(
        r.entry(LeafIndex(900)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(lab.log_dir().join("tile/entries/003.p/132").is_file());
    assert!(lab.log_dir().join("tile/0/002").is_file());
    let report = audit(&src, &lab.verifier_key().unwrap(), AuditOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(report.entries, 900);
}

#[test]
fn concurrent_appenders_are_group_committed() {
    let (_d, lab) = new_lab();
    let w = Arc::new(lab.writer(LockMode::FailFast).unwrap());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                (0..100u64)
                    .map(|i| w.append(entry_bytes(t * 1000 + i, 10)).unwrap().0)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut got: Vec<u64> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    got.sort();
    assert_eq!(
        got,
        (0..800).collect::<Vec<_>>(),
        "every append gets a distinct index"
    );
    assert_eq!(w.checkpoint().checkpoint.size, TreeSize(800));
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    audit(&src, &lab.verifier_key().unwrap(), AuditOptions::default())
        .unwrap()
        .unwrap();
}

#[test]
fn second_writer_fails_clearly_while_the_first_holds_the_lock() {
    let (_d, lab) = new_lab();
    let w = lab.writer(LockMode::FailFast).unwrap();
    let e = lab.writer(LockMode::FailFast).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(e.to_string().contains("another process is writing"), "{e}");
    drop(w);
    lab.writer(LockMode::FailFast).unwrap();
}

#[test]
fn bad_entries_are_refused_and_nothing_is_written() {
    let (_d, lab) = new_lab();
    let w = lab.writer(LockMode::FailFast).unwrap();
    w.append(entry_bytes(0, 0)).unwrap();
    let before = std::fs::read(lab.log_dir().join("checkpoint")).unwrap();
    let big = entry(1, None, MAX_ENTRY_BYTES);
    let e = w.append_entry(&big).unwrap_err();
    assert!(
        matches!(e, Error::EntryTooLarge { limit: 65_535, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("put large content in a blob"), "{e}");
    let e = w.append(vec![b'x'; MAX_ENTRY_BYTES + 1]).unwrap_err();
    assert!(matches!(e, Error::EntryTooLarge { .. }), "{e}");
    let e = w.append(b"{\"not\":\"an entry\"}".to_vec()).unwrap_err();
    assert!(matches!(e, Error::BadEntry(_)), "{e}");
    let mut spaced = entry_bytes(2, 0);
    spaced.insert(1, b' ');
    assert!(matches!(w.append(spaced).unwrap_err(), Error::BadEntry(_)));
    assert_eq!(
        std::fs::read(lab.log_dir().join("checkpoint")).unwrap(),
        before
    );
    assert_eq!(w.checkpoint().checkpoint.size, TreeSize(1));
    // The writer is still usable.
    assert_eq!(w.append(entry_bytes(3, 0)).unwrap(), LeafIndex(1));
}

#[test]
fn missing_lab_and_truncated_tile_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = glassbox_ledger::LabDir::open(&dir.path().join("nope")).unwrap_err();
    assert!(e.to_string().contains("glassbox init"), "{e}");
    assert!(!dir.path().join("nope").exists(), "nothing is created");

    let (_d, lab) = new_lab();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        for i in 0..5 {
            w.append(entry_bytes(i, 0)).unwrap();
        }
    }
    let tile = lab.log_dir().join("tile/0/000.p/5");
    let bytes = std::fs::read(&tile).unwrap();
    std::fs::write(&tile, &bytes[..bytes.len() - 3]).unwrap();
    let e = lab.writer(LockMode::FailFast).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("000.p/5"), "{e}");
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let r = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let e = r.inclusion_proof(LeafIndex(1), TreeSize(5)).unwrap_err();
    assert!(e.to_string().contains("000.p/5"), "{e}");
}

#[test]
fn blobs_put_through_the_lab_are_referenced_and_audited() {
    let (_d, lab) = new_lab();
    let data = vec![42u8; 100_000];
    let put = lab.blobs().put(&mut data.as_slice()).unwrap();
    let w = lab.writer(LockMode::FailFast).unwrap();
    w.append_entry(&crate::fixture::blob_entry(0, &put))
        .unwrap();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let rep = audit(&src, &lab.verifier_key().unwrap(), AuditOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!((rep.blobs, rep.blob_bytes), (1, 100_000));
}

/// A blob is read no further than the size its entry names (or the auditor's cap), so a
/// source that serves more (a hostile server, a blob replaced behind the store's back) fails
/// the audit instead of being hashed forever.
#[test]
fn a_blob_is_read_only_up_to_the_size_its_entry_names() {
    let (_d, lab) = new_lab();
    let data = vec![7u8; 4096];
    let put = lab.blobs().put(&mut data.as_slice()).unwrap();
    let mut e = crate::fixture::blob_entry(0, &put);
    if let glassbox_schemas::record::EntryBody::Artifact(b) = &mut e.body {
        b.bytes = 4000;
    }
    lab.writer(LockMode::FailFast)
        .unwrap()
        .append_entry(&e)
        .unwrap();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let vkey = lab.verifier_key().unwrap();
    let failure = audit(&src, &vkey, AuditOptions::default())
        .unwrap()
        .unwrap_err();
    let text = failure.to_string();
    assert!(
        text.contains("more than the 4000 bytes entry 0 names"),
        "{text}"
    );

    // No named size: the auditor's cap bounds it.
    let (_d2, lab) = new_lab();
    let put = lab.blobs().put(&mut data.as_slice()).unwrap();
    let mut e = crate::fixture::blob_entry(0, &put);
    e.body = glassbox_schemas::record::SnapshotBody {
        run: "run-000001".into(),
        step: 3,
    }
    .into();
    lab.writer(LockMode::FailFast)
        .unwrap()
        .append_entry(&e)
        .unwrap();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let vkey = lab.verifier_key().unwrap();
    let capped = AuditOptions {
        max_blob_bytes: Some(1000),
        ..Default::default()
    };
    let text = audit(&src, &vkey, capped).unwrap().unwrap_err().to_string();
    assert!(text.contains("larger than 1000 bytes"), "{text}");
    assert!(text.contains("--max-blob-bytes"), "{text}");
    let rep = audit(&src, &vkey, AuditOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(rep.blob_bytes, 4096);
}

/// Every file `verify` reads from a target is bounded by what its format
/// allows. The checkpoint, tile and blob bounds have their own tests; these are the verifier
/// key and an entry bundle: a file past its bound is refused after reading one byte past it,
/// with the file, the bound and what it should have been.
#[test]
fn an_oversized_verifier_key_or_entry_bundle_is_refused_by_its_bound() {
    use glassbox_ledger::audit::{AuditFailure, AuditOptions, audit};
    use glassbox_ledger::source::{LogSource, ReadLimit};

    let (_d, lab) = new_lab();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append(entry_bytes(0, 0)).unwrap();
    }
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let vkey = lab.verifier_key().unwrap();
    // A key line padded past the 4 KiB a `name+id+base64` line can need.
    let good = std::fs::read(lab.root().join("vkey")).unwrap();
    let mut huge = good.clone();
    huge.extend(std::iter::repeat_n(b' ', 5000));
    std::fs::write(lab.root().join("vkey"), &huge).unwrap();
    match src.read("vkey", ReadLimit::VKEY) {
        Err(glassbox_ledger::Error::TooLarge { limit, what, .. }) => {
            assert_eq!((limit, what), (4096, "a verifier key file"));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    std::fs::write(lab.root().join("vkey"), &good).unwrap();
    // The one-entry log's bundle is the partial `tile/entries/000.p/1`: at most one entry of a
    // 2-byte length and 65,535 bytes. Grown past that, the audit stops at the bound.
    let bundle = lab.log_dir().join("tile/entries/000.p/1");
    let mut grown = std::fs::read(&bundle).unwrap();
    grown.resize(2 + 65_535 + 1, b'x');
    std::fs::write(&bundle, &grown).unwrap();
    match audit(&src, &vkey, AuditOptions::default()).unwrap() {
        Err(AuditFailure::TooLarge {
            location,
            limit,
            what,
        }) => {
            assert!(location.ends_with("tile/entries/000.p/1"), "{location}");
            assert_eq!((limit, what), (65_537, "an entry bundle of that width"));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
