//! A run's own log: what the worker said about one run (the backend it chose and why, resuming,
//! warnings and retries, the error that ended it), kept so it can be stored as a blob with an
//! `artifact` entry when the run ends, whatever the ending.
//!
//! Every line also goes to `tracing`, as the worker's messages always did. The text is bounded
//! ([`MAX_RUN_LOG_BYTES`]): past the cap the first half is kept, then the newest lines that fit
//! in the second half, with a note of what was left out between them (the end of a log, where
//! the error that ended the run is, matters most). A log may also have a listener that sees
//! every line as it is written (the worker passes them to its [`super::LiveSink`], so the
//! dashboard can stream a running attempt's log). Not here: storing it (the worker does).

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
        let line = format!("{stamp} {level} {text}\n");
        if let Some(f) = &self.listener {
            f(line.trim_end_matches('\n'));
        }
        let half = self.cap / 2;
        let mut l = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !l.head_full {
            if l.head.len() + line.len() <= half {
                l.head.push_str(&line);
                return;
            }
            l.head_full = true;
        }
        l.tail_bytes += line.len();
        l.tail.push_back(line);
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
