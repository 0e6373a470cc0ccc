//! A run's own log: what a person at the worker's terminal sees about one run (the backend it
//! chose and why, resuming, each progress and evaluation line, warnings and retries, anomalies,
//! the error that ended it), kept so it can be stored as a blob with an `artifact` entry when
//! the run ends, whatever the ending, and handed out in chunks while it runs
//! ([`RunLog::take_chunk`]: the recording thread stores each with the metric chunks, so a
//! killed worker's log is on the record up to its last chunk).
//!
//! Every line also goes to `tracing`, as the worker's messages always did. The text is bounded
//! ([`MAX_RUN_LOG_BYTES`]): past the cap the first half is kept, then the newest lines that fit
//! in the second half, with a note of what was left out between them (the end of a log, where
//! the error that ended the run is, matters most). A log may also have a listener that sees
//! every line as it is written (the worker passes them to its [`super::LiveSink`], so the
//! dashboard can stream a running attempt's log). The chunks keep the same bound: they carry
//! the lines up to the first half of the cap, then one note that the rest waits for the end of
//! the attempt (whose stored log has the newest lines). Not here: storing it (the worker does).

use std::collections::VecDeque;
use std::sync::Mutex;

/// Largest run log kept, in bytes (the note about omitted lines comes on top).
pub const MAX_RUN_LOG_BYTES: usize = 256 * 1024;

/// Sees each line of a [`RunLog`] as it is written (without its newline).
pub type LineListener = Box<dyn Fn(&str) + Send + Sync>;

/// A bounded, shared, line-oriented log of one run. Cheap to write from any thread.
pub struct RunLog {
    inner: Mutex<Lines>,
    cap: usize,
    listener: Option<LineListener>,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("cap", &self.cap)
            .field("listener", &self.listener.is_some())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Lines {
    /// The first lines, up to half the cap.
    head: String,
    /// Whether the head is full (later lines go to the tail).
    head_full: bool,
    /// The newest lines after the head, at most half the cap in total.
    tail: VecDeque<String>,
    tail_bytes: usize,
    /// Lines (and their bytes) dropped between head and tail.
    omitted_lines: u64,
    omitted_bytes: u64,
    /// Lines written so far.
    written: u64,
    /// Lines not handed out in a chunk yet, from line `chunk_from` (1-based).
    pending: String,
    chunk_from: u64,
    /// Bytes handed out in chunks so far.
    chunked_bytes: usize,
    /// Whether the chunks have reached their bound (later lines wait for the end).
    chunks_full: bool,
    /// Whether the note saying so was handed out.
    chunks_noted: bool,
}

/// Lines of a run's log not yet on the record, numbered from 1 in the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    /// The number of its first line.
    pub first_line: u64,
    /// The number of its last line.
    pub last_line: u64,
    /// The lines, each ending in a newline (and the note, when the chunks reached their bound).
    pub text: String,
}

impl Default for RunLog {
    fn default() -> Self {
        Self::with_cap(MAX_RUN_LOG_BYTES)
    }
}

