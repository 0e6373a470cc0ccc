//! The log's side of C2SP tlog-witness: after each checkpoint, ask the configured witnesses to
//! cosign it, within a bounded time, and keep the cosignatures that verify.
//!
//! [`Witnessing::collect`] sends every witness an `add-checkpoint` request at once (one thread
//! each), with a consistency proof from the size that witness is believed to hold. That belief
//! starts from the previous checkpoint's cosignatures (a witness whose cosignature is on it
//! holds that size) and is corrected by a witness's 409, which names its size: the request is
//! then sent once more with a proof from there. Each request has one deadline for the whole
//! exchange ([`Witnessing::timeout`]), so a witness that is down or hangs costs at most that
//! long, and never fails the append: the checkpoint is published with the cosignatures that
//! came back, and [`CosignOutcome`] says which witnesses did not answer and whether the quorum
//! was met. Not here: the checkpoint's storage (the log writer calls this), and the witness
//! itself ([`crate::witness`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use crate::checkpoint::{NoteSignature, SignedCheckpoint};
use crate::cosignature::{CosignerKey, WitnessPolicy};
use crate::error::Error;
use crate::merkle::MerkleHash;
use crate::witness::AddCheckpoint;

/// The most bytes read of a witness's answer (a few signature lines).
const MAX_RESPONSE_BYTES: u64 = 16 * 1024;

/// One witness: where to send `add-checkpoint`, and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessEndpoint {
    /// The submission prefix (`https://witness.example/`); `add-checkpoint` is appended.
    pub url: String,
    /// Its cosigning key.
    pub key: CosignerKey,
}

/// What asking the witnesses for one checkpoint gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CosignOutcome {
    /// The cosignature lines that verified, one per witness.
    pub cosignatures: Vec<NoteSignature>,
    /// Witnesses that gave none, and why (by URL).
    pub failures: Vec<(String, String)>,
    /// The quorum configured.
    pub quorum: usize,
}

impl CosignOutcome {
    /// Whether enough witnesses cosigned.
    pub fn met(&self) -> bool {
        self.cosignatures.len() >= self.quorum
    }
}

impl fmt::Display for CosignOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cosignature(s), quorum {}",
            self.cosignatures.len(),
            self.quorum
        )?;
        for (url, why) in &self.failures {
            write!(f, "; {url}: {why}")?;
        }
        Ok(())
    }
}

/// The witnesses a log asks, and what it believes each holds.
pub struct Witnessing {
    witnesses: Vec<WitnessEndpoint>,
    quorum: usize,
    timeout: Duration,
    agent: ureq::Agent,
    /// Witness index -> the size it is believed to hold.
    held: Mutex<HashMap<usize, u64>>,
}

