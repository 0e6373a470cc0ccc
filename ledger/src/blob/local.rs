//! Blobs in a local directory ([`LocalBlobStore`]): `<dir>/<first 2 hex>/<remaining 62 hex>`,
//! written to a temp file, fsynced, renamed, and the directory fsynced, so a blob is either
//! wholly there or absent. Puts and gets stream in fixed-size chunks (memory stays bounded for
//! any size); a large file is hashed on several threads and copied in windows.
//!
//! Not here: choosing a store from a location (`open`) or the bucket store (`crate::s3`).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::error::Error;
use crate::fsync::sync_dir;

use super::{BlobStore, CHUNK, Inspect, InspectingReader, PutOutcome};

/// Blobs in a local directory.
#[derive(Debug, Clone)]
pub struct LocalBlobStore {
    /// `<lab>/blobs`.
    dir: PathBuf,
}

impl LocalBlobStore {
    /// A store rooted at `<lab>/blobs` (the directory must exist).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file a blob lives in.
    pub fn path_of(&self, hash: &BlobHash) -> PathBuf {
        let hex = hash.0.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Puts a file by path.
    pub fn put_file(&self, path: &Path) -> Result<PutOutcome, Error> {
        let mut f = File::open(path).map_err(Error::io("cannot open", path))?;
        self.put(&mut f)
    }

    /// Puts a regular file while `inspect` reads it, in one pass over memory and on every
    /// core: the file is copied into a temp file in the store by the kernel
    /// (`copy_file_range`, no trip through this process) a [`WINDOW`] at a time; each copied
    /// window is mapped and hashed (BLAKE3's multithreaded path) while `inspect` reads the
    /// same mapped bytes, and the copy of the next window runs beside both; the kernel is
    /// asked to start writing each finished window to disk, so the closing fsync has little
    /// left to wait for. What is hashed and inspected is the store's own copy, so a source
    /// that changes meanwhile cannot make the blob differ from its hash or its inspection.
    /// Anything but a regular file goes through [`BlobStore::put`].
    pub fn put_file_inspected(
        &self,
        path: &Path,
        inspect: &mut dyn Inspect,
    ) -> Result<PutOutcome, Error> {
        self.require_dir()?;
        let src = File::open(path).map_err(Error::io("cannot open", path))?;
        let meta = src.metadata().map_err(Error::io("cannot stat", path))?;
        if !meta.is_file() {
            return BlobStore::put(self, &mut InspectingReader::new(src, inspect));
        }
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(&self.dir)
            .map_err(Error::io("cannot create a temp file in", &self.dir))?;
        let tmp_path = tmp.path().to_path_buf();
        let out = tmp.as_file();
        let mut hasher = blake3::Hasher::new();
        let mut at = 0u64;
        let in_kernel = AtomicBool::new(true);
        let copy = |at| copy_window(&src, out, at, &in_kernel, path, &tmp_path);
        let mut len = copy(at)?;
        while len > 0 {
            // SAFETY: the map is read-only and dropped before the temp file is touched again.
            // The temp file is this process's own (created exclusively, mode 0600, removed on
            // any error) and only ever grows, so the mapped pages stay valid.
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(at)
                    .len(len as usize)
                    .map(out)
            }
            .map_err(Error::io("cannot map", &tmp_path))?;
            let _ = map.advise(memmap2::Advice::Sequential);
            let next_at = at + len;
            let (read, next) = rayon::join(
                || {
                    let (_, seen) = rayon::join(
                        || {
                            hasher.update_rayon(&map);
                        },
                        || inspect.bytes(&map),
                    );
                    seen
                },
                || copy(next_at),
            );
            drop(map);
            read.map_err(Error::io("cannot store", path))?;
            start_writeback(out, at, len);
            at = next_at;
            len = next?;
        }
        inspect.end().map_err(Error::io("cannot store", path))?;
        let hash = BlobHash(hasher.finalize().into());
        self.persist_temp(tmp, hash, at)
    }

