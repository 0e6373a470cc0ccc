//! Interoperability: a lab's checkpoint, tiles, entries and proofs checked with independent
//! third-party implementations — Cloudflare azul's `signed_note` (C2SP signed-note) and
//! `tlog_tiles` (a port of Go's `golang.org/x/mod/sumdb/tlog`: tiled RFC 6962 trees, record and
//! tree proofs) — not only with our own verifier.
//!
//! `tlog_tiles` 0.2 names tiles the Go sumdb way (`tile/H/L/N`); the [`LabTiles`] reader maps
//! its tile coordinates onto the C2SP paths we store (`tile/L/N`), so the bytes it checks are
//! our files, unchanged.

use glassbox_ledger::merkle::{
    LeafIndex, MerkleHash, TreeSize, verify_consistency, verify_inclusion,
};
use glassbox_ledger::tiles::split_bundle;
use glassbox_ledger::{DirSource, LabDir, LockMode, LogReader};
use signed_note::{Note, StandardSigner, StandardVerifier, VerifierList};
use tlog_tiles::{Hash, HashReader, Tile, TileHashReader, TileReader};

use crate::fixture::{entry_bytes, new_lab};

struct LabTiles<'a>(&'a LabDir);

impl TileReader for LabTiles<'_> {
    fn height(&self) -> u8 {
        8
    }

    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        tiles
            .iter()
            .map(|t| {
                let id = glassbox_ledger::tiles::TileId {
                    kind: glassbox_ledger::tiles::TileKind::Hashes(t.level()),
                    index: t.level_index(),
                    width: t.width() as u16,
                };
                std::fs::read(self.0.log_dir().join(id.path()))
                    .map_err(|_| tlog_tiles::Error::InvalidTile)
            })
            .collect()
    }

    fn save_tiles(&self, _tiles: &[Tile], _data: &[Vec<u8>]) {}
}

fn build(n: u64) -> (tempfile::TempDir, LabDir, Vec<Vec<u8>>) {
    let (d, lab) = new_lab();
    let entries: Vec<Vec<u8>> = (0..n)
        .map(|i| entry_bytes(i, (i % 7) as usize * 9))
        .collect();
    let w = lab.writer(LockMode::FailFast).unwrap();
    // Several batches so partial tiles of earlier sizes exist too.
    let cut = [0, n / 3, n / 3 + 1, n];
    for win in cut.windows(2) {
        w.append_batch(entries[win[0] as usize..win[1] as usize].to_vec())
            .unwrap();
    }
    (d, lab, entries)
}

#[test]
fn checkpoint_verifies_with_signed_note_and_parses_with_tlog_tiles() {
    let (_d, lab, _) = build(300);
    let note_bytes = std::fs::read(lab.log_dir().join("checkpoint")).unwrap();
    let vkey = lab.verifier_key().unwrap().to_string();
    let verifier = StandardVerifier::new(&vkey).unwrap();
    let note = Note::from_bytes(&note_bytes).unwrap();
    let (verified, unverified) = note
        .verify(&VerifierList::new(vec![Box::new(verifier)]))
        .unwrap();
    assert_eq!((verified.len(), unverified.len()), (1, 0));
    let cp = tlog_tiles::Checkpoint::from_bytes(note.text()).unwrap();
    assert_eq!(cp.origin(), "test.example/log");
    assert_eq!(cp.size(), 300);
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let ours = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    assert_eq!(cp.hash().0, ours.checkpoint.checkpoint.root.0);

    // Our private key text loads in signed_note's signer, and a note it signs verifies with
    // our verifier (the key id and signature encodings agree both ways).
    let skey = std::fs::read_to_string(lab.key_path()).unwrap();
    let signer = StandardSigner::new(skey.trim()).unwrap();
    let mut theirs = Note::new(note.text(), &[]).unwrap();
    theirs.add_sigs(&[&signer]).unwrap();
    let checked = lab
        .verifier_key()
        .unwrap()
        .verify(&theirs.to_bytes())
        .unwrap();
    assert_eq!(checked.checkpoint.size, TreeSize(300));
    // A note with an altered text fails their verifier.
    let mut bad = note_bytes.clone();
    bad[5] ^= 1;
    let bad_verifier = StandardVerifier::new(&vkey).unwrap();
    assert!(
        Note::from_bytes(&bad)
            .and_then(|n| n.verify(&VerifierList::new(vec![Box::new(bad_verifier)])))
            .is_err()
    );
}

