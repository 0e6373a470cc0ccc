//! What a worker tells its live sink while it trains, checked against the record at the moment
//! it is told: a snapshot's completions (`[samples]`) go out once per `samples` entry, only
//! after that entry is in the log, with the body the log holds.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use glassbox_lab::LabConfig;
use glassbox_lab::worker::RecordedSamples;
use glassbox_ledger::{DirSource, LeafIndex, LogReader, VerifierKey};
use glassbox_schemas::record::SamplesBody;
use glassbox_schemas::{EntryKind, ExperimentId, LedgerEntry, RunId, RunStatus};

use crate::flow::{of_kind, recorded, setup_clocked, spec};

/// A live sink that, when told of samples, reads the log as it is then.
struct SamplesProbe {
    root: PathBuf,
    vkey: VerifierKey,
    /// Per call: the entry named, the body told, and that entry as the log held it then.
    seen: Mutex<Vec<(u64, SamplesBody, Option<LedgerEntry>)>>,
}

impl glassbox_lab::LiveSink for SamplesProbe {
    fn metrics(&self, _e: &ExperimentId, _r: &RunId, _m: &glassbox_runner::observer::MetricRecord) {
    }
    fn status(&self, _e: &ExperimentId, _r: &RunId, _s: glassbox_schemas::RunPhase) {}
    fn samples(&self, _e: &ExperimentId, _r: &RunId, recorded: RecordedSamples<'_>) {
        let (entry, body) = (recorded.entry, recorded.samples);
        let source = DirSource {
            root: self.root.clone(),
        };
        let held = LogReader::open(&source, &self.vkey)
            .ok()
            .filter(|r| entry < r.size().0)
            .and_then(|r| r.entry(LeafIndex(entry)).ok())
            .map(|bytes| LedgerEntry::from_bytes(&bytes).unwrap());
        self.seen.lock().unwrap().push((entry, body.clone(), held));
    }
}

async fn samples_are_told_after_their_entry_is_in_the_log(engine: &str) {
    let s = setup_clocked(
        engine,
        "live_samples",
        LabConfig::default(),
        glassbox_lab::queue::Clock::System,
    )
    .await;
    // Snapshots at steps 4 and 8, each sampled.
    let sp = spec(
        8,
        "",
        "[samples]\nmax_tokens = 4\nprompts = [\"ab\", \"ba\"]",
    );
    assert!(sp.samples.is_some());
    s.propose_and_approve(1, "ann", sp).await;
    let probe = Arc::new(SamplesProbe {
        root: s.recorder.lab().root().to_path_buf(),
        vkey: s.recorder.lab().verifier_key().unwrap(),
        seen: Mutex::new(Vec::new()),
    });
    let f = recorded(
        s.worker("w")
            .with_live(probe.clone())
            .run_next()
            .await
            .unwrap(),
    );
    assert_eq!(
        f.ending.status,
        RunStatus::Succeeded,
        "{:?}",
        f.ending.reason
    );

    let entries = s.entries();
    let recorded: Vec<(u64, &LedgerEntry)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind() == EntryKind::Samples)
        .map(|(i, e)| (i as u64, e))
        .collect();
    assert_eq!(recorded.len(), 2, "two snapshots sampled");
    assert_eq!(of_kind(&entries, EntryKind::Samples).len(), 2);
    let seen = probe.seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|(i, ..)| *i).collect::<Vec<_>>(),
        recorded.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        "one call per samples entry, naming it"
    );
    for ((entry, body, held), (_, logged)) in seen.iter().zip(&recorded) {
        let held = held
            .as_ref()
            .unwrap_or_else(|| panic!("entry {entry} was not in the log when the sink was told"));
        assert_eq!(held, *logged);
        assert_eq!(
            held.body_of::<SamplesBody>().unwrap(),
            body,
            "the sink is told what the entry holds"
        );
        assert_eq!(body.prompts, ["ab", "ba"]);
        assert_eq!(body.texts.len(), 2);
    }
    assert_eq!(
        seen.iter().map(|(_, b, _)| b.step).collect::<Vec<_>>(),
        [4, 8]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_told_after_their_entry_is_in_the_log_sqlite() {
    samples_are_told_after_their_entry_is_in_the_log("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_told_after_their_entry_is_in_the_log_postgres() {
    samples_are_told_after_their_entry_is_in_the_log("postgres").await;
}
