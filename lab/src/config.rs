//! The lab configuration (TOML): budgets, quotas, the order jobs run in, and how workers
//! lease and report. Every key has a default, so an empty file (or none) is a working lab.
//!
//! ```toml
//! [limits]
//! max_flops_per_proposal = 1e15   # refuse approving a spec whose estimated FLOPs exceed this
//! max_wall_seconds = 3600         # every run stops (budget_exceeded) after this long, whatever
//!                                 # its spec's budget; a larger budget.max_wall_seconds is refused
//! max_open_per_author = 3         # approved-and-waiting or running jobs per proposer
//! max_attempts = 3                # leases per job before it fails for good
//! max_memory_bytes = 8e9          # the cost model's memory estimate must fit: refused at approval,
//!                                 # and a worker ends an over-limit run budget_exceeded before it
//!                                 # allocates; default: half this machine's RAM (CPU workers),
//!                                 # the device's memory (GPU workers)
//! max_metric_points = 50000000    # scalar points plus vector components a run may record
//! max_proposals_per_author_per_day = 20  # proposal entries per GitHub author in any 24 hours
//! max_notes_per_author_per_hour = 30     # `/note` annotations per GitHub author in any hour
//! max_flops_per_sweep = 1e16      # the total of a sweep's children one /approve may approve
//!
//! [queue]
//! default_priority = 0            # jobs run by priority (higher first), then age (older first)
//! author_priority = { alice = 10 }  # per-proposer priority (e.g. the lab's own ladder runs)
//! durability = "power_loss"       # a queue commit survives a power cut (fsync per commit), or
//!                                 # "process_crash": only a crash of glassbox processes (faster;
//!                                 # a machine or database crash may lose the last ~second)
//!
//! [worker]
//! lease_seconds = 30              # a worker silent this long loses its job to another
//! heartbeat_seconds = 5           # how often a running worker renews its lease
//! poll_millis = 500               # how often an idle worker asks for a job
//! metrics_flush_steps = 50        # train steps per metric-chunk blob (and at every checkpoint)
//! stall_factor = 10               # a run with no step for this many median step times is
//! stall_min_seconds = 60          # stalled (and for at least this long): one alert per run
//!
//! [storage]
//! blobs = "s3://bucket/prefix"    # where blobs live: a directory, file:///path or s3://bucket/prefix
//!                                 # (endpoint and keys from AWS_* variables); default <lab>/blobs
//!
//! [ledger]
//! witnesses = [{ url = "https://witness.example/", vkey = "witness.example/w1+1a2b3c4d+BA..." }]
//!                                 # C2SP witnesses asked to cosign every checkpoint (tlog-witness)
//! witness_quorum = 1              # cosignatures a checkpoint should carry (default: every witness);
//!                                 # below it the checkpoint is still published, and says so
//! witness_timeout_millis = 3000   # the most one witness may delay an append
//!
//! [reproduce]
//! policy = "top"                  # after a run succeeds, queue its independent reproduction:
//!                                 # "top" (when it would enter a leaderboard's top N), "all", "off"
//! top = 3                         # the N of "top"
//! on_other_worker = true          # the reproduction never runs on the worker that made the run
//!                                 # (nor on its host, while a worker of another host serves)
//!
//! [[leaderboard]]                 # boards rank reproduced results only (`/boards/<name>`)
//! name = "markov-loss"
//! metric = "eval/markov/loss"
//! direction = "min"               # or "max"
//! compute = "flops"               # the compute axis: training "flops" or "tokens"
//! ```
//!
//! Loading reports every problem at once, each naming its key. This module reads the file; the
//! flow and the workers apply it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::error::LabError;

/// Budget and quota limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest estimated training FLOPs (train + eval) a proposal may ask for.
    pub max_flops_per_proposal: f64,
    /// Largest `budget.max_wall_seconds` a proposal may ask for.
    pub max_wall_seconds: u64,
    /// Open (queued, held, leased, running) jobs per proposer.
    pub max_open_per_author: u64,
    /// Leases per job before it fails for good.
    pub max_attempts: u32,
    /// Largest memory estimate (the cost model's `memory_bytes`) a run may have; `None`: half
    /// this machine's RAM, or the device's memory on a GPU worker ([`crate::limits`]).
    pub max_memory_bytes: Option<f64>,
    /// Largest metric volume (`cost::metric_volume(..).total()`) a run may record.
    pub max_metric_points: u64,
    /// Proposal entries one author may cause in any 24 hours (GitHub proposals; an edit that
    /// does not change the spec hash writes no entry and does not count).
    pub max_proposals_per_author_per_day: u32,
    /// `/note` annotations one author may write in any hour.
    pub max_notes_per_author_per_hour: u32,
    /// Total estimated FLOPs of all a sweep's children that one `/approve` may approve.
    pub max_flops_per_sweep: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_flops_per_proposal: 1e15,
            max_wall_seconds: 3600,
            max_open_per_author: 3,
            max_attempts: 3,
            max_memory_bytes: None,
            max_metric_points: 50_000_000,
            max_proposals_per_author_per_day: 20,
            max_notes_per_author_per_hour: 30,
            max_flops_per_sweep: 1e16,
        }
    }
}

