//! Records out of a file whose lines or rows are objects (evaluation suites): JSON Lines, or
//! Parquet with each row as a JSON object of its columns (lists as arrays). Streaming and
//! bounded: a line longer than the limit, or more records than the limit, is refused with the
//! line or row named.
//!
//! Not here: what a record must hold (the caller checks each one), or corpora of documents
//! ([`crate::documents`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use crate::error::{DataError, Location};

/// The file's format, from its first bytes: Parquet (`PAR1`) or JSON Lines.
pub fn is_parquet(file: &mut File) -> Result<bool, std::io::Error> {
    use std::io::Seek;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    Ok(n == 4 && &magic == b"PAR1")
}

/// Calls `visit` with each record (where it is: a 1-based line of JSON Lines, or a row of
/// Parquet with no column named; the object) of `file`, named `name` in errors; at most
/// `max_records`, each line at most `max_line` bytes. Blank lines are skipped.
pub fn read_records(
    mut file: File,
    name: &str,
    max_records: usize,
    max_line: usize,
    visit: &mut dyn FnMut(Location, serde_json::Value) -> Result<(), DataError>,
) -> Result<u64, DataError> {
    let bad = |at: Location, problem: String, accepted: String| DataError::Document {
        file: name.into(),
        at,
        problem,
        accepted,
    };
    let too_many = |at: Location| {
        bad(
            at,
            format!("more than {max_records} records"),
            format!("at most {max_records} items in one suite (split it into several)"),
        )
    };
    if is_parquet(&mut file).map_err(DataError::io(format!("read {name}")))? {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(file).map_err(|e| {
            bad(
                Location::File,
                format!("not a readable Parquet file ({e})"),
                "an Apache Parquet file (uncompressed or Snappy-compressed)".into(),
            )
        })?;
        let rows = reader.get_row_iter(None).map_err(|e| {
            bad(
                Location::File,
                format!("its rows cannot be read ({e})"),
                "a well-formed Parquet file".into(),
            )
        })?;
        let mut n = 0u64;
        for row in rows {
            n += 1;
            let at = || Location::Row {
                row: n,
                column: "*".into(),
            };
            if n as usize > max_records {
                return Err(too_many(at()));
            }
            let row = row.map_err(|e| {
                bad(
                    at(),
                    format!("cannot be read ({e})"),
                    "a well-formed Parquet file".into(),
                )
            })?;
            visit(
                Location::Row {
                    row: n,
                    column: String::new(),
                },
                row.to_json_value(),
            )?;
        }
        return Ok(n);
    }
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let (mut number, mut records) = (0u64, 0u64);
    loop {
        line.clear();
        let read = (&mut reader)
            .take(max_line as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(DataError::io(format!("read {name}")))?;
        if read == 0 {
            return Ok(records);
        }
        number += 1;
        if line.len() > max_line && line.last() != Some(&b'\n') {
            return Err(bad(
                Location::Line(number),
                format!("the line is longer than {max_line} bytes"),
                "one record per line, each at most that long".into(),
            ));
        }
        let text = std::str::from_utf8(&line).map_err(|e| {
            bad(
                Location::Line(number),
                format!("not UTF-8 ({e})"),
                "UTF-8 JSON, one object per line".into(),
            )
        })?;
        if text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            bad(
                Location::Line(number),
                format!("not JSON ({e})"),
                "one JSON object per line (JSON Lines)".into(),
            )
        })?;
        records += 1;
        if records as usize > max_records {
            return Err(too_many(Location::Line(number)));
        }
        visit(Location::Line(number), value)?;
    }
}
