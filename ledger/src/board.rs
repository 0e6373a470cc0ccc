//! Leaderboards derived from the ledger alone, ranking only reproduced results.
//!
//! A board ([`BoardDef`], the lab config's `[[leaderboard]]`) names a final metric or an
//! evaluation metric (`eval:SUITE/METRIC`), which way it is better and a compute axis (training
//! FLOPs or tokens, from the cost model applied to the run's recorded spec). [`BoardBuilder`]
//! reads entries in log order — `proposal` (author, title), `result` (a succeeded run's final
//! metrics), `reproduction` (re-runs of that run), and for evaluation metrics `snapshot`,
//! `eval_suite` and `evaluation` — and [`BoardBuilder::finish`] sorts each run into one of
//! three lists:
//!
//! - **ranked**: at least one reproduction `reproduced` it and none found it `differs`;
//! - **awaiting reproduction**: no reproduction has finished with a comparison yet (listed,
//!   never ranked);
//! - **reproduction failed**: a reproduction found it `differs` (a negative result, shown).
//!
//! A run's value of an evaluation metric is its newest `evaluated` entry of its last snapshot
//! on the suite's newest version (the newest `eval_suite` entry of that name), so every run on
//! a board is measured on the same items; a run without one is not on the board, as a run
//! without the final metric is not. The reproduction rule is the same for both kinds of metric.
//!
//! An experiment is ranked once, by its best reproduced run. Rank order is the metric, then
//! less compute, then the earlier `result` entry. The Pareto frontier marks ranked rows that no
//! other ranked row beats on both the metric and compute.
//!
//! Everything here is a pure function of the entries and the specs their hashes name, so the
//! board served by `web` is the one anyone rebuilds from a copied log (`glassbox board --ledger`).
//! Not here: deciding when to reproduce (the lab's `[reproduce]` policy) or drawing the board.

use std::collections::{BTreeMap, HashMap};

use glassbox_schemas::eval::parse_metric_name;
use glassbox_schemas::record::EvalOutcome;
use glassbox_schemas::record::{EntryBody, LedgerEntry};
use glassbox_schemas::sweep::Direction;
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec, RunId, RunStatus, SpecHash};
use serde::{Deserialize, Serialize};

/// What a board's compute axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeAxis {
    /// Training FLOPs (`6 N + 12 L d T` per token, the cost model's `train_flops`).
    #[default]
    Flops,
    /// Training tokens (steps x batch x sequence length).
    Tokens,
}

impl ComputeAxis {
    /// The axis' unit, for labels.
    pub fn unit(self) -> &'static str {
        match self {
            ComputeAxis::Flops => "FLOPs",
            ComputeAxis::Tokens => "tokens",
        }
    }
}

/// One board, as the lab config declares it (`[[leaderboard]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardDef {
    /// Its name, used in URLs (`/boards/<name>`): lowercase letters, digits and `-`.
    pub name: String,
    /// The metric ranked: a final metric, e.g. `eval/markov/bpb`, or an evaluation metric,
    /// e.g. `eval:markov-choice/acc_norm`.
    pub metric: String,
    /// Which way the metric is better.
    #[serde(default)]
    pub direction: Direction,
    /// The compute axis.
    #[serde(default)]
    pub compute: ComputeAxis,
}

impl BoardDef {
    /// Why the definition cannot be used, naming the field and what would be accepted.
    pub fn problem(&self) -> Option<String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !name_ok {
            return Some(format!(
                "leaderboard.name {:?}: must be 1-64 lowercase letters, digits or -",
                self.name
            ));
        }
        if self.metric.is_empty() || self.metric.len() > 128 {
            return Some(format!(
                "leaderboard {}: metric {:?} must name a final metric, e.g. eval/<domain>/bpb, or an evaluation metric, e.g. eval:<suite>/acc_norm",
                self.name, self.metric
            ));
        }
        None
    }
}

/// Whether `a` is strictly better than `b` in `direction`.
pub fn better(direction: Direction, a: f64, b: f64) -> bool {
    match direction {
        Direction::Min => a < b,
        Direction::Max => a > b,
    }
}

/// Where a run stands on a board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Reproduced: ranked.
    Ranked,
    /// No finished reproduction yet.
    AwaitingReproduction,
    /// A reproduction found a difference.
    ReproductionFailed,
}

