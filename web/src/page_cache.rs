//! [`PageCache`]: experiment pages of finished runs, rendered once and kept on disk by (page,
//! index position), so a page that has not changed is read, not drawn.
//!
//! A finished experiment's page changes only when an entry about it (or one of its runs) is
//! indexed: the catalog knows the last such entry (`CatalogData::touched`). A page is stored
//! under the BLAKE3 of its key (experiment and run shown; only the default chart view, so the
//! number of files is bounded by the number of (experiment, run) pairs, whatever URLs are asked
//! for) with that entry's index in its first line; it is served while the index matches and
//! replaced when it does not. Files are written to a temporary name and renamed, so a reader
//! never sees half a page. The cache is derived from the index like every page; deleting the
//! directory only costs renderings.
//!
//! The directory is `<lab>/web-cache/` unless the server is given another (or none). When it
//! cannot be written (a read-only lab) the cache says so once in the log and stays off. This
//! module knows nothing of HTML or HTTP: it maps keys and positions to bytes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::body::Bytes;
use glassbox_schemas::Blake3Hash;

/// The first line of every stored page: this, a space, the index position, a newline. Bumped
/// when what every page shows changes, so pages drawn by an older server are drawn again
/// (v2: Boards and Sweeps in the navigation, a sweep child's link to its sweep).
const MAGIC: &str = "glassbox-page-v2";

/// Rendered pages on disk.
#[derive(Debug)]
pub struct PageCache {
    dir: Option<PathBuf>,
    off: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    tmp: AtomicU64,
}

impl PageCache {
    /// A cache in `dir` (created on the first write), or none.
    pub fn new(dir: Option<PathBuf>) -> Self {
        PageCache {
            dir,
            off: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            tmp: AtomicU64::new(0),
        }
    }

    /// Where pages are kept, if anywhere.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        if self.off.load(Ordering::Relaxed) {
            return None;
        }
        let name = Blake3Hash::of(key.as_bytes()).to_hex();
        Some(self.dir.as_ref()?.join(&name[..2]).join(&name[2..]))
    }

    /// The page stored under `key` if it was drawn at index position `touched`.
    pub async fn get(&self, key: &str, touched: u64) -> Option<Bytes> {
        let path = self.path(key)?;
        let found = match tokio::fs::read(&path).await {
            Ok(bytes) => split(Bytes::from(bytes), touched),
            Err(_) => None,
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Stores `body` under `key` as drawn at index position `touched`, replacing what was there.
    pub async fn put(&self, key: &str, touched: u64, body: &Bytes) {
        let Some(path) = self.path(key) else { return };
        let mut bytes = format!("{MAGIC} {touched}\n").into_bytes();
        bytes.extend_from_slice(body);
        let tmp = path.with_extension(format!(
            "tmp{}.{}",
            std::process::id(),
            self.tmp.fetch_add(1, Ordering::Relaxed)
        ));
        let written = async {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            tokio::fs::write(&tmp, &bytes).await?;
            tokio::fs::rename(&tmp, &path).await
        }
        .await;
        match written {
            Ok(()) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                if !self.off.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        dir = %self.dir.as_deref().unwrap_or(Path::new("")).display(),
                        error = %e,
                        "cannot write the page cache; pages will be drawn on every request"
                    );
                }
            }
        }
    }

    /// Pages read from disk, not found (or stale), and written, since the start.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }
}

/// The body of a stored page if its first line says it was drawn at `touched`.
fn split(bytes: Bytes, touched: u64) -> Option<Bytes> {
    let nl = bytes.iter().position(|b| *b == b'\n')?;
    let head = std::str::from_utf8(&bytes[..nl]).ok()?;
    let (magic, at) = head.split_once(' ')?;
    (magic == MAGIC && at.parse::<u64>().ok()? == touched).then(|| bytes.slice(nl + 1..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pages_are_served_only_at_the_position_they_were_drawn_at() {
        let dir = tempfile::tempdir().unwrap();
        let c = PageCache::new(Some(dir.path().join("web-cache")));
        assert_eq!(c.get("exp\nrun-1", 7).await, None);
        c.put("exp\nrun-1", 7, &Bytes::from_static(b"<p>page\nat 7</p>"))
            .await;
        assert_eq!(
            c.get("exp\nrun-1", 7).await.as_deref(),
            Some(&b"<p>page\nat 7</p>"[..])
        );
        assert_eq!(c.get("exp\nrun-1", 8).await, None, "an entry indexed since");
        assert_eq!(c.get("exp\nrun-2", 7).await, None, "another key");
        c.put("exp\nrun-1", 8, &Bytes::from_static(b"new")).await;
        assert_eq!(c.get("exp\nrun-1", 8).await.as_deref(), Some(&b"new"[..]));
        assert_eq!(c.get("exp\nrun-1", 7).await, None, "replaced");
        assert_eq!(c.counts(), (2, 4, 2));
        // One file per key, nothing left behind.
        let files: Vec<_> = std::fs::read_dir(dir.path().join("web-cache"))
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .collect();
        assert_eq!(files.len(), 1);
    }

    #[tokio::test]
    async fn an_unwritable_directory_turns_the_cache_off() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let c = PageCache::new(Some(file.join("web-cache")));
        c.put("k", 1, &Bytes::from_static(b"body")).await;
        assert_eq!(c.get("k", 1).await, None);
        assert_eq!(c.counts().2, 0);
        assert!(PageCache::new(None).get("k", 1).await.is_none());
    }

    #[test]
    fn malformed_files_are_misses() {
        assert_eq!(split(Bytes::from_static(b"no newline"), 1), None);
        assert_eq!(split(Bytes::from_static(b"other-magic 1\nx"), 1), None);
        assert_eq!(split(Bytes::from_static(b"glassbox-page-v2 x\nx"), 1), None);
        assert_eq!(
            split(Bytes::from_static(b"glassbox-page-v1 1\nx"), 1),
            None,
            "an older server's page"
        );
    }
}
