//! Git publication: the mirror verifies, later publications are incremental with one commit
//! per new checkpoint (message = the checkpoint note), big blobs are listed as omitted, and a
//! rewritten history is refused.

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::publish::publish;
use glassbox_ledger::{BlobStore, DirSource, Error, LabDir, LockMode, audit};

fn commits(repo: &std::path::Path) -> Vec<String> {
    let r = git2::Repository::open(repo).unwrap();
    let mut walk = r.revwalk().unwrap();
    walk.push_head().unwrap();
    walk.map(|id| {
        r.find_commit(id.unwrap())
            .unwrap()
            .message()
            .unwrap()
            .to_string()
    })
    .collect()
}

#[test]
fn published_repository_verifies_and_grows_incrementally() {
    let (_d, lab) = crate::fixture::new_lab();
    let small = lab.blobs().put(&mut vec![1u8; 1000].as_slice()).unwrap();
    let big = lab.blobs().put(&mut vec![2u8; 5000].as_slice()).unwrap();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_entry(&crate::fixture::blob_entry(0, &small))
            .unwrap();
        w.append_entry(&crate::fixture::blob_entry(1, &big))
            .unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let repo = out.path().join("mirror");
    let r1 = publish(&lab, &repo, 4096).unwrap();
    assert!(r1.committed);
    assert_eq!((r1.size, r1.blobs_copied, r1.blobs_omitted), (2, 1, 1));
    let cp = std::fs::read_to_string(lab.log_dir().join("checkpoint")).unwrap();
    assert_eq!(commits(&repo), vec![cp.clone()]);
    let vkey = lab.verifier_key().unwrap();
    let rep = audit(
        &DirSource { root: repo.clone() },
        &vkey,
        AuditOptions::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!((rep.entries, rep.blobs, rep.blobs_omitted), (2, 1, 1));
    assert!(
        std::fs::read_to_string(repo.join("blobs/OMITTED"))
            .unwrap()
            .contains(&big.hash.to_string())
    );
    assert!(
        !repo.join("keys").exists(),
        "the private key is never published"
    );

    // Nothing new: no commit.
    assert!(!publish(&lab, &repo, 4096).unwrap().committed);
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        for i in 2..300 {
            w.append(crate::fixture::entry_bytes(i, 0)).unwrap();
        }
    }
    let r2 = publish(&lab, &repo, 4096).unwrap();
    assert!(r2.committed && r2.size == 300);
    let log = commits(&repo);
    assert_eq!(log.len(), 2);
    assert_eq!(
        log[0],
        std::fs::read_to_string(lab.log_dir().join("checkpoint")).unwrap()
    );
    audit(
        &DirSource { root: repo.clone() },
        &vkey,
        AuditOptions::default(),
    )
    .unwrap()
    .unwrap();

    // A lab whose history differs (same key, different entries) cannot publish over it.
    let other_dir = tempfile::tempdir().unwrap();
    copy_dir(lab.root(), other_dir.path());
    let other = LabDir::open(other_dir.path()).unwrap();
    std::fs::remove_dir_all(other.log_dir()).unwrap();
    glassbox_ledger::LogWriter::create(&other.log_dir(), &other.signing_key().unwrap()).unwrap();
    {
        let w = other.writer(LockMode::FailFast).unwrap();
        for i in 0..400 {
            w.append(crate::fixture::entry_bytes(i + 10_000, 0))
                .unwrap();
        }
    }
    let e = publish(&other, &repo, 4096).unwrap_err();
    assert!(matches!(e, Error::Git { .. }), "{e}");
    assert!(e.to_string().contains("rewritten history"), "{e}");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
