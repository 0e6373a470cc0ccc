//! The index database on SQLite and on PostgreSQL (`GLASSBOX_TEST_POSTGRES_URL`, which `cargo
//! xtask test` provides; the test fails, never skips, without it; each test uses its own schema
//! so parallel runs do not collide). Same test body on both engines.

use glassbox_schemas::RefRole;
use glassbox_schemas::record::refs;
use std::collections::BTreeMap;

use glassbox_ledger::index::{CurveNames, Index, IndexMismatch, OVERVIEW_POINTS};
use glassbox_ledger::{BlobStore, DirSource, LabDir, LockMode, LogReader};
use glassbox_schemas::record::{ArtifactBody, EntryBody, ProposalBody, ResultBody, RunStartedBody};
use glassbox_schemas::{
    Blake3Hash, EntryKind, ExperimentId, LedgerEntry, RunId, RunStatus, SpecHash,
};
use sqlx::Connection;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A lab whose log holds a proposal, a run start, a result and some artifacts.
fn lab_with_a_run() -> (tempfile::TempDir, LabDir) {
    let (d, lab) = crate::fixture::new_lab();
    let exp = Some(ExperimentId::from("glassbox-lab/glassbox#7"));
    let spec = SpecHash(Blake3Hash::of(b"spec"));
    let w = lab.writer(LockMode::FailFast).unwrap();
    let e = |exp: Option<ExperimentId>, body: EntryBody| {
        LedgerEntry::new(exp, BTreeMap::new(), body)
            .to_canonical_bytes()
            .unwrap()
    };
    let mut batch = vec![e(
        exp.clone(),
        EntryBody::from(ProposalBody {
            sweep: None,
            spec_hash: spec,
            author: "ada".into(),
            title: "tiny moe".into(),
            issue: None,
        }),
    )];
    batch.push(e(
        exp.clone(),
        EntryBody::from(RunStartedBody {
            worker: None,
            host: None,
            run: RunId::from("run-000001"),
            spec_hash: spec,
            code_revision: "abc".into(),
            backend: "cpu".into(),
            backend_reason: None,
            hardware: "test".into(),
            seed: 1,
            kernel_hashes: BTreeMap::new(),
            resumed_from_step: None,
            build: None,
            data: None,
            attempt: None,
        }),
    ));
    for i in 0..300 {
        batch.push(crate::fixture::entry_bytes(i, 0));
    }
    // A metric chunk: 130 steps x 5 points (more than one multi-row INSERT holds), its last
    // step written twice (the second value wins).
    let mut chunk = String::new();
    for step in 1..=130u64 {
        chunk.push_str(&format!(
            "{{\"step\":{step},\"kind\":\"train\",\"scalars\":{{\"train/loss\":{}}},\"vectors\":{{\"load\":[1.0,2.0,3.0,4.0]}}}}\n",
            step as f64 * 0.01
        ));
    }
    chunk.push_str("{\"step\":130,\"kind\":\"eval\",\"scalars\":{\"train/loss\":9.5}}\n");
    let put = lab.blobs().put(&mut chunk.as_bytes()).unwrap();
    batch.push(
        LedgerEntry::new(
            exp.clone(),
            refs([(RefRole::Metrics, put.hash.0)]),
            ArtifactBody {
                name: "metrics-000001.jsonl".into(),
                bytes: put.bytes,
                run: Some(RunId::from("run-000001")),
            },
        )
        .to_canonical_bytes()
        .unwrap(),
    );
    batch.push(e(
        exp,
        EntryBody::from(ResultBody {
            run: RunId::from("run-000001"),
            spec_hash: spec,
            ending: glassbox_schemas::record::RunEnding {
                status: RunStatus::Diverged,
                steps: 40,
                final_metrics: BTreeMap::from([
                    ("train/loss".to_string(), 2.5),
                    ("grad/norm/total".to_string(), 1.25),
                ]),
                reason: Some("loss became NaN at step 41".into()),
            },
            forecast: None,
            params_blake3: None,
        }),
    ));
    w.append_batch(batch).unwrap();
    (d, lab)
}

