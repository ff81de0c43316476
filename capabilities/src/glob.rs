//! Name globs: `*` matches any run of characters, every other character only itself.
//! Used for tool names (scopes, gate rules) and environment variable names
//! (`[process.env]`).
//!
//! Ours stays rather than a glob crate (`globset`, `wildmatch`): those give `?`, `[...]`
//! and `{a,b}` meanings our documented patterns do not have, and they are built for
//! paths; these are names, matched without compiling anything.

/// Glob match where `*` matches any run of characters.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_stars_anywhere() {
        assert!(glob_match("*", "bash"));
        assert!(glob_match("lsp_*", "lsp_hover"));
        assert!(!glob_match("lsp_*", "bash"));
        assert!(glob_match("*_list", "job_list"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxcyyb"));
        assert!(!glob_match("ab*ba", "aba"));
        assert!(glob_match("bash", "bash"));
    }
}