/// The order jobs run in.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QueueOrder {
    /// Priority of a job whose author has no entry in `author_priority`.
    pub default_priority: i64,
    /// Priority by proposer login.
    pub author_priority: BTreeMap<String, i64>,
    /// What a committed queue change survives.
    pub durability: crate::db::Durability,
}

impl QueueOrder {
    /// The priority a job by `author` gets.
    pub fn priority_of(&self, author: &str) -> i64 {
        self.author_priority
            .get(author)
            .copied()
            .unwrap_or(self.default_priority)
    }
}

/// How workers lease and report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Lease length.
    pub lease_seconds: f64,
    /// Heartbeat period (less than the lease).
    pub heartbeat_seconds: f64,
    /// Idle poll period.
    pub poll_millis: u64,
    /// Train steps per metric chunk.
    pub metrics_flush_steps: u64,
    /// A run with no step for this many median step times is stalled.
    pub stall_factor: f64,
    /// ... and for at least this many seconds.
    pub stall_min_seconds: f64,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            lease_seconds: 30.0,
            heartbeat_seconds: 5.0,
            poll_millis: 500,
            metrics_flush_steps: 50,
            stall_factor: 10.0,
            stall_min_seconds: 60.0,
        }
    }
}

impl WorkerSettings {
    /// The lease as a duration.
    pub fn lease(&self) -> Duration {
        Duration::from_secs_f64(self.lease_seconds)
    }
    /// The heartbeat period.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs_f64(self.heartbeat_seconds)
    }
    /// The idle poll period.
    pub fn poll(&self) -> Duration {
        Duration::from_millis(self.poll_millis)
    }
}

/// Sections of a lab config file that belong to `glassbox serve` (`[web]`, `[github]`).
pub const SERVER_SECTIONS: &[&str] = &["web", "github"];

/// Where the lab keeps its blobs.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// A blob store location (`glassbox_ledger::open_store`): a directory, `file:///path` or
    /// `s3://bucket/prefix`; `None` is the lab directory's `blobs/`. Every process of a lab
    /// (server, workers, `glassbox run`) must name the same store.
    pub blobs: Option<String>,
}

/// One witness of the lab's log: where its `add-checkpoint` is, and its cosigning key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessSetting {
    /// The witness's submission prefix (`https://witness.example/`).
    pub url: String,
    /// Its verifier key, `name+hexid+base64(0x04||key)`.
    pub vkey: String,
}

/// `[ledger]`: who cosigns the lab's checkpoints.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSettings {
    /// The witnesses asked after each checkpoint.
    pub witnesses: Vec<WitnessSetting>,
    /// Cosignatures a checkpoint should carry; default: all the witnesses.
    pub witness_quorum: Option<usize>,
    /// The most one witness's exchange may take, in milliseconds.
    pub witness_timeout_millis: u64,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self {
            witnesses: Vec::new(),
            witness_quorum: None,
            witness_timeout_millis: 3000,
        }
    }
}

impl LedgerSettings {
    /// The log writer's witnesses, or `None` when none are configured. The keys were checked
    /// when the file was loaded.
    pub fn witnessing(&self) -> Option<std::sync::Arc<glassbox_ledger::cosigning::Witnessing>> {
        use glassbox_ledger::cosigning::{WitnessEndpoint, Witnessing};
        if self.witnesses.is_empty() {
            return None;
        }
        let endpoints: Vec<WitnessEndpoint> = self
            .witnesses
            .iter()
            .filter_map(|w| {
                Some(WitnessEndpoint {
                    url: w.url.clone(),
                    key: w.vkey.parse().ok()?,
                })
            })
            .collect();
        let quorum = self.witness_quorum.unwrap_or(endpoints.len());
        Some(std::sync::Arc::new(Witnessing::new(
            endpoints,
            quorum,
            Duration::from_millis(self.witness_timeout_millis),
        )))
    }