#[test]
fn tiles_entries_and_proofs_agree_with_tlog_tiles() {
    // 66_000 entries: full and partial tiles on levels 0 and 1, and one hash on level 2.
    let n = 66_000u64;
    let (_d, lab, entries) = build(n);
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let ours = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let root = Hash(ours.checkpoint.checkpoint.root.0);
    let tiles = LabTiles(&lab);
    // TileHashReader authenticates every tile it loads against the tree root.
    let thr = TileHashReader::new(n, root, &tiles);
    assert_eq!(tlog_tiles::tree_hash(n, &thr).unwrap(), root);

    // Entry bundles: their record hashes are the stored level-0 hashes.
    for t in [0u64, 1, 128, 256] {
        let bytes = std::fs::read(lab.log_dir().join(format!("tile/entries/{:03}", t))).unwrap();
        let parsed = split_bundle(&bytes, 256).unwrap();
        let idx: Vec<u64> = (0..256)
            .map(|k| tlog_tiles::stored_hash_index(0, t * 256 + k))
            .collect();
        let stored = thr.read_hashes(&idx).unwrap();
        for (k, e) in parsed.iter().enumerate() {
            assert_eq!(*e, entries[(t * 256) as usize + k].as_slice());
            assert_eq!(tlog_tiles::record_hash(e), stored[k]);
        }
    }
    let last_bytes = std::fs::read(lab.log_dir().join("tile/entries/257.p/208")).unwrap();
    let last = split_bundle(&last_bytes, 208).unwrap();
    assert_eq!(last.len(), 208);

    // Inclusion proofs both ways.
    for i in [0u64, 1, 255, 256, 65_535, 65_536, n - 1] {
        let leaf = tlog_tiles::record_hash(&entries[i as usize]);
        let ours_p = ours
            .inclusion_proof(LeafIndex(i), TreeSize(n))
            .unwrap()
            .unwrap();
        let theirs_p = tlog_tiles::prove_record(n, i, &thr).unwrap();
        assert_eq!(
            ours_p.iter().map(|h| h.0).collect::<Vec<_>>(),
            theirs_p.iter().map(|h| h.0).collect::<Vec<_>>(),
            "index {i}"
        );
        let as_theirs: Vec<Hash> = ours_p.iter().map(|h| Hash(h.0)).collect();
        tlog_tiles::check_record(&as_theirs, n, root, i, leaf).unwrap();
        let as_ours: Vec<MerkleHash> = theirs_p.iter().map(|h| MerkleHash(h.0)).collect();
        verify_inclusion(
            &MerkleHash(leaf.0),
            LeafIndex(i),
            TreeSize(n),
            &as_ours,
            &MerkleHash(root.0),
        )
        .unwrap();
    }
    // Consistency proofs both ways.
    for m in [1u64, 2, 255, 256, 22_000, 65_536, n - 1] {
        let rm = ours.root_at(TreeSize(m)).unwrap();
        assert_eq!(
            tlog_tiles::tree_hash(m, &thr).unwrap().0,
            rm.0,
            "root at {m}"
        );
        let ours_p = ours
            .consistency_proof(TreeSize(m), TreeSize(n))
            .unwrap()
            .unwrap();
        let theirs_p = tlog_tiles::prove_tree(n, m, &thr).unwrap();
        assert_eq!(
            ours_p.iter().map(|h| h.0).collect::<Vec<_>>(),
            theirs_p.iter().map(|h| h.0).collect::<Vec<_>>(),
            "m {m}"
        );
        let as_theirs: Vec<Hash> = ours_p.iter().map(|h| Hash(h.0)).collect();
        tlog_tiles::check_tree(&as_theirs, n, root, m, Hash(rm.0)).unwrap();
        let as_ours: Vec<MerkleHash> = theirs_p.iter().map(|h| MerkleHash(h.0)).collect();
        verify_consistency(TreeSize(m), TreeSize(n), &rm, &MerkleHash(root.0), &as_ours).unwrap();
    }
}
