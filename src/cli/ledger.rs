//! `glassbox init` and `glassbox ledger ...`: create a lab; put and get blobs; list and show
//! entries; print the checkpoint, the verifier key and proofs; rebuild the index.
//!
//! Glue only: every format and check lives in `glassbox-ledger`. Errors about the thing asked
//! for (a malformed hash, an index past the end, a damaged log) exit 1; errors doing the work
//! (I/O, database, a missing lab) exit 3.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine as _;
use clap::{Args, Subcommand};
use glassbox_lab::artifact::Ingest;
use glassbox_ledger::index::Index;
use glassbox_ledger::merkle::{self, LeafIndex, TreeSize};
use glassbox_ledger::{BlobStore, DirSource, LabDir, LogReader};
use glassbox_schemas::{BlobHash, EntryKind, LedgerEntry};
use serde_json::json;

use crate::GlobalOpts;
use crate::cli::args::lab_blob_store;
use crate::exit;

/// Where the index database lives.
#[derive(Debug, Clone, Args)]
pub struct IndexOpts {
    /// Index database: a PostgreSQL URL or a SQLite file [default: <lab>/index.db].
    #[arg(long, env = "GLASSBOX_INDEX_URL")]
    pub index_url: Option<String>,
}

impl IndexOpts {
    pub fn url(&self, lab: &LabDir) -> String {
        self.index_url
            .clone()
            .unwrap_or_else(|| lab.index_path().display().to_string())
    }
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The log's origin line and key name (unique per log), e.g. `example.org/glassbox`.
    /// Default: `glassbox-lab/<8 random hex digits>`.
    #[arg(long)]
    pub origin: Option<String>,
    #[command(flatten)]
    pub index: IndexOpts,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Store a file as a blob and append an `artifact` entry naming it; prints hash and index.
    Put {
        /// The file.
        file: PathBuf,
        #[arg(long)]
        json: bool,
        /// Move the file into the store instead of copying it: on the store's file system it
        /// is renamed (nothing copied) and its name is gone afterwards, as with `dvc add`.
        #[arg(long = "move")]
        move_file: bool,
        #[command(flatten)]
        index: IndexOpts,
        /// Where the lab's blobs live (a directory, `file:///path` or `s3://bucket/prefix`)
        /// [default: the lab's `lab.toml` `storage.blobs`, else its `blobs/`].
        #[arg(long, env = "GLASSBOX_BLOBS")]
        blobs: Option<String>,
    },
    /// Write a blob to stdout or a file, checking its hash on the way.
    Get {
        /// `blake3:<64 hex>`.
        hash: String,
        /// Output file (written whole or not at all).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Where the lab's blobs live (a directory, `file:///path` or `s3://bucket/prefix`)
        /// [default: the lab's `lab.toml` `storage.blobs`, else its `blobs/`].
        #[arg(long, env = "GLASSBOX_BLOBS")]
        blobs: Option<String>,
    },
    /// List entries (from the index, brought up to date first).
    Log {
        /// Only entries of this kind (e.g. `result`).
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        index: IndexOpts,
    },
    /// Print one entry.
    Show {
        /// Entry index.
        index: u64,
        #[arg(long)]
        json: bool,
    },
    /// Print the latest signed checkpoint.
    Checkpoint,
    /// Print the verifier key (`name+hexkeyid+base64(0x01||pubkey)`).
    Vkey,
    /// Print an inclusion or consistency proof.
    #[command(subcommand)]
    Proof(ProofCommand),
    /// Rebuild the index database from the log.
    Reindex {
        #[command(flatten)]
        index: IndexOpts,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProofCommand {
    /// Inclusion proof of entry INDEX in the tree of SIZE entries (default: the checkpoint's).
    Inclusion {
        index: u64,
        #[arg(long)]
        size: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Consistency proof between tree sizes M and N.
    Consistency {
        m: u64,
        n: u64,
        #[arg(long)]
        json: bool,
    },
    /// Proof that entry FIRST (a forecast) was in a signed, witnessed checkpoint before entry
    /// SECOND (the run's `run_started`) was sequenced: the archived checkpoint, its
    /// cosignatures, and the inclusion and consistency proofs that tie it to the log.
    Precedes {
        first: u64,
        second: u64,
        /// A witness whose cosignature to count (its verifier key or a file holding it)
        /// [default: the witnesses of the lab's `lab.toml`].
        #[arg(long = "witness")]
        witnesses: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

/// Errors that mean "what you asked about is bad" (exit 1) rather than "could not do it".
pub fn is_check_failure(e: &anyhow::Error) -> bool {
    use glassbox_ledger::Error as E;
    e.chain().any(|c| {
        c.downcast_ref::<glassbox_schemas::HashParseError>()
            .is_some()
            || matches!(
                c.downcast_ref::<E>(),
                Some(
                    E::EntryTooLarge { .. }
                        | E::BadEntry(_)
                        | E::OutOfRange { .. }
                        | E::BlobNotFound { .. }
                        | E::Checkpoint(_)
                        | E::Corrupt { .. }
                )
            )
    })
}

/// Runs a command body, mapping check failures to exit 1 and the rest to exit 3.
pub fn finish(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    match result {
        Err(e) if is_check_failure(&e) => {
            eprintln!("error: {e:#}");
            Ok(exit::code(exit::CHECK_FAILED))
        }
        other => other,
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn run_init(args: InitArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let origin = match args.origin {
        Some(o) => o,
        None => default_origin()?,
    };
    let (lab, cp) = LabDir::init(&global.lab, &origin)?;
    let url = args.index.url(&lab);
    runtime()?.block_on(async {
        let idx = Index::connect(&url).await?;
        idx.close().await;
        anyhow::Ok(())
    })?;
    println!("created lab {}", lab.root().display());
    println!("  origin   {}", cp.checkpoint.origin);
    println!("  vkey     {}", lab.verifier_key()?);
    println!(
        "  key      {} (mode 0600; keep it secret)",
        lab.key_path().display()
    );
    println!("  index    {url}");
    Ok(exit::code(exit::OK))
}

/// A fresh lab's log origin when none is given: `glassbox-lab/<8 random hex>`.
pub fn default_origin() -> anyhow::Result<String> {
    Ok(LabDir::random_origin()?)
}

pub fn run(cmd: LedgerCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    finish(run_inner(cmd, global))
}

fn open_reader<'s>(lab: &LabDir, source: &'s DirSource) -> anyhow::Result<LogReader<'s>> {
    Ok(LogReader::open(source, &lab.verifier_key()?)?)
}

fn run_inner(cmd: LedgerCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let lab = LabDir::open(&global.lab)?;
    let source = DirSource {
        root: lab.root().to_path_buf(),
    };
    match cmd {
        LedgerCommand::Put {
            file,
            json,
            move_file,
            index,
            blobs,
        } => {
            let store = lab_blob_store(&lab, blobs.as_deref())?;
            let how = if move_file {
                Ingest::Move
            } else {
                Ingest::Copy
            };
            put(&lab, store, &source, &file, how, json, &index)
        }
        LedgerCommand::Get {
            hash,
            output,
            blobs,
        } => {
            let store = lab_blob_store(&lab, blobs.as_deref())?;
            get(store.as_ref(), &hash, output.as_deref())
        }
        LedgerCommand::Log { kind, json, index } => {
            let kind: Option<EntryKind> = kind
                .map(|k| k.parse::<EntryKind>())
                .transpose()
                .map_err(|e| anyhow::anyhow!("--kind: {e}"))?;
            let reader = open_reader(&lab, &source)?;
            let store = lab_blob_store(&lab, None)?;
            let indexed = runtime()?.block_on(async {
                let idx = Index::connect(&index.url(&lab)).await?;
                // With the blobs: metric chunks share the index's watermark, so an entry
                // indexed without its chunk would never get its curve.
                idx.sync_with_blobs(&reader, Some(store.as_ref())).await?;
                let rows = idx.entries(kind).await?;
                idx.close().await;
                anyhow::Ok(rows)
            });
            // The index is derived data: when it cannot catch up (its database locked, full
            // or unreadable), the log itself still answers.
            let rows = match indexed {
                Ok(rows) => rows,
                Err(e) => {
                    eprintln!(
                        "warning: the index cannot catch up ({}); listing from the log itself",
                        exit::message(&e)
                    );
                    glassbox_ledger::index::entries_from_log(&reader, kind)?
                }
            };
            if json {
                let out: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|r| {
                        json!({"index": r.index, "entry": serde_json::from_str::<serde_json::Value>(&r.entry).unwrap_or(serde_json::Value::Null)})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                for r in rows {
                    println!(
                        "{:>6}  {}  {:<12}  {}{}",
                        r.index,
                        r.time,
                        r.kind,
                        r.experiment.as_deref().unwrap_or("-"),
                        r.run.map(|x| format!("  {x}")).unwrap_or_default()
                    );
                }
            }
            Ok(exit::code(exit::OK))
        }
        LedgerCommand::Show { index, json } => {
            let reader = open_reader(&lab, &source)?;
            let bytes = reader.entry(LeafIndex(index))?;
            let value: serde_json::Value =
                serde_json::from_slice(&bytes).context("entry is not JSON")?;
            let leaf = merkle::leaf_hash(&bytes);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"index": index, "leaf_hash": leaf.to_hex(), "entry": value})
                    )?
                );
            } else {
                println!("entry {index}  (leaf hash {leaf})");
                println!("{}", serde_json::to_string_pretty(&value)?);
            }
            Ok(exit::code(exit::OK))
        }
        LedgerCommand::Checkpoint => {
            let reader = open_reader(&lab, &source)?;
            std::io::stdout().write_all(&reader.checkpoint.to_bytes())?;
            Ok(exit::code(exit::OK))
        }
        LedgerCommand::Vkey => {
            println!("{}", lab.verifier_key()?);
            Ok(exit::code(exit::OK))
        }
        LedgerCommand::Proof(p) => proof(&lab, &source, p),
        LedgerCommand::Reindex { index } => {
            let reader = open_reader(&lab, &source)?;
            let url = index.url(&lab);
            let store = lab_blob_store(&lab, None)?;
            let n = runtime()?.block_on(async {
                let idx = Index::connect(&url).await?;
                let n = idx
                    .reindex_with_blobs(&reader, Some(store.as_ref()))
                    .await?;
                idx.close().await;
                anyhow::Ok(n)
            })?;
            println!("reindexed {n} entries into {url}");
            Ok(exit::code(exit::OK))
        }
    }
}

fn put(
    lab: &LabDir,
    blobs: std::sync::Arc<dyn BlobStore>,
    source: &DirSource,
    file: &Path,
    how: Ingest,
    json: bool,
    index: &IndexOpts,
) -> anyhow::Result<ExitCode> {
    let database_url = std::env::var("GLASSBOX_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty());
    let put =
        glassbox_lab::artifact::put_file(lab, blobs.clone(), database_url.as_deref(), file, how)?;
    let idx = LeafIndex(put.entry);
    let reader = open_reader(lab, source)?;
    let url = index.url(lab);
    runtime()?.block_on(async {
        let i = Index::connect(&url).await?;
        i.sync_with_blobs(&reader, Some(blobs.as_ref())).await?;
        i.close().await;
        anyhow::Ok(())
    })
    .with_context(|| format!("entry {idx} is in the log, but the index was not updated; run `glassbox ledger reindex`"))?;
    if json {
        println!(
            "{}",
            json!({"hash": put.hash.to_string(), "bytes": put.bytes, "existed": put.existed, "entry": idx.0})
        );
    } else {
        println!("{}", put.hash);
        println!("entry {idx}");
    }
    Ok(exit::code(exit::OK))
}

fn get(blobs: &dyn BlobStore, hash: &str, output: Option<&Path>) -> anyhow::Result<ExitCode> {
    let hash: BlobHash = hash.parse()?;
    match output {
        None => {
            glassbox_ledger::blob::copy_verified(blobs, &hash, &mut std::io::stdout().lock())?;
        }
        Some(path) => {
            glassbox_ledger::blob::get_verified_to(blobs, &hash, path)?;
        }
    }
    Ok(exit::code(exit::OK))
}

/// `ledger proof precedes`: the library builds and checks the proof; this prints it.
fn precedes(
    lab: &LabDir,
    source: &DirSource,
    first: u64,
    second: u64,
    witnesses: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    use glassbox_ledger::cosignature::WitnessPolicy;
    let policy = if witnesses.is_empty() {
        glassbox_lab::handle::own_config(lab.root())?
            .and_then(|c| c.ledger.witnessing())
            .map(|w| w.policy())
            .unwrap_or_default()
    } else {
        let keys = witnesses
            .iter()
            .map(|w| {
                let p = Path::new(w);
                let text = if !w.contains('+') && p.is_file() {
                    std::fs::read_to_string(p).with_context(|| format!("cannot read {w}"))?
                } else {
                    w.clone()
                };
                text.trim()
                    .parse()
                    .with_context(|| format!("--witness {w:?}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        WitnessPolicy {
            quorum: keys.len(),
            witnesses: keys,
        }
    };
    let archive = glassbox_ledger::archive::CheckpointArchive::in_log_dir(&lab.log_dir());
    let proof = match glassbox_ledger::precedence::prove_precedes(
        source,
        &lab.verifier_key()?,
        &archive,
        first,
        second,
        &policy,
    )? {
        Ok(p) => p,
        Err(f) => {
            eprintln!("error: {f}");
            return Ok(exit::code(exit::CHECK_FAILED));
        }
    };
    let kind = |bytes: &[u8]| {
        LedgerEntry::from_bytes(bytes)
            .map(|e| e.kind().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let note = String::from_utf8_lossy(&proof.checkpoint.to_bytes()).into_owned();
    let cosigned: Vec<(String, u64)> = proof
        .cosigned
        .as_ref()
        .map(|q| q.cosigned.clone())
        .unwrap_or_default();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "first": { "index": first, "kind": kind(&proof.first_entry) },
                "second": { "index": second, "kind": kind(&proof.second_entry) },
                "checkpoint": note,
                "cosignatures": cosigned.iter().map(|(w, t)| json!({"witness": w, "time": t})).collect::<Vec<_>>(),
                "inclusion": proof.inclusion.iter().map(b64).collect::<Vec<_>>(),
                "current_checkpoint": String::from_utf8_lossy(&proof.current.to_bytes()),
                "consistency": proof.consistency.iter().map(b64).collect::<Vec<_>>(),
                "second_inclusion": proof.second_inclusion.iter().map(b64).collect::<Vec<_>>(),
            }))?
        );
        return Ok(exit::code(exit::OK));
    }
    let s = proof.checkpoint.checkpoint.size.0;
    println!(
        "entry {first} ({}) was published before entry {second} ({}) was sequenced: the checkpoint of size {s} holds {first} and not {second}",
        kind(&proof.first_entry),
        kind(&proof.second_entry)
    );
    print!("{note}");
    for (w, t) in &cosigned {
        let when = time::OffsetDateTime::from_unix_timestamp(*t as i64)
            .ok()
            .and_then(|d| {
                d.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| t.to_string());
        println!("cosigned by {w} at {when}");
    }
    if let Some(q) = &proof.cosigned
        && !q.met()
    {
        println!("witnesses: {q}");
    }
    println!(
        "checked: inclusion of {first} in size {s} ({} hashes), consistency {s} -> {} ({} hashes), inclusion of {second} in size {} ({} hashes)",
        proof.inclusion.len(),
        proof.current.checkpoint.size.0,
        proof.consistency.len(),
        proof.current.checkpoint.size.0,
        proof.second_inclusion.len()
    );
    Ok(exit::code(exit::OK))
}

fn b64(h: &merkle::MerkleHash) -> String {
    base64::engine::general_purpose::STANDARD.encode(h.0)
}

fn proof(lab: &LabDir, source: &DirSource, cmd: ProofCommand) -> anyhow::Result<ExitCode> {
    if let ProofCommand::Precedes {
        first,
        second,
        witnesses,
        json,
    } = cmd
    {
        return precedes(lab, source, first, second, &witnesses, json);
    }
    let reader = open_reader(lab, source)?;
    match cmd {
        ProofCommand::Precedes { .. } => unreachable!("answered above"),
        ProofCommand::Inclusion { index, size, json } => {
            let size = TreeSize(size.unwrap_or(reader.size().0));
            let proof = reader.inclusion_proof(LeafIndex(index), size)?;
            let proof = match proof {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(exit::code(exit::CHECK_FAILED));
                }
            };
            let leaf = merkle::leaf_hash(&reader.entry(LeafIndex(index))?);
            let root = reader.root_at(size)?;
            merkle::verify_inclusion(&leaf, LeafIndex(index), size, &proof, &root)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "index": index, "size": size.0, "leaf_hash": b64(&leaf), "root": b64(&root),
                        "proof": proof.iter().map(b64).collect::<Vec<_>>(),
                    }))?
                );
            } else {
                println!(
                    "index {index}\nsize {}\nleaf {}\nroot {}",
                    size.0,
                    b64(&leaf),
                    b64(&root)
                );
                for h in &proof {
                    println!("{}", b64(h));
                }
            }
        }
        ProofCommand::Consistency { m, n, json } => {
            let (m, n) = (TreeSize(m), TreeSize(n));
            let proof = match reader.consistency_proof(m, n)? {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(exit::code(exit::CHECK_FAILED));
                }
            };
            let (rm, rn) = (reader.root_at(m)?, reader.root_at(n)?);
            merkle::verify_consistency(m, n, &rm, &rn, &proof)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "m": m.0, "n": n.0, "root_m": b64(&rm), "root_n": b64(&rn),
                        "proof": proof.iter().map(b64).collect::<Vec<_>>(),
                    }))?
                );
            } else {
                println!(
                    "m {}\nn {}\nroot_m {}\nroot_n {}",
                    m.0,
                    n.0,
                    b64(&rm),
                    b64(&rn)
                );
                for h in &proof {
                    println!("{}", b64(h));
                }
            }
        }
    }
    Ok(exit::code(exit::OK))
}
