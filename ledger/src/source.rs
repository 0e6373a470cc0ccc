//! Read access to a lab's published layout (`log/...`, `blobs/...`, `vkey`) from a directory or
//! over HTTP(S), so one audit serves local labs, published git mirrors and web servers alike.
//!
//! A [`LogSource`] only fetches bytes by relative path; it trusts nothing and checks nothing
//! (that is `audit`). Paths are the lab layout: `log/checkpoint`, `log/tile/0/000.p/5`,
//! `blobs/ab/<62 hex>`; an HTTP source appends them to its base URL.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;
use crate::tiles::{TileId, TileKind};

/// The most a read of one published file may return, and what that file is, for the message
/// when a source serves more. Every read of a [`LogSource`] names one, so a hostile server
/// cannot make an auditor read without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    /// Bytes.
    pub max: u64,
    /// What the file is (`a checkpoint note`).
    pub what: &'static str,
}

impl ReadLimit {
    /// `log/checkpoint`: origin, size, root and signature lines. C2SP sets no hard cap; 64 KiB
    /// holds hundreds of cosignatures.
    pub const CHECKPOINT: ReadLimit = ReadLimit {
        max: 64 * 1024,
        what: "a checkpoint note",
    };
    /// `vkey`: one `name+id+base64` line.
    pub const VKEY: ReadLimit = ReadLimit {
        max: 4096,
        what: "a verifier key file",
    };
    /// `blobs/OMITTED`: one hash per line.
    pub const OMITTED: ReadLimit = ReadLimit {
        max: 64 << 20,
        what: "the list of omitted blobs",
    };

    /// A tile: a hash tile is exactly `width` x 32 bytes; an entry bundle at most `width`
    /// entries of a 2-byte length and up to 65,535 bytes each.
    pub fn tile(id: TileId) -> ReadLimit {
        let width = u64::from(id.width);
        match id.kind {
            TileKind::Hashes(_) => ReadLimit {
                max: width * 32,
                what: "a hash tile of that width",
            },
            TileKind::Entries => ReadLimit {
                max: width * (2 + u64::from(u16::MAX)),
                what: "an entry bundle of that width",
            },
        }
    }

    /// A blob: what its entry says, or the auditor's cap.
    pub fn blob(max: u64) -> ReadLimit {
        ReadLimit {
            max,
            what: "that blob",
        }
    }
}

/// Where a lab's public files are read from.
pub trait LogSource {
    /// Opens a file for streaming; `Ok(None)` when it does not exist. The caller reads at most
    /// `limit.max` bytes of it; a remote source also refuses a longer declared length and
    /// bounds the transfer's time by it.
    fn open(&self, rel: &str, limit: ReadLimit) -> Result<Option<Box<dyn Read + '_>>, Error>;

    /// Reads a whole file of at most `limit.max` bytes; `Ok(None)` when it does not exist,
    /// [`Error::TooLarge`] (after reading one byte past the limit, no more) when it is longer.
    fn read(&self, rel: &str, limit: ReadLimit) -> Result<Option<Vec<u8>>, Error> {
        match self.open(rel, limit)? {
            None => Ok(None),
            Some(r) => {
                let mut out = Vec::new();
                r.take(limit.max.saturating_add(1))
                    .read_to_end(&mut out)
                    .map_err(|e| self.read_error(rel, e))?;
                if out.len() as u64 > limit.max {
                    return Err(Error::TooLarge {
                        location: self.locate(rel),
                        limit: limit.max,
                        what: limit.what,
                    });
                }
                Ok(Some(out))
            }
        }
    }

    /// Names the source and the file for messages (a path or a URL).
    fn locate(&self, rel: &str) -> String;

    /// An error while reading `rel`.
    fn read_error(&self, rel: &str, e: io::Error) -> Error;
}

/// A lab directory (or a published copy of one).
#[derive(Debug, Clone)]
pub struct DirSource {
    /// The lab directory.
    pub root: PathBuf,
}

