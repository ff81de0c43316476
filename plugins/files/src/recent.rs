//! The most recently modified of many paths, held in bounded memory: a heap keeping
//! only the `cap` newest seen so far (ties by path), and a count of all.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::SystemTime;

/// The `cap` newest paths offered, and how many were offered.
pub struct Newest<T: Ord> {
    cap: usize,
    /// The worst kept entry on top: the oldest (then the greatest path).
    heap: BinaryHeap<(Reverse<SystemTime>, T)>,
    seen: usize,
}

impl<T: Ord> Newest<T> {
    pub fn new(cap: usize) -> Newest<T> {
        Newest {
            cap,
            heap: BinaryHeap::with_capacity(cap.min(4096) + 1),
            seen: 0,
        }
    }

    /// Offers `item` modified at `modified`.
    pub fn offer(&mut self, modified: SystemTime, item: T) {
        self.seen += 1;
        if self.cap == 0 {
            return;
        }
        if self.heap.len() == self.cap {
            match self.heap.peek() {
                Some(worst) if (Reverse(modified), &item) >= (worst.0, &worst.1) => return,
                _ => {}
            }
            self.heap.pop();
        }
        self.heap.push((Reverse(modified), item));
    }

    /// How many were offered.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The kept items, newest first (equal times by ascending item).
    pub fn into_sorted(self) -> Vec<T> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|(_, item)| item)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn keeps_the_newest_in_order_and_counts_all() {
        let mut newest = Newest::new(3);
        for (t, name) in [(5, "e"), (1, "a"), (9, "i"), (7, "g"), (3, "c"), (7, "f")] {
            newest.offer(at(t), name);
        }
        assert_eq!(newest.seen(), 6);
        assert_eq!(newest.into_sorted(), vec!["i", "f", "g"]);
    }

    #[test]
    fn a_cap_of_zero_only_counts() {
        let mut newest = Newest::new(0);
        newest.offer(at(1), "a");
        assert_eq!(newest.seen(), 1);
        assert!(newest.into_sorted().is_empty());
    }

    #[test]
    fn memory_stays_at_the_cap() {
        let mut newest = Newest::new(10);
        for i in 0..100_000u64 {
            newest.offer(at(i % 977), i);
        }
        assert_eq!(newest.heap.len(), 10);
        assert_eq!(newest.seen(), 100_000);
        let kept = newest.into_sorted();
        assert!(kept.iter().all(|i| i % 977 == 976));
    }
}