/// One reproduction of a board row's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowReproduction {
    /// The `reproduction` entry.
    pub entry: u64,
    /// `reproduced`, `differs`, `failed` or `cancelled`.
    pub outcome: String,
    /// The worker that re-ran it, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// `bitwise` or `tolerance`, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<String>,
    /// The first difference or why it could not finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One run on a board.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoardRow {
    /// 1-based rank; only for ranked rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Where it stands.
    pub standing: Standing,
    /// The experiment.
    pub experiment: ExperimentId,
    /// Its title.
    pub title: String,
    /// Who proposed it.
    pub author: String,
    /// The run's value of the board's metric (its final value, or its last snapshot's
    /// evaluation).
    pub value: f64,
    /// The `evaluation` entry the value comes from (boards ranking an `eval:` metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_entry: Option<u64>,
    /// Compute on the board's axis; absent when the spec could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<f64>,
    /// The run.
    pub run: RunId,
    /// Its `result` entry.
    pub result_entry: u64,
    /// Its reproductions, in log order.
    pub reproductions: Vec<RowReproduction>,
    /// On the Pareto frontier of metric against compute (ranked rows only).
    pub pareto: bool,
}

/// A board as derived from the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Board {
    /// The definition.
    #[serde(flatten)]
    pub def: BoardDef,
    /// Entries read (the log size the board is derived at).
    pub log_size: u64,
    /// Ranked rows, best first.
    pub ranked: Vec<BoardRow>,
    /// Rows awaiting reproduction, newest result first.
    pub awaiting: Vec<BoardRow>,
    /// Rows whose reproduction failed, newest result first.
    pub failed: Vec<BoardRow>,
}

impl Board {
    /// Whether a run reaching `value` would be among the top `n` ranked rows.
    pub fn would_enter_top(&self, value: f64, n: usize) -> bool {
        if !value.is_finite() || n == 0 {
            return false;
        }
        match self.ranked.get(n - 1) {
            None => true,
            Some(last) => better(self.def.direction, value, last.value),
        }
    }
}

#[derive(Debug)]
struct RunFacts {
    experiment: Option<ExperimentId>,
    spec_hash: SpecHash,
    entry: u64,
    final_metrics: BTreeMap<String, f64>,
}

/// What boards ranking an evaluation metric read of the log.
#[derive(Debug, Default)]
struct EvalFacts {
    /// Each suite's newest version (its newest `eval_suite` entry's hash), by name.
    newest_version: HashMap<String, BlobHash>,
    /// Each run's last snapshot step.
    last_snapshot: HashMap<RunId, u64>,
    /// The newest `evaluated` entry of each (run, suite version, step): its index and metrics.
    results: HashMap<SnapshotOnSuite, (u64, BTreeMap<String, f64>)>,
}

/// A run's snapshot (by step) on one version of a suite.
type SnapshotOnSuite = (RunId, BlobHash, u64);

impl EvalFacts {
    /// `run`'s value of `metric` on `suite` and the entry it comes from: its newest
    /// `evaluated` entry of its last snapshot on the suite's newest version.
    fn value(&self, run: &RunId, suite: &str, metric: &str) -> Option<(f64, u64)> {
        let version = self.newest_version.get(suite)?;
        let step = self.last_snapshot.get(run)?;
        let (entry, metrics) = self.results.get(&(run.clone(), *version, *step))?;
        Some((*metrics.get(metric)?, *entry))
    }
}

/// Reads entries in log order and derives every board at once ([module docs](self)).
#[derive(Debug, Default)]
pub struct BoardBuilder {
    people: HashMap<ExperimentId, (String, String)>,
    runs: Vec<(RunId, RunFacts)>,
    reproductions: HashMap<RunId, Vec<RowReproduction>>,
    evals: EvalFacts,
    size: u64,
}