    fn check(&self, bad: &mut impl FnMut(&str, String, &str)) {
        for (i, w) in self.witnesses.iter().enumerate() {
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                bad(
                    &format!("ledger.witnesses[{i}].url"),
                    format!("{:?}", w.url),
                    "must be an http:// or https:// URL (the witness's submission prefix)",
                );
            }
            if let Err(e) = w.vkey.parse::<glassbox_ledger::cosignature::CosignerKey>() {
                bad(
                    &format!("ledger.witnesses[{i}].vkey"),
                    format!("{:?}", w.vkey.chars().take(100).collect::<String>()),
                    &e.to_string(),
                );
            }
        }
        if let Some(q) = self.witness_quorum
            && (q == 0 || q > self.witnesses.len())
        {
            bad(
                "ledger.witness_quorum",
                q.to_string(),
                &format!(
                    "must be between 1 and the number of witnesses ({})",
                    self.witnesses.len()
                ),
            );
        }
        if self.witness_timeout_millis == 0 || self.witness_timeout_millis > 60_000 {
            bad(
                "ledger.witness_timeout_millis",
                self.witness_timeout_millis.to_string(),
                "must be between 1 and 60000",
            );
        }
    }
}

/// Which successful runs the lab reproduces by itself (`[reproduce]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReproducePolicy {
    /// None (the default): reproductions are asked for with `/reproduce`.
    #[default]
    Off,
    /// A run that would enter a leaderboard's top `top`.
    Top,
    /// Every successful run.
    All,
}

/// `[reproduce]`: automatic independent reproduction.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReproduceSettings {
    /// Which runs.
    pub policy: ReproducePolicy,
    /// The N of `top`.
    pub top: usize,
    /// Never on the worker (nor, while another host serves the queue, the host) that made it.
    pub on_other_worker: bool,
}

impl Default for ReproduceSettings {
    fn default() -> Self {
        ReproduceSettings {
            policy: ReproducePolicy::Off,
            top: 3,
            on_other_worker: true,
        }
    }
}

/// `[export]`: what the lab says about the models it exports (`glassbox export`).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportSettings {
    /// The licence of the weights the lab publishes (an SPDX id or a sentence), written into
    /// every exported model card. Left out: the card says none is declared.
    pub licence: Option<String>,
}

/// `[evals]`: the suites every snapshot of every run is evaluated on, each as an eval job of its
/// own at `priority` (below every training job's, so training never waits on them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSettings {
    /// Suite names (their newest version when a snapshot is saved).
    pub suites: Vec<glassbox_schemas::eval::SuiteName>,
    /// Queue priority of eval jobs (training jobs' are `[queue]`'s).
    pub priority: i64,
}

impl Default for EvalSettings {
    fn default() -> Self {
        Self {
            suites: Vec::new(),
            priority: -1000,
        }
    }
}

/// The whole lab configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabConfig {
    /// `[limits]`.
    pub limits: Limits,
    /// `[queue]`.
    pub queue: QueueOrder,
    /// `[worker]`.
    pub worker: WorkerSettings,
    /// `[storage]`.
    pub storage: Storage,
    /// `[ledger]`.
    pub ledger: LedgerSettings,
    /// `[reproduce]`.
    pub reproduce: ReproduceSettings,
    /// `[export]`.
    pub export: ExportSettings,
    /// `[evals]`.
    pub evals: EvalSettings,
    /// `[[leaderboard]]`: the boards, in the file's order.
    pub leaderboards: Vec<glassbox_ledger::board::BoardDef>,
}

impl LabConfig {
    /// Reads a config file; every problem is reported, each with its key. The server's own
    /// sections ([`SERVER_SECTIONS`]) may be present and are skipped, so one file configures a
    /// server and its workers.
    pub fn load(path: &Path) -> Result<Self, LabError> {
        let text = std::fs::read_to_string(path).map_err(LabError::io("cannot read", path))?;
        Self::parse_sections(&text, SERVER_SECTIONS)
            .map(|(cfg, _)| cfg)
            .map_err(|problems| LabError::Config {
                path: path.to_path_buf(),
                problems,
            })
    }

    /// Parses config text; `Err` lists every problem.
    pub fn parse(text: &str) -> Result<Self, Vec<String>> {
        Self::parse_sections(text, &[]).map(|(cfg, _)| cfg)
    }