async fn exercise(url: &str, lab: &LabDir) {
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let idx = Index::connect(url).await.unwrap();
    // Empty index: behind the log.
    assert_eq!(
        idx.check(&reader).await.unwrap(),
        Err(IndexMismatch::Behind {
            indexed: 0,
            log: 304
        })
    );
    let blobs = lab.blobs();
    assert_eq!(
        idx.sync_with_blobs(&reader, Some(&blobs)).await.unwrap(),
        304
    );
    assert_eq!(idx.sync(&reader).await.unwrap(), 0, "sync is incremental");
    idx.check(&reader).await.unwrap().unwrap();
    let results = idx.entries(Some(EntryKind::Result)).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].index, 303);
    assert_eq!(results[0].run.as_deref(), Some("run-000001"));
    assert_eq!(idx.entries(None).await.unwrap().len(), 304);
    assert_eq!(
        idx.run_status("run-000001").await.unwrap(),
        Some(("diverged".to_string(), Some(40)))
    );
    let points = idx.metric_points("run-000001").await.unwrap();
    assert_eq!(
        points.len(),
        130 * 5 + 1,
        "every chunk point once, plus the result's"
    );
    let at = |name: &str, step: u64| {
        points
            .iter()
            .find(|(n, s, _)| n == name && *s == step)
            .map(|p| p.2)
    };
    assert_eq!(at("grad/norm/total", 40), Some(1.25));
    assert_eq!(
        at("train/loss", 40),
        Some(2.5),
        "the result's final value wins"
    );
    assert_eq!(
        at("train/loss", 130),
        Some(9.5),
        "a repeated point keeps its last value"
    );
    assert_eq!(at("train/loss", 7), Some(0.07));
    assert_eq!(at("load/2", 129), Some(3.0));
    // The run has ended: its overviews are drawn, each curve whole (fewer points than an
    // overview keeps), the same points the curve reads give.
    let overviews = idx.overviews("run-000001").await.unwrap();
    assert_eq!(
        overviews.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "grad/norm/total",
            "load/0",
            "load/1",
            "load/2",
            "load/3",
            "train/loss"
        ]
    );
    let loss = idx
        .curves("run-000001", CurveNames::One("train/loss"), 0, u64::MAX)
        .await
        .unwrap();
    assert_eq!(overviews["train/loss"].points, loss["train/loss"]);
    assert!(overviews.values().all(|o| o.is_whole()));
    assert_eq!(overviews["load/3"].total, 130);
    // Reindex rebuilds the same rows; migrations are idempotent on reconnect.
    idx.close().await;
    let idx = Index::connect(url).await.unwrap();
    assert_eq!(
        idx.reindex_with_blobs(&reader, Some(&blobs)).await.unwrap(),
        304
    );
    assert_eq!(
        idx.metric_points("run-000001").await.unwrap(),
        points,
        "reindexing rebuilds the metric curves too"
    );
    assert_eq!(
        idx.overviews("run-000001").await.unwrap(),
        overviews,
        "and their overviews"
    );
    idx.check(&reader).await.unwrap().unwrap();
    idx.close().await;
}

#[test]
fn sqlite_index_syncs_checks_and_reindexes() {
    let (_d, lab) = lab_with_a_run();
    let url = lab.index_path().display().to_string();
    runtime().block_on(exercise(&url, &lab));
    assert!(lab.index_path().is_file());
}

/// Indexes the whole log of `lab` into the SQLite index at `url`.
async fn sync_all(lab: &LabDir, url: &str) {
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let idx = Index::connect(url).await.unwrap();
    idx.sync(&reader).await.unwrap();
    idx.close().await;
}

