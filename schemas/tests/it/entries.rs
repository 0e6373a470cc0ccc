//! Typed entry bodies keep the exact canonical bytes of entries written before they were typed.
//!
//! `tests/data/entries/canonical.jsonl` holds entries of every kind, one per line, as the lab
//! wrote them with `serde_json::Value` bodies (a CLI run with its reproduction, a ladder and its
//! scaling-law forecast, a quickstart proposal from an issue with an author's forecast, a
//! dataset of each source; and a rejection, a failed result, a differing reproduction and a
//! resumed CUDA run_started built from the body types of that time; a superseding annotation
//! and a router-bias anomaly; a sweep, a child's proposal and set
//! approval, a failed gate and an automatic bitwise reproduction).
//! Each must parse into its typed body and re-encode to the same bytes: a log's leaf hashes
//! are over these bytes, so a change here would make old entries unreadable or new ones differently shaped.

use std::collections::BTreeSet;
use std::path::Path;

use glassbox_schemas::{EntryKind, LedgerEntry};

#[test]
fn committed_entries_re_encode_to_their_exact_bytes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/entries/canonical.jsonl");
    let text = std::fs::read(&path).unwrap();
    let mut kinds = BTreeSet::new();
    for (n, line) in text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let entry = LedgerEntry::from_bytes(line).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
        let again = entry.to_canonical_bytes().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&again),
            String::from_utf8_lossy(line),
            "line {} re-encodes differently",
            n + 1
        );
        kinds.insert(entry.kind());
    }
    let all: BTreeSet<EntryKind> = EntryKind::ALL.into_iter().collect();
    assert_eq!(kinds, all, "the fixture must hold every kind");
}