    /// Parses config text in which the sections named in `others` belong to someone else
    /// (the server's `[web]`, the bot's `[github]`): those come back untouched for their owner
    /// to read; any other unknown section is a problem. `Err` lists every problem.
    pub fn parse_sections(text: &str, others: &[&str]) -> Result<(Self, toml::Table), Vec<String>> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| vec![e.to_string()])?;
        let mut problems = Vec::new();
        let mut cfg = LabConfig::default();
        let mut rest = toml::Table::new();
        for (key, value) in &table {
            match key.as_str() {
                "limits" => section(key, value, &mut cfg.limits, &mut problems),
                "queue" => section(key, value, &mut cfg.queue, &mut problems),
                "worker" => section(key, value, &mut cfg.worker, &mut problems),
                "storage" => section(key, value, &mut cfg.storage, &mut problems),
                "ledger" => section(key, value, &mut cfg.ledger, &mut problems),
                "reproduce" => section(key, value, &mut cfg.reproduce, &mut problems),
                "export" => section(key, value, &mut cfg.export, &mut problems),
                "evals" => section(key, value, &mut cfg.evals, &mut problems),
                "leaderboard" => boards(value, &mut cfg.leaderboards, &mut problems),
                other if others.contains(&other) => {
                    rest.insert(key.clone(), value.clone());
                }
                other => {
                    let mut known = vec![
                        "limits",
                        "queue",
                        "worker",
                        "storage",
                        "ledger",
                        "reproduce",
                        "export",
                        "evals",
                        "leaderboard",
                    ];
                    known.extend_from_slice(others);
                    problems.push(format!(
                        "{other}: unknown section (known sections: {})",
                        known.join(", ")
                    ))
                }
            }
        }
        cfg.check(&mut problems);
        if problems.is_empty() {
            Ok((cfg, rest))
        } else {
            Err(problems)
        }
    }

    fn check(&self, problems: &mut Vec<String>) {
        let mut bad = |key: &str, value: String, rule: &str| {
            problems.push(format!("{key} = {value}: {rule}"));
        };
        if let Some(l) = &self.export.licence
            && (l.trim().is_empty() || l.len() > 200 || l.contains(['\n', '\r']))
        {
            bad(
                "export.licence",
                format!("{l:?}"),
                "one line of at most 200 characters (an SPDX id such as \"apache-2.0\", or a sentence)",
            );
        }
        let q = &self.queue;
        let lowest_training = q
            .author_priority
            .values()
            .copied()
            .chain([q.default_priority])
            .min()
            .unwrap_or(0);
        if self.evals.priority >= lowest_training {
            bad(
                "evals.priority",
                self.evals.priority.to_string(),
                &format!(
                    "must be below every training job's priority (the lowest is {lowest_training}), so training never waits on an evaluation"
                ),
            );
        }
        if self.evals.suites.len() > 16 {
            bad(
                "evals.suites",
                format!("{} suites", self.evals.suites.len()),
                "at most 16 suites",
            );
        }
        let l = &self.limits;
        if !(l.max_flops_per_proposal.is_finite() && l.max_flops_per_proposal > 0.0) {
            bad(
                "limits.max_flops_per_proposal",
                l.max_flops_per_proposal.to_string(),
                "must be a positive number",
            );
        }
        if !(l.max_flops_per_sweep.is_finite() && l.max_flops_per_sweep > 0.0) {
            bad(
                "limits.max_flops_per_sweep",
                l.max_flops_per_sweep.to_string(),
                "must be a positive number",
            );
        }
        if l.max_attempts == 0 {
            bad("limits.max_attempts", "0".into(), "must be at least 1");
        }
        if l.max_wall_seconds == 0 {
            bad("limits.max_wall_seconds", "0".into(), "must be at least 1");
        }
        if let Some(m) = l.max_memory_bytes
            && !(m.is_finite() && m >= 1.0)
        {
            bad(
                "limits.max_memory_bytes",
                m.to_string(),
                "must be a positive number of bytes",
            );
        }
        if l.max_metric_points == 0 {
            bad("limits.max_metric_points", "0".into(), "must be at least 1");
        }
        if l.max_proposals_per_author_per_day == 0 {
            bad(
                "limits.max_proposals_per_author_per_day",
                "0".into(),
                "must be at least 1",
            );
        }
        let w = &self.worker;
        if !(w.lease_seconds.is_finite() && w.lease_seconds >= 1.0) {
            bad(
                "worker.lease_seconds",
                w.lease_seconds.to_string(),
                "must be at least 1",
            );
        }
        if !(w.heartbeat_seconds.is_finite()
            && w.heartbeat_seconds > 0.0
            && w.heartbeat_seconds < w.lease_seconds)
        {
            bad(
                "worker.heartbeat_seconds",
                w.heartbeat_seconds.to_string(),
                "must be positive and less than worker.lease_seconds",
            );
        }
        if let Some(loc) = &self.storage.blobs {
            let scheme_ok =
                !loc.contains("://") || loc.starts_with("s3://") || loc.starts_with("file://");
            if loc.trim().is_empty() || !scheme_ok || loc == "s3://" {
                bad(
                    "storage.blobs",
                    format!("{loc:?}"),
                    "must be a directory, file:///path or s3://bucket/prefix",
                );
            }
        }
        if !(w.stall_factor.is_finite() && w.stall_factor >= 1.0) {
            bad(
                "worker.stall_factor",
                w.stall_factor.to_string(),
                "must be at least 1",
            );
        }
        if !(w.stall_min_seconds.is_finite() && w.stall_min_seconds >= 0.0) {
            bad(
                "worker.stall_min_seconds",
                w.stall_min_seconds.to_string(),
                "must be a number of seconds, 0 or more",
            );
        }
        if l.max_notes_per_author_per_hour == 0 {
            bad(
                "limits.max_notes_per_author_per_hour",
                "0".into(),
                "must be at least 1",
            );
        }
        if w.metrics_flush_steps == 0 {
            bad(
                "worker.metrics_flush_steps",
                "0".into(),
                "must be at least 1",
            );
        }
        if self.reproduce.top == 0 {
            bad("reproduce.top", "0".into(), "must be at least 1");
        }
        let mut names = std::collections::BTreeSet::new();
        for b in &self.leaderboards {
            if let Some(p) = b.problem() {
                problems.push(p);
            } else if !names.insert(b.name.clone()) {
                problems.push(format!(
                    "leaderboard.name {:?}: two boards have this name; each needs its own",
                    b.name
                ));
            }
        }
        if self.reproduce.policy == ReproducePolicy::Top && self.leaderboards.is_empty() {
            problems.push(
                "reproduce.policy = \"top\": needs at least one [[leaderboard]] to rank against (or policy = \"all\")".into(),
            );
        }
        let mut bad = |key: &str, value: String, rule: &str| {
            problems.push(format!("{key} = {value}: {rule}"));
        };
        self.ledger.check(&mut bad);
    }
}