impl BoardBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes entry `index` (entries must come in log order).
    pub fn add(&mut self, index: u64, entry: &LedgerEntry) {
        self.size = self.size.max(index + 1);
        match &entry.body {
            EntryBody::Proposal(p) => {
                if let Some(e) = &entry.experiment {
                    self.people
                        .insert(e.clone(), (p.author.clone(), p.title.clone()));
                }
            }
            EntryBody::Result(r) if r.ending.status == RunStatus::Succeeded => {
                self.runs.push((
                    r.run.clone(),
                    RunFacts {
                        experiment: entry.experiment.clone(),
                        spec_hash: r.spec_hash,
                        entry: index,
                        final_metrics: r.ending.final_metrics.clone(),
                    },
                ));
            }
            EntryBody::Reproduction(r) => {
                self.reproductions
                    .entry(r.run.clone())
                    .or_default()
                    .push(RowReproduction {
                        entry: index,
                        outcome: r.outcome.clone(),
                        worker: r.worker.clone(),
                        comparison: r.comparison.map(|c| {
                            match c {
                                glassbox_schemas::record::Comparison::Bitwise => "bitwise",
                                glassbox_schemas::record::Comparison::Tolerance => "tolerance",
                            }
                            .to_string()
                        }),
                        detail: r.detail.clone(),
                    });
            }
            EntryBody::Snapshot(s) => {
                let last = self
                    .evals
                    .last_snapshot
                    .entry(s.run.clone())
                    .or_insert(s.step);
                *last = (*last).max(s.step);
            }
            EntryBody::EvalSuite(s) => {
                self.evals
                    .newest_version
                    .insert(s.name.as_str().to_string(), s.suite);
            }
            // Entries come in log order: a later evaluation of the same snapshot replaces an
            // earlier one; one that did not end `evaluated` is no result and replaces nothing.
            EntryBody::Evaluation(e) if e.outcome == EvalOutcome::Evaluated => {
                self.evals.results.insert(
                    (e.run.clone(), e.suite_hash, e.step),
                    (index, e.metrics.clone()),
                );
            }
            _ => {}
        }
    }

    /// The boards of `defs`; `spec` loads a recorded spec by its hash (for the compute axis).
    pub fn finish(
        &self,
        defs: &[BoardDef],
        mut spec: impl FnMut(&SpecHash) -> Option<ExperimentSpec>,
    ) -> Vec<Board> {
        let mut costs: HashMap<SpecHash, Option<glassbox_schemas::CostEstimate>> = HashMap::new();
        defs.iter()
            .map(|def| {
                let mut rows = Vec::new();
                let eval_metric = parse_metric_name(&def.metric);
                for (run, facts) in &self.runs {
                    let found = match &eval_metric {
                        Some((suite, metric)) => self
                            .evals
                            .value(run, suite.as_str(), metric)
                            .map(|(v, entry)| (v, Some(entry))),
                        None => facts.final_metrics.get(&def.metric).map(|&v| (v, None)),
                    };
                    let Some((value, value_entry)) = found else {
                        continue;
                    };
                    if !value.is_finite() {
                        continue;
                    }
                    let Some(experiment) = facts.experiment.clone() else {
                        continue;
                    };
                    let cost = *costs.entry(facts.spec_hash).or_insert_with(|| {
                        spec(&facts.spec_hash).map(|s| glassbox_schemas::estimate(&s))
                    });
                    let compute = cost.map(|c| match def.compute {
                        ComputeAxis::Flops => c.train_flops,
                        ComputeAxis::Tokens => c.train_tokens as f64,
                    });
                    let reproductions = self.reproductions.get(run).cloned().unwrap_or_default();
                    let standing = if reproductions.iter().any(|r| r.outcome == "differs") {
                        Standing::ReproductionFailed
                    } else if reproductions.iter().any(|r| r.outcome == "reproduced") {
                        Standing::Ranked
                    } else {
                        Standing::AwaitingReproduction
                    };
                    let (author, title) = self.people.get(&experiment).cloned().unwrap_or_default();
                    rows.push(BoardRow {
                        rank: None,
                        standing,
                        experiment,
                        title,
                        author,
                        value,
                        value_entry,
                        compute,
                        run: run.clone(),
                        result_entry: facts.entry,
                        reproductions,
                        pareto: false,
                    });
                }
                arrange(def.clone(), self.size, rows)
            })
            .collect()
    }
}

