//! The tally capability: counts over sliding windows of time that the host keeps for a
//! plugin across its calls, so a plugin whose every call gets a fresh instance can still
//! remember (a rate limit's calls in the last minute, a circuit breaker's recent
//! failures). Each plugin has its own keys, in memory, at most `[tally] max_keys` of them
//! (the least recently used goes first); a window is at most an hour.
//!
//! A key longer than [`MAX_KEY_BYTES`] is kept as its SHA-256, so what a plugin holds is
//! bounded whatever keys it makes. A key's additions are kept by time slot (a 1024th of the window asked for), so a key
//! holds at most about a thousand entries whatever is added to it; an addition leaves the
//! window with its slot.

pub mod capability;
pub mod wit;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// The longest window a tally counts over.
pub const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// The longest key kept as it is; a longer one is kept as its SHA-256 (hex).
pub const MAX_KEY_BYTES: usize = 256;
/// Slots a window is cut into: the bound on a key's entries.
const SLOTS_PER_WINDOW: u32 = 1024;

/// `[tally]` in `dsh.toml`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TallyConfig {
    /// The most keys one plugin holds; the least recently used goes first.
    pub max_keys: usize,
}

impl Default for TallyConfig {
    fn default() -> Self {
        TallyConfig { max_keys: 10_000 }
    }
}

/// A key's count over a window, as `add` leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// What was added within the window (this addition included when it was made).
    pub total: u64,
    /// Whether this addition was made.
    pub added: bool,
    /// Until the oldest addition still in the window leaves it (zero: none).
    pub next_expiry: Duration,
}

/// Every plugin's tallies.
#[derive(Debug)]
pub struct TallyService {
    max_keys: usize,
    plugins: Mutex<HashMap<String, HashMap<String, Key>>>,
}

/// One key's additions, oldest first, by slot start.
#[derive(Debug, Default)]
struct Key {
    entries: VecDeque<(Instant, u64)>,
    last_used: Option<Instant>,
}

impl Key {
    /// Drops what is older than `window` before `now`; the sum of what is left.
    fn expire(&mut self, now: Instant, window: Duration) -> u64 {
        while let Some(&(at, _)) = self.entries.front() {
            if now.saturating_duration_since(at) >= window {
                self.entries.pop_front();
            } else {
                break;
            }
        }
        self.entries.iter().map(|(_, amount)| amount).sum()
    }
}

impl TallyService {
    pub fn new(config: &TallyConfig) -> Self {
        TallyService {
            max_keys: config.max_keys.max(1),
            plugins: Mutex::new(HashMap::new()),
        }
    }

    /// Adds `amount` to `plugin`'s `key` unless its total over the last `window` would
    /// pass `limit`; the window as it is then. The check and the addition are one step.
    pub fn add(
        &self,
        plugin: &str,
        key: &str,
        amount: u64,
        window: Duration,
        limit: Option<u64>,
    ) -> Window {
        let window = window.clamp(Duration::from_millis(1), MAX_WINDOW);
        let hashed;
        let key = if key.len() > MAX_KEY_BYTES {
            use sha2::Digest as _;
            hashed = sha2::Sha256::digest(key.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>();
            hashed.as_str()
        } else {
            key
        };
        let now = Instant::now();
        let mut plugins = self
            .plugins
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let keys = plugins.entry(plugin.to_string()).or_default();
        if !keys.contains_key(key) && keys.len() >= self.max_keys {
            // The least recently used key makes room.
            let oldest = keys
                .iter()
                .min_by_key(|(_, k)| k.last_used)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                keys.remove(&oldest);
            }
        }
        let entry = keys.entry(key.to_string()).or_default();
        entry.last_used = Some(now);
        let mut total = entry.expire(now, window);
        let added = amount > 0 && limit.is_none_or(|limit| total.saturating_add(amount) <= limit);
        if added {
            total = total.saturating_add(amount);
            let slot = window / SLOTS_PER_WINDOW;
            match entry.entries.back_mut() {
                Some((at, sum)) if now.saturating_duration_since(*at) < slot => {
                    *sum = sum.saturating_add(amount)
                }
                _ => entry.entries.push_back((now, amount)),
            }
        }
        let next_expiry = entry.entries.front().map_or(Duration::ZERO, |&(at, _)| {
            window.saturating_sub(now.saturating_duration_since(at))
        });
        Window {
            total,
            added,
            next_expiry,
        }
    }

    /// Keys held now, over every plugin.
    pub fn keys(&self) -> usize {
        self.plugins
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .values()
            .map(HashMap::len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_limit_is_never_passed_and_says_when_room_comes() {
        let tally = TallyService::new(&TallyConfig::default());
        for n in 1..=3 {
            let window = tally.add("rl", "a", 1, MINUTE, Some(3));
            assert!(window.added);
            assert_eq!(window.total, n);
        }
        let refused = tally.add("rl", "a", 1, MINUTE, Some(3));
        assert!(!refused.added);
        assert_eq!(refused.total, 3);
        assert!(refused.next_expiry > Duration::from_secs(59) && refused.next_expiry <= MINUTE);
        // Another key, and another plugin's same key, count apart.
        assert!(tally.add("rl", "b", 1, MINUTE, Some(3)).added);
        assert!(tally.add("other", "a", 1, MINUTE, Some(3)).added);
        // Amount 0 only reads.
        let read = tally.add("rl", "a", 0, MINUTE, None);
        assert_eq!((read.total, read.added), (3, false));
    }

    #[test]
    fn additions_leave_the_window_with_time() {
        let tally = TallyService::new(&TallyConfig::default());
        let window = Duration::from_millis(50);
        assert!(tally.add("p", "k", 2, window, Some(2)).added);
        assert!(!tally.add("p", "k", 1, window, Some(2)).added);
        std::thread::sleep(Duration::from_millis(60));
        let again = tally.add("p", "k", 1, window, Some(2));
        assert!(again.added);
        assert_eq!(again.total, 1);
    }

    #[test]
    fn a_long_key_is_kept_short_and_still_told_apart() {
        let tally = TallyService::new(&TallyConfig::default());
        let (one, two) = ("a".repeat(1 << 20), "b".repeat(1 << 20));
        assert!(tally.add("p", &one, 1, MINUTE, Some(1)).added);
        assert!(!tally.add("p", &one, 1, MINUTE, Some(1)).added);
        assert!(tally.add("p", &two, 1, MINUTE, Some(1)).added);
        let plugins = tally.plugins.lock().unwrap();
        assert!(plugins["p"].keys().all(|key| key.len() <= MAX_KEY_BYTES));
    }

    #[test]
    fn keys_and_entries_stay_bounded() {
        let tally = TallyService::new(&TallyConfig { max_keys: 100 });
        for n in 0..1000 {
            tally.add("p", &format!("key-{n}"), 1, MINUTE, None);
        }
        assert_eq!(tally.keys(), 100);
        for _ in 0..100_000 {
            tally.add("p", "hot", 1, MINUTE, None);
        }
        let plugins = tally.plugins.lock().unwrap();
        let hot = &plugins["p"]["hot"];
        assert!(hot.entries.len() <= SLOTS_PER_WINDOW as usize + 1);
        assert_eq!(hot.entries.iter().map(|e| e.1).sum::<u64>(), 100_000);
    }
}