/// Reads `[[leaderboard]]` tables, each problem naming the board and key.
fn boards(
    value: &toml::Value,
    into: &mut Vec<glassbox_ledger::board::BoardDef>,
    problems: &mut Vec<String>,
) {
    let Some(list) = value.as_array() else {
        problems.push(
            "leaderboard: must be an array of tables ([[leaderboard]] name = ..., metric = ...)"
                .into(),
        );
        return;
    };
    for (i, v) in list.iter().enumerate() {
        match glassbox_ledger::board::BoardDef::deserialize(v.clone()) {
            Ok(b) => into.push(b),
            Err(e) => problems.push(format!("leaderboard[{i}]: {}", e.message())),
        }
    }
}

/// Deserialises one section, key by key, so that every bad key is reported.
fn section<T>(name: &str, value: &toml::Value, into: &mut T, problems: &mut Vec<String>)
where
    T: for<'de> Deserialize<'de> + Default,
{
    let Some(table) = value.as_table() else {
        problems.push(format!("{name}: must be a table ([{name}])"));
        return;
    };
    // One key at a time: each bad key gets its own line.
    let mut good = toml::Table::new();
    for (k, v) in table {
        let mut one = toml::Table::new();
        one.insert(k.clone(), v.clone());
        match T::deserialize(toml::Value::Table(one)) {
            Ok(_) => {
                good.insert(k.clone(), v.clone());
            }
            Err(e) => problems.push(format!("{name}.{k}: {}", e.message())),
        }
    }
    match T::deserialize(toml::Value::Table(good)) {
        Ok(v) => *into = v,
        Err(e) => problems.push(format!("{name}: {}", e.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_the_defaults() {
        assert_eq!(LabConfig::parse("").unwrap(), LabConfig::default());
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let text = "[limits]\nmax_attempts = 0\nmax_open_per_autor = 2\n\n[worker]\nlease_seconds = \"long\"\n\n[scheduler]\nx = 1\n";
        let problems = LabConfig::parse(text).unwrap_err();
        let all = problems.join("\n");
        assert!(
            all.contains("limits.max_open_per_autor: unknown field"),
            "{all}"
        );
        assert!(all.contains("worker.lease_seconds: invalid type"), "{all}");
        assert!(all.contains("scheduler: unknown section"), "{all}");
        assert!(all.contains("limits.max_attempts = 0"), "{all}");
        assert_eq!(problems.len(), 4, "{all}");
    }

    #[test]
    fn storage_names_a_blob_store() {
        let cfg = LabConfig::parse("[storage]\nblobs = \"s3://lab/team\"\n").unwrap();
        assert_eq!(cfg.storage.blobs.as_deref(), Some("s3://lab/team"));
        let problems = LabConfig::parse("[storage]\nblobs = \"gs://lab\"\n").unwrap_err();
        assert_eq!(
            problems,
            vec![
                "storage.blobs = \"gs://lab\": must be a directory, file:///path or s3://bucket/prefix"
            ]
        );
    }

    #[test]
    fn ledger_names_witnesses_by_url_and_key() {
        let w = glassbox_ledger::cosignature::CosigningKey::generate("witness.example/w1").unwrap();
        let vkey = w.verifier_key().to_string();
        let text = format!(
            "[ledger]\nwitnesses = [{{ url = \"http://127.0.0.1:9/\", vkey = \"{vkey}\" }}]\nwitness_quorum = 1\n"
        );
        let cfg = LabConfig::parse(&text).unwrap();
        assert_eq!(cfg.ledger.witnesses[0].vkey, vkey);
        let witnessing = cfg.ledger.witnessing().unwrap();
        assert_eq!(witnessing.policy().quorum, 1);
        assert_eq!(witnessing.policy().witnesses, vec![w.verifier_key()]);
        assert!(LabConfig::default().ledger.witnessing().is_none());

        let lab_key = glassbox_ledger::SigningKey::generate("lab").unwrap();
        let text = format!(
            "[ledger]\nwitnesses = [{{ url = \"ftp://w\", vkey = \"{}\" }}]\nwitness_quorum = 2\n",
            lab_key.verifier_key()
        );
        let all = LabConfig::parse(&text).unwrap_err().join("\n");
        assert!(
            all.contains("ledger.witnesses[0].url = \"ftp://w\""),
            "{all}"
        );
        assert!(
            all.contains("ledger.witnesses[0].vkey") && all.contains("type 0x04"),
            "{all}"
        );
        assert!(
            all.contains(
                "ledger.witness_quorum = 2: must be between 1 and the number of witnesses (1)"
            ),
            "{all}"
        );
    }

    #[test]
    fn queue_durability_is_power_loss_unless_relaxed() {
        use crate::queue::Durability;
        assert_eq!(LabConfig::default().queue.durability, Durability::PowerLoss);
        let cfg = LabConfig::parse("[queue]\ndurability = \"process_crash\"\n").unwrap();
        assert_eq!(cfg.queue.durability, Durability::ProcessCrash);
        let problems = LabConfig::parse("[queue]\ndurability = \"fast\"\n").unwrap_err();
        assert!(
            problems[0].starts_with("queue.durability: unknown variant `fast`"),
            "{problems:?}"
        );
    }

    #[test]
    fn trust_limits_parse_and_are_checked() {
        let cfg = LabConfig::parse(
            "[limits]\nmax_memory_bytes = 8e9\nmax_metric_points = 1000\nmax_proposals_per_author_per_day = 2\n",
        )
        .unwrap();
        assert_eq!(cfg.limits.max_memory_bytes, Some(8e9));
        assert_eq!(cfg.limits.max_metric_points, 1000);
        assert_eq!(cfg.limits.max_proposals_per_author_per_day, 2);
        let problems = LabConfig::parse(
            "[limits]\nmax_memory_bytes = -1\nmax_wall_seconds = 0\nmax_proposals_per_author_per_day = 0\n",
        )
        .unwrap_err();
        assert_eq!(
            problems,
            vec![
                "limits.max_wall_seconds = 0: must be at least 1",
                "limits.max_memory_bytes = -1: must be a positive number of bytes",
                "limits.max_proposals_per_author_per_day = 0: must be at least 1",
            ]
        );
    }

    #[test]
    fn author_priority_orders_jobs() {
        let cfg = LabConfig::parse("[queue]\nauthor_priority = { lab = 10 }\n").unwrap();
        assert_eq!(cfg.queue.priority_of("lab"), 10);
        assert_eq!(cfg.queue.priority_of("someone"), 0);
    }
}