/// Sorts rows into the three lists, ranks, dedupes by experiment and marks the frontier.
fn arrange(def: BoardDef, log_size: u64, rows: Vec<BoardRow>) -> Board {
    let dir = def.direction;
    let order = |a: &BoardRow, b: &BoardRow| {
        let by_value = match dir {
            Direction::Min => a.value.total_cmp(&b.value),
            Direction::Max => b.value.total_cmp(&a.value),
        };
        by_value
            .then_with(|| {
                a.compute
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.compute.unwrap_or(f64::INFINITY))
            })
            .then_with(|| a.result_entry.cmp(&b.result_entry))
    };
    let (mut ranked, rest): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|r| r.standing == Standing::Ranked);
    ranked.sort_by(order);
    let mut seen = std::collections::HashSet::new();
    ranked.retain(|r| seen.insert(r.experiment.clone()));
    for (i, r) in ranked.iter_mut().enumerate() {
        r.rank = Some(i as u32 + 1);
    }
    // The frontier: walking by compute, a row joins when it beats every cheaper row.
    let mut by_compute: Vec<usize> = (0..ranked.len())
        .filter(|&i| ranked[i].compute.is_some())
        .collect();
    by_compute.sort_by(|&a, &b| {
        let (ra, rb) = (&ranked[a], &ranked[b]);
        ra.compute
            .unwrap_or(0.0)
            .total_cmp(&rb.compute.unwrap_or(0.0))
            .then_with(|| order(ra, rb))
    });
    let mut best: Option<f64> = None;
    for i in by_compute {
        let v = ranked[i].value;
        if best.is_none_or(|b| better(dir, v, b)) {
            ranked[i].pareto = true;
            best = Some(v);
        }
    }
    let newest_first = |a: &BoardRow, b: &BoardRow| b.result_entry.cmp(&a.result_entry);
    let (mut failed, mut awaiting): (Vec<_>, Vec<_>) = rest
        .into_iter()
        .filter(|r| !seen.contains(&r.experiment) || r.standing == Standing::ReproductionFailed)
        .partition(|r| r.standing == Standing::ReproductionFailed);
    failed.sort_by(newest_first);
    awaiting.sort_by(newest_first);
    Board {
        def,
        log_size,
        ranked,
        awaiting,
        failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glassbox_schemas::record::RunEnding;
    use glassbox_schemas::record::{ProposalBody, ReproductionBody, ResultBody};

    fn def() -> BoardDef {
        BoardDef {
            name: "loss".into(),
            metric: "eval/m/loss".into(),
            direction: Direction::Min,
            compute: ComputeAxis::Flops,
        }
    }

    fn entry(exp: &str, body: impl Into<EntryBody>) -> LedgerEntry {
        LedgerEntry::new(Some(ExperimentId(exp.into())), Default::default(), body)
    }

    fn result(run: &str, value: f64) -> ResultBody {
        let ending = RunEnding {
            status: RunStatus::Succeeded,
            steps: 10,
            final_metrics: [("eval/m/loss".to_string(), value)].into(),
            reason: None,
        };
        ResultBody {
            run: RunId(run.into()),
            spec_hash: SpecHash(glassbox_schemas::Blake3Hash::from_bytes([0; 32])),
            ending,
            forecast: None,
            params_blake3: None,
        }
    }

    fn repro(run: &str, outcome: &str) -> ReproductionBody {
        ReproductionBody {
            run: RunId(run.into()),
            outcome: outcome.into(),
            detail: None,
            backend: "cpu".into(),
            binary: None,
            build: None,
            comparison: None,
            worker: Some("w2".into()),
            host: None,
            automatic: true,
        }
    }

    /// Only reproduced runs are ranked; a mismatch is listed as failed, the rest await.
    #[test]
    fn ranks_only_reproduced_runs() {
        let mut b = BoardBuilder::new();
        let entries = [
            entry(
                "a",
                ProposalBody {
                    spec_hash: SpecHash(glassbox_schemas::Blake3Hash::from_bytes([0; 32])),
                    author: "ann".into(),
                    title: "A".into(),
                    issue: None,
                    sweep: None,
                },
            ),
            entry("a", result("run-a", 2.0)),
            entry("b", result("run-b", 1.0)),
            entry("c", result("run-c", 3.0)),
            entry("d", result("run-d", 0.5)),
            entry("a", repro("run-a", "reproduced")),
            entry("c", repro("run-c", "reproduced")),
            entry("d", repro("run-d", "differs")),
        ];
        for (i, e) in entries.iter().enumerate() {
            b.add(i as u64, e);
        }
        let boards = b.finish(&[def()], |_| None);
        let board = &boards[0];
        let ranked: Vec<_> = board
            .ranked
            .iter()
            .map(|r| (r.rank, r.run.0.as_str()))
            .collect();
        assert_eq!(ranked, [(Some(1), "run-a"), (Some(2), "run-c")]);
        assert_eq!(board.ranked[0].author, "ann");
        assert_eq!(board.awaiting.len(), 1);
        assert_eq!(board.awaiting[0].run.0, "run-b");
        assert_eq!(board.failed.len(), 1);
        assert_eq!(board.failed[0].run.0, "run-d");
        assert!(board.would_enter_top(1.5, 1));
        assert!(!board.would_enter_top(2.5, 1));
        assert!(board.would_enter_top(2.5, 3));
        assert_eq!(board.log_size, entries.len() as u64);
    }

    /// A board of an evaluation metric ranks each reproduced run by its newest `evaluated`
    /// entry of its last snapshot on the suite's newest version: an earlier snapshot, an older
    /// version and a failed evaluation are not its value, and a run without one is not on it.
    #[test]
    fn ranks_by_an_evaluation_of_the_last_snapshot() {
        use glassbox_schemas::eval::EvalKind;
        use glassbox_schemas::record::SnapshotBody;
        use glassbox_schemas::record::{EvalSuiteBody, EvaluationBody};
        let hash = |b: u8| BlobHash(glassbox_schemas::Blake3Hash::from_bytes([b; 32]));
        let (v1, v2) = (hash(1), hash(2));
        let suite = |version: BlobHash| EvalSuiteBody {
            name: "hs".parse().unwrap(),
            kind: EvalKind::MultipleChoice,
            items: 10,
            suite: version,
            licence: None,
            source: None,
        };
        let eval = |run: &str, step: u64, version: BlobHash, acc: f64, outcome: EvalOutcome| {
            EvaluationBody {
                run: RunId(run.into()),
                step,
                snapshot: hash(9),
                suite: "hs".parse().unwrap(),
                suite_hash: version,
                kind: EvalKind::MultipleChoice,
                outcome,
                detail: None,
                items: 10,
                metrics: if outcome == EvalOutcome::Evaluated {
                    [("acc_norm".to_string(), acc)].into()
                } else {
                    BTreeMap::new()
                },
                contamination: None,
                job: None,
                worker: None,
                host: None,
                threads: 1,
                build: None,
                automatic: true,
                forecast: None,
            }
        };
        let snapshot = |run: &str, step: u64| SnapshotBody {
            run: RunId(run.into()),
            step,
        };
        let ok = EvalOutcome::Evaluated;
        let entries = [
            entry("a", suite(v1)),
            entry("a", result("run-a", 9.0)),
            entry("b", result("run-b", 9.0)),
            entry("c", result("run-c", 9.0)),
            entry("a", snapshot("run-a", 5)),
            entry("a", snapshot("run-a", 10)),
            entry("b", snapshot("run-b", 10)),
            entry("c", snapshot("run-c", 10)),
            entry("a", suite(v2)),
            entry("a", eval("run-a", 5, v2, 0.99, ok)),
            entry("a", eval("run-a", 10, v2, 0.6, ok)),
            entry("a", eval("run-a", 10, v2, 0.7, ok)),
            entry("a", eval("run-a", 10, v2, 0.0, EvalOutcome::Failed)),
            entry("b", eval("run-b", 10, v1, 0.95, ok)),
            entry("c", eval("run-c", 10, v2, 0.65, ok)),
            entry("a", repro("run-a", "reproduced")),
            entry("b", repro("run-b", "reproduced")),
            entry("c", repro("run-c", "reproduced")),
        ];
        let mut b = BoardBuilder::new();
        for (i, e) in entries.iter().enumerate() {
            b.add(i as u64, e);
        }
        let def = BoardDef {
            name: "hs".into(),
            metric: "eval:hs/acc_norm".into(),
            direction: Direction::Max,
            compute: ComputeAxis::Flops,
        };
        let boards = b.finish(&[def], |_| None);
        let ranked: Vec<_> = boards[0]
            .ranked
            .iter()
            .map(|r| (r.run.0.as_str(), r.value, r.value_entry))
            .collect();
        assert_eq!(
            ranked,
            [("run-a", 0.7, Some(11)), ("run-c", 0.65, Some(14))],
            "run-b was evaluated on the older version only"
        );
        assert!(boards[0].awaiting.is_empty() && boards[0].failed.is_empty());
        // A final-metric board of the same log is as before.
        let finals = b.finish(&[def_max_loss()], |_| None);
        assert!(finals[0].ranked.iter().all(|r| r.value_entry.is_none()));
    }

    fn def_max_loss() -> BoardDef {
        BoardDef {
            direction: Direction::Max,
            ..def()
        }
    }

    /// The frontier keeps rows no other row beats on both axes.
    #[test]
    fn pareto_frontier() {
        let mk = |exp: &str, value: f64, compute: f64| BoardRow {
            rank: None,
            standing: Standing::Ranked,
            experiment: ExperimentId(exp.into()),
            title: String::new(),
            author: String::new(),
            value,
            value_entry: None,
            compute: Some(compute),
            run: RunId(exp.into()),
            result_entry: 0,
            reproductions: vec![],
            pareto: false,
        };
        let rows = vec![
            mk("cheap", 3.0, 1.0),
            mk("dominated", 3.5, 2.0),
            mk("mid", 2.0, 4.0),
            mk("best", 1.0, 8.0),
        ];
        let board = arrange(def(), 4, rows);
        let on: Vec<_> = board
            .ranked
            .iter()
            .filter(|r| r.pareto)
            .map(|r| r.experiment.0.as_str())
            .collect();
        assert_eq!(on, ["best", "mid", "cheap"]);
        assert!(
            !board
                .ranked
                .iter()
                .any(|r| r.experiment.0 == "dominated" && r.pareto)
        );
    }
}
