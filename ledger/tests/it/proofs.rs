//! RFC 6962 / RFC 9162 Merkle vectors: roots of the trillian test leaves, the RFC 9162 2.1.5
//! proof shapes on 7 leaves, trillian's proof vectors, and verifier rejections.

use glassbox_ledger::merkle::{
    LeafIndex, MemoryTree, MerkleHash, ProofError, TreeSize, consistency_proof, empty_root,
    inclusion_proof, leaf_hash, node_hash, verify_consistency, verify_inclusion,
};

/// The eight RFC 6962 test leaves used by trillian and certificate-transparency-go.
const LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

fn tree() -> MemoryTree {
    let raw: Vec<Vec<u8>> = LEAVES.iter().map(|h| hex::decode(h).unwrap()).collect();
    MemoryTree::from_entries(raw.iter().map(|v| v.as_slice()))
}

fn h(s: &str) -> MerkleHash {
    MerkleHash::from_hex(s).unwrap()
}

fn incl(t: &MemoryTree, i: u64, n: u64) -> Vec<MerkleHash> {
    inclusion_proof(t, LeafIndex(i), TreeSize(n))
        .unwrap()
        .unwrap()
}

fn cons(t: &MemoryTree, m: u64, n: u64) -> Vec<MerkleHash> {
    consistency_proof(t, TreeSize(m), TreeSize(n))
        .unwrap()
        .unwrap()
}