impl RunLog {
    /// An empty log holding at most `cap` bytes of lines.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Lines::default()),
            cap: cap.max(2),
            listener: None,
        }
    }

    /// An empty log whose every line is also passed to `listener` as it is written.
    pub fn following(listener: LineListener) -> Self {
        Self {
            listener: Some(listener),
            ..Self::default()
        }
    }

    /// Adds a line (stamped with the UTC time) and passes it to `tracing` at info level.
    pub fn info(&self, text: impl AsRef<str>) {
        tracing::info!("{}", text.as_ref());
        self.push("info", text.as_ref());
    }

    /// Adds a warning line and passes it to `tracing` at warn level.
    pub fn warn(&self, text: impl AsRef<str>) {
        tracing::warn!("{}", text.as_ref());
        self.push("warn", text.as_ref());
    }

    /// Adds an error line and passes it to `tracing` at error level.
    pub fn error(&self, text: impl AsRef<str>) {
        tracing::error!("{}", text.as_ref());
        self.push("error", text.as_ref());
    }

    fn push(&self, level: &str, text: &str) {
        let now = time::OffsetDateTime::now_utc();
        let stamp = now
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        // One line per line: a message with newlines in it is written as several lines, so
        // that line numbers and the level of each stay true.
        let mut out = String::new();
        for part in text.split('\n') {
            out.push_str(&format!(
                "{stamp} {level} {}\n",
                part.trim_end_matches('\r')
            ));
        }
        for line in out.split_inclusive('\n') {
            self.push_line(line);
        }
    }

    fn push_line(&self, line: &str) {
        if let Some(f) = &self.listener {
            f(line.trim_end_matches('\n'));
        }
        let half = self.cap / 2;
        let mut l = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        l.written += 1;
        if !l.chunks_full {
            if l.chunked_bytes + l.pending.len() + line.len() <= half {
                if l.pending.is_empty() {
                    l.chunk_from = l.written;
                }
                l.pending.push_str(line);
            } else {
                l.chunks_full = true;
            }
        }
        if !l.head_full {
            if l.head.len() + line.len() <= half {
                l.head.push_str(line);
                return;
            }
            l.head_full = true;
        }
        l.tail_bytes += line.len();
        l.tail.push_back(line.to_string());
        while l.tail_bytes > half {
            match l.tail.pop_front() {
                Some(old) => {
                    l.tail_bytes -= old.len();
                    l.omitted_lines += 1;
                    l.omitted_bytes += old.len() as u64;
                }
                None => break,
            }
        }
    }

    /// The lines written since the last chunk, if any (see the module text for the bound).
    pub fn take_chunk(&self) -> Option<LogChunk> {
        let mut l = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = std::mem::take(&mut l.pending);
        let n = text.matches('\n').count() as u64;
        let (first_line, last_line) = if n > 0 {
            (l.chunk_from, l.chunk_from + n - 1)
        } else {
            (l.written, l.written)
        };
        l.chunked_bytes += text.len();
        if l.chunks_full && !l.chunks_noted {
            l.chunks_noted = true;
            text.push_str(&format!(
                "[... later lines are stored when the attempt ends: a run log keeps at most {} bytes, and the chunks written while it runs the first half ...]\n",
                self.cap
            ));
        }
        if text.is_empty() {
            return None;
        }
        Some(LogChunk {
            first_line,
            last_line,
            text,
        })
    }

    /// The log's text: the head, a note when lines were left out, the tail.
    pub fn text(&self) -> String {
        let l = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = l.head.clone();
        if l.omitted_lines > 0 {
            out.push_str(&format!(
                "[... {} lines ({} bytes) left out here: a run log keeps at most {} bytes, the first and the last half ...]\n",
                l.omitted_lines, l.omitted_bytes, self.cap
            ));
        }
        for line in &l.tail {
            out.push_str(line);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_sees_every_line_as_it_is_written() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let s = seen.clone();
        let log = RunLog::following(Box::new(move |l| {
            s.lock().unwrap().push(l.to_string());
        }));
        log.info("backend cpu");
        log.warn("retrying");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert!(seen[0].ends_with(" info backend cpu"), "{seen:?}");
        assert!(seen[1].ends_with(" warn retrying"), "{seen:?}");
        assert_eq!(log.text().lines().collect::<Vec<_>>(), seen);
    }

    /// Chunks hand out every line once, in order and numbered, until half the cap; then one
    /// note; the whole log still ends with the newest lines.
    #[test]
    fn chunks_hand_out_each_line_once_up_to_their_bound() {
        let log = RunLog::with_cap(2000);
        assert_eq!(log.take_chunk(), None);
        log.info("backend: cpu");
        log.info("step 1/3 loss 5.0\nsecond line of one message");
        let c = log.take_chunk().unwrap();
        assert_eq!((c.first_line, c.last_line), (1, 3));
        assert_eq!(c.text.lines().count(), 3);
        assert!(
            c.text
                .lines()
                .nth(2)
                .unwrap()
                .ends_with(" info second line of one message")
        );
        assert_eq!(log.take_chunk(), None);
        log.warn("retrying");
        let c = log.take_chunk().unwrap();
        assert_eq!((c.first_line, c.last_line), (4, 4));
        let mut chunked = String::new();
        for i in 0..200 {
            log.info(format!("step {i}"));
            if let Some(c) = log.take_chunk() {
                chunked.push_str(&c.text);
            }
        }
        assert!(chunked.len() <= 1000 + 300, "{}", chunked.len());
        assert_eq!(chunked.matches("stored when the attempt ends").count(), 1);
        assert!(log.text().trim_end().ends_with("step 199"));
        assert_eq!(log.take_chunk(), None);
    }

    #[test]
    fn a_short_log_is_kept_whole() {
        let log = RunLog::default();
        log.info("backend: cpu (asked for auto; no CUDA here)");
        log.error("failed: boom");
        let text = log.text();
        assert!(text.contains(" info backend: cpu (asked for auto; no CUDA here)\n"));
        assert!(text.ends_with(" error failed: boom\n"), "{text}");
        assert!(!text.contains("left out"));
    }

    #[test]
    fn a_long_log_keeps_its_start_and_end_with_a_note() {
        let log = RunLog::with_cap(4096);
        log.info("first line");
        for i in 0..1000 {
            log.warn(format!("retry {i}"));
        }
        log.error("the error that ended it");
        let text = log.text();
        assert!(text.len() <= 4096 + 200, "{}", text.len());
        assert!(text.contains("first line"));
        assert!(text.contains("retry 0\n"));
        assert!(text.trim_end().ends_with("the error that ended it"));
        assert!(text.contains("lines ("), "{text}");
        assert!(text.contains("left out here: a run log keeps at most 4096 bytes"));
        assert!(!text.contains("retry 500\n"));
    }
}
