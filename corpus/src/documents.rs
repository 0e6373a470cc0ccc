//! Documents out of a corpus's raw file: plain text (the whole file, or split on a separator),
//! JSON Lines (one object per line, its text field) and Parquet (a string column, row by row).
//!
//! Reading streams with bounded memory: text and JSONL are fed in chunks to a
//! [`DocumentSplitter`] (so the lab parses a file in the same pass that hashes and stores it),
//! which holds at most one document or line ([`MAX_DOCUMENT_BYTES`]); Parquet is read a row
//! group's column a batch of rows at a time. Empty documents (an empty JSON string, two
//! separators in a row) carry no text and are skipped. Every problem is a [`DataError`] naming
//! the file, the line (or row and column), what was found and what would be accepted.
//!
//! Not here: tokenizing (the runner) or storing (the lab).

use std::fs::File;

use glassbox_schemas::data::CorpusFormat;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::counting;
use crate::error::{DataError, Location};

/// Largest document (and largest JSONL line, less its framing) accepted: 64 MiB. A bigger one
/// is refused with a hint to split it.
pub const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// Room for the JSON framing around a document on one line.
const MAX_LINE_BYTES: usize = MAX_DOCUMENT_BYTES + (1 << 20);

/// What reading a corpus found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DocumentCounts {
    /// Non-empty documents.
    pub documents: u64,
    /// UTF-8 bytes of their text.
    pub text_bytes: u64,
}

/// Reads every document of a corpus file in `format`, in order, handing each to `visit`.
/// `name` is how errors name the file.
pub fn read_file(
    file: File,
    name: &str,
    format: &CorpusFormat,
    visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<DocumentCounts, DataError> {
    match format {
        CorpusFormat::Parquet { text_column } => read_parquet(file, name, text_column, visit),
        _ => {
            let mut splitter = DocumentSplitter::new(format, name)?;
            let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
            read_stream(&mut reader, &mut splitter, visit)
        }
    }
}

/// Document `n` (0-based; empty documents are not counted) of a corpus file, reading no
/// further than it; `None` when the file has fewer documents.
pub fn nth(
    file: File,
    name: &str,
    format: &CorpusFormat,
    n: u64,
) -> Result<Option<String>, DataError> {
    let mut seen = 0u64;
    let mut found = None;
    let read = read_file(file, name, format, &mut |doc| {
        if seen == n {
            found = Some(doc.to_string());
            return Err(DataError::Stopped);
        }
        seen += 1;
        Ok(())
    });
    match read {
        Ok(_) | Err(DataError::Stopped) => Ok(found),
        Err(e) => Err(e),
    }
}

/// Feeds `reader` to `splitter` to the end.
pub fn read_stream(
    reader: &mut dyn std::io::Read,
    splitter: &mut DocumentSplitter,
    visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<DocumentCounts, DataError> {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DataError::io(format!("read {}", splitter.file))(e)),
        };
        splitter.feed(&buf[..n], visit)?;
    }
    splitter.finish(visit)
}

/// How a [`DocumentSplitter`] cuts its input.
#[derive(Debug, Clone)]
enum Cut {
    /// The whole input is one document.
    Whole,
    /// Documents end at this separator.
    Separator(Vec<u8>),
    /// One JSON object per line; this field is the document.
    Jsonl(String),
}

/// Splits a text or JSONL file, fed in chunks of any size, into documents.
#[derive(Debug)]
pub struct DocumentSplitter {
    cut: Cut,
    file: String,
    /// Bytes not yet cut into a document.
    pending: Vec<u8>,
    /// How far into `pending` a separator has been searched for already.
    scanned: usize,
    /// 1-based line of `pending[0]`.
    line: u64,
    counts: DocumentCounts,
    /// Bytes per parallel piece in [`DocumentSplitter::feed_counting`].
    piece_bytes: usize,
}