    /// Moves a file into the store without copying it when it is on the store's file system:
    /// hash it in place (all cores), fsync it, check nothing wrote to it meanwhile, rename it
    /// to its blob path, fsync both directories. The file is then the blob (what DVC does on
    /// `dvc add` with a copy-only cache). On another file system it is copied and removed
    /// ([`BlobStore::put`], then unlink). If the blob is already stored, the file is removed.
    /// A file that changes while it is hashed is refused and left where it was.
    pub fn put_move(&self, path: &Path) -> Result<PutOutcome, Error> {
        self.require_dir()?;
        let file = File::open(path).map_err(Error::io("cannot open", path))?;
        let before = file.metadata().map_err(Error::io("cannot stat", path))?;
        if !before.is_file() {
            return Err(Error::io("cannot store", path)(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let (digest, bytes) = hash_file_parallel(&file, path)?;
        let hash = BlobHash(digest);
        let dest = self.path_of(&hash);
        let source_dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if dest.exists() {
            fs::remove_file(path).map_err(Error::io("stored, but cannot remove", path))?;
            sync_dir(&source_dir)?;
            return Ok(PutOutcome {
                hash,
                bytes,
                existed: true,
            });
        }
        file.sync_all().map_err(Error::io("cannot fsync", path))?;
        let after = fs::metadata(path).map_err(Error::io("cannot stat", path))?;
        if file_stamp(&before) != file_stamp(&after) {
            return Err(Error::io("cannot store", path)(io::Error::other(
                "the file changed while it was being hashed; nothing was stored",
            )));
        }
        let parent = dest.parent().unwrap_or(&self.dir).to_path_buf();
        let created = !parent.exists();
        fs::create_dir_all(&parent).map_err(Error::io("cannot create", &parent))?;
        match fs::rename(path, &dest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {
                drop(file);
                let out = LocalBlobStore::put_file(self, path)?;
                fs::remove_file(path).map_err(Error::io("stored, but cannot remove", path))?;
                sync_dir(&source_dir)?;
                return Ok(out);
            }
            Err(e) => return Err(Error::io("cannot rename into", &dest)(e)),
        }
        sync_dir(&parent)?;
        if created {
            sync_dir(&self.dir)?;
        }
        sync_dir(&source_dir)?;
        Ok(PutOutcome {
            hash,
            bytes,
            existed: false,
        })
    }

    /// Makes a fully written temp file the blob `hash`: fsync, rename to its path, fsync the
    /// directories. If the blob is already stored the temp file is dropped (and deleted).
    fn persist_temp(
        &self,
        tmp: tempfile::NamedTempFile,
        hash: BlobHash,
        bytes: u64,
    ) -> Result<PutOutcome, Error> {
        let dest = self.path_of(&hash);
        if dest.exists() {
            // Dropping `tmp` deletes it: putting an existing blob writes nothing durable.
            return Ok(PutOutcome {
                hash,
                bytes,
                existed: true,
            });
        }
        tmp.as_file()
            .sync_all()
            .map_err(Error::io("cannot fsync", tmp.path()))?;
        let parent = dest.parent().unwrap_or(&self.dir).to_path_buf();
        let created = !parent.exists();
        fs::create_dir_all(&parent).map_err(Error::io("cannot create", &parent))?;
        tmp.persist(&dest)
            .map_err(|e| Error::io("cannot rename into", &dest)(e.error))?;
        sync_dir(&parent)?;
        if created {
            sync_dir(&self.dir)?;
        }
        Ok(PutOutcome {
            hash,
            bytes,
            existed: false,
        })
    }

    fn require_dir(&self) -> Result<(), Error> {
        if self.dir.is_dir() {
            Ok(())
        } else {
            Err(Error::NoLab {
                path: self.dir.parent().unwrap_or(&self.dir).to_path_buf(),
                reason: format!("{} is not a directory", self.dir.display()),
            })
        }
    }
}

/// What identifies a file's contents cheaply: if none of these changed, nobody wrote to it.
fn file_stamp(m: &fs::Metadata) -> (u64, u64, u64, Option<std::time::SystemTime>) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino(), m.len(), m.modified().ok())
}

/// Bytes of a file mapped at once while hashing it in place: each window is hashed on every
/// core and unmapped before the next, so resident memory stays near this size for any file.
const WINDOW: u64 = 16 << 20;

/// Hashes an open regular file with every core, as `b3sum` does: the file is mapped (no copy
/// into a buffer) a [`WINDOW`] at a time, each window hashed with BLAKE3's multithreaded
/// path, then unmapped.
fn hash_file_parallel(file: &File, path: &Path) -> Result<(Blake3Hash, u64), Error> {
    let len = file
        .metadata()
        .map_err(Error::io("cannot stat", path))?
        .len();
    let mut hasher = blake3::Hasher::new();
    let mut at = 0u64;
    while at < len {
        let n = WINDOW.min(len - at);
        // SAFETY: the map is read-only and dropped before the next window. Its contents are
        // only sound while no one truncates the file (another process shrinking it would make
        // reading the lost pages raise SIGBUS) — the same condition `b3sum` and other
        // mmap-based tools run under. `put_move` hashes files it is about to take over and
        // checks afterwards that size and modification time did not change.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(at)
                .len(n as usize)
                .map(file)
        }
        .map_err(Error::io("cannot map", path))?;
        let _ = map.advise(memmap2::Advice::Sequential);
        hasher.update_rayon(&map);
        at += n;
    }
    Ok((hasher.finalize().into(), len))
}

