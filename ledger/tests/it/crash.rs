//! Crash safety: a real writer process (`glassbox-ledger-dev append-stream`, 4 concurrent
//! appenders) is killed with SIGKILL at pseudo-random moments, 24 times in a row on the same
//! lab. After each kill the lab must audit clean, every append the process acknowledged must
//! be in the log at the index it was given, the next writer must resume, and no tile path may
//! ever hold other bytes than the first it was written with (C2SP: a tile path's content is
//! fixed), even when the kill left tiles past the checkpoint.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use glassbox_ledger::audit::AuditOptions;
use glassbox_ledger::merkle::LeafIndex;
use glassbox_ledger::{DirSource, LogReader, audit};
use glassbox_schemas::LedgerEntry;

#[test]
fn sigkilled_writer_never_loses_acknowledged_appends() {
    let (_d, lab) = crate::fixture::new_lab();
    let exe = env!("CARGO_BIN_EXE_glassbox-ledger-dev");
    let vkey = lab.verifier_key().unwrap();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    // xorshift: reproducible "random" kill delays between 15 and 135 ms.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut total_acked = 0usize;
    let mut last_size = 0u64;
    let mut tiles_seen = std::collections::BTreeMap::new();
    for trial in 0..24u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = 15 + rng % 120;
        let mut child = Command::new(exe)
            .args([
                "append-stream",
                lab.root().to_str().unwrap(),
                &(trial * 1_000_000).to_string(),
                "4",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap(); // SIGKILL on Unix
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        child.wait().unwrap();
        crate::store::assert_immutable(
            &mut tiles_seen,
            &crate::store::tile_files(&lab.log_dir()),
            &format!("trial {trial}, after the kill"),
        );

        let report = audit(&src, &vkey, AuditOptions::default())
            .unwrap()
            .unwrap_or_else(|f| panic!("trial {trial}: {f}"));
        let size = report.checkpoint.checkpoint.size.0;
        assert!(size >= last_size, "trial {trial}: the log shrank");
        last_size = size;
        let reader = LogReader::open(&src, &vkey).unwrap();
        for line in out.lines() {
            let mut parts = line.split_whitespace().skip(1);
            let (Some(idx), Some(seq)) = (parts.next(), parts.next()) else {
                continue; // a line cut by the kill
            };
            let (idx, seq): (u64, u64) = (idx.parse().unwrap(), seq.parse().unwrap());
            assert!(
                idx < size,
                "trial {trial}: acknowledged entry {idx} is past the checkpoint size {size}"
            );
            let entry = LedgerEntry::from_bytes(&reader.entry(LeafIndex(idx)).unwrap()).unwrap();
            let glassbox_schemas::record::EntryBody::Artifact(body) = &entry.body else {
                panic!("trial {trial}: entry {idx} is a {}", entry.kind());
            };
            assert_eq!(
                body.name,
                format!("item-{seq}"),
                "trial {trial}: entry {idx}"
            );
            total_acked += 1;
        }
        // No temp file is visible after the next writer opens (it removes leftovers, and
        // finishes a journaled batch with the same bytes).
        drop(lab.writer(glassbox_ledger::LockMode::FailFast).unwrap());
        crate::store::assert_immutable(
            &mut tiles_seen,
            &crate::store::tile_files(&lab.log_dir()),
            &format!("trial {trial}, after the next writer opened"),
        );
        let leftovers: Vec<_> = std::fs::read_dir(lab.log_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "trial {trial}: {leftovers:?}");
    }
    assert!(
        total_acked > 24,
        "the writer acknowledged only {total_acked} appends in 24 trials"
    );
}