#[test]
fn roots_match_rfc6962_vectors() {
    let t = tree();
    assert_eq!(
        empty_root().to_hex(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        empty_root().to_base64(),
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    );
    for (n, root) in [
        (
            1,
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        ),
        (
            2,
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        ),
        (
            3,
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        ),
        (
            4,
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
        (
            5,
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        ),
        (
            6,
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        ),
        (
            7,
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        ),
        (
            8,
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ),
    ] {
        assert_eq!(t.root(TreeSize(n)).to_hex(), root, "size {n}");
    }
}

/// RFC 9162 2.1.5: the tree of 7 leaves d0..d6 with a..f the leaf hashes of d0..d5,
/// g = H(a,b), h = H(c,d), i = H(e,f), j = leaf hash of d6, k = H(g,h), l = H(i,j).
#[test]
fn proof_shapes_on_seven_leaves_match_rfc9162() {
    let t = tree();
    let d = &t.leaves;
    let (a, b, c, dd, e, f) = (d[0], d[1], d[2], d[3], d[4], d[5]);
    let g = node_hash(&a, &b);
    let hh = node_hash(&c, &dd);
    let i = node_hash(&e, &f);
    let j = d[6];
    let k = node_hash(&g, &hh);
    let l = node_hash(&i, &j);
    assert_eq!(node_hash(&k, &l), t.root(TreeSize(7)));
    assert_eq!(incl(&t, 0, 7), vec![b, hh, l]);
    assert_eq!(incl(&t, 3, 7), vec![c, g, l]);
    assert_eq!(incl(&t, 4, 7), vec![f, j, k]);
    assert_eq!(incl(&t, 6, 7), vec![i, k]);
    assert_eq!(cons(&t, 3, 7), vec![c, dd, g, l]);
    assert_eq!(cons(&t, 4, 7), vec![l]);
    assert_eq!(cons(&t, 6, 7), vec![i, j, k]);
    // Every proof of every shape verifies.
    for n in 1..=8u64 {
        let root = t.root(TreeSize(n));
        for idx in 0..n {
            let p = incl(&t, idx, n);
            verify_inclusion(
                &t.leaves[idx as usize],
                LeafIndex(idx),
                TreeSize(n),
                &p,
                &root,
            )
            .unwrap();
        }
        for m in 0..=n {
            let p = cons(&t, m, n);
            verify_consistency(TreeSize(m), TreeSize(n), &t.root(TreeSize(m)), &root, &p).unwrap();
        }
    }
}

#[test]
fn trillian_proof_vectors() {
    let t = tree();
    // (leaf index 0-based, tree size, path)
    let inclusion = [
        (
            0u64,
            8u64,
            vec![
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            5,
            8,
            vec![
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            2,
            3,
            vec!["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
        ),
        (
            1,
            5,
            vec![
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
        (0, 1, vec![]),
    ];
    for (i, n, path) in inclusion {
        let want: Vec<MerkleHash> = path.iter().map(|s| h(s)).collect();
        assert_eq!(incl(&t, i, n), want, "inclusion {i} in {n}");
    }
    let consistency = [
        (1u64, 1u64, vec![]),
        (
            1,
            8,
            vec![
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            6,
            8,
            vec![
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            2,
            5,
            vec![
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
    ];
    for (m, n, path) in consistency {
        let want: Vec<MerkleHash> = path.iter().map(|s| h(s)).collect();
        assert_eq!(cons(&t, m, n), want, "consistency {m} -> {n}");
    }
}

fn flip(x: &MerkleHash) -> MerkleHash {
    let mut y = *x;
    y.0[7] ^= 0x10;
    y
}

#[test]
fn inclusion_verifier_rejects_bad_proofs() {
    let t = tree();
    let n = TreeSize(7);
    let root = t.root(n);
    let leaf = t.leaves[3];
    let p = incl(&t, 3, 7);
    verify_inclusion(&leaf, LeafIndex(3), n, &p, &root).unwrap();
    // Wrong index, wrong size, index past the end. (Sizes 5, 6 and 8 take the same path for
    // index 3 as size 7 does — the proof only fixes the tree's shape along that path — so the
    // wrong sizes tried are ones whose path differs.)
    assert!(verify_inclusion(&leaf, LeafIndex(2), n, &p, &root).is_err());
    assert!(verify_inclusion(&leaf, LeafIndex(3), TreeSize(8), &p, &t.root(TreeSize(8))).is_err());
    assert!(verify_inclusion(&leaf, LeafIndex(3), TreeSize(4), &p, &root).is_err());
    assert!(verify_inclusion(&leaf, LeafIndex(3), TreeSize(9), &p, &root).is_err());
    assert!(matches!(
        verify_inclusion(&leaf, LeafIndex(7), n, &p, &root),
        Err(ProofError::IndexOutOfRange { index: 7, size: 7 })
    ));
    // Extra or missing hashes.
    let mut extra = p.clone();
    extra.push(root);
    assert!(matches!(
        verify_inclusion(&leaf, LeafIndex(3), n, &extra, &root),
        Err(ProofError::WrongLength { .. })
    ));
    assert!(matches!(
        verify_inclusion(&leaf, LeafIndex(3), n, &p[..2], &root),
        Err(ProofError::WrongLength { .. })
    ));
    assert!(verify_inclusion(&leaf, LeafIndex(3), n, &[], &root).is_err());
    // A flipped bit anywhere: leaf, any proof hash, root.
    assert!(verify_inclusion(&flip(&leaf), LeafIndex(3), n, &p, &root).is_err());
    for k in 0..p.len() {
        let mut q = p.clone();
        q[k] = flip(&q[k]);
        assert!(
            matches!(
                verify_inclusion(&leaf, LeafIndex(3), n, &q, &root),
                Err(ProofError::RootMismatch { .. })
            ),
            "hash {k}"
        );
    }
    assert!(verify_inclusion(&leaf, LeafIndex(3), n, &p, &flip(&root)).is_err());
    // A different leaf.
    assert!(verify_inclusion(&leaf_hash(b"other"), LeafIndex(3), n, &p, &root).is_err());
    // Building a proof for an index past the end is an error, not a panic.
    assert!(
        inclusion_proof(&t, LeafIndex(8), TreeSize(8))
            .unwrap()
            .is_err()
    );
}

#[test]
fn consistency_verifier_rejects_bad_proofs() {
    let t = tree();
    for (m, n) in [(3u64, 7u64), (4, 7), (6, 7), (1, 8), (6, 8), (2, 5)] {
        let (rm, rn) = (t.root(TreeSize(m)), t.root(TreeSize(n)));
        let p = cons(&t, m, n);
        verify_consistency(TreeSize(m), TreeSize(n), &rm, &rn, &p).unwrap();
        // Wrong sizes: a different old size changes which subtrees the proof must rebuild.
        assert!(
            verify_consistency(TreeSize(m + 1), TreeSize(n), &rm, &rn, &p).is_err(),
            "{m}->{n} m+1"
        );
        if m > 1 {
            assert!(
                verify_consistency(TreeSize(m - 1), TreeSize(n), &rm, &rn, &p).is_err(),
                "{m}->{n} m-1"
            );
        }
        assert!(matches!(
            verify_consistency(TreeSize(n), TreeSize(m), &rn, &rm, &p),
            Err(ProofError::SizesOutOfOrder { .. })
        ));
        // Extra or missing hashes.
        let mut extra = p.clone();
        extra.push(rn);
        assert!(verify_consistency(TreeSize(m), TreeSize(n), &rm, &rn, &extra).is_err());
        assert!(verify_consistency(TreeSize(m), TreeSize(n), &rm, &rn, &p[..p.len() - 1]).is_err());
        // Flipped bits in each hash and each root.
        for k in 0..p.len() {
            let mut q = p.clone();
            q[k] = flip(&q[k]);
            assert!(
                verify_consistency(TreeSize(m), TreeSize(n), &rm, &rn, &q).is_err(),
                "{m}->{n} hash {k}"
            );
        }
        assert!(verify_consistency(TreeSize(m), TreeSize(n), &flip(&rm), &rn, &p).is_err());
        assert!(verify_consistency(TreeSize(m), TreeSize(n), &rm, &flip(&rn), &p).is_err());
    }
    // Same size: empty proof, equal roots.
    let r = t.root(TreeSize(5));
    verify_consistency(TreeSize(5), TreeSize(5), &r, &r, &[]).unwrap();
    assert!(verify_consistency(TreeSize(5), TreeSize(5), &r, &flip(&r), &[]).is_err());
    assert!(verify_consistency(TreeSize(5), TreeSize(5), &r, &r, &[r]).is_err());
}