/// Copies up to [`WINDOW`] bytes of `src` at offset `at` to the same offset of `out`, in the
/// kernel (`copy_file_range`) while `in_kernel` holds; where the kernel refuses (another file
/// system, an old kernel) it clears `in_kernel` and copies through a buffer, as every later
/// window then does. Returns how many bytes were copied, fewer only at the end of `src`.
fn copy_window(
    src: &File,
    out: &File,
    at: u64,
    in_kernel: &AtomicBool,
    path: &Path,
    tmp: &Path,
) -> Result<u64, Error> {
    use std::os::unix::fs::FileExt;
    let mut done = 0u64;
    while done < WINDOW && in_kernel.load(Ordering::Relaxed) {
        let mut from = at + done;
        let mut to = from;
        let want = (WINDOW - done) as usize;
        match rustix::fs::copy_file_range(src, Some(&mut from), out, Some(&mut to), want) {
            Ok(0) => return Ok(done),
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => in_kernel.store(false, Ordering::Relaxed),
        }
    }
    let mut buf = Vec::new();
    while done < WINDOW {
        if buf.is_empty() {
            buf = vec![0u8; 1 << 20];
        }
        let room = buf.len().min((WINDOW - done) as usize);
        let n = match src.read_at(&mut buf[..room], at + done) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot read", path)(e)),
        };
        out.write_all_at(&buf[..n], at + done)
            .map_err(Error::io("cannot write", tmp))?;
        done += n as u64;
    }
    Ok(done)
}

