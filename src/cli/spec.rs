//! `glassbox spec check FILE` and `glassbox spec schema`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use glassbox_schemas::{CostEstimate, ExperimentSpec, SpecError, SpecHash};
use serde_json::json;

use crate::GlobalOpts;
use crate::exit;

#[derive(Debug, Subcommand)]
pub enum SpecCommand {
    /// Validate a spec, ladder or sweep file (TOML). Prints the hash and cost (exit 0) or every error
    /// (exit 1).
    Check {
        /// The spec file, e.g. examples/tiny.toml.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of the experiment spec.
    Schema,
}

pub fn run(cmd: SpecCommand, _global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    match cmd {
        SpecCommand::Check { file, json } => check(&file, json),
        SpecCommand::Schema => {
            print!(
                "{}",
                glassbox_schemas::schema::experiment_spec_schema_pretty()
            );
            Ok(exit::code(exit::OK))
        }
    }
}

fn check(file: &PathBuf, as_json: bool) -> anyhow::Result<ExitCode> {
    let meta =
        std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?;
    if meta.len() > glassbox_schemas::validate::MAX_SPEC_BYTES as u64 {
        let err = SpecError::TooLarge {
            bytes: meta.len() as usize,
            limit: glassbox_schemas::validate::MAX_SPEC_BYTES,
        };
        return Ok(report_error(file, &err, as_json));
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    if glassbox_schemas::ladder::is_ladder(&text) {
        return check_ladder(file, &text, as_json);
    }
    if glassbox_schemas::sweep::is_sweep(&text) {
        return check_sweep(file, &text, as_json);
    }
    match glassbox_schemas::parse_toml(&text) {
        Ok(spec) => {
            let hash = glassbox_schemas::spec_hash(&spec)
                .context("the validated spec has no canonical form")?;
            let cost = glassbox_schemas::estimate(&spec);
            if as_json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&ok_json(&spec, hash, &cost))?
                );
            } else {
                print_ok(file, &spec, hash, &cost);
            }
            Ok(exit::code(exit::OK))
        }
        Err(err) => Ok(report_error(file, &err, as_json)),
    }
}

