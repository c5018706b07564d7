//! The receipts index: one file per recipe (`runs/<recipe>/receipts.idx`) that says which steps
//! have a receipt and with which fingerprint digest, so a no-op plan reads one file instead of one
//! receipt per step.
//!
//! The per-step receipts stay the source of truth (each written atomically when its step
//! finished; a kill leaves them consistent). The index is only a cache of the `receipts/`
//! directory, trusted while that directory is unchanged: it records the directory's mtime, and
//! any receipt written, replaced or removed since (by a run, a kill mid-run, or a hand) changes
//! the mtime and sends the plan back to the receipt files. A run that is about to change
//! receipts also deletes the index first. A digest that does not match, or a step the index
//! cannot vouch for, is always answered from the receipt file itself.
//!
//! Format (text, one step a line, ids never contain whitespace):
//!
//! ```text
//! kiln-receipts-index 1 <receipts dir mtime: secs> <nanos>
//! <step id> <digest> <finished unix secs> <duration ms>    # a receipt
//! <step id> ?                                           # a receipt this index does not describe
//! end <number of step lines>
//! ```

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

// Timestamps of files come from a coarse clock (a few ms behind, or whole seconds on some file
// systems): a directory changed within the racy window may change again within the same
// timestamp, so an index is not built on it.
use crate::hash::racy_window;

const MAGIC: &str = "kiln-receipts-index 1";

/// A directory's modification time (seconds, nanoseconds), `None` when it does not exist.
pub(super) type DirStamp = Option<(i64, i64)>;

pub(super) fn dir_stamp(dir: &Path) -> DirStamp {
    std::fs::metadata(dir)
        .ok()
        .map(|m| (m.mtime(), m.mtime_nsec()))
}

/// What a receipt says, as far as the plan needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Summary {
    pub(super) digest: String,
    pub(super) finished_unix: u64,
    pub(super) duration_ms: u64,
}

/// What is known about one step's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    Present(Summary),
    Absent,
    /// A receipt exists; read it to know more.
    Unknown,
}

/// The receipts of one recipe as this process knows them: from the index, from receipt files
/// read, and from its own writes.
#[derive(Debug, Default)]
pub(super) struct Known {
    loaded: bool,
    /// The index vouched for the whole directory: a step it does not list has no receipt.
    pub(super) complete: bool,
    pub(super) entries: HashMap<String, Entry>,
    /// The directory's mtime when the index was found unusable, and the clock then: a plan
    /// without the run lock may write a new index only if nothing changed since.
    pub(super) stamp_at_load: DirStamp,
    pub(super) clock_at_load: Option<SystemTime>,
}

impl Known {
    pub(super) fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// Load the index once; trust it only while `receipts_dir` has the mtime it records.
    pub(super) fn load(&mut self, index: &Path, receipts_dir: &Path) {
        if self.loaded {
            return;
        }
        self.loaded = true;
        self.clock_at_load = Some(SystemTime::now());
        let stamp = dir_stamp(receipts_dir);
        self.stamp_at_load = stamp;
        let Ok(text) =
            crate::bounded::read_text(index, "the receipts index", crate::bounded::INDEX_CAP)
        else {
            return;
        };
        if let Some(entries) = parse(&text, stamp) {
            self.entries = entries;
            self.complete = true;
        }
    }

    /// The answer for `id` without reading its receipt, if there is one.
    pub(super) fn get(&self, id: &str) -> Option<&Entry> {
        match self.entries.get(id) {
            Some(Entry::Unknown) => None,
            Some(e) => Some(e),
            None if self.complete => Some(&Entry::Absent),
            None => None,
        }
    }

    /// Whether a new index may be written for `receipts_dir`, and the mtime to record. The
    /// run-lock holder (no other kiln changes receipts) records the directory as it is now; anyone
    /// else only if the directory has not changed since this process first looked. Either way
    /// not while the directory's mtime is recent: a change within the same coarse timestamp
    /// would go unseen (git's "racy" rule); the next plan writes the index then.
    pub(super) fn stamp_for_save(&self, receipts_dir: &Path, exclusive: bool) -> Option<DirStamp> {
        let clock = if exclusive {
            SystemTime::now()
        } else {
            self.clock_at_load?
        };
        let now = dir_stamp(receipts_dir);
        if !exclusive && now != self.stamp_at_load {
            return None;
        }
        if let Some((secs, nanos)) = now {
            let mtime = SystemTime::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(secs).ok()?)
                + Duration::from_nanos(u64::try_from(nanos).ok()?);
            if mtime + racy_window() > clock {
                return None;
            }
        }
        Some(now)
    }
}

fn parse(text: &str, stamp: DirStamp) -> Option<HashMap<String, Entry>> {
    let mut lines = text.lines();
    let header = lines.next()?.strip_prefix(MAGIC)?;
    let recorded = match header.trim() {
        "none" => None,
        t => {
            let (s, n) = t.split_once(' ')?;
            Some((s.parse().ok()?, n.parse().ok()?))
        }
    };
    if recorded != stamp {
        return None;
    }
    let mut entries = HashMap::new();
    for line in lines {
        let mut f = line.split(' ');
        let id = f.next()?;
        if id == "end" {
            let count: usize = f.next()?.parse().ok()?;
            return (count == entries.len()).then_some(entries);
        }
        let entry = match f.next()? {
            "?" => Entry::Unknown,
            digest => Entry::Present(Summary {
                digest: digest.to_string(),
                finished_unix: f.next()?.parse().ok()?,
                duration_ms: f.next()?.parse().ok()?,
            }),
        };
        entries.insert(id.to_string(), entry);
    }
    // No `end` line: cut short.
    None
}

/// The index text for `entries` (present or unknown receipts only), recording `stamp`.
pub(super) fn render<'a>(
    stamp: DirStamp,
    entries: impl Iterator<Item = (&'a str, &'a Entry)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    let _ = match stamp {
        Some((s, n)) => writeln!(out, "{MAGIC} {s} {n}"),
        None => writeln!(out, "{MAGIC} none"),
    };
    let mut count = 0;
    for (id, e) in entries {
        let _ = match e {
            Entry::Present(s) => writeln!(
                out,
                "{id} {} {} {}",
                s.digest, s.finished_unix, s.duration_ms
            ),
            Entry::Unknown => writeln!(out, "{id} ?"),
            Entry::Absent => continue,
        };
        count += 1;
    }
    let _ = writeln!(out, "end {count}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(d: &str) -> Entry {
        Entry::Present(Summary {
            digest: d.into(),
            finished_unix: 7,
            duration_ms: 3,
        })
    }

    #[test]
    fn round_trips_and_rejects_a_changed_directory_or_a_torn_file() {
        let stamp = Some((1_700_000_000, 42));
        let a = present("abc");
        let text = render(
            stamp,
            [("a", &a), ("b", &Entry::Unknown), ("c", &Entry::Absent)].into_iter(),
        );
        let text = String::from_utf8(text).unwrap();
        let parsed = parse(&text, stamp).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed["a"], a);
        assert_eq!(parsed["b"], Entry::Unknown);
        assert!(parse(&text, Some((1_700_000_000, 43))).is_none());
        assert!(parse(&text, None).is_none());
        let torn = &text[..text.len() - 6];
        assert!(parse(torn, stamp).is_none());
        let known = Known {
            complete: true,
            entries: parsed,
            ..Known::default()
        };
        assert_eq!(known.get("a"), Some(&a));
        assert_eq!(known.get("b"), None);
        assert_eq!(known.get("zzz"), Some(&Entry::Absent));
    }
}
