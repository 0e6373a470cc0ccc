//! Precedence: the archive keeps every checkpoint the writer installed, and a proof that one
//! entry was published before another was sequenced is built from it and checked; entries of
//! one batch have no checkpoint between them, and the proof says so.

use glassbox_ledger::archive::CheckpointArchive;
use glassbox_ledger::cosignature::WitnessPolicy;
use glassbox_ledger::merkle::{
    LeafIndex, TreeSize, leaf_hash, verify_consistency, verify_inclusion,
};
use glassbox_ledger::precedence::{PrecedenceFailure, prove_precedes};
use glassbox_ledger::{DirSource, LockMode};

use crate::fixture::{entry_bytes, new_lab};

#[test]
fn an_entry_published_before_another_is_proven_and_one_batch_is_not() {
    let (_d, lab) = new_lab();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_batch((0..3).map(|i| entry_bytes(i, 0)).collect())
            .unwrap(); // 0..3
        w.append(entry_bytes(3, 0)).unwrap(); // the "forecast", 3
        w.append_batch((4..300).map(|i| entry_bytes(i, 0)).collect())
            .unwrap();
    }
    // Another writer later: the archive goes on across writers.
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append(entry_bytes(300, 0)).unwrap(); // the "run_started", 300
        w.append(entry_bytes(301, 0)).unwrap();
    }
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let vkey = lab.verifier_key().unwrap();
    let archive = CheckpointArchive::in_log_dir(&lab.log_dir());
    assert_eq!(archive.last_size().unwrap(), Some(302));
    let none = WitnessPolicy::default();
    let p = prove_precedes(&src, &vkey, &archive, 3, 300, &none)
        .unwrap()
        .unwrap();
    // The earliest checkpoint holding entry 3: size 4, made before entry 300 existed.
    assert_eq!(p.checkpoint.checkpoint.size, TreeSize(4));
    assert_eq!(p.first_entry, entry_bytes(3, 0));
    vkey.verify(&p.checkpoint.to_bytes()).unwrap();
    verify_inclusion(
        &leaf_hash(&entry_bytes(3, 0)),
        LeafIndex(3),
        TreeSize(4),
        &p.inclusion,
        &p.checkpoint.checkpoint.root,
    )
    .unwrap();
    verify_consistency(
        TreeSize(4),
        TreeSize(302),
        &p.checkpoint.checkpoint.root,
        &p.current.checkpoint.root,
        &p.consistency,
    )
    .unwrap();
    // Entries 4 and 5 were appended in one batch: no checkpoint shows 4 before 5.
    assert!(matches!(
        prove_precedes(&src, &vkey, &archive, 4, 5, &none).unwrap(),
        Err(PrecedenceFailure::NoCheckpointBetween {
            first: 4,
            second: 5
        })
    ));
    assert!(matches!(
        prove_precedes(&src, &vkey, &archive, 300, 3, &none).unwrap(),
        Err(PrecedenceFailure::NotOrdered { .. })
    ));
    assert!(matches!(
        prove_precedes(&src, &vkey, &archive, 3, 302, &none).unwrap(),
        Err(PrecedenceFailure::NotOrdered { .. })
    ));
}
