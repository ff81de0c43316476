//! Bounded text: what the model sees of a long output. Owns the head+tail cut with its
//! `… N bytes omitted …` marker and the spill file that keeps the full text.
//!
//! [`BoundedCapture`] takes output as it streams, keeps at most `limit` bytes in memory
//! (the head and the tail) and writes everything to a spill file once the output is
//! longer than the limit, so a 100 MB output costs `limit` bytes of memory. The spill
//! file has a cap too (`[limits] max_spill_bytes`, 1 GiB unless set): past it the file
//! keeps the first bytes only, and the omitted-bytes marker says the file was cut.
//! Spill files are private (0600, in 0700 directories): they hold raw output.
//!
//! When the spill file cannot be written (a full disk), the capture still answers: it
//! keeps the head and tail it has, removes what was written of the file (it is not the
//! full output, and it holds space), and the marker says `spill failed: …` and why, in
//! the words the pipeline's own spill failure uses (see `pipeline::s5_finalize`).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A spill file's cap when none is set (the default of `[limits] max_spill_bytes`).
pub const DEFAULT_SPILL_CAP: u64 = 1 << 30;

/// Text cut to a budget, and where the full text is when it was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounded {
    /// The text, or its head and tail around an omitted-bytes marker.
    pub text: String,
    /// Bytes of the full output.
    pub total_bytes: u64,
    /// File holding the full output (or its first bytes, see `spill_cut`), when `text`
    /// is a cut of it.
    pub full_output_path: Option<PathBuf>,
    /// True when the output was longer than the spill file's cap: the file holds only
    /// the first bytes of it.
    pub spill_cut: bool,
    /// Why the spill file could not be written, when it could not (`text` is then a cut
    /// whose marker says so, and `full_output_path` is `None`: the file was removed).
    pub spill_error: Option<String>,
}

/// The marker put between head and tail.
pub fn omitted_marker(omitted: u64, full_output: &Path) -> String {
    format!(
        "\n… {omitted} bytes omitted (full output: {}) …\n",
        full_output.display()
    )
}

/// The marker put between head and tail when the spill file stopped at its cap.
pub fn omitted_marker_cut(omitted: u64, spill: &Path, cap: u64, total: u64) -> String {
    format!(
        "\n… {omitted} bytes omitted (full output cut at the spill cap, [limits] max_spill_bytes: {} holds its first {cap} of {total} bytes) …\n",
        spill.display()
    )
}

/// The marker put between head and tail when the spill file could not be written: the
/// omitted bytes are lost, and the marker says so and why.
pub fn omitted_marker_spill_failed(omitted: u64, spill: &Path, error: &std::io::Error) -> String {
    format!(
        "\n… {omitted} bytes omitted (spill failed: the full output could not be kept in {}: {}) …\n",
        spill.display(),
        spill_error_text(error)
    )
}

/// Why a spill failed, in words: a full disk is named as such.
pub fn spill_error_text(error: &std::io::Error) -> String {
    if error.raw_os_error() == Some(dsh_launch::os::ENOSPC) {
        format!("no space left on the device: {error}")
    } else {
        error.to_string()
    }
}

/// Cuts `text` to at most about `limit` bytes plus the marker, spilling the full text to
/// `spill_path` when it is longer.
pub fn cut(text: &str, limit: usize, spill_path: &Path) -> Bounded {
    let mut capture = BoundedCapture::new(limit, spill_path.to_path_buf());
    capture.push(text.as_bytes());
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

/// Streams output into head + tail memory and, past the limit, a spill file of at most
/// `spill_cap` bytes.
pub struct BoundedCapture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<BufWriter<File>>,
    /// Past the limit: the head is at most half of it and a tail is kept (with or
    /// without a spill file).
    over: bool,
    /// The error that stopped the spill file; it has been removed.
    spill_failed: Option<std::io::Error>,
    spill_cap: u64,
    /// Bytes written to the spill file.
    spilled: u64,
}

