//! The ledger's sequencer, on both engines: entries get gap-free indices in
//! the lab database, in the transaction of the change they record; the integrator writes them
//! to the log exactly once, in order, whoever sequenced them; a process without the signing key
//! only sequences and waits for the integrator.

use std::sync::Arc;
use std::time::Duration;

use glassbox_lab::queue::{Clock, Durability, JobKind, NewJob, Queue, WorkerId};
use glassbox_lab::sequencer::Sequencer;
use glassbox_lab::{LabConfig, Recorder};
use glassbox_ledger::{DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::ArtifactBody;
use glassbox_schemas::{ExperimentId, LedgerEntry, SpecHash};

use crate::flow::setup_clocked;

/// Entry `i` of these tests, with a fixed time so that one built twice has the same bytes.
fn note(i: usize) -> LedgerEntry {
    let mut e = LedgerEntry::new(
        Some(ExperimentId("exp-seq".into())),
        Default::default(),
        ArtifactBody {
            name: format!("notes/{i}.txt"),
            bytes: i as u64,
            run: None,
        },
    );
    e.time = time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
    e
}

/// Every entry of the lab's log, read from its files against its signed checkpoint.
fn log_entries(lab: &LabDir) -> Vec<Vec<u8>> {
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&source, &lab.verifier_key().unwrap()).unwrap();
    (0..reader.size().0)
        .map(|i| reader.entry(glassbox_ledger::LeafIndex(i)).unwrap())
        .collect()
}

fn bytes(e: &LedgerEntry) -> Vec<u8> {
    e.to_canonical_bytes().unwrap()
}

/// A second recorder on the same lab and database, as another process would open it.
fn another_recorder(lab: &LabDir, url: &str) -> Recorder {
    let seq = Sequencer::connect(url, Durability::PowerLoss).unwrap();
    Recorder::open(lab.clone(), Arc::new(lab.blobs()), seq).unwrap()
}

