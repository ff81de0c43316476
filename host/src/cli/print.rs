//! Printing shared by the commands: JSON documents and times.

/// Prints `value` as indented JSON on its own line (what every `--json` prints).
pub fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` in UTC for seconds since the Unix epoch; the number of
/// seconds itself past the last time `jiff` can date (late in the year 9999).
pub fn utc_time(unix_seconds: u64) -> String {
    match i64::try_from(unix_seconds).map(jiff::Timestamp::from_second) {
        Ok(Ok(time)) => time.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        _ => format!("{unix_seconds}s since 1970"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc_dates_to_the_second() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00");
        // A leap day, the last second of a day, of a year, of a century year.
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc_time(1_709_251_199), "2024-02-29 23:59:59");
        assert_eq!(utc_time(1_767_225_599), "2025-12-31 23:59:59");
        assert_eq!(utc_time(4_107_542_399), "2100-02-28 23:59:59");
        assert_eq!(utc_time(4_107_542_400), "2100-03-01 00:00:00");
        assert_eq!(utc_time(253_400_000_000), "9999-12-05 08:53:20");
        assert_eq!(utc_time(u64::MAX), format!("{}s since 1970", u64::MAX));
    }
}
