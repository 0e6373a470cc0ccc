//! What a worker checks before it trains a leased job: the spec loaded by its hash and held to
//! the job's `approval` entry, the lab's limits, and the snapshot a previous attempt left.
//!
//! Not here: training (`training`) or recording the ending (`ending`).

use crate::error::LabError;
use crate::queue::Job;
use glassbox_schemas::record::ApprovalBody;
use glassbox_schemas::record::EntryBody;
use glassbox_schemas::{BlobHash, ExperimentSpec, RunId, RunStatus};
use std::path::{Path, PathBuf};

use super::*;

impl Worker {
    /// The job's spec from the blob store, if it can be read (for an ending's forecast).
    pub(super) fn stored_spec(&self, job: &Job) -> Option<ExperimentSpec> {
        let bytes = self.recorder.get_bytes(&BlobHash(job.spec_hash.0)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The job's spec from the blob store, checked against its hash and its approval.
    pub(super) fn checked_spec(&self, job: &Job) -> Result<ExperimentSpec, String> {
        let bytes = self
            .recorder
            .get_bytes(&BlobHash(job.spec_hash.0))
            .map_err(|e| format!("cannot load its spec: {e}"))?;
        let spec: ExperimentSpec = serde_json::from_slice(&bytes)
            .map_err(|e| format!("its stored spec does not parse: {e}"))?;
        let hash = glassbox_schemas::spec_hash(&spec).map_err(|e| e.to_string())?;
        if hash != job.spec_hash {
            return Err(format!(
                "its stored spec hashes to {hash}, not the job's {}",
                job.spec_hash
            ));
        }
        let Some(index) = job.approval_entry else {
            return Err("it has no approval entry; only approved specs run".into());
        };
        let entry = self
            .recorder
            .entry(index)
            .map_err(|e| format!("cannot read its approval (entry {index}): {e}"))?;
        let approval: ApprovalBody = match &entry.body {
            EntryBody::Approval(b) => b.clone(),
            other => {
                return Err(format!(
                    "entry {index} is a {} entry, not an approval",
                    other.kind().as_str()
                ));
            }
        };
        if approval.spec_hash != hash {
            return Err(format!(
                "its approval (entry {index}) is for {}, but the spec is {hash}; it must be approved again",
                approval.spec_hash
            ));
        }
        // Only declared corpora are read (a job approved before the flow checked it).
        for (i, c) in spec.data.mixture.iter().enumerate() {
            if let Some(h) = &c.corpus
                && self
                    .recorder
                    .dataset_entry(h)
                    .map_err(|e| e.to_string())?
                    .is_none()
            {
                return Err(format!(
                    "data.mixture[{i}].corpus = {h}: no `dataset` entry of this lab declares it"
                ));
            }
        }
        Ok(spec)
    }

    /// Copies the job's last checkpoint blob into scratch space, if it has one.
    pub(super) fn fetch_snapshot(
        &self,
        job: &Job,
        scratch: &Path,
    ) -> Result<Option<PathBuf>, LabError> {
        let (Some(hash), Some(step)) = (job.snapshot_blob, job.snapshot_step) else {
            return Ok(None);
        };
        std::fs::create_dir_all(scratch).map_err(LabError::io("cannot create", scratch))?;
        let path = scratch.join(format!("resume-step-{step}.safetensors"));
        let mut out = std::fs::File::create(&path).map_err(LabError::io("cannot create", &path))?;
        let mut blob = self.recorder.blobs().get(&hash)?;
        std::io::copy(&mut blob, &mut out).map_err(LabError::io("cannot write", &path))?;
        Ok(Some(path))
    }

    /// A spec over this worker's limits (memory, metric volume) ends `budget_exceeded` before
    /// anything is allocated; `device_memory` is the GPU's, on a GPU worker.
    pub(super) async fn over_limits(
        &self,
        job: &Job,
        run: &RunId,
        spec: &ExperimentSpec,
        device_memory: Option<u64>,
        log: &RunLog,
    ) -> Option<Result<JobEnd, LabError>> {
        let problem = crate::limits::worker_problem(&self.opts.limits, spec, device_memory)?;
        log.warn(format!("not training: {problem}"));
        let outcome = JobOutcome::early(RunStatus::BudgetExceeded, problem);
        Some(self.conclude(job, run, Some(spec), outcome, log).await)
    }
}