impl LogSource for DirSource {
    fn open(&self, rel: &str, _limit: ReadLimit) -> Result<Option<Box<dyn Read + '_>>, Error> {
        let path = self.root.join(rel);
        match File::open(&path) {
            Ok(f) => Ok(Some(Box::new(io::BufReader::with_capacity(1 << 20, f)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot open", path)(e)),
        }
    }

    fn locate(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    fn read_error(&self, rel: &str, e: io::Error) -> Error {
        Error::io("cannot read", self.root.join(rel))(e)
    }
}

/// The same layout served over HTTP(S) (`<base>/log/checkpoint`, ...).
///
/// Time is bounded as well as size: 15 s to connect, 30 s for the response's head, 30 s for
/// any one read, and a whole body must arrive within 30 s plus one second per MiB its limit
/// allows (a server slower than 1 MiB/s on a large blob fails the audit; run it nearer the
/// server or from a published copy).
#[derive(Debug)]
pub struct HttpSource {
    base: String,
    agent: ureq::Agent,
}

/// Time allowed for a response's head, any one read, and a small body.
const HTTP_STEP: Duration = Duration::from_secs(30);

impl HttpSource {
    /// A source rooted at `base` (`https://lab.example/` or `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(HTTP_STEP))
            .timeout_per_read(Some(HTTP_STEP))
            .max_redirects(5)
            .build()
            .into();
        Self {
            base: base.trim_end_matches('/').to_string(),
            agent,
        }
    }
}

impl LogSource for HttpSource {
    fn open(&self, rel: &str, limit: ReadLimit) -> Result<Option<Box<dyn Read + '_>>, Error> {
        let url = self.locate(rel);
        let body_time = HTTP_STEP + Duration::from_secs(limit.max >> 20);
        let resp = self
            .agent
            .get(&url)
            .config()
            .timeout_recv_body(Some(body_time))
            .build()
            .call()
            .map_err(|e| Error::Http {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            code => {
                return Err(Error::Http {
                    url,
                    reason: format!("HTTP status {code}"),
                });
            }
        }
        let declared = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit.max) {
            return Err(Error::TooLarge {
                location: url,
                limit: limit.max,
                what: limit.what,
            });
        }
        Ok(Some(Box::new(resp.into_body().into_reader())))
    }

    fn locate(&self, rel: &str) -> String {
        format!("{}/{}", self.base, rel)
    }

    fn read_error(&self, rel: &str, e: io::Error) -> Error {
        Error::Http {
            url: self.locate(rel),
            reason: e.to_string(),
        }
    }
}

/// A store holding a lab's public layout below some prefix.
pub trait Bucket: LogSource + Send + Sync {
    /// Writes `bytes` at `rel` (`log/checkpoint`, `log/tile/0/000`), replacing what is there.
    fn write(&self, rel: &str, bytes: Vec<u8>) -> Result<(), Error>;
    /// Deletes `rel`; deleting what is absent is no error.
    fn remove(&self, rel: &str) -> Result<(), Error>;
    /// Every file below `prefix` (`log/tile/`), as paths relative to the layout's root.
    fn files(&self, prefix: &str) -> Result<Vec<String>, Error>;
    /// The bucket and prefix, for messages (`s3://bucket/prefix`).
    fn name(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_past_its_limit_is_too_large_and_stops() {
        let lab = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(lab.path().join("log")).unwrap();
        std::fs::write(lab.path().join("log/checkpoint"), vec![b'x'; 100]).unwrap();
        let src = DirSource {
            root: lab.path().to_path_buf(),
        };
        let limit = ReadLimit {
            max: 99,
            what: "a checkpoint note",
        };
        match src.read("log/checkpoint", limit) {
            Err(Error::TooLarge {
                location,
                limit,
                what,
            }) => {
                assert!(location.ends_with("log/checkpoint"), "{location}");
                assert_eq!((limit, what), (99, "a checkpoint note"));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let exact = ReadLimit { max: 100, ..limit };
        assert_eq!(
            src.read("log/checkpoint", exact).unwrap().unwrap().len(),
            100
        );
    }

    #[test]
    fn tile_limits_follow_the_format() {
        let hashes = TileId {
            kind: TileKind::Hashes(0),
            index: 0,
            width: 256,
        };
        assert_eq!(ReadLimit::tile(hashes).max, 8192);
        let bundle = TileId {
            kind: TileKind::Entries,
            index: 0,
            width: 3,
        };
        assert_eq!(ReadLimit::tile(bundle).max, 3 * 65_537);
    }
}
