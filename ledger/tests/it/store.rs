//! The store stays small and its tiles immutable (C2SP tlog-tiles): after many small batches
//! `tile/` holds the full tiles plus only the partials of tiles that are not full yet (a
//! partial is deleted once its full tile is published), every tile path ever written keeps its
//! first bytes, and a batch cut short after its journal and tiles but before its checkpoint is
//! finished with the same entries by the next writer.

use std::collections::BTreeMap;
use std::path::Path;

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::merkle::LeafIndex;
use glassbox_ledger::tiles::{TILE_WIDTH, tiles_for_size};
use glassbox_ledger::{DirSource, LockMode, LogReader, audit};

use crate::fixture::{entry_bytes, new_lab};

/// Every file under `log/tile`, by its path below `log/`, with its bytes.
pub fn tile_files(log_dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&log_dir.join("tile"), log_dir, &mut out);
    out
}

/// Fails when a path in `now` had other bytes in `seen`; records the new ones.
pub fn assert_immutable(
    seen: &mut BTreeMap<String, Vec<u8>>,
    now: &BTreeMap<String, Vec<u8>>,
    when: &str,
) {
    for (path, bytes) in now {
        if let Some(before) = seen.get(path) {
            assert!(
                before == bytes,
                "{when}: tile path {path} was rewritten with other bytes"
            );
        } else {
            seen.insert(path.clone(), bytes.clone());
        }
    }
}

/// Whether `rel` (`tile/0/x001/234.p/17`) is a partial of a tile that is full at `size`.
fn superseded(rel: &str, size: u64) -> bool {
    let Some((tile, _width)) = rel.split_once(".p/") else {
        return false;
    };
    tiles_for_size(size)
        .iter()
        .any(|t| t.is_full() && t.path() == tile)
}

#[test]
fn small_batches_leave_only_full_tiles_and_the_partials_still_needed() {
    let (_d, lab) = new_lab();
    let w = lab.writer(LockMode::FailFast).unwrap();
    let mut seen = BTreeMap::new();
    let mut next = 0u64;
    // 1..=7 entries per batch up to 1,100 entries: 4 full bundles, a 5th partial one.
    let mut k = 0u64;
    while next < 1_100 {
        let n = 1 + k % 7;
        k += 1;
        let batch: Vec<Vec<u8>> = (next..next + n).map(|i| entry_bytes(i, 0)).collect();
        w.append_batch(batch).unwrap();
        next += n;
        assert_immutable(
            &mut seen,
            &tile_files(&lab.log_dir()),
            &format!("after {next} entries"),
        );
    }
    let files = tile_files(&lab.log_dir());
    let left: Vec<&String> = files.keys().filter(|p| superseded(p, next)).collect();
    assert!(
        left.is_empty(),
        "partials of full tiles are still stored: {left:?}"
    );
    // What is left: the full tiles, and partials only of the tiles still partial at `next`.
    let needed = tiles_for_size(next);
    for path in files.keys() {
        let tile = path.split_once(".p/").map_or(path.as_str(), |(t, _)| t);
        assert!(
            needed.iter().any(|t| t
                .path()
                .split_once(".p/")
                .map_or(t.path(), |(t, _)| t.to_string())
                == tile),
            "{path} belongs to no tile of a tree of {next} entries"
        );
    }
    let partial_files = files.keys().filter(|p| p.contains(".p/")).count();
    let full_files = files.keys().filter(|p| !p.contains(".p/")).count();
    assert_eq!(
        full_files as u64,
        2 * (next / TILE_WIDTH),
        "{:?}",
        files.keys().collect::<Vec<_>>()
    );
    // At most one batch's worth of partial widths since the last full tile, per tile kind.
    assert!(partial_files <= 3 * 256, "{partial_files} partial files");
    // Every file the checkpoint names is there: the log audits, and a reader reads it.
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    audit(&src, &lab.verifier_key().unwrap(), AuditOptions::default())
        .unwrap()
        .unwrap();
    let r = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    assert_eq!(
        r.entry(LeafIndex(next - 1)).unwrap(),
        entry_bytes(next - 1, 0)
    );
}

#[test]
fn a_batch_cut_before_its_checkpoint_is_finished_with_the_same_bytes() {
    let (_d, lab) = new_lab();
    let vkey = lab.verifier_key().unwrap();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_batch((0..250).map(|i| entry_bytes(i, 0)).collect())
            .unwrap();
    }
    let before = std::fs::read(lab.log_dir().join("checkpoint")).unwrap();
    let before_tiles = tile_files(&lab.log_dir());
    // A batch that crosses the first full tile: journal, tiles and checkpoint written...
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_batch((250..260).map(|i| entry_bytes(i, 0)).collect())
            .unwrap();
    }
    let written = tile_files(&lab.log_dir());
    assert!(
        written.contains_key("tile/0/000"),
        "{:?}",
        written.keys().collect::<Vec<_>>()
    );
    // ...then the crash is simulated: the checkpoint as it was before that batch, and the
    // partials the finished batch had deleted are back (they were there before its commit).
    std::fs::write(lab.log_dir().join("checkpoint"), &before).unwrap();
    for (rel, bytes) in &before_tiles {
        let p = lab.log_dir().join(rel);
        if !p.exists() {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
        }
    }
    // The next writer finishes the journaled batch first: its own appends come after it, and
    // every tile path keeps the bytes it had.
    let w = lab.writer(LockMode::FailFast).unwrap();
    assert_eq!(w.checkpoint().checkpoint.size.0, 260);
    let idx = w.append(entry_bytes(9_999, 3)).unwrap();
    assert_eq!(idx.0, 260);
    let mut seen = written.clone();
    assert_immutable(&mut seen, &before_tiles, "before the batch");
    assert_immutable(&mut seen, &tile_files(&lab.log_dir()), "after the replay");
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let r = LogReader::open(&src, &vkey).unwrap();
    for i in [249u64, 250, 259] {
        assert_eq!(r.entry(LeafIndex(i)).unwrap(), entry_bytes(i, 0));
    }
    audit(&src, &vkey, AuditOptions::default())
        .unwrap()
        .unwrap();
}

#[test]
fn a_torn_journal_is_ignored() {
    let (_d, lab) = new_lab();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_batch((0..5).map(|i| entry_bytes(i, 0)).collect())
            .unwrap();
    }
    let journal = lab.log_dir().join(".batch");
    let bytes = std::fs::read(&journal).unwrap();
    // A journal cut mid-write (its hash no longer matches) for a batch past the checkpoint.
    let cp = std::fs::read(lab.log_dir().join("checkpoint")).unwrap();
    {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append(entry_bytes(5, 0)).unwrap();
    }
    std::fs::write(lab.log_dir().join("checkpoint"), &cp).unwrap();
    let torn = std::fs::read(&journal).unwrap();
    std::fs::write(&journal, &torn[..torn.len() - 7]).unwrap();
    let w = lab.writer(LockMode::FailFast).unwrap();
    assert_eq!(w.checkpoint().checkpoint.size.0, 5);
    assert!(!bytes.is_empty());
}
