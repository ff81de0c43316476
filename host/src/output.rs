//! Bounded text: what the model sees of a long output. Owns the head+tail cut with its
//! `… N bytes omitted …` marker and the spill file that keeps the full text.
//!
//! [`BoundedCapture`] takes output as it streams, keeps at most `limit` bytes in memory
//! (the head and the tail) and writes everything to a spill file once the output is
//! longer than the limit, so a 100 MB output costs `limit` bytes of memory. Spill files
//! are private (0600, in 0700 directories): they hold raw output.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Text cut to a budget, and where the full text is when it was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounded {
    /// The text, or its head and tail around an omitted-bytes marker.
    pub text: String,
    /// Bytes of the full output.
    pub total_bytes: u64,
    /// File holding the full output, when `text` is a cut of it.
    pub full_output_path: Option<PathBuf>,
}

/// The marker put between head and tail.
pub fn omitted_marker(omitted: u64, full_output: &Path) -> String {
    format!(
        "\n… {omitted} bytes omitted (full output: {}) …\n",
        full_output.display()
    )
}

/// Cuts `text` to at most about `limit` bytes plus the marker, spilling the full text to
/// `spill_path` when it is longer.
pub fn cut(text: &str, limit: usize, spill_path: &Path) -> std::io::Result<Bounded> {
    let mut capture = BoundedCapture::new(limit, spill_path.to_path_buf());
    capture.push(text.as_bytes())?;
    capture.finish()
}

/// Appends `chunk` to `tail`, keeping only the newest `keep` bytes.
pub fn push_tail(tail: &mut VecDeque<u8>, chunk: &[u8], keep: usize) {
    if chunk.len() >= keep {
        tail.clear();
        tail.extend(&chunk[chunk.len() - keep..]);
    } else {
        tail.extend(chunk);
        let excess = tail.len().saturating_sub(keep);
        tail.drain(..excess);
    }
}

/// Streams output into head + tail memory and, past the limit, a spill file.
pub struct BoundedCapture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<BufWriter<File>>,
}

impl BoundedCapture {
    /// `limit` is the most bytes kept in memory and returned (a minimum of 2 applies).
    pub fn new(limit: usize, spill_path: PathBuf) -> Self {
        BoundedCapture {
            limit: limit.max(2),
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill_path,
            spill: None,
        }
    }

    /// Bytes seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Takes the next chunk of output.
    pub fn push(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.total += chunk.len() as u64;
        let spill = match &mut self.spill {
            Some(spill) => spill,
            None if self.head.len() + chunk.len() <= self.limit => {
                self.head.extend_from_slice(chunk);
                return Ok(());
            }
            None => self.start_spill()?,
        };
        spill.write_all(chunk)?;
        let head_len = self.limit / 2;
        let tail_len = self.limit - head_len;
        let take = head_len.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..take]);
        push_tail(&mut self.tail, &chunk[take..], tail_len);
        Ok(())
    }

    /// Past the limit for the first time: everything so far goes to the spill file,
    /// and memory keeps only the head half (and from now on a tail).
    fn start_spill(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        if let Some(dir) = self.spill_path.parent() {
            crate::session::private::create_dir_all(dir)?;
        }
        let file = crate::session::private::create_file(&self.spill_path)?;
        let mut file = BufWriter::with_capacity(64 * 1024, file);
        file.write_all(&self.head)?;
        let head_len = self.limit / 2;
        if self.head.len() > head_len {
            let overflow = self.head.split_off(head_len);
            self.tail.extend(overflow);
        }
        Ok(self.spill.insert(file))
    }

    /// The bounded text; flushes the spill file.
    pub fn finish(mut self) -> std::io::Result<Bounded> {
        let Some(mut file) = self.spill.take() else {
            return Ok(Bounded {
                text: String::from_utf8_lossy(&self.head).into_owned(),
                total_bytes: self.total,
                full_output_path: None,
            });
        };
        file.flush()?;
        let kept = (self.head.len() + self.tail.len()) as u64;
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        text.push_str(&omitted_marker(self.total - kept, &self.spill_path));
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        text.push_str(&String::from_utf8_lossy(&tail));
        Ok(Bounded {
            text,
            total_bytes: self.total,
            full_output_path: Some(self.spill_path),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole_and_not_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.txt");
        let bounded = cut("hello\n", 100, &spill).unwrap();
        assert_eq!(bounded.text, "hello\n");
        assert_eq!(bounded.full_output_path, None);
        assert!(!spill.exists());
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.txt");
        let mut capture = BoundedCapture::new(10, spill.clone());
        for chunk in ["abc", "defgh", "ijklmnop", "qrstuvwxyz", "0123"] {
            capture.push(chunk.as_bytes()).unwrap();
        }
        let bounded = capture.finish().unwrap();
        let full = "abcdefghijklmnopqrstuvwxyz0123";
        assert_eq!(std::fs::read_to_string(&spill).unwrap(), full);
        assert_eq!(bounded.total_bytes, 30);
        assert!(
            bounded.text.starts_with("abcde\n… 20 bytes omitted"),
            "{}",
            bounded.text
        );
        assert!(bounded.text.ends_with("…\nz0123"), "{}", bounded.text);
        assert_eq!(bounded.full_output_path, Some(spill));
    }

    #[test]
    fn a_first_chunk_longer_than_the_limit_is_cut_too() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.txt");
        let text: String = ('a'..='z').collect();
        let bounded = cut(&text, 10, &spill).unwrap();
        assert!(
            bounded.text.starts_with("abcde\n… 16 bytes omitted"),
            "{}",
            bounded.text
        );
        assert!(bounded.text.ends_with("…\nvwxyz"), "{}", bounded.text);
        assert_eq!(std::fs::read_to_string(&spill).unwrap(), text);
    }

    #[test]
    fn a_cut_through_a_multibyte_character_stays_valid_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = "é".repeat(50);
        let bounded = cut(&text, 11, &dir.path().join("s")).unwrap();
        assert!(bounded.text.contains("bytes omitted"));
    }
}