impl fmt::Debug for Witnessing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Witnessing")
            .field("witnesses", &self.witnesses)
            .field("quorum", &self.quorum)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Witnessing {
    /// Asks `witnesses`, each exchange bounded by `timeout`; `quorum` is what the outcome is
    /// measured against.
    pub fn new(witnesses: Vec<WitnessEndpoint>, quorum: usize, timeout: Duration) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .build()
            .into();
        Self {
            witnesses,
            quorum,
            timeout,
            agent,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The deadline of one witness's exchange.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The policy a verifier would apply with these witnesses and quorum.
    pub fn policy(&self) -> WitnessPolicy {
        WitnessPolicy {
            witnesses: self.witnesses.iter().map(|w| w.key.clone()).collect(),
            quorum: self.quorum,
        }
    }

    /// Asks every witness to cosign `checkpoint`; `previous` is the checkpoint before it (its
    /// cosignatures say which size a witness holds); `prove(m)` builds the consistency proof
    /// from size `m` to `checkpoint`'s size.
    pub fn collect(
        &self,
        previous: &SignedCheckpoint,
        checkpoint: &SignedCheckpoint,
        prove: &(dyn Fn(u64) -> Result<Vec<MerkleHash>, Error> + Sync),
    ) -> CosignOutcome {
        let mut outcome = CosignOutcome {
            quorum: self.quorum,
            ..CosignOutcome::default()
        };
        if self.witnesses.is_empty() {
            return outcome;
        }
        let guesses: Vec<u64> = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            self.witnesses
                .iter()
                .enumerate()
                .map(|(i, w)| match held.get(&i) {
                    Some(s) => *s,
                    None => match w.key.verify(previous) {
                        Ok(Some(_)) => previous.checkpoint.size.0,
                        _ => 0,
                    },
                })
                .collect()
        };
        let results: Vec<Result<(NoteSignature, u64), String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .witnesses
                .iter()
                .zip(&guesses)
                .map(|(w, &old)| scope.spawn(move || self.ask(w, old, checkpoint, prove)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the request thread panicked".into()))
                })
                .collect()
        });
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for (i, (w, r)) in self.witnesses.iter().zip(results).enumerate() {
            match r {
                Ok((line, size)) => {
                    held.insert(i, size);
                    outcome.cosignatures.push(line);
                }
                Err(why) => {
                    held.remove(&i);
                    outcome.failures.push((w.url.clone(), why));
                }
            }
        }
        outcome
    }

    /// One witness: a request from `old`, and once more from the size a 409 names.
    fn ask(
        &self,
        w: &WitnessEndpoint,
        old: u64,
        checkpoint: &SignedCheckpoint,
        prove: &(dyn Fn(u64) -> Result<Vec<MerkleHash>, Error> + Sync),
    ) -> Result<(NoteSignature, u64), String> {
        let size = checkpoint.checkpoint.size.0;
        let mut old = old.min(size);
        for attempt in 0..2 {
            let proof = if old == 0 {
                Vec::new()
            } else {
                prove(old).map_err(|e| format!("cannot build the proof from size {old}: {e}"))?
            };
            let body = AddCheckpoint {
                old_size: old,
                proof,
                note: checkpoint.to_bytes(),
            }
            .to_bytes();
            let url = format!("{}/add-checkpoint", w.url.trim_end_matches('/'));
            let mut resp = self
                .agent
                .post(&url)
                .header("content-type", "text/plain")
                .send(&body[..])
                .map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let text = resp
                .body_mut()
                .with_config()
                .limit(MAX_RESPONSE_BYTES)
                .read_to_vec()
                .map_err(|e| format!("reading the answer: {e}"))?;
            let text = String::from_utf8_lossy(&text).into_owned();
            match status {
                200 => return self.accept(w, checkpoint, &text).map(|l| (l, size)),
                409 if attempt == 0 => {
                    let held: u64 = text
                        .trim()
                        .parse()
                        .map_err(|_| format!("409 without a size in its body: {:?}", cut(&text)))?;
                    if held > size {
                        return Err(format!(
                            "the witness holds size {held}, larger than this checkpoint's {size}: \
                             it has cosigned a longer tree of this log (a fork, or a rollback here)"
                        ));
                    }
                    old = held;
                }
                code => return Err(format!("HTTP {code}: {}", cut(&text))),
            }
        }
        Err("409 twice: another writer is submitting this log to the witness".into())
    }

    /// The answer's signature lines that are this witness's valid cosignature of `checkpoint`.
    fn accept(
        &self,
        w: &WitnessEndpoint,
        checkpoint: &SignedCheckpoint,
        body: &str,
    ) -> Result<NoteSignature, String> {
        let mut note = checkpoint.text.clone();
        note.push('\n');
        note.push_str(body);
        let parsed = SignedCheckpoint::parse(note.as_bytes())
            .map_err(|e| format!("the answer is not signature lines: {e}"))?;
        let mut last = "no cosignature by its key in the answer".to_string();
        for line in parsed.signatures.into_iter().filter(|s| w.key.matches(s)) {
            match w.key.verify_line(&checkpoint.text, &line) {
                Ok(_) => return Ok(line),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }
}

fn cut(s: &str) -> String {
    s.trim().chars().take(200).collect()
}
