//! [`Leaderboards`]: the lab's boards ([`BoardDef`]s, handed in with
//! [`crate::WebState::with_boards`]) derived from the log, kept until the log grows.
//!
//! The catalog feeds every `proposal`, `result` and `reproduction` to its
//! [`glassbox_ledger::board::BoardBuilder`] in log order as it catches up; here the builder is
//! finished with the specs the runs name. A spec is read the way the lab and
//! `glassbox board --ledger` read it — the blob named by the spec hash itself (canonical JSON) —
//! so the board served here is the one anyone derives from a copy of the log. Specs are kept by
//! hash (content-addressed: never stale); one that cannot be read is tried again when the log
//! has grown. The boards are derived once per log size ([`crate::catalog::CatalogData::next`]).
//!
//! Not here: drawing a board (`pages::boards`) or ranking rules (`glassbox_ledger::board`).

use glassbox_schemas::{RunPhase, RunStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use glassbox_ledger::BlobStore;
use glassbox_ledger::board::{Board, BoardDef};
use glassbox_schemas::{BlobHash, ExperimentSpec, SpecHash};

use crate::WebState;
use crate::error::WebError;

/// Times the catalog may grow under one request before the boards are drawn with the specs
/// read so far (a spec not read yet leaves its rows without compute, and the boards are not kept).
const MAX_ROUNDS: usize = 3;

/// Derived boards and the specs they needed.
#[derive(Debug, Default)]
pub struct Leaderboards {
    /// The boards at a log size.
    derived: Mutex<Option<(u64, Arc<Vec<Board>>)>>,
    /// Specs read, by hash.
    specs: Mutex<HashMap<SpecHash, Arc<ExperimentSpec>>>,
    /// Specs that could not be read, and the log size at which that was tried.
    unreadable: Mutex<HashMap<SpecHash, u64>>,
}

impl Leaderboards {
    /// Every board of `st.boards`, derived from the log as the catalog holds it now.
    pub async fn boards(&self, st: &WebState) -> Result<Arc<Vec<Board>>, WebError> {
        if st.boards.is_empty() {
            return Ok(Arc::new(Vec::new()));
        }
        let mut round = 0;
        loop {
            round += 1;
            let (at, wanted) = {
                let cat = st.catalog.read(&st.index, st.blobs.as_ref()).await?;
                if let Some((at, boards)) = &*lock(&self.derived) {
                    if *at == cat.next {
                        return Ok(boards.clone());
                    }
                }
                let wanted = self.wanted(&cat);
                if wanted.is_empty() || round == MAX_ROUNDS {
                    let boards = Arc::new(self.finish(&cat, &st.boards));
                    if wanted.is_empty() {
                        *lock(&self.derived) = Some((cat.next, boards.clone()));
                    }
                    return Ok(boards);
                }
                (cat.next, wanted)
            };
            let blobs = st.blobs.clone();
            let read = tokio::task::spawn_blocking(move || {
                wanted
                    .into_iter()
                    .map(|h| (h, read_spec(blobs.as_ref(), &h)))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| WebError::Io(std::io::Error::other(e)))?;
            let mut specs = lock(&self.specs);
            let mut unreadable = lock(&self.unreadable);
            for (h, spec) in read {
                match spec {
                    Some(s) => {
                        specs.insert(h, Arc::new(s));
                        unreadable.remove(&h);
                    }
                    None => {
                        unreadable.insert(h, at);
                    }
                }
            }
        }
    }

    /// The board named `name` (404 when the lab has none of that name).
    pub async fn board(&self, st: &WebState, name: &str) -> Result<Board, WebError> {
        self.boards(st)
            .await?
            .iter()
            .find(|b| b.def.name == name)
            .cloned()
            .ok_or_else(|| {
                WebError::not_found(format!(
                    "board {name:?} (this lab's boards are listed at /boards)"
                ))
            })
    }

    /// Specs of succeeded runs not read yet (nor tried at this log size).
    fn wanted(&self, cat: &crate::catalog::CatalogData) -> Vec<SpecHash> {
        let specs = lock(&self.specs);
        let unreadable = lock(&self.unreadable);
        let mut wanted: Vec<SpecHash> = cat
            .runs
            .values()
            .filter(|r| r.status == RunPhase::Ended(RunStatus::Succeeded))
            .filter_map(|r| r.spec_hash.parse::<SpecHash>().ok())
            .filter(|h| !specs.contains_key(h) && unreadable.get(h) != Some(&cat.next))
            .collect();
        wanted.sort();
        wanted.dedup();
        wanted
    }

    fn finish(&self, cat: &crate::catalog::CatalogData, defs: &[BoardDef]) -> Vec<Board> {
        let specs = lock(&self.specs);
        let mut boards = cat
            .board
            .finish(defs, |h| specs.get(h).map(|s| (**s).clone()));
        // The builder counts the entries it was given; the catalog has read every entry of
        // the log up to `next` (most of them of kinds no board reads).
        for b in &mut boards {
            b.log_size = cat.next;
        }
        boards
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is a map operation or a swap: a panic cannot leave it half done.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The spec stored under its own hash (canonical JSON), at most the spec size limit (x4, as the
/// catalog reads them).
fn read_spec(blobs: &dyn BlobStore, hash: &SpecHash) -> Option<ExperimentSpec> {
    let limit = glassbox_schemas::validate::MAX_SPEC_BYTES as u64 * 4;
    let r = blobs.get(&BlobHash(hash.0)).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(r, limit + 1), &mut bytes).ok()?;
    if bytes.len() as u64 > limit {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}