/// Writes as much of `bytes` as fits under `cap` (counting `written`).
fn write_capped(
    file: &mut BufWriter<File>,
    written: &mut u64,
    cap: u64,
    bytes: &[u8],
) -> std::io::Result<()> {
    let room = cap.saturating_sub(*written).min(bytes.len() as u64) as usize;
    if room > 0 {
        file.write_all(&bytes[..room])?;
        *written += room as u64;
    }
    Ok(())
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
            over: false,
            spill_failed: None,
            spill_cap: DEFAULT_SPILL_CAP,
            spilled: 0,
        }
    }

    /// Sets the most bytes the spill file holds (a minimum of 1 applies).
    pub fn spill_cap(mut self, bytes: u64) -> Self {
        self.spill_cap = bytes.max(1);
        self
    }

    /// Bytes seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Takes the next chunk of output. A spill file that cannot be written is not an
    /// error: the capture goes on in memory (head and tail) and says so at the end.
    pub fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if !self.over {
            if self.head.len() + chunk.len() <= self.limit {
                self.head.extend_from_slice(chunk);
                return;
            }
            self.start_spill();
        }
        if let Some(spill) = self.spill.as_mut() {
            if let Err(error) = write_capped(spill, &mut self.spilled, self.spill_cap, chunk) {
                self.fail_spill(error);
            }
        }
        let head_len = self.limit / 2;
        let tail_len = self.limit - head_len;
        let take = head_len.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..take]);
        push_tail(&mut self.tail, &chunk[take..], tail_len);
    }

    /// Past the limit for the first time: everything so far goes to the spill file,
    /// and memory keeps only the head half (and from now on a tail).
    fn start_spill(&mut self) {
        self.over = true;
        let opened = match self.spill_path.parent() {
            Some(dir) => crate::private::create_dir_all(dir),
            None => Ok(()),
        }
        .and_then(|()| crate::private::create_file(&self.spill_path))
        .and_then(|file| {
            let mut file = BufWriter::with_capacity(64 * 1024, file);
            write_capped(&mut file, &mut self.spilled, self.spill_cap, &self.head)?;
            Ok(file)
        });
        match opened {
            Ok(file) => self.spill = Some(file),
            Err(error) => self.fail_spill(error),
        }
        let head_len = self.limit / 2;
        if self.head.len() > head_len {
            let overflow = self.head.split_off(head_len);
            self.tail.extend(overflow);
        }
    }

    /// The spill file cannot be written: what was written of it goes (it is not the
    /// full output, and it holds space a full disk needs), and the capture goes on in
    /// memory.
    fn fail_spill(&mut self, error: std::io::Error) {
        tracing::warn!(%error, path = %self.spill_path.display(), "cannot spill a long output; keeping its head and tail only");
        if let Some(file) = self.spill.take() {
            // Its buffered bytes are dropped unwritten.
            let (file, _) = file.into_parts();
            drop(file);
        }
        if let Err(error) = std::fs::remove_file(&self.spill_path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, path = %self.spill_path.display(), "cannot remove a partial spill file");
            }
        }
        self.spill_failed.get_or_insert(error);
    }

    /// The marker of a spill file cut at its cap. It is longer than the usual one, so
    /// head and tail give up that many bytes: the text stays as long as a plain cut.
    /// The same holds for the marker of a spill that failed (`make` gives the marker
    /// for a count of omitted bytes).
    fn long_marker(&mut self, make: impl Fn(u64) -> String) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let plain = omitted_marker(self.total - kept, &self.spill_path).len();
        let mut trim = 0usize;
        let marker = loop {
            let kept = kept.saturating_sub(trim as u64);
            let marker = make(self.total - kept);
            let need = marker.len().saturating_sub(plain);
            if need <= trim {
                break marker;
            }
            trim = need;
        };
        let from_head = (trim / 2).min(self.head.len());
        self.head.truncate(self.head.len() - from_head);
        let from_tail = (trim - from_head).min(self.tail.len());
        self.tail.drain(..from_tail);
        marker
    }

    /// The bounded text; flushes the spill file. A spill file that could not be written
    /// (here or before) is not an error: the text says so in its marker.
    pub fn finish(mut self) -> Bounded {
        if !self.over {
            return Bounded {
                text: String::from_utf8_lossy(&self.head).into_owned(),
                total_bytes: self.total,
                full_output_path: None,
                spill_cut: false,
                spill_error: None,
            };
        }
        if let Some(mut file) = self.spill.take() {
            match file.flush() {
                Ok(()) => drop(file),
                Err(error) => {
                    self.spill = Some(file);
                    self.fail_spill(error);
                }
            }
        }
        let failed = self.spill_failed.take();
        let spill_cut = failed.is_none() && self.spilled < self.total;
        let marker = if let Some(error) = &failed {
            let spill = self.spill_path.clone();
            self.long_marker(|omitted| omitted_marker_spill_failed(omitted, &spill, error))
        } else if spill_cut {
            let (spill, spilled, total) = (self.spill_path.clone(), self.spilled, self.total);
            self.long_marker(|omitted| omitted_marker_cut(omitted, &spill, spilled, total))
        } else {
            let kept = (self.head.len() + self.tail.len()) as u64;
            omitted_marker(self.total - kept, &self.spill_path)
        };
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        text.push_str(&marker);
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        text.push_str(&String::from_utf8_lossy(&tail));
        Bounded {
            text,
            total_bytes: self.total,
            full_output_path: failed.is_none().then_some(self.spill_path),
            spill_cut,
            spill_error: failed.as_ref().map(spill_error_text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole_and_not_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.txt");
        let bounded = cut("hello\n", 100, &spill);
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
            capture.push(chunk.as_bytes());
        }
        let bounded = capture.finish();
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
        let bounded = cut(&text, 10, &spill);
        assert!(
            bounded.text.starts_with("abcde\n… 16 bytes omitted"),
            "{}",
            bounded.text
        );
        assert!(bounded.text.ends_with("…\nvwxyz"), "{}", bounded.text);
        assert_eq!(std::fs::read_to_string(&spill).unwrap(), text);
    }

    #[test]
    fn the_spill_file_stops_at_its_cap_and_the_marker_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let full: Vec<u8> = (0..3000u32).map(|n| b'a' + (n % 26) as u8).collect();
        let capture_of = |name: &str, cap: u64| {
            let mut capture = BoundedCapture::new(400, dir.path().join(name)).spill_cap(cap);
            for chunk in full.chunks(7) {
                capture.push(chunk);
            }
            capture.finish()
        };
        let whole = capture_of("whole.txt", 1 << 20);
        let capped = capture_of("cappd.txt", 1000);
        assert_eq!(
            std::fs::read(dir.path().join("cappd.txt")).unwrap(),
            &full[..1000]
        );
        assert!(capped.spill_cut && !whole.spill_cut);
        assert_eq!(capped.total_bytes, 3000);
        assert!(
            capped.text.contains("cut at the spill cap")
                && capped.text.contains("holds its first 1000 of 3000 bytes"),
            "{}",
            capped.text
        );
        assert!(capped.text.starts_with("abcdefgh"), "{}", capped.text);
        assert!(
            capped
                .text
                .ends_with(std::str::from_utf8(&full[2900..]).unwrap()),
            "the newest bytes are kept: {}",
            capped.text
        );
        assert!(
            capped.text.len() <= whole.text.len(),
            "the longer marker costs head and tail bytes, not budget: {} > {}",
            capped.text.len(),
            whole.text.len()
        );
    }

    #[test]
    fn output_that_fits_the_cap_is_spilled_whole_and_not_called_cut() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("out.txt");
        let mut capture = BoundedCapture::new(4, spill.clone()).spill_cap(10);
        capture.push(b"0123456789");
        let bounded = capture.finish();
        assert_eq!(std::fs::read_to_string(&spill).unwrap(), "0123456789");
        assert!(!bounded.spill_cut);
        assert!(bounded.text.contains("(full output: "), "{}", bounded.text);
    }

    #[test]
    fn a_spill_that_cannot_be_written_keeps_head_and_tail_and_the_marker_says_why() {
        let dir = tempfile::tempdir().unwrap();
        // The spill directory is a file: the spill cannot be written.
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, "").unwrap();
        let spill = blocked.join("out.txt");
        let full: Vec<u8> = (0..3000u32).map(|n| b'a' + (n % 26) as u8).collect();
        let mut capture = BoundedCapture::new(400, spill.clone());
        for chunk in full.chunks(7) {
            capture.push(chunk);
        }
        let bounded = capture.finish();
        assert_eq!(bounded.total_bytes, 3000);
        assert_eq!(bounded.full_output_path, None);
        assert!(bounded.spill_error.is_some() && !bounded.spill_cut);
        assert!(
            bounded
                .text
                .contains("bytes omitted (spill failed: the full output could not be kept in"),
            "{}",
            bounded.text
        );
        assert!(bounded.text.starts_with("abcdefgh"), "{}", bounded.text);
        assert!(
            bounded
                .text
                .ends_with(std::str::from_utf8(&full[2950..]).unwrap()),
            "the newest bytes are kept: {}",
            bounded.text
        );
        let enospc = std::io::Error::from_raw_os_error(dsh_launch::os::ENOSPC);
        assert!(omitted_marker_spill_failed(1, &spill, &enospc)
            .contains("no space left on the device: No space left on device"));
    }

    #[test]
    fn a_cut_through_a_multibyte_character_stays_valid_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = "é".repeat(50);
        let bounded = cut(&text, 11, &dir.path().join("s"));
        assert!(bounded.text.contains("bytes omitted"));
    }
}
