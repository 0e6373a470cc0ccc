//! A run's snapshot loaded from the record (what `score`, `sample`, `export` and eval jobs
//! stand on) when the spec it was trained with is one this binary cannot run: a spec from a
//! newer glassbox with a field this one does not know, and a model this runner refuses. Each is
//! refused naming the run, the spec and what is wrong; nothing panics.

use glassbox_lab::LabConfig;
use glassbox_lab::queue::Clock;
use glassbox_lab::recorder::one_ref;
use glassbox_lab::trained::{Pick, TrainedModel};
use glassbox_schemas::record::{RunStartedBody, SnapshotBody};
use glassbox_schemas::{BlobHash, EntryKind, RefRole, RunId, SpecHash};

use crate::flow::{of_kind, recorded, setup_clocked, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_whose_spec_this_binary_cannot_run_is_refused_naming_why() {
    let s = setup_clocked("sqlite", "cannot_run", LabConfig::default(), Clock::System).await;
    let w = s.worker_with("w1", |_| {});
    let (_, q) = s.propose_and_approve(1, "alice", spec(8, "", "")).await;
    recorded(w.run_job(q.job).await.unwrap());
    let entries = s.entries();
    let started = of_kind(&entries, EntryKind::RunStarted)[0];
    let started: RunStartedBody = started.body_of::<RunStartedBody>().unwrap().clone();
    let snapshot = of_kind(&entries, EntryKind::Snapshot)[0]
        .blob(RefRole::Checkpoint)
        .copied()
        .unwrap();
    // The real run loads.
    TrainedModel::load(&s.recorder, &started.run, &Pick::Newest).unwrap();

    let trained_with = serde_json::to_value(spec(8, "", "")).unwrap();
    let mut newer = trained_with.clone();
    newer["model"]["attention"] = serde_json::json!("multi_head_latent");
    let mut odd_heads = trained_with;
    odd_heads["model"]["n_heads"] = serde_json::json!(3);
    let cases = [
        (newer, "run-000090", "unknown field `attention`"),
        (odd_heads, "run-000091", "model.n_heads"),
    ];
    for (spec_json, run, says) in cases {
        // A run recorded with that spec and the real snapshot's weights.
        let hash = s
            .recorder
            .put_bytes(&serde_json::to_vec(&spec_json).unwrap())
            .unwrap();
        let run = RunId(run.into());
        let body = RunStartedBody {
            run: run.clone(),
            spec_hash: SpecHash(hash.0),
            ..started.clone()
        };
        s.recorder
            .record(None, one_ref(RefRole::Spec, &hash), body)
            .unwrap();
        let step = SnapshotBody {
            run: run.clone(),
            step: 8,
        };
        s.recorder
            .record(
                None,
                one_ref(RefRole::Checkpoint, &BlobHash(snapshot)),
                step,
            )
            .unwrap();

        let err = TrainedModel::load(&s.recorder, &run, &Pick::Newest)
            .err()
            .unwrap_or_else(|| panic!("{run}: loaded a spec this binary cannot run"))
            .to_string();
        assert!(
            err.contains(&format!("run {run}'s spec"))
                && err.contains("cannot be run by this binary")
                && err.contains(says),
            "{run}: {err}"
        );
    }
}