async fn appends_from_two_recorders_are_gap_free_and_each_in_the_log_once(engine: &str) {
    let s = setup_clocked(engine, "twice", LabConfig::default(), Clock::System).await;
    let lab = s.recorder.lab().clone();
    let before = log_entries(&lab).len();
    let other = Arc::new(another_recorder(&lab, &s.url));
    let mut threads = Vec::new();
    for t in 0..4usize {
        let rec = if t % 2 == 0 {
            s.recorder.clone()
        } else {
            other.clone()
        };
        threads.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            for i in 0..10 {
                let entries = [note(t * 100 + 2 * i), note(t * 100 + 2 * i + 1)];
                let idx = rec.append(&entries).unwrap();
                assert_eq!(idx[1], idx[0] + 1, "one append's entries are consecutive");
                got.push((idx[0], bytes(&entries[0])));
                got.push((idx[1], bytes(&entries[1])));
            }
            got
        }));
    }
    let mut all: Vec<(u64, Vec<u8>)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort();
    let log = log_entries(&lab);
    assert_eq!(log.len(), before + 80, "every entry is in the log once");
    for (k, (idx, b)) in all.iter().enumerate() {
        assert_eq!(
            *idx,
            (before + k) as u64,
            "indices are handed out without gaps"
        );
        assert_eq!(
            &log[*idx as usize], b,
            "entry {idx} is the one appended at {idx}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_from_two_recorders_are_gap_free_and_each_in_the_log_once_sqlite() {
    appends_from_two_recorders_are_gap_free_and_each_in_the_log_once("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_from_two_recorders_are_gap_free_and_each_in_the_log_once_postgres() {
    appends_from_two_recorders_are_gap_free_and_each_in_the_log_once("postgres").await;
}

async fn an_ending_rolled_back_sequences_nothing_and_gives_its_indices_back(engine: &str) {
    let s = setup_clocked(engine, "rollback", LabConfig::default(), Clock::System).await;
    let q: &Queue = &s.queue;
    let job = q
        .enqueue(&NewJob {
            kind: JobKind::Run,
            experiment: ExperimentId("exp-seq".into()),
            spec_hash: SpecHash(glassbox_schemas::Blake3Hash::from_bytes([7; 32])),
            author: "alice".into(),
            proposal_entry: None,
            approval_entry: None,
            priority: 0,
            max_attempts: 1,
        })
        .await
        .unwrap();
    let w = WorkerId("w".into());
    let leased = q.lease(&w, Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(leased.id, job);
    let size = log_entries(s.recorder.lab()).len() as u64;
    let mut ending = q.begin_ending(job, &w).await.unwrap();
    let first = ending
        .sequence(&[bytes(&note(1)), bytes(&note(2))])
        .await
        .unwrap();
    assert_eq!(first, size);
    ending.rollback().await.unwrap();
    // The job is still held and nothing was sequenced: the next entry takes the same index.
    let rec = s.recorder.clone();
    let idx = tokio::task::spawn_blocking(move || rec.append(&[note(3)]).unwrap())
        .await
        .unwrap();
    assert_eq!(idx, vec![size], "a rolled-back sequencing leaves no gap");
    // Committed with the job's end, the entries are sequenced at the same moment the job ends.
    let mut ending = q.begin_ending(job, &w).await.unwrap();
    let first = ending.sequence(&[bytes(&note(4))]).await.unwrap();
    ending
        .finish(glassbox_schemas::RunStatus::Succeeded, None)
        .await
        .unwrap();
    assert_eq!(first, size + 1);
    let rec = s.recorder.clone();
    tokio::task::spawn_blocking(move || rec.publish(first).unwrap())
        .await
        .unwrap();
    let log = log_entries(s.recorder.lab());
    assert_eq!(log.len() as u64, size + 2);
    assert_eq!(log[first as usize], bytes(&note(4)));
    assert!(q.get(job).await.unwrap().state.is_terminal());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_rolled_back_sequences_nothing_and_gives_its_indices_back_sqlite() {
    an_ending_rolled_back_sequences_nothing_and_gives_its_indices_back("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_rolled_back_sequences_nothing_and_gives_its_indices_back_postgres() {
    an_ending_rolled_back_sequences_nothing_and_gives_its_indices_back("postgres").await;
}

async fn a_process_without_the_key_waits_for_the_integrator(engine: &str) {
    let s = setup_clocked(engine, "keyless", LabConfig::default(), Clock::System).await;
    let lab = s.recorder.lab().clone();
    // A worker's copy of the lab: the log's files and verifier key, no signing key.
    let copy = s.dir.path().join("worker-copy");
    copy_dir(lab.root(), &copy);
    std::fs::remove_file(copy.join("keys").join("ledger.key")).unwrap();
    let worker_lab = LabDir::open(&copy).unwrap();
    let keyless = Arc::new(another_recorder(&worker_lab, &s.url));
    assert!(!keyless.integrates() && s.recorder.integrates());
    let appending = {
        let k = keyless.clone();
        std::thread::spawn(move || k.append(&[note(10), note(11)]).unwrap())
    };
    // It waits: nothing integrates until the key holder does.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !appending.is_finished(),
        "a keyless append returns only once published"
    );
    let rec = s.recorder.clone();
    let integrated = tokio::task::spawn_blocking(move || rec.integrate_pending().unwrap())
        .await
        .unwrap();
    assert!(integrated);
    let idx = appending.join().unwrap();
    let log = log_entries(&lab);
    assert_eq!(log[idx[0] as usize], bytes(&note(10)));
    assert_eq!(log[idx[1] as usize], bytes(&note(11)));
    // The keyless process reads entries back from the sequencer, not from its stale files.
    assert_eq!(bytes(&keyless.entry(idx[1]).unwrap()), bytes(&note(11)));
    // Nothing pending: a second pass integrates nothing.
    let rec = s.recorder.clone();
    assert!(
        !tokio::task::spawn_blocking(move || rec.integrate_pending().unwrap())
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_without_the_key_waits_for_the_integrator_sqlite() {
    a_process_without_the_key_waits_for_the_integrator("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_without_the_key_waits_for_the_integrator_postgres() {
    a_process_without_the_key_waits_for_the_integrator("postgres").await;
}

/// Entries a process sequenced and then died before integrating are integrated once by the
/// next integrator; entries appended to the log around the sequencer (an older tool) are
/// adopted when nothing is pending, in order.
async fn sequenced_entries_outlive_their_process_and_direct_appends_are_adopted(engine: &str) {
    let s = setup_clocked(engine, "outlive", LabConfig::default(), Clock::System).await;
    let lab = s.recorder.lab().clone();
    let size = log_entries(&lab).len() as u64;
    {
        // "Another process": sequences and is gone before integrating.
        let seq = Sequencer::connect(&s.url, Durability::PowerLoss).unwrap();
        let first = seq.append(&[bytes(&note(20)), bytes(&note(21))]).unwrap();
        assert_eq!(first, size);
    }
    let rec = s.recorder.clone();
    let idx = tokio::task::spawn_blocking(move || rec.append(&[note(22)]).unwrap())
        .await
        .unwrap();
    assert_eq!(idx, vec![size + 2]);
    let log = log_entries(&lab);
    assert_eq!(log.len() as u64, size + 3);
    assert_eq!(log[size as usize], bytes(&note(20)));
    assert_eq!(log[size as usize + 1], bytes(&note(21)));
    // A direct append to the log, outside the sequencer, while no process runs: the next
    // process to open the lab adopts it.
    let w = lab.writer(LockMode::Wait).unwrap();
    w.append_entry(&note(23)).unwrap();
    drop(w);
    let next = Arc::new(another_recorder(&lab, &s.url));
    let rec = next.clone();
    let idx = tokio::task::spawn_blocking(move || rec.append(&[note(24)]).unwrap())
        .await
        .unwrap();
    assert_eq!(
        idx,
        vec![size + 4],
        "the next index comes after the adopted entry"
    );
    let log = log_entries(&lab);
    assert_eq!(log[size as usize + 3], bytes(&note(23)));
    assert_eq!(log[size as usize + 4], bytes(&note(24)));
    assert_eq!(
        bytes(&s.recorder.entry(size + 3).unwrap()),
        bytes(&note(23))
    );
    // One that takes an index already handed out is refused by name, and nothing more is
    // integrated over it.
    let seq = Sequencer::connect(&s.url, Durability::PowerLoss).unwrap();
    assert_eq!(seq.append(&[bytes(&note(25))]).unwrap(), size + 5);
    let w = lab.writer(LockMode::Wait).unwrap();
    w.append_entry(&note(26)).unwrap();
    drop(w);
    let rec = next.clone();
    let err = tokio::task::spawn_blocking(move || rec.integrate().unwrap_err())
        .await
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!("entry {}", size + 5)) && err.contains("around the sequencer"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequenced_entries_outlive_their_process_and_direct_appends_are_adopted_sqlite() {
    sequenced_entries_outlive_their_process_and_direct_appends_are_adopted("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequenced_entries_outlive_their_process_and_direct_appends_are_adopted_postgres() {
    sequenced_entries_outlive_their_process_and_direct_appends_are_adopted("postgres").await;
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
