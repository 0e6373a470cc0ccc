//! `glassbox data import` / `data generate`: add a corpus to the lab as a blob with a `dataset`
//! entry, and print the hash a spec names it by (`corpus = "blake3:..."`).

use std::path::PathBuf;
use std::process::ExitCode;

use glassbox_lab::dataset;
use glassbox_schemas::spec::{GeneratorKind, GeneratorSpec};

use crate::GlobalOpts;
use crate::cli::lab_context::{self, LabArgs};
use crate::exit;

/// `glassbox data` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DataCommand {
    /// Store a text file as a corpus (bytes tokenizer) and record a `dataset` entry.
    Import {
        /// Domain name for metric names (`eval/<domain>/loss`).
        #[arg(long)]
        domain: String,
        /// The file.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sample a built-in seeded Markov source (exact entropy known) and record it.
    Generate {
        /// Domain name.
        #[arg(long)]
        domain: String,
        /// Seed of the source's structure and sample stream.
        #[arg(long)]
        seed: u64,
        /// Bytes to generate.
        #[arg(long)]
        bytes: u64,
        /// Context length (1-4).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
        order: u32,
        /// Distinct symbols (2-256).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..=256))]
        alphabet: u32,
        /// Successors per context (1-256, at most the alphabet).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
        branching: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: DataCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let args = LabArgs::defaults();
    lab_context::runtime()?.block_on(async {
        let ctx = lab_context::open(global, &args, true).await?;
        let rec = ctx.recorder.clone();
        let (result, json) = match cmd {
            DataCommand::Import { domain, file, json } => (
                tokio::task::spawn_blocking(move || dataset::import(&rec, &domain, &file)).await?,
                json,
            ),
            DataCommand::Generate {
                domain,
                seed,
                bytes,
                order,
                alphabet,
                branching,
                json,
            } => {
                let g = GeneratorSpec {
                    kind: GeneratorKind::Markov,
                    seed,
                    order,
                    alphabet,
                    branching,
                };
                (
                    tokio::task::spawn_blocking(move || {
                        dataset::generate(&rec, &domain, &g, bytes)
                    })
                    .await?,
                    json,
                )
            }
        };
        let d = match result {
            Ok(d) => d,
            Err(glassbox_lab::LabError::Refused(m)) => {
                eprintln!("error: {m}");
                return Ok(exit::code(exit::CHECK_FAILED));
            }
            Err(e) => return Err(e.into()),
        };
        if json {
            println!("{}", serde_json::to_string_pretty(&d)?);
        } else {
            println!("{}", d.hash);
            println!(
                "  domain {}  bytes {}  tokenizer {}  source {}",
                d.body.domain, d.bytes, d.body.tokenizer, d.body.source
            );
            if let Some(h) = d.body.entropy_bits_per_byte {
                println!("  entropy {h:.6} bits/byte (the loss floor)");
            }
            println!("  recorded as dataset entry {}", d.entry);
            println!(
                "  use it in a spec: [[data.mixture]] domain = \"{}\" corpus = \"{}\"",
                d.body.domain, d.hash
            );
        }
        Ok(exit::code(exit::OK))
    })
}
