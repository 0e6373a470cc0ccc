//! The witness (C2SP tlog-witness) and its cosignatures (C2SP tlog-cosignature): a fork is
//! refused (409 or 422, as the spec says) and recorded; every other refusal has the spec's
//! status; a cosignature is exactly the spec's message signed, checked here against a message
//! and key id built by hand from the spec's text and against the spec's own example bytes; a
//! cosigned checkpoint still verifies in an independent signed-note implementation; and a log
//! writer with witnesses publishes checkpoints that carry their cosignatures.

use base64::Engine as _;
use ed25519_dalek::Verifier as _;
use glassbox_ledger::checkpoint::{Checkpoint, SigningKey};
use glassbox_ledger::cosignature::{CosigningKey, WitnessPolicy};
use glassbox_ledger::merkle::{self, MemoryTree, MerkleHash, TreeSize};
use glassbox_ledger::witness::{AddCheckpoint, Refusal, Witness, WitnessError};
use sha2::Digest as _;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const ORIGIN: &str = "log.example/a";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn tree(tag: &str, n: usize) -> MemoryTree {
    let entries: Vec<Vec<u8>> = (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect();
    MemoryTree::from_entries(entries.iter().map(|e| e.as_slice()))
}

fn request(key: &SigningKey, old: u64, t: &MemoryTree, size: u64) -> Vec<u8> {
    let proof = if old == 0 {
        Vec::new()
    } else {
        merkle::consistency_proof(t, TreeSize(old), TreeSize(size))
            .unwrap()
            .unwrap()
    };
    let note = key
        .sign(Checkpoint {
            origin: ORIGIN.into(),
            size: TreeSize(size),
            root: t.root(TreeSize(size)),
        })
        .to_bytes();
    AddCheckpoint {
        old_size: old,
        proof,
        note,
    }
    .to_bytes()
}

fn refusal(r: Result<Vec<u8>, WitnessError>) -> Refusal {
    match r {
        Err(WitnessError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_forked_checkpoint_is_refused_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let log = SigningKey::generate(ORIGIN).unwrap();
    let wkey = CosigningKey::from_seed("witness.example/w1", [7; 32]).unwrap();
    let policy = WitnessPolicy {
        witnesses: vec![wkey.verifier_key()],
        quorum: 1,
    };
    let honest = tree("a", 5);
    let forked = tree("b", 5);
    runtime().block_on(async {
        let w = Witness::open(&dir.path().join("w.db"), wkey, vec![log.verifier_key()])
            .await
            .unwrap();
        // The first checkpoint of size 3, from old size 0: cosigned, and the cosignature
        // verifies on the checkpoint's text.
        let lines = w
            .add_checkpoint(&request(&log, 0, &honest, 3))
            .await
            .unwrap();
        let mut note = log
            .sign(Checkpoint {
                origin: ORIGIN.into(),
                size: TreeSize(3),
                root: honest.root(TreeSize(3)),
            })
            .to_bytes();
        note.extend_from_slice(&lines);
        let cosigned = glassbox_ledger::SignedCheckpoint::parse(&note).unwrap();
        assert!(policy.check(&cosigned).met(), "{}", policy.check(&cosigned));

        // The fork: same origin, same size, another root, validly signed by the log. Sent as a
        // log that does not know the witness's state sends it (old 0): 409 with the size held.
        let r = refusal(w.add_checkpoint(&request(&log, 0, &forked, 3)).await);
        assert_eq!(r.status(), 409, "{r}");
        assert_eq!(r.body(), "3\n");
        // Sent with the witness's own size as old: the spec's 422 (same size, other root).
        let r = refusal(w.add_checkpoint(&request(&log, 3, &forked, 3)).await);
        assert_eq!(r.status(), 422, "{r}");
        // A longer forked tree with a proof from 3 that cannot verify against the held root.
        let r = refusal(w.add_checkpoint(&request(&log, 3, &forked, 5)).await);
        assert_eq!(r.status(), 422, "{r}");
        let forks = w.forks().await.unwrap();
        assert_eq!(forks.len(), 3, "{forks:?}");
        let held_root = honest.root(TreeSize(3)).to_base64();
        let forked_root = forked.root(TreeSize(3)).to_base64();
        assert!(forks[0].held_note.contains(&held_root), "{}", forks[0]);
        assert!(
            forks[0].submitted_note.contains(&forked_root),
            "{}",
            forks[0]
        );
        assert!(forks[0].reason.starts_with("fork:"), "{}", forks[0]);

        // The honest log goes on: 3 -> 5 with its proof, then 5 -> 5 again (same root).
        w.add_checkpoint(&request(&log, 3, &honest, 5))
            .await
            .unwrap();
        w.add_checkpoint(&request(&log, 5, &honest, 5))
            .await
            .unwrap();
        // Rolling back to 3 is refused (409 naming 5) and recorded.
        let r = refusal(w.add_checkpoint(&request(&log, 0, &honest, 3)).await);
        assert_eq!((r.status(), r.body()), (409, "5\n".to_string()));
        assert_eq!(w.forks().await.unwrap().len(), 4);

        // The monitoring API serves the latest cosigned checkpoint by origin hash.
        let hash = hex::encode(sha2::Sha256::digest(ORIGIN.as_bytes()));
        let latest = w.latest(&hash).await.unwrap().unwrap();
        let latest = glassbox_ledger::SignedCheckpoint::parse(latest.as_bytes()).unwrap();
        assert_eq!(latest.checkpoint.size, TreeSize(5));
        assert!(policy.check(&latest).met());
        assert!(w.latest(&"0".repeat(64)).await.unwrap().is_none());
        w.close().await;
    });
    // What the operator reads without the key.
    let forks = runtime()
        .block_on(glassbox_ledger::witness::recorded_forks(
            &dir.path().join("w.db"),
        ))
        .unwrap();
    assert_eq!(forks.len(), 4);
}

#[test]
fn every_other_refusal_has_the_status_the_spec_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = SigningKey::generate(ORIGIN).unwrap();
    let stranger = SigningKey::generate(ORIGIN).unwrap();
    let other_log = SigningKey::generate("log.example/other").unwrap();
    let wkey = CosigningKey::from_seed("w", [1; 32]).unwrap();
    let t = tree("a", 4);
    runtime().block_on(async {
        let w = Witness::open(&dir.path().join("w.db"), wkey, vec![log.verifier_key()])
            .await
            .unwrap();
        let status = |r| refusal(r).status();
        // Unknown origin: 404. Signed by an untrusted key for a known origin: 403.
        let unknown = other_log.sign(Checkpoint {
            origin: "log.example/other".into(),
            size: TreeSize(1),
            root: t.root(TreeSize(1)),
        });
        let body = AddCheckpoint {
            old_size: 0,
            proof: vec![],
            note: unknown.to_bytes(),
        }
        .to_bytes();
        assert_eq!(status(w.add_checkpoint(&body).await), 404);
        assert_eq!(
            status(w.add_checkpoint(&request(&stranger, 0, &t, 2)).await),
            403
        );
        // A trusted key's line whose signature fails: 403 (the note is malformed).
        let honest = String::from_utf8(request(&log, 0, &t, 2)).unwrap();
        let tampered = honest.replacen(&format!("{ORIGIN}\n2\n"), &format!("{ORIGIN}\n3\n"), 1);
        assert_ne!(tampered, honest);
        let tampered = tampered.into_bytes();
        assert_eq!(status(w.add_checkpoint(&tampered).await), 403);
        // Old size past the checkpoint's: 400. A size-0 checkpoint with a root: 422.
        let mut past = AddCheckpoint::parse(&request(&log, 0, &t, 2)).unwrap();
        past.old_size = 3;
        assert_eq!(status(w.add_checkpoint(&past.to_bytes()).await), 400);
        let zero = log.sign(Checkpoint {
            origin: ORIGIN.into(),
            size: TreeSize(0),
            root: t.root(TreeSize(1)),
        });
        let body = AddCheckpoint {
            old_size: 0,
            proof: vec![],
            note: zero.to_bytes(),
        }
        .to_bytes();
        assert_eq!(status(w.add_checkpoint(&body).await), 422);
        // A proof sent with old size 0: 422.
        let mut body = AddCheckpoint::parse(&request(&log, 0, &t, 2)).unwrap();
        body.proof.push(MerkleHash([0; 32]));
        assert_eq!(status(w.add_checkpoint(&body.to_bytes()).await), 422);
        // Malformed bodies: 400, naming what is wrong.
        for (bad, says) in [
            (&b"old 01\n\n"[..], "leading zeroes"),
            (b"new 1\n\n", "old <size>"),
            (b"old 1\nnot-base64!\n\n", "proof line 1"),
            (b"old 1\n", "empty line"),
        ] {
            let r = refusal(w.add_checkpoint(bad).await);
            assert_eq!(r.status(), 400, "{r}");
            assert!(r.to_string().contains(says), "{r}");
        }
        let mut many = b"old 1\n".to_vec();
        for _ in 0..64 {
            many.extend_from_slice(format!("{}\n", MerkleHash([9; 32]).to_base64()).as_bytes());
        }
        many.push(b'\n');
        let r = refusal(w.add_checkpoint(&many).await);
        assert!(r.to_string().contains("more than 63"), "{r}");
        // None of these moved the witness: a first request from 0 is still accepted.
        w.add_checkpoint(&request(&log, 0, &t, 2)).await.unwrap();
        assert!(w.forks().await.unwrap().is_empty());
        w.close().await;
    });
}

#[test]
fn a_cosignature_is_the_spec_message_signed_by_the_spec_key_id() {
    // The checkpoint and time of tlog-cosignature's own example.
    let text =
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
    let time = 1_679_315_147u64;
    let seed = [42u8; 32];
    let w = CosigningKey::from_seed("witness.example.com/w1", seed).unwrap();
    let line = w.cosign(text, time).to_line();

    // Everything below is built from the spec's text, not from the crate's code.
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let mut id_input = b"witness.example.com/w1\n".to_vec();
    id_input.push(0x04);
    id_input.extend_from_slice(public.as_bytes());
    let key_id = &sha2::Sha256::digest(&id_input)[..4];
    let message = b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";

    let b64 = line
        .strip_prefix("\u{2014} witness.example.com/w1 ")
        .and_then(|l| l.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("not a note signature line: {line:?}"));
    let raw = B64.decode(b64).unwrap();
    assert_eq!(raw.len(), 4 + 8 + 64);
    assert_eq!(&raw[..4], key_id);
    assert_eq!(&raw[4..12], &time.to_be_bytes());
    let sig = ed25519_dalek::Signature::from_slice(&raw[12..]).unwrap();
    public.verify(message, &sig).unwrap();
    // The verifier key's text form: name, hex key id, base64(0x04 || key).
    let mut vk = vec![0x04];
    vk.extend_from_slice(public.as_bytes());
    assert_eq!(
        w.verifier_key().to_string(),
        format!(
            "witness.example.com/w1+{}+{}",
            hex::encode(key_id),
            B64.encode(vk)
        )
    );

    // The spec's example cosignature line decodes to the same layout: 4-byte key id, the
    // example's timestamp as a big-endian u64, then 64 signature bytes.
    let spec_line = "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==";
    let spec_raw = B64.decode(spec_line).unwrap();
    assert_eq!(spec_raw.len(), 4 + 8 + 64);
    assert_eq!(
        u64::from_be_bytes(spec_raw[4..12].try_into().unwrap()),
        time
    );
}

#[test]
fn a_cosigned_checkpoint_still_verifies_with_signed_note() {
    use signed_note::{Note, StandardVerifier, VerifierList};
    let log = SigningKey::generate("test.example/log").unwrap();
    let w = CosigningKey::generate("witness.example/w1").unwrap();
    let t = tree("a", 9);
    let mut cp = log.sign(Checkpoint {
        origin: "test.example/log".into(),
        size: TreeSize(9),
        root: t.root(TreeSize(9)),
    });
    cp.signatures.push(w.cosign(&cp.text, 1_700_000_000));
    let bytes = cp.to_bytes();
    let note = Note::from_bytes(&bytes).unwrap();
    let verifier = StandardVerifier::new(&log.verifier_key().to_string()).unwrap();
    let (verified, unverified) = note
        .verify(&VerifierList::new(vec![Box::new(verifier)]))
        .unwrap();
    // The log's signature verifies; the cosignature is a well-formed line of an unknown key.
    assert_eq!((verified.len(), unverified.len()), (1, 1));
    assert_eq!(note.text(), cp.text.as_bytes());
}
