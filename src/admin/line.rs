//! Text that must stay on one line of the admin protocol (a reason, a note): shared by the
//! protocol, the server and the commands that answer with such text.

/// Make a reason safe for one status line: no newlines, bounded length.
pub(crate) fn one_line(reason: &str) -> String {
    let mut out: String = reason
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .take(4096)
        .collect();
    if out.is_empty() {
        out.push_str("unknown error");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_stay_on_one_line() {
        assert_eq!(one_line("a\nb\rc"), "a b c");
        assert_eq!(one_line(""), "unknown error");
        assert_eq!(one_line(&"x".repeat(10_000)).len(), 4096);
    }
}