impl DocumentSplitter {
    /// A splitter for `format` (text or JSONL); `file` names the input in errors.
    pub fn new(format: &CorpusFormat, file: &str) -> Result<Self, DataError> {
        let cut = match format {
            CorpusFormat::Text { separator: None } => Cut::Whole,
            CorpusFormat::Text { separator: Some(s) } => {
                if s.is_empty() || s.len() > 256 {
                    return Err(DataError::Document {
                        file: file.into(),
                        at: Location::File,
                        problem: format!("separator {s:?} is {} bytes", s.len()),
                        accepted: "a separator is 1 to 256 bytes, such as \"\\n\\n\"".into(),
                    });
                }
                Cut::Separator(s.as_bytes().to_vec())
            }
            CorpusFormat::Jsonl { text_field } => Cut::Jsonl(text_field.clone()),
            CorpusFormat::Parquet { .. } => {
                return Err(DataError::Document {
                    file: file.into(),
                    at: Location::File,
                    problem: "Parquet is not read as a stream".into(),
                    accepted: "read it with documents::read_file".into(),
                });
            }
        };
        Ok(Self {
            cut,
            file: file.into(),
            pending: Vec::new(),
            scanned: 0,
            line: 1,
            counts: DocumentCounts::default(),
            piece_bytes: counting::PIECE_BYTES,
        })
    }

    /// What has been cut so far.
    pub fn counts(&self) -> DocumentCounts {
        self.counts
    }

