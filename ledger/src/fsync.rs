//! Durable renames and creates: fsyncing the directory that holds them.
//!
//! Not here: the files' own fsyncs (each writer does those before it renames).

use std::fs::File;
use std::path::Path;

use crate::error::Error;

/// fsyncs a directory so a rename or create inside it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("cannot fsync directory", dir))
}