/// Runs `sql` on the SQLite index at `url` behind the index's back (tampering, lost rows).
async fn edit_behind_its_back(url: &str, sql: &str) {
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{url}"))
        .await
        .unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

/// What `check` says of the index at `url` against `lab`'s log.
async fn check(lab: &LabDir, url: &str) -> Result<(), IndexMismatch> {
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let idx = Index::connect(url).await.unwrap();
    let r = idx.check(&reader).await.unwrap();
    idx.close().await;
    r
}

#[test]
fn sqlite_index_detects_a_tampered_row() {
    let (_d, lab) = lab_with_a_run();
    let url = lab.index_path().display().to_string();
    runtime().block_on(async {
        sync_all(&lab, &url).await;
        edit_behind_its_back(
            &url,
            "UPDATE entries SET entry = replace(entry, 'item-5\"', 'item-6\"') WHERE idx = 7",
        )
        .await;
        let m = check(&lab, &url).await.unwrap_err();
        assert_eq!(
            m,
            IndexMismatch::Row {
                index: 7,
                reason: "differs from the log entry".into()
            }
        );
        assert!(m.to_string().contains("glassbox ledger reindex"));
    });
}

#[test]
fn sqlite_index_behind_is_a_prefix_and_a_hole_is_a_missing_row() {
    let (_d, lab) = lab_with_a_run();
    let url = lab.index_path().display().to_string();
    runtime().block_on(async {
        sync_all(&lab, &url).await;
        // The newest rows missing: behind.
        edit_behind_its_back(&url, "DELETE FROM entries WHERE idx IN (302, 303)").await;
        assert_eq!(
            check(&lab, &url).await,
            Err(IndexMismatch::Behind {
                indexed: 302,
                log: 304
            })
        );
        // A hole: the row is named.
        edit_behind_its_back(&url, "DELETE FROM entries WHERE idx = 40").await;
        assert_eq!(
            check(&lab, &url).await,
            Err(IndexMismatch::Row {
                index: 40,
                reason: "is missing".into()
            })
        );
    });
}

#[test]
fn postgres_index() {
    let (_d, lab) = lab_with_a_run();
    runtime().block_on(async {
        let schema = glassbox_test_support::postgres_schema("ledger", "index").await;
        exercise(&schema.url, &lab).await;
        schema.drop_schema().await;
    });
}

/// A lab whose log holds one `artifact` entry naming `chunk` as a metric chunk of `run-000002`.
fn lab_with_a_chunk(chunk: &[u8]) -> (tempfile::TempDir, LabDir) {
    let (d, lab) = crate::fixture::new_lab();
    let w = lab.writer(LockMode::FailFast).unwrap();
    w.append_batch(vec![
        chunk_artifact(&lab, chunk, "metrics-000001.jsonl")
            .to_canonical_bytes()
            .unwrap(),
    ])
    .unwrap();
    (d, lab)
}

/// A chunk of more points than the index holds in memory at once (50,000)
/// is streamed in batches, and every point arrives, in one transaction.
#[test]
fn a_long_chunk_is_indexed_in_batches_and_whole() {
    let mut chunk = String::new();
    // 12,000 steps x 9 points = 108,000 points: more than two batches.
    for step in 1..=12_000u64 {
        chunk.push_str(&format!(
            "{{\"step\":{step},\"kind\":\"train\",\"scalars\":{{\"train/loss\":{}}},\"vectors\":{{\"load\":[1,2,3,4,5,6,7,8]}}}}\n",
            1.0 / step as f64
        ));
    }
    let (_d, lab) = lab_with_a_chunk(chunk.as_bytes());
    let url = lab.index_path().display().to_string();
    runtime().block_on(async {
        let src = DirSource {
            root: lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
        let idx = Index::connect(&url).await.unwrap();
        assert_eq!(
            idx.sync_with_blobs(&reader, Some(&lab.blobs()))
                .await
                .unwrap(),
            1
        );
        let points = idx.metric_points("run-000002").await.unwrap();
        assert_eq!(points.len(), 12_000 * 9);
        let loss_at = |step: u64| {
            points
                .iter()
                .find(|(n, s, _)| n == "train/loss" && *s == step)
                .map(|p| p.2)
        };
        assert_eq!(loss_at(1), Some(1.0));
        assert_eq!(loss_at(12_000), Some(1.0 / 12_000.0));
        assert!(
            points
                .iter()
                .any(|(n, s, v)| n == "load/7" && *s == 12_000 && *v == 8.0)
        );
        idx.close().await;
    });
}

/// Appends `entries` to the lab's log and syncs the index at `url` with the lab's blobs.
async fn append_and_sync(lab: &LabDir, url: &str, entries: Vec<LedgerEntry>) -> Index {
    if !entries.is_empty() {
        let w = lab.writer(LockMode::FailFast).unwrap();
        w.append_batch(
            entries
                .iter()
                .map(|e| e.to_canonical_bytes().unwrap())
                .collect(),
        )
        .unwrap();
    }
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
    let idx = Index::connect(url).await.unwrap();
    idx.sync_with_blobs(&reader, Some(&lab.blobs()))
        .await
        .unwrap();
    idx
}

/// A metric-chunk `artifact` entry of `run-000002` with `train/loss` = `f(step)` for `steps`.
fn chunk_entry(
    lab: &LabDir,
    steps: std::ops::RangeInclusive<u64>,
    f: impl Fn(u64) -> f64,
) -> LedgerEntry {
    let mut chunk = String::new();
    for step in steps {
        chunk.push_str(&format!(
            "{{\"step\":{step},\"kind\":\"train\",\"scalars\":{{\"train/loss\":{}}}}}\n",
            f(step)
        ));
    }
    chunk_artifact(lab, chunk.as_bytes(), "metrics.jsonl")
}

/// The overview of `run-000002`'s `train/loss`, which must exist.
async fn loss_overview(idx: &Index) -> glassbox_ledger::index::Overview {
    idx.overviews("run-000002")
        .await
        .unwrap()
        .remove("train/loss")
        .expect("an overview of train/loss")
}

/// The `artifact` entry naming `chunk` (stored in the lab's blobs) as a metric chunk of
/// `run-000002`.
fn chunk_artifact(lab: &LabDir, chunk: &[u8], name: &str) -> LedgerEntry {
    let put = lab.blobs().put(&mut &chunk[..]).unwrap();
    LedgerEntry::new(
        Some(ExperimentId::from("glassbox-lab/glassbox#8")),
        refs([(RefRole::Metrics, put.hash.0)]),
        ArtifactBody {
            name: name.into(),
            bytes: put.bytes,
            run: Some(RunId::from("run-000002")),
        },
    )
}

/// A run's overviews appear when its `result` is indexed (not while it runs), keep
/// a one-step spike of a long curve, are drawn again when a later chunk changes the curve, and
/// an index made before overviews existed gets them from its migration at the next sync.
#[test]
fn overviews_are_drawn_when_a_run_ends_and_again_when_its_points_change() {
    let (_d, lab) = lab_with_a_chunk(b"");
    let url = lab.index_path().display().to_string();
    let loss = |s: u64| {
        if s == 4_321 {
            50.0
        } else {
            1.0 + 1.0 / s as f64
        }
    };
    runtime().block_on(async {
        let idx = append_and_sync(&lab, &url, vec![chunk_entry(&lab, 1..=10_000, loss)]).await;
        assert!(
            idx.overviews("run-000002").await.unwrap().is_empty(),
            "a run without a result has no overview"
        );
        idx.close().await;
        let result = LedgerEntry::new(
            Some(ExperimentId::from("glassbox-lab/glassbox#8")),
            BTreeMap::new(),
            ResultBody {
                run: RunId::from("run-000002"),
                spec_hash: SpecHash(Blake3Hash::of(b"spec")),
                ending: glassbox_schemas::record::RunEnding {
                    status: RunStatus::Succeeded,
                    steps: 10_000,
                    final_metrics: BTreeMap::from([("train/loss".to_string(), loss(10_000))]),
                    reason: None,
                },
                forecast: None,
                params_blake3: None,
            },
        );
        let idx = append_and_sync(&lab, &url, vec![result]).await;
        let o = loss_overview(&idx).await;
        assert_eq!((o.total, o.points.len()), (10_000, OVERVIEW_POINTS));
        assert_eq!(o.points.first(), Some(&(1, 2.0)));
        assert_eq!(o.points.last(), Some(&(10_000, loss(10_000))));
        assert!(o.points.contains(&(4_321, 50.0)), "the spike is kept");
        idx.close().await;

        // A chunk indexed after the result (steps 10,001 to 12,000) is in the overview.
        let idx = append_and_sync(&lab, &url, vec![chunk_entry(&lab, 10_001..=12_000, loss)]).await;
        let o = loss_overview(&idx).await;
        assert_eq!(o.total, 12_000);
        assert_eq!(o.points.last(), Some(&(12_000, loss(12_000))));

        // An index from before the overview migration: its migration marks every ended run,
        // and the next sync (with nothing new in the log) draws their overviews.
        let before = idx.overviews("run-000002").await.unwrap();
        for sql in [
            "DROP TABLE metric_overview",
            "DROP TABLE overview_pending",
            "DELETE FROM _sqlx_migrations WHERE version = 3",
        ] {
            sqlx::query(sql).execute(idx.write_pool()).await.unwrap();
        }
        idx.close().await;
        let idx = append_and_sync(&lab, &url, vec![]).await;
        assert_eq!(idx.overviews("run-000002").await.unwrap(), before);
        idx.close().await;
    });
}

/// A chunk line over the index's line limit (16 MiB) is refused, naming the
/// line by number, and nothing of the entry is indexed (the sync is one transaction).
#[test]
fn a_chunk_line_over_the_limit_is_refused_by_number() {
    let mut chunk =
        String::from("{\"step\":1,\"kind\":\"train\",\"scalars\":{\"train/loss\":1.0}}\n");
    chunk.push_str("{\"step\":2,\"kind\":\"train\",\"scalars\":{\"train/loss\":");
    chunk.push_str(&"1".repeat(17 << 20));
    chunk.push_str("}}\n");
    let (_d, lab) = lab_with_a_chunk(chunk.as_bytes());
    let url = lab.index_path().display().to_string();
    runtime().block_on(async {
        let src = DirSource {
            root: lab.root().to_path_buf(),
        };
        let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
        let idx = Index::connect(&url).await.unwrap();
        let err = idx
            .sync_with_blobs(&reader, Some(&lab.blobs()))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2 is over 16777216 bytes"), "{err}");
        assert!(err.contains("entry 0"), "{err}");
        assert!(idx.metric_points("run-000002").await.unwrap().is_empty());
        assert_eq!(idx.entries(None).await.unwrap().len(), 0);
        idx.close().await;
    });
}

/// Two processes' indexers catching up with the same log at once (the server's sync and a
/// `ledger log` beside it): each takes the write lock first and re-reads what is indexed under
/// it, so neither inserts an entry the other did (no `UNIQUE constraint failed`), neither fails,
/// and the index ends with every entry once.
#[test]
fn concurrent_syncs_of_one_index_neither_fail_nor_duplicate() {
    let (_d, lab) = lab_with_a_run();
    let url = lab.index_path().display().to_string();
    let src = DirSource {
        root: lab.root().to_path_buf(),
    };
    let size = LogReader::open(&src, &lab.verifier_key().unwrap())
        .unwrap()
        .size()
        .0;
    for round in 0..20 {
        // A fresh index each round, so every round races from nothing.
        let _ = std::fs::remove_file(lab.index_path());
        let start = std::sync::Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (lab, url, start) = (lab.clone(), url.clone(), start.clone());
                std::thread::spawn(move || {
                    runtime().block_on(async {
                        let src = DirSource {
                            root: lab.root().to_path_buf(),
                        };
                        let reader = LogReader::open(&src, &lab.verifier_key().unwrap()).unwrap();
                        let idx = Index::connect(&url).await?;
                        start.wait();
                        let added = idx.sync(&reader).await?;
                        idx.close().await;
                        Ok::<u64, glassbox_ledger::Error>(added)
                    })
                })
            })
            .collect();
        let mut added = 0;
        for t in threads {
            added += t
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: a sync failed: {e}"));
        }
        assert_eq!(added, size, "round {round}: entries added in all");
        runtime().block_on(async {
            let idx = Index::connect(&url).await.unwrap();
            assert_eq!(idx.indexed().await.unwrap(), size, "round {round}");
            idx.close().await;
        });
    }
}