    /// Takes the next chunk; hands every document it completes to `visit`.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        match self.cut.clone() {
            Cut::Whole => {
                self.pending.extend_from_slice(chunk);
                self.check_size(self.pending.len(), MAX_DOCUMENT_BYTES)
            }
            Cut::Separator(sep) => {
                self.pending.extend_from_slice(chunk);
                let mut start = 0;
                let mut from = self.scanned;
                while let Some(i) = memchr::memmem::find(&self.pending[from..], &sep) {
                    let end = from + i;
                    self.document(start, end, visit)?;
                    start = end + sep.len();
                    from = start;
                }
                self.consume(start);
                self.scanned = self.pending.len().saturating_sub(sep.len() - 1);
                self.check_size(self.pending.len(), MAX_DOCUMENT_BYTES)
            }
            Cut::Jsonl(field) => {
                // Lines wholly inside `chunk` are parsed in place; only a line's unfinished
                // tail waits in `pending`.
                let Some(mut rest) = self.end_pending_line(chunk, &field, visit)? else {
                    return Ok(());
                };
                while let Some(i) = memchr::memchr(b'\n', rest) {
                    self.check_size(i, MAX_LINE_BYTES)?;
                    self.json_line(&rest[..i], &field, visit)?;
                    rest = &rest[i + 1..];
                }
                self.pending.extend_from_slice(rest);
                self.check_size(self.pending.len(), MAX_LINE_BYTES)
            }
        }
    }

    /// [`DocumentSplitter::feed`] when only the counts are wanted (`data import`): the same
    /// checks and counts, but the whole JSONL lines of `chunk` are read on every core (see
    /// [`crate::counting`]). Text is cut as by `feed`.
    pub fn feed_counting(&mut self, chunk: &[u8]) -> Result<(), DataError> {
        let field = match &self.cut {
            Cut::Jsonl(field) => field.clone(),
            _ => return self.feed(chunk, &mut |_| Ok(())),
        };
        let Some(rest) = self.end_pending_line(chunk, &field, &mut |_| Ok(()))? else {
            return Ok(());
        };
        let whole = memchr::memrchr(b'\n', rest).map_or(0, |i| i + 1);
        let (lines, tail) = rest.split_at(whole);
        self.count_lines(lines, &field)?;
        self.pending.extend_from_slice(tail);
        self.check_size(self.pending.len(), MAX_LINE_BYTES)
    }

    /// Ends the line waiting in `pending` with the start of `chunk`, if `chunk` holds its
    /// end; returns the rest of `chunk`, or `None` when all of it went to `pending`.
    fn end_pending_line<'c>(
        &mut self,
        chunk: &'c [u8],
        field: &str,
        visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
    ) -> Result<Option<&'c [u8]>, DataError> {
        if self.pending.is_empty() {
            return Ok(Some(chunk));
        }
        let Some(i) = memchr::memchr(b'\n', chunk) else {
            self.pending.extend_from_slice(chunk);
            self.check_size(self.pending.len(), MAX_LINE_BYTES)?;
            return Ok(None);
        };
        self.pending.extend_from_slice(&chunk[..i]);
        self.check_size(self.pending.len(), MAX_LINE_BYTES)?;
        let line = std::mem::take(&mut self.pending);
        self.json_line(&line, field, visit)?;
        Ok(Some(&chunk[i + 1..]))
    }

    /// Counts whole JSONL lines (`lines` ends with a line end) in parallel pieces; a piece the
    /// quick path leaves is read by the exact one, and the first bad line, in file order, is
    /// the error.
    fn count_lines(&mut self, lines: &[u8], field: &str) -> Result<(), DataError> {
        use rayon::prelude::*;
        let pieces = counting::pieces(lines, self.piece_bytes);
        let file = &self.file;
        let counted: Vec<Result<counting::PieceCounts, DataError>> = pieces
            .par_iter()
            .map(
                |piece| match counting::quick_count(piece, field, MAX_DOCUMENT_BYTES) {
                    Some(c) => Ok(c),
                    None => exact_count(piece, field, file),
                },
            )
            .collect();
        for c in counted {
            match c {
                Ok(c) => {
                    self.counts.documents += c.documents;
                    self.counts.text_bytes += c.text_bytes;
                    self.line += c.newlines;
                }
                Err(DataError::Document {
                    file,
                    at: Location::Line(n),
                    problem,
                    accepted,
                }) => {
                    return Err(DataError::Document {
                        file,
                        at: Location::Line(self.line - 1 + n),
                        problem,
                        accepted,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Ends the input: the last document (or unterminated line) is cut. Returns the counts.
    pub fn finish(
        &mut self,
        visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
    ) -> Result<DocumentCounts, DataError> {
        match self.cut.clone() {
            Cut::Whole | Cut::Separator(_) => {
                let end = self.pending.len();
                self.document(0, end, visit)?;
            }
            Cut::Jsonl(field) => {
                let line = std::mem::take(&mut self.pending);
                self.json_line(&line, &field, visit)?;
            }
        }
        self.pending.clear();
        Ok(self.counts)
    }

    fn check_size(&self, len: usize, max: usize) -> Result<(), DataError> {
        if len <= max {
            return Ok(());
        }
        let (problem, accepted) = match self.cut {
            Cut::Jsonl(_) => (
                format!("the line is longer than {} MiB", max >> 20),
                "one document of at most 64 MiB per line".to_string(),
            ),
            Cut::Whole => (
                format!("the file is one document of more than {} MiB", max >> 20),
                "documents of at most 64 MiB: split the file into documents with --separator"
                    .to_string(),
            ),
            Cut::Separator(_) => (
                format!(
                    "a document is longer than {} MiB (no separator in it)",
                    max >> 20
                ),
                "documents of at most 64 MiB between separators".to_string(),
            ),
        };
        Err(DataError::Document {
            file: self.file.clone(),
            at: Location::Line(self.line),
            problem,
            accepted,
        })
    }

    /// Drops `pending[..n]`, keeping the line count.
    fn consume(&mut self, n: usize) {
        self.line += memchr::memchr_iter(b'\n', &self.pending[..n]).count() as u64;
        self.pending.drain(..n);
        self.scanned = 0;
    }

    /// `pending[start..end]` is a document of a text file.
    fn document(
        &mut self,
        start: usize,
        end: usize,
        visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let bytes = &self.pending[start..end];
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                let before = &self.pending[..start + e.valid_up_to()];
                let line = self.line + memchr::memchr_iter(b'\n', before).count() as u64;
                return Err(DataError::Document {
                    file: self.file.clone(),
                    at: Location::Line(line),
                    problem: format!("byte {:#04x} is not UTF-8", bytes[e.valid_up_to()]),
                    accepted: "text corpora must be UTF-8".into(),
                });
            }
        };
        if !text.is_empty() {
            self.counts.documents += 1;
            self.counts.text_bytes += text.len() as u64;
            visit(text)?;
        }
        Ok(())
    }

    /// One JSONL line (without its newline); advances the line count.
    fn json_line(
        &mut self,
        line: &[u8],
        field: &str,
        visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let at = self.line;
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(());
        }
        let bad = |problem: String, accepted: String| DataError::Document {
            file: self.file.clone(),
            at: Location::Line(at),
            problem,
            accepted,
        };
        let mut de = serde_json::Deserializer::from_slice(line);
        let found = FieldSeed { field }
            .deserialize(&mut de)
            .and_then(|f| de.end().map(|()| f))
            .map_err(|e| {
                bad(
                    format!("not a JSON object ({e})"),
                    format!("each line must be one JSON object with a string field {field:?}, such as {{\"{field}\": \"...\"}}"),
                )
            })?;
        match found {
            Found::Text(text) => {
                if text.len() > MAX_DOCUMENT_BYTES {
                    return Err(bad(
                        format!("field {field:?} is longer than 64 MiB"),
                        "documents of at most 64 MiB".into(),
                    ));
                }
                if !text.is_empty() {
                    self.counts.documents += 1;
                    self.counts.text_bytes += text.len() as u64;
                    visit(&text)?;
                }
                Ok(())
            }
            Found::Missing(keys) => Err(bad(
                if keys.is_empty() {
                    format!("no field {field:?} (the object has no fields)")
                } else {
                    format!("no field {field:?} (its fields: {})", keys.join(", "))
                },
                "pass --text-field with the field that holds the document's text".into(),
            )),
            Found::NotText(kind) => Err(bad(
                format!("field {field:?} is {kind}, not a string"),
                "the text field must be a JSON string".into(),
            )),
            Found::NotObject(kind) => Err(bad(
                format!("{kind}, not a JSON object"),
                format!("each line must be one JSON object with a string field {field:?}"),
            )),
        }
    }
}

/// Reads a piece of whole JSONL lines line by line, as [`DocumentSplitter::feed`] does; lines
/// in its errors count from the piece's first line (1).
fn exact_count(piece: &[u8], field: &str, file: &str) -> Result<counting::PieceCounts, DataError> {
    let mut s = DocumentSplitter {
        cut: Cut::Jsonl(field.to_string()),
        file: file.to_string(),
        pending: Vec::new(),
        scanned: 0,
        line: 1,
        counts: DocumentCounts::default(),
        piece_bytes: counting::PIECE_BYTES,
    };
    s.feed(piece, &mut |_| Ok(()))?;
    debug_assert!(s.pending.is_empty(), "a piece ends at a line end");
    Ok(counting::PieceCounts {
        documents: s.counts.documents,
        text_bytes: s.counts.text_bytes,
        newlines: s.line - 1,
    })
}

/// What a JSONL line held for the text field.
enum Found<'de> {
    Text(std::borrow::Cow<'de, str>),
    /// The field is absent; the first keys seen.
    Missing(Vec<String>),
    /// The field is not a string: what it is.
    NotText(&'static str),
    /// The line is not an object: what it is.
    NotObject(&'static str),
}

/// Deserializes a line, keeping only `field` (other values are skipped without allocating).
struct FieldSeed<'f> {
    field: &'f str,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Found<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = Found<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a JSON object with a string field {:?}", self.field)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut keys = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.field && found.is_none() {
                found = Some(map.next_value::<TextOrKind<'de>>()?.0);
            } else {
                if keys.len() < 8 {
                    keys.push(key.into_owned());
                }
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(match found {
            Some(Ok(text)) => Found::Text(text),
            Some(Err(kind)) => Found::NotText(kind),
            None => Found::Missing(keys),
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Found::NotObject("an array"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Found::NotObject("a string"))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Found::NotObject("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Found::NotObject("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Found::NotObject("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Found::NotObject("a number"))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Found::NotObject("null"))
    }
}

/// A JSON value that is a string (borrowed when it has no escapes), or what kind it is.
struct TextOrKind<'de>(Result<std::borrow::Cow<'de, str>, &'static str>);

impl<'de> serde::Deserialize<'de> for TextOrKind<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TextOrKind<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(TextOrKind(Ok(std::borrow::Cow::Borrowed(s))))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(TextOrKind(Ok(std::borrow::Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(TextOrKind(Ok(std::borrow::Cow::Owned(s))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(TextOrKind(Err("a boolean")))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(TextOrKind(Err("a number")))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(TextOrKind(Err("a number")))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(TextOrKind(Err("a number")))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(TextOrKind(Err("null")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TextOrKind(Err("an array")))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TextOrKind(Err("an object")))
            }
        }
        d.deserialize_any(V)
    }
}

/// Rows read from a Parquet column at a time.
const PARQUET_BATCH_ROWS: usize = 1024;

/// Every row's `column` of a Parquet file, a batch of rows at a time.
fn read_parquet(
    file: File,
    name: &str,
    column: &str,
    visit: &mut dyn FnMut(&str) -> Result<(), DataError>,
) -> Result<DocumentCounts, DataError> {
    use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
    use parquet::column::reader::get_typed_column_reader;
    use parquet::data_type::{ByteArray, ByteArrayType};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let bad = |at: Location, problem: String, accepted: String| DataError::Document {
        file: name.into(),
        at,
        problem,
        accepted,
    };
    let reader = SerializedFileReader::new(file).map_err(|e| {
        bad(
            Location::File,
            format!("not a Parquet file ({e})"),
            "an Apache Parquet file (uncompressed or Snappy-compressed)".into(),
        )
    })?;
    let meta = reader.metadata();
    let schema = meta.file_metadata().schema_descr();
    let columns: Vec<String> = schema.columns().iter().map(|c| c.path().string()).collect();
    let Some(index) = columns.iter().position(|c| c == column) else {
        return Err(bad(
            Location::Column(column.into()),
            format!("no such column (its columns: {})", columns.join(", ")),
            "pass --text-column with the string column that holds the documents' text".into(),
        ));
    };
    let desc = schema.column(index);
    let is_string = desc.physical_type() == PhysicalType::BYTE_ARRAY
        && (matches!(desc.logical_type_ref(), Some(LogicalType::String))
            || desc.converted_type() == ConvertedType::UTF8
            || (desc.logical_type_ref().is_none() && desc.converted_type() == ConvertedType::NONE));
    if !is_string || desc.max_rep_level() > 0 {
        return Err(bad(
            Location::Column(column.into()),
            format!(
                "is a {}{} column, not a string column",
                if desc.max_rep_level() > 0 {
                    "repeated "
                } else {
                    ""
                },
                desc.physical_type()
            ),
            "the text column must hold one UTF-8 string (BYTE_ARRAY) per row".into(),
        ));
    }
    let mut counts = DocumentCounts::default();
    let mut row = 0u64;
    let mut values: Vec<ByteArray> = Vec::with_capacity(PARQUET_BATCH_ROWS);
    let mut defs: Vec<i16> = Vec::with_capacity(PARQUET_BATCH_ROWS);
    let max_def = desc.max_def_level();
    for g in 0..meta.num_row_groups() {
        let group = reader.get_row_group(g).map_err(|e| {
            bad(
                Location::File,
                format!("row group {g} cannot be read ({e})"),
                "a well-formed Parquet file".into(),
            )
        })?;
        let col = group.get_column_reader(index).map_err(|e| {
            bad(
                Location::Column(column.into()),
                format!("cannot be read in row group {g} ({e})"),
                "a well-formed Parquet file (uncompressed or Snappy-compressed)".into(),
            )
        })?;
        let mut typed = get_typed_column_reader::<ByteArrayType>(col);
        loop {
            values.clear();
            defs.clear();
            let (records, _, _) = typed
                .read_records(PARQUET_BATCH_ROWS, Some(&mut defs), None, &mut values)
                .map_err(|e| {
                    bad(
                        Location::Row {
                            row: row + 1,
                            column: column.into(),
                        },
                        format!("cannot be read ({e})"),
                        "a well-formed Parquet file (uncompressed or Snappy-compressed)".into(),
                    )
                })?;
            if records == 0 {
                break;
            }
            let mut next = values.iter();
            for r in 0..records {
                row += 1;
                let present = max_def == 0 || defs.get(r).copied() == Some(max_def);
                let value = if present { next.next() } else { None };
                let Some(value) = value else {
                    return Err(bad(
                        Location::Row {
                            row,
                            column: column.into(),
                        },
                        "is null".into(),
                        "every row needs its text (drop the rows without one)".into(),
                    ));
                };
                let text = std::str::from_utf8(value.data()).map_err(|e| {
                    bad(
                        Location::Row {
                            row,
                            column: column.into(),
                        },
                        format!("is not UTF-8 ({e})"),
                        "the text column must hold UTF-8 strings".into(),
                    )
                })?;
                if text.len() > MAX_DOCUMENT_BYTES {
                    return Err(bad(
                        Location::Row {
                            row,
                            column: column.into(),
                        },
                        "is longer than 64 MiB".into(),
                        "documents of at most 64 MiB".into(),
                    ));
                }
                if !text.is_empty() {
                    counts.documents += 1;
                    counts.text_bytes += text.len() as u64;
                    visit(text)?;
                }
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(format: &CorpusFormat, input: &[u8], chunk: usize) -> Result<Vec<String>, DataError> {
        let mut s = DocumentSplitter::new(format, "in.txt")?;
        let mut docs = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            s.feed(c, &mut |d| {
                docs.push(d.to_string());
                Ok(())
            })?;
        }
        let counts = s.finish(&mut |d| {
            docs.push(d.to_string());
            Ok(())
        })?;
        assert_eq!(counts.documents, docs.len() as u64);
        assert_eq!(
            counts.text_bytes,
            docs.iter().map(|d| d.len() as u64).sum::<u64>()
        );
        Ok(docs)
    }

    #[test]
    fn jsonl_documents_are_the_same_for_every_chunk_size() {
        let input = "{\"id\":1,\"text\":\"héllo\"}\n\n{\"text\":\"a\\nb\",\"x\":[1,{\"y\":2}]}\r\n{\"text\":\"\"}\n{\"text\":\"end\"}";
        let f = CorpusFormat::Jsonl {
            text_field: "text".into(),
        };
        for chunk in [1, 2, 3, 7, 1000] {
            assert_eq!(
                split(&f, input.as_bytes(), chunk).unwrap(),
                ["héllo", "a\nb", "end"],
                "chunk {chunk}"
            );
        }
    }

    /// `feed_counting` (parallel pieces, quick path with exact fallback) against `feed` (line
    /// by line): the same counts, or the same error naming the same line.
    #[test]
    fn counting_agrees_with_reading_line_by_line() {
        let f = CorpusFormat::Jsonl {
            text_field: "text".into(),
        };
        let good = [
            "{\"id\":1,\"text\":\"h\\u00e9llo\\nworld\"}",
            "",
            "   ",
            "{\"text\":\"\"}",
            "{\"meta\":{\"a\":[1,2,{\"b\":null}]},\"text\":\"tab\\there \\\"q\\\"\"}\r",
            "{\"te\\u0078t\":\"escaped key\"}",
            "{\"text\":\"first\",\"text\":\"second\"}",
            "{\"k0\":0,\"k1\":0,\"k2\":0,\"k3\":0,\"k4\":0,\"k5\":0,\"k6\":0,\"k7\":0,\"k8\":0,\"k9\":0,\"k10\":0,\"k11\":0,\"k12\":0,\"k13\":0,\"k14\":0,\"k15\":0,\"k16\":0,\"text\":\"wide\"}",
            "{\"text\":\"\u{1F600} emoji and CJK \u{4E2D}\u{6587}\"}",
        ];
        let bad = [
            "not json",
            "{\"text\":7}",
            "{\"body\":\"x\"}",
            "{\"text\":\"a\"}{\"text\":\"b\"}",
            "{\"text\":",
            "[1]",
        ];
        let read =
            |input: &str, chunk: usize, piece: Option<usize>| -> Result<DocumentCounts, String> {
                let mut s = DocumentSplitter::new(&f, "in.jsonl").unwrap();
                for c in input.as_bytes().chunks(chunk) {
                    match piece {
                        Some(p) => {
                            s.piece_bytes = p;
                            s.feed_counting(c)
                        }
                        None => s.feed(c, &mut |_| Ok(())),
                    }
                    .map_err(|e| e.to_string())?;
                }
                s.finish(&mut |_| Ok(())).map_err(|e| e.to_string())
            };
        let mut inputs = Vec::new();
        for n in 0..40usize {
            let mut lines: Vec<&str> = (0..n).map(|i| good[(i * 7 + n) % good.len()]).collect();
            if n % 3 == 1 {
                lines.insert(n / 2, bad[n % bad.len()]);
            }
            let mut text = lines.join("\n");
            if n % 2 == 0 {
                text.push('\n');
            }
            inputs.push(text);
        }
        let mut errors = 0;
        for input in &inputs {
            let want = read(input, 1 << 20, None);
            errors += want.is_err() as usize;
            for chunk in [1, 5, 64, 1 << 20] {
                for piece in [1, 40, 1 << 20] {
                    assert_eq!(
                        read(input, chunk, Some(piece)),
                        want,
                        "{input:?} chunk {chunk} piece {piece}"
                    );
                }
            }
        }
        assert!(errors >= 10, "the inputs hold bad lines: {errors}");
    }

    #[test]
    fn separators_split_across_chunks() {
        let f = CorpusFormat::Text {
            separator: Some("\n\n".into()),
        };
        let input = b"one\ntwo\n\nthree\n\n\n\nfour\n";
        for chunk in [1, 2, 5, 100] {
            assert_eq!(
                split(&f, input, chunk).unwrap(),
                ["one\ntwo", "three", "four\n"],
                "chunk {chunk}"
            );
        }
        let whole = CorpusFormat::Text { separator: None };
        assert_eq!(split(&whole, input, 3).unwrap().len(), 1);
    }

    #[test]
    fn bad_jsonl_lines_are_named_with_what_is_accepted() {
        let f = CorpusFormat::Jsonl {
            text_field: "text".into(),
        };
        let cases: [(&str, &str); 5] = [
            (
                "{\"text\":\"ok\"}\nnot json\n",
                "in.txt: line 2: not a JSON object (",
            ),
            (
                "{\"text\":\"ok\"}\n{\"body\":\"x\",\"id\":3}\n",
                "in.txt: line 2: no field \"text\" (its fields: body, id); pass --text-field",
            ),
            (
                "{\"text\":7}\n",
                "in.txt: line 1: field \"text\" is a number, not a string",
            ),
            ("[1,2]\n", "in.txt: line 1: an array, not a JSON object"),
            (
                "{\"text\":\"a\"} trailing\n",
                "in.txt: line 1: not a JSON object (trailing characters",
            ),
        ];
        for (input, want) in cases {
            let err = split(&f, input.as_bytes(), 4).unwrap_err().to_string();
            assert!(err.starts_with(want), "{input:?}: {err}");
        }
    }

    #[test]
    fn nth_reads_only_up_to_the_document_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(
            &p,
            "{\"text\":\"a\"}\n{\"text\":\"\"}\n{\"text\":\"b\"}\nnot json\n",
        )
        .unwrap();
        let f = CorpusFormat::Jsonl {
            text_field: "text".into(),
        };
        let open = || File::open(&p).unwrap();
        assert_eq!(nth(open(), "c", &f, 1).unwrap().as_deref(), Some("b"));
        // Document 2 would be past the bad line: the error names it.
        let err = nth(open(), "c", &f, 2).unwrap_err().to_string();
        assert!(err.starts_with("c: line 4: not a JSON object"), "{err}");
    }

    #[test]
    fn text_that_is_not_utf8_is_named_by_line() {
        let f = CorpusFormat::Text {
            separator: Some("\n".into()),
        };
        let err = split(&f, b"ok\nfine\nbad \xff here\n", 2)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "in.txt: line 3: byte 0xff is not UTF-8; text corpora must be UTF-8"
        );
    }
}