fn check_ladder(file: &std::path::Path, text: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let ladder = match glassbox_schemas::ladder::parse_ladder_toml(text) {
        Ok(l) => l,
        Err(err) => return Ok(report_error(file, &err, as_json)),
    };
    let mut rungs = Vec::new();
    for spec in &ladder.rungs {
        let hash = glassbox_schemas::spec_hash(spec)
            .context("the validated spec has no canonical form")?;
        rungs.push((spec, hash, glassbox_schemas::estimate(spec)));
    }
    let total: f64 = rungs.iter().map(|(_, _, c)| c.total_flops).sum();
    if as_json {
        let out = json!({
            "valid": true,
            "ladder": true,
            "metric": ladder.config.metric,
            "tolerance": ladder.config.tolerance,
            "total_flops": total,
            "rungs": rungs.iter().map(|(s, h, c)| ok_json(s, *h, c)).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{}: valid ladder, {} rungs (the last is the target), forecast metric {} +- {}",
            file.display(),
            rungs.len(),
            ladder.config.metric,
            ladder.config.tolerance
        );
        for (spec, hash, cost) in &rungs {
            println!(
                "  {:<24} {}  {:>9} params  {} FLOPs",
                spec.experiment.slug,
                hash,
                human(cost.params_total as f64),
                sci(cost.total_flops)
            );
        }
        println!("  total compute {}", sci(total));
    }
    Ok(exit::code(exit::OK))
}

fn check_sweep(file: &std::path::Path, text: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let sweep = match glassbox_schemas::sweep::parse_sweep_toml(text) {
        Ok(s) => s,
        Err(err) => return Ok(report_error(file, &err, as_json)),
    };
    let mut children = Vec::new();
    for c in &sweep.children {
        let hash = glassbox_schemas::spec_hash(&c.spec)
            .context("the validated spec has no canonical form")?;
        children.push((c, hash, glassbox_schemas::estimate(&c.spec)));
    }
    let total: f64 = children.iter().map(|(_, _, c)| c.total_flops).sum();
    let mode = match sweep.mode {
        glassbox_schemas::sweep::SweepMode::Grid => "grid",
        glassbox_schemas::sweep::SweepMode::List => "list",
    };
    if as_json {
        let out = json!({
            "valid": true,
            "sweep": true,
            "mode": mode,
            "metric": sweep.metric,
            "parent_hash": sweep.parent_hash.to_string(),
            "total_flops": total,
            "children": children.iter().map(|(c, h, cost)| {
                let mut j = ok_json(&c.spec, *h, cost);
                j["values"] = c.values.iter().map(|(p, v)| (p.clone(), v.clone())).collect::<serde_json::Map<_, _>>().into();
                j
            }).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{}: valid sweep ({mode}), {} children{}",
            file.display(),
            children.len(),
            sweep
                .metric
                .as_deref()
                .map(|m| format!(", best by {m}"))
                .unwrap_or_default()
        );
        println!(
            "  parent hash {} (one /approve binds it)",
            sweep.parent_hash
        );
        for (c, hash, cost) in &children {
            println!(
                "  {:<28} {}  {:>9} params  {} FLOPs  {}",
                c.spec.experiment.slug,
                hash,
                human(cost.params_total as f64),
                sci(cost.total_flops),
                glassbox_schemas::sweep::describe(&c.values)
            );
        }
        println!("  total compute {}", sci(total));
    }
    Ok(exit::code(exit::OK))
}

fn ok_json(spec: &ExperimentSpec, hash: SpecHash, cost: &CostEstimate) -> serde_json::Value {
    json!({
        "valid": true,
        "slug": spec.experiment.slug,
        "spec_hash": hash.to_string(),
        "params_total": cost.params_total,
        "params_active": cost.params_active,
        "params_active_nonembedding": cost.params_active_nonembedding,
        "flops_per_token": cost.flops_per_token,
        "train_tokens": cost.train_tokens,
        "train_flops": cost.train_flops,
        "eval_flops": cost.eval_flops,
        "total_flops": cost.total_flops,
        "memory_bytes": cost.memory_bytes,
    })
}

fn print_ok(file: &std::path::Path, spec: &ExperimentSpec, hash: SpecHash, cost: &CostEstimate) {
    println!("{}: valid ({})", file.display(), spec.experiment.slug);
    println!("  spec hash       {hash}");
    println!(
        "  parameters      {} total, {} active ({} experts of {} per token, {} shared)",
        human(cost.params_total as f64),
        human(cost.params_active as f64),
        spec.model.moe.top_k,
        spec.model.moe.n_experts,
        spec.model.moe.n_shared
    );
    println!(
        "  compute         {} FLOPs/token x {} tokens = {} FLOPs (incl. eval {})",
        human(cost.flops_per_token),
        human(cost.train_tokens as f64),
        sci(cost.total_flops),
        sci(cost.eval_flops)
    );
    println!(
        "  memory          ~{:.1} GiB for training (estimate)",
        cost.memory_bytes as f64 / (1u64 << 30) as f64
    );
    if let Some(max) = spec.budget.max_flops {
        if cost.total_flops > max {
            println!(
                "  note            budget.max_flops = {} is below the estimated {}: the run will stop as budget_exceeded",
                sci(max),
                sci(cost.total_flops)
            );
        }
    }
}

fn report_error(file: &std::path::Path, err: &SpecError, as_json: bool) -> ExitCode {
    if as_json {
        let errors: Vec<serde_json::Value> = match err {
            SpecError::Invalid(list) => list
                .iter()
                .map(|e| json!({"path": e.path, "value": e.value, "rule": e.rule, "message": e.to_string()}))
                .collect(),
            SpecError::Syntax { line, column, message } => vec![json!({
                "path": null, "line": line, "column": column, "rule": message,
                "message": err.to_string(),
            })],
            SpecError::TooLarge { .. } => vec![json!({"path": null, "rule": err.to_string(), "message": err.to_string()})],
        };
        let out = json!({"valid": false, "errors": errors});
        println!(
            "{}",
            serde_json::to_string_pretty(&out).unwrap_or_else(|_| out.to_string())
        );
    } else {
        match err {
            SpecError::Syntax {
                line,
                column,
                message,
            } => {
                eprintln!(
                    "{}:{line}:{column}: TOML syntax error: {message}",
                    file.display()
                )
            }
            SpecError::Invalid(list) => {
                eprintln!("{}: {} error(s):", file.display(), list.len());
                for e in list {
                    eprintln!("  {e}");
                }
            }
            SpecError::TooLarge { .. } => eprintln!("{}: {err}", file.display()),
        }
    }
    exit::code(exit::CHECK_FAILED)
}

/// 1234567 -> "1.23M".
fn human(x: f64) -> String {
    let (v, s) = if x >= 1e12 {
        (x / 1e12, "T")
    } else if x >= 1e9 {
        (x / 1e9, "B")
    } else if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "K")
    } else {
        (x, "")
    };
    format!("{v:.2}{s}")
}

fn sci(x: f64) -> String {
    format!("{x:.3e}")
}
