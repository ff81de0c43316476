//! The records kept on disk for one workspace: `journal.jsonl`, one line per piece of a
//! call's record as it is made (a call's record may come in several: what it changed
//! itself, then what a job or terminal it started changed later), merged by call when
//! read; and `index.json`, what every recorded path was when it was last written (with
//! how far into the journal it is), so a restart compares the workspace with what it
//! kept instead of reading every file again.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{PathState, Stamp};

/// One path's change within a record: what it was before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub before: PathState,
    pub after: PathState,
    /// Made while a call of another owner ran too: no owner may undo it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// One line of the journal: a piece of one record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Segment {
    /// `SESSION/call-N`, or `SESSION/outside-N` for changes no call made.
    pub id: String,
    /// The owner whose call made it (none: made outside dsh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Its place in the journal's order.
    pub seq: u64,
    /// When it was written (milliseconds since the epoch).
    pub at_ms: u64,
    #[serde(default)]
    pub changes: BTreeMap<String, Change>,
    /// What could not be recorded, each said whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_recorded: Vec<String>,
    /// The records this one undid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undoes: Vec<String>,
}

/// A call's whole record: its segments merged.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: String,
    pub owner: Option<String>,
    pub tool: Option<String>,
    /// Its first segment's place.
    pub seq: u64,
    pub at_ms: u64,
    pub changes: BTreeMap<String, Change>,
    pub not_recorded: Vec<String>,
    pub undoes: Vec<String>,
    /// The record that undid it, when one did.
    pub undone_by: Option<String>,
}

impl Record {
    fn from_segment(segment: Segment) -> Record {
        Record {
            id: segment.id,
            owner: segment.owner,
            tool: segment.tool,
            seq: segment.seq,
            at_ms: segment.at_ms,
            changes: segment.changes,
            not_recorded: segment.not_recorded,
            undoes: segment.undoes,
            undone_by: None,
        }
    }

    /// Adds a later segment of the same record: a path's first `before` stays, its
    /// last `after` wins.
    fn merge(&mut self, segment: Segment) {
        self.at_ms = segment.at_ms;
        for (path, change) in segment.changes {
            match self.changes.get_mut(&path) {
                Some(kept) => {
                    kept.after = change.after;
                    kept.shared |= change.shared;
                }
                None => {
                    self.changes.insert(path, change);
                }
            }
        }
        self.changes
            .retain(|_, change| change.before != change.after);
        self.not_recorded.extend(segment.not_recorded);
        self.undoes.extend(segment.undoes);
    }
}

/// The records of one workspace, as read from its journal.
#[derive(Debug, Default)]
pub struct Records {
    pub list: Vec<Record>,
    by_id: HashMap<String, usize>,
    pub next_seq: u64,
}

impl Records {
    pub fn add(&mut self, segment: Segment) {
        self.next_seq = self.next_seq.max(segment.seq + 1);
        let undoes = segment.undoes.clone();
        let id = segment.id.clone();
        match self.by_id.get(&segment.id) {
            Some(&at) => self.list[at].merge(segment),
            None => {
                self.by_id.insert(segment.id.clone(), self.list.len());
                let mut record = Record::from_segment(segment);
                record
                    .changes
                    .retain(|_, change| change.before != change.after);
                self.list.push(record);
            }
        }
        for undone in undoes {
            if let Some(&at) = self.by_id.get(&undone) {
                self.list[at].undone_by = Some(id.clone());
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<&Record> {
        self.by_id.get(id).map(|&at| &self.list[at])
    }
}

/// The journal file: appended to by line, read from where this process last read.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    /// How far this process has read it.
    read_to: u64,
}

impl Journal {
    pub fn new(path: PathBuf) -> Journal {
        Journal { path, read_to: 0 }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads what was appended since the last read (by this process or another) into
    /// `records`; returns the segments read, each with the journal's length after it,
    /// for the index to follow.
    pub fn catch_up(&mut self, records: &mut Records) -> Vec<(u64, Segment)> {
        let mut read = Vec::new();
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return read;
        };
        let Ok(len) = file.metadata().map(|meta| meta.len()) else {
            return read;
        };
        if len < self.read_to {
            // Rewritten by a start that dropped old records: read it again whole.
            self.read_to = 0;
            *records = Records::default();
        }
        if len == self.read_to {
            return read;
        }
        let mut text = Vec::new();
        if file.seek(std::io::SeekFrom::Start(self.read_to)).is_err()
            || file.read_to_end(&mut text).is_err()
        {
            return read;
        }
        // Only whole lines: a line being appended now is read next time.
        let whole = text
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        let mut end = self.read_to;
        for line in text[..whole].split(|b| *b == b'\n') {
            end += line.len() as u64 + 1;
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Segment>(line) {
                Ok(segment) => {
                    records.add(segment.clone());
                    read.push((end, segment));
                }
                Err(error) => {
                    tracing::warn!(%error, path = %self.path.display(), "skipping a journal line that does not parse")
                }
            }
        }
        self.read_to += whole as u64;
        read
    }

    /// Appends `segment` as one line (one write, so lines of processes appending side
    /// by side never interleave).
    pub fn append(&mut self, segment: &Segment) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(segment).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = crate::private::open_file(
            &self.path,
            std::fs::OpenOptions::new().append(true).create(true),
        )?;
        file.write_all(&line)
    }

    /// The bytes read so far (where an index written now stands).
    pub fn read_to(&self) -> u64 {
        self.read_to
    }

    /// Rewrites the journal with only `keep`'s records, one segment each (a start
    /// dropping records past `[undo] days_kept`).
    pub fn rewrite(&mut self, keep: &[Record]) -> std::io::Result<()> {
        let mut text = Vec::new();
        for record in keep {
            let segment = Segment {
                id: record.id.clone(),
                owner: record.owner.clone(),
                tool: record.tool.clone(),
                seq: record.seq,
                at_ms: record.at_ms,
                changes: record.changes.clone(),
                not_recorded: record.not_recorded.clone(),
                undoes: record.undoes.clone(),
            };
            text.extend(serde_json::to_vec(&segment).map_err(std::io::Error::other)?);
            text.push(b'\n');
        }
        crate::private::write_file_atomic(&self.path, &text)?;
        self.read_to = text.len() as u64;
        Ok(())
    }
}

/// What a recorded path was when last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    pub state: PathState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<Stamp>,
}

/// `index.json`: every recorded path's state, and how far into the journal that holds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IndexFile {
    pub journal_bytes: u64,
    pub paths: HashMap<String, Known>,
}

impl IndexFile {
    pub fn read(path: &Path) -> Option<IndexFile> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::private::write_file_atomic(path, &bytes)
    }
}