/// Asks the kernel to start writing `len` bytes of `file` at `at` to disk now, without waiting
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`), so the fsync that makes a blob durable
/// finds most of it written. Only a hint: the fsync still decides, so a failure is ignored.
fn start_writeback(file: &File, at: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on an open descriptor this function borrows; it reads no memory.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            at as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Hashes and copies `reader` into `out` chunk by chunk.
fn hash_copy(
    reader: &mut dyn Read,
    out: &mut File,
    tmp: &Path,
) -> Result<(Blake3Hash, u64), Error> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        // Fill the buffer fully (readers may return short reads) so each hashing step is big.
        let mut filled = 0;
        while filled < CHUNK {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("cannot read input for", tmp)(e)),
            }
        }
        if filled == 0 {
            break;
        }
        let chunk = &buf[..filled];
        // Hash on a second thread while this one writes: ingest then costs max(hash, write)
        // instead of their sum.
        std::thread::scope(|s| -> Result<(), Error> {
            let h = s.spawn(|| {
                hasher.update(chunk);
            });
            let w = out.write_all(chunk).map_err(Error::io("cannot write", tmp));
            h.join().map_err(|_| {
                Error::io("cannot hash", tmp)(io::Error::other("hashing thread panicked"))
            })?;
            w
        })?;
        total += filled as u64;
        if filled < CHUNK {
            break;
        }
    }
    Ok((hasher.finalize().into(), total))
}

impl BlobStore for LocalBlobStore {
    fn put_file(&self, path: &Path) -> Result<PutOutcome, Error> {
        LocalBlobStore::put_file(self, path)
    }

    fn put_move(&self, path: &Path) -> Result<PutOutcome, Error> {
        LocalBlobStore::put_move(self, path)
    }

    fn put(&self, reader: &mut dyn Read) -> Result<PutOutcome, Error> {
        self.require_dir()?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempfile_in(&self.dir)
            .map_err(Error::io("cannot create a temp file in", &self.dir))?;
        let tmp_path = tmp.path().to_path_buf();
        let (digest, bytes) = hash_copy(reader, tmp.as_file_mut(), &tmp_path)?;
        self.persist_temp(tmp, BlobHash(digest), bytes)
    }

    fn put_file_inspected(
        &self,
        path: &Path,
        inspect: &mut dyn Inspect,
    ) -> Result<PutOutcome, Error> {
        LocalBlobStore::put_file_inspected(self, path, inspect)
    }

    fn get(&self, hash: &BlobHash) -> Result<Box<dyn Read + Send>, Error> {
        let path = self.path_of(hash);
        match File::open(&path) {
            Ok(f) => Ok(Box::new(io::BufReader::with_capacity(1 << 20, f))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::BlobNotFound {
                hash: hash.to_string(),
                store: self.describe(),
            }),
            Err(e) => Err(Error::io("cannot open", path)(e)),
        }
    }

    fn size(&self, hash: &BlobHash) -> Result<Option<u64>, Error> {
        let path = self.path_of(hash);
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot stat", path)(e)),
        }
    }

    fn list(&self) -> Result<Vec<BlobHash>, Error> {
        let mut out = Vec::new();
        let rd = fs::read_dir(&self.dir).map_err(Error::io("cannot list", &self.dir))?;
        for d in rd {
            let d = d.map_err(Error::io("cannot list", &self.dir))?;
            let prefix = d.file_name().to_string_lossy().to_string();
            if prefix.len() != 2 || !d.path().is_dir() {
                continue;
            }
            for f in fs::read_dir(d.path()).map_err(Error::io("cannot list", d.path()))? {
                let f = f.map_err(Error::io("cannot list", d.path()))?;
                let text = format!("blake3:{prefix}{}", f.file_name().to_string_lossy());
                if let Ok(h) = text.parse::<BlobHash>() {
                    out.push(h);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::{BlobStore, Inspect};
    use crate::store::open_store_with_env;

    #[test]
    fn put_get_has_list_and_noop_on_existing() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalBlobStore::new(dir.path());
        let data = vec![7u8; CHUNK * 2 + 123];
        let put = store.put(&mut data.as_slice()).unwrap();
        assert_eq!(put.hash.0, Blake3Hash::of(&data));
        assert_eq!(put.bytes, data.len() as u64);
        assert!(!put.existed);
        let hex = put.hash.0.to_hex();
        assert!(dir.path().join(&hex[..2]).join(&hex[2..]).is_file());
        let again = store.put(&mut data.as_slice()).unwrap();
        assert!(again.existed);
        let mut back = Vec::new();
        store
            .get(&put.hash)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        assert!(store.has(&put.hash).unwrap());
        assert_eq!(store.list().unwrap(), vec![put.hash]);
        // No temp files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let missing = BlobHash(Blake3Hash::of(b"nope"));
        assert!(matches!(
            store.get(&missing),
            Err(Error::BlobNotFound { .. })
        ));
    }

    #[test]
    fn open_store_takes_directories_and_refuses_unknown_locations() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().to_str().unwrap().to_string();
        for loc in [text.clone(), format!("file://{text}")] {
            let store = open_store_with_env(&loc, &|_| None).unwrap();
            let put = store.put(&mut &b"abc"[..]).unwrap();
            assert!(store.has(&put.hash).unwrap(), "{loc}");
        }
        for bad in ["gs://bucket/x", "s3:///prefix"] {
            let err = open_store_with_env(bad, &|_| None).err().expect(bad);
            assert!(matches!(err, Error::ObjectStore { .. }), "{bad}: {err}");
        }
        let missing = dir.path().join("nope");
        assert!(open_store_with_env(missing.to_str().unwrap(), &|_| None).is_err());
    }

    #[test]
    fn parallel_file_hash_matches_blake3_at_window_edges() {
        let dir = tempfile::tempdir().unwrap();
        let w = WINDOW as usize;
        for len in [0, 1, CHUNK + 1, w - 1, w, w + 1, 2 * w + 5] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let path = dir.path().join(format!("f{len}"));
            fs::write(&path, &data).unwrap();
            let (hash, n) = hash_file_parallel(&File::open(&path).unwrap(), &path).unwrap();
            assert_eq!(
                (hash, n),
                (Blake3Hash::of(&data), len as u64),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn put_move_renames_the_file_into_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalBlobStore::new(dir.path().join("blobs"));
        fs::create_dir(dir.path().join("blobs")).unwrap();
        let data = vec![9u8; CHUNK + 17];
        let src = dir.path().join("big.bin");
        fs::write(&src, &data).unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let before = inode(&src);
        let put = store.put_move(&src).unwrap();
        assert_eq!(
            (put.hash.0, put.bytes, put.existed),
            (Blake3Hash::of(&data), data.len() as u64, false)
        );
        assert!(!src.exists(), "the file's name is gone");
        let blob = store.path_of(&put.hash);
        assert_eq!(inode(&blob), before, "renamed, not copied");
        assert_eq!(fs::read(&blob).unwrap(), data);

        // The same bytes again: already stored, the file is removed, nothing rewritten.
        fs::write(&src, &data).unwrap();
        let again = store.put_move(&src).unwrap();
        assert!(again.existed && !src.exists());
        assert_eq!(inode(&blob), before);
        assert_eq!(store.list().unwrap(), vec![put.hash]);
    }

    #[test]
    fn put_move_refuses_what_is_not_a_file_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("blobs")).unwrap();
        let store = LocalBlobStore::new(dir.path().join("blobs"));
        let missing = dir.path().join("missing.bin");
        let err = store.put_move(&missing).unwrap_err().to_string();
        assert!(
            err.contains("cannot open") && err.contains("missing.bin"),
            "{err}"
        );
        let sub = dir.path().join("a-directory");
        fs::create_dir(&sub).unwrap();
        let err = store.put_move(&sub).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(sub.is_dir());
        assert!(store.list().unwrap().is_empty());
        // No lab: refused before the file is touched.
        let src = dir.path().join("keep.bin");
        fs::write(&src, b"keep").unwrap();
        let nowhere = LocalBlobStore::new(dir.path().join("no-such-blobs"));
        assert!(matches!(nowhere.put_move(&src), Err(Error::NoLab { .. })));
        assert_eq!(fs::read(&src).unwrap(), b"keep");
    }

    /// Collects what a put shows it; refuses once it has seen `refuse_after` bytes.
    struct Seen {
        bytes: Vec<u8>,
        chunks: usize,
        ended: usize,
        refuse_after: Option<usize>,
    }

    impl Seen {
        fn new(refuse_after: Option<usize>) -> Self {
            Seen {
                bytes: Vec::new(),
                chunks: 0,
                ended: 0,
                refuse_after,
            }
        }
    }

    impl Inspect for Seen {
        fn bytes(&mut self, chunk: &[u8]) -> io::Result<()> {
            self.bytes.extend_from_slice(chunk);
            self.chunks += 1;
            match self.refuse_after {
                Some(n) if self.bytes.len() >= n => Err(io::Error::other("refused")),
                _ => Ok(()),
            }
        }
        fn end(&mut self) -> io::Result<()> {
            self.ended += 1;
            Ok(())
        }
    }

    /// A store that has only `put` of its own, so the trait's default
    /// `put_file_inspected` (the one S3 uses) runs.
    struct PutOnly(LocalBlobStore);

    impl BlobStore for PutOnly {
        fn put(&self, reader: &mut dyn Read) -> Result<PutOutcome, Error> {
            BlobStore::put(&self.0, reader)
        }
        fn get(&self, hash: &BlobHash) -> Result<Box<dyn Read + Send>, Error> {
            self.0.get(hash)
        }
        fn size(&self, hash: &BlobHash) -> Result<Option<u64>, Error> {
            self.0.size(hash)
        }
        fn list(&self) -> Result<Vec<BlobHash>, Error> {
            self.0.list()
        }
        fn describe(&self) -> String {
            self.0.describe()
        }
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(".tmp-"))
            .collect()
    }

    #[test]
    fn inspected_puts_show_every_byte_once_in_order_and_store_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        fs::create_dir(&blobs).unwrap();
        // Over two windows and not a multiple of a page, so the last window is short.
        let len = 2 * WINDOW as usize + 12_345;
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let src = dir.path().join("corpus.jsonl");
        fs::write(&src, &data).unwrap();
        let want = BlobHash(blake3::hash(&data).into());
        let local = LocalBlobStore::new(blobs.clone());
        let put_only = PutOnly(LocalBlobStore::new(blobs.clone()));
        for (name, store) in [("local", &local as &dyn BlobStore), ("default", &put_only)] {
            let mut seen = Seen::new(None);
            let out = store.put_file_inspected(&src, &mut seen).unwrap();
            assert_eq!(out.hash, want, "{name}");
            assert_eq!(out.bytes, len as u64, "{name}");
            assert!(seen.bytes == data, "{name}: the inspector saw other bytes");
            assert_eq!(seen.ended, 1, "{name}");
            assert_eq!(fs::read(local.path_of(&want)).unwrap().len(), len, "{name}");
            // The second put finds the blob stored.
            assert_eq!(out.existed, name == "default", "{name}");
        }
        let again = local.put_file_inspected(&src, &mut Seen::new(None));
        assert!(again.unwrap().existed);
        assert!(leftovers(&blobs).is_empty());
        assert_eq!(
            fs::read(&src).unwrap(),
            data,
            "the source is left as it was"
        );
    }

    #[test]
    fn windows_copy_the_same_bytes_in_the_kernel_and_through_a_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let len = WINDOW as usize + 4_097;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        let src_path = dir.path().join("src");
        fs::write(&src_path, &data).unwrap();
        let src = File::open(&src_path).unwrap();
        for kernel in [true, false] {
            let out_path = dir.path().join(format!("out-{kernel}"));
            let out = File::create(&out_path).unwrap();
            let flag = AtomicBool::new(kernel);
            let copy = |at| copy_window(&src, &out, at, &flag, &src_path, &out_path).unwrap();
            assert_eq!(copy(0), WINDOW, "kernel {kernel}");
            assert_eq!(copy(WINDOW), 4_097, "kernel {kernel}");
            assert_eq!(copy(WINDOW + 4_097), 0, "kernel {kernel}");
            assert!(fs::read(&out_path).unwrap() == data, "kernel {kernel}");
        }
    }

    #[test]
    fn a_refused_inspection_stores_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        fs::create_dir(&blobs).unwrap();
        let data = vec![7u8; WINDOW as usize + 10];
        let src = dir.path().join("bad.jsonl");
        fs::write(&src, &data).unwrap();
        let local = LocalBlobStore::new(blobs.clone());
        let put_only = PutOnly(LocalBlobStore::new(blobs.clone()));
        for store in [&local as &dyn BlobStore, &put_only] {
            let err = store
                .put_file_inspected(&src, &mut Seen::new(Some(1)))
                .unwrap_err()
                .to_string();
            assert!(err.contains("refused"), "{err}");
            assert!(store.list().unwrap().is_empty());
            assert!(leftovers(&blobs).is_empty());
        }
        // Not a regular file: a directory cannot be read (the default path's error).
        assert!(
            local
                .put_file_inspected(dir.path(), &mut Seen::new(None))
                .is_err()
        );
        assert!(local.list().unwrap().is_empty());
    }

    #[test]
    fn put_move_across_file_systems_copies_then_removes() {
        // /dev/shm is a tmpfs on Linux, so a rename from there into a store on disk fails with
        // EXDEV and the move falls back to a copy. Where it is the same file system the
        // rename path runs instead; the outcome must be the same either way.
        let shm = Path::new("/dev/shm");
        let src_dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let store = LocalBlobStore::new(dir.path());
        let src = src_dir.path().join("elsewhere.bin");
        fs::write(&src, b"from another file system").unwrap();
        let put = store.put_move(&src).unwrap();
        assert!(!src.exists());
        assert_eq!(
            fs::read(store.path_of(&put.hash)).unwrap(),
            b"from another file system"
        );
    }
}
