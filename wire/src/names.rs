//! The name and identifier patterns of docs/protocol.md, hand-written (no regex engine):
//! host names `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`, owner fingerprints `^[A-Za-z0-9._-]{0,64}$`,
//! ULIDs `^[0-9A-HJKMNP-TV-Z]{26}$` (Crockford, upper case), local names `^[a-z0-9][a-z0-9-]{1,39}$`.

fn host_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`
pub fn is_host_name(s: &str) -> bool {
    let b = s.as_bytes();
    match b.split_first() {
        Some((first, rest)) => {
            first.is_ascii_alphanumeric() && rest.len() <= 62 && rest.iter().all(|&c| host_char(c))
        }
        None => false,
    }
}

/// `^[A-Za-z0-9._-]{0,64}$` (the empty string is a valid "no owner").
pub fn is_owner_fp(s: &str) -> bool {
    s.len() <= 64 && s.bytes().all(host_char)
}

/// `^[0-9A-HJKMNP-TV-Z]{26}$`
pub fn is_ulid(s: &str) -> bool {
    s.len() == 26
        && s.bytes().all(|b| {
            b.is_ascii_digit()
                || (b.is_ascii_uppercase() && !matches!(b, b'I' | b'L' | b'O' | b'U'))
        })
}

/// `^[a-z0-9][a-z0-9-]{1,39}$`
pub(crate) fn is_local_name(s: &str) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match b.split_first() {
        Some((&first, rest)) => {
            lower_alnum(first)
                && (1..=39).contains(&rest.len())
                && rest.iter().all(|&c| lower_alnum(c) || c == b'-')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        for ok in ["a", "laptop", "A.b_c-d", "0", &"x".repeat(63)] {
            assert!(is_host_name(ok), "{ok:?}");
        }
        for bad in [
            "",
            ".a",
            "-a",
            "_a",
            "a b",
            "a@b",
            "é",
            &"x".repeat(64),
            "a\n",
        ] {
            assert!(!is_host_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn owner_fps() {
        for ok in ["", "abcd-ef01-2345-6789", "._-", &"x".repeat(64)] {
            assert!(is_owner_fp(ok), "{ok:?}");
        }
        for bad in ["a b", "a/b", &"x".repeat(65), "é"] {
            assert!(!is_owner_fp(bad), "{bad:?}");
        }
    }

    #[test]
    fn ulids() {
        assert!(is_ulid("01KB5Z2X3Y4Z5A6B7C8D9E0F1G"));
        assert!(is_ulid("0123456789ABCDEFGHJKMNPQRS"));
        for bad in [
            "01kb5z2x3y4z5a6b7c8d9e0f1g",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1U",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1I",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1L",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1O",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1",
            "01KB5Z2X3Y4Z5A6B7C8D9E0F1GG",
            "",
        ] {
            assert!(!is_ulid(bad), "{bad:?}");
        }
    }

    #[test]
    fn local_names() {
        for ok in [
            "ab",
            "alice",
            "bob-2",
            "0-",
            &format!("a{}", "b".repeat(39)),
        ] {
            assert!(is_local_name(ok), "{ok:?}");
        }
        for bad in [
            "a",
            "",
            "-ab",
            "Bad Name",
            "Alice",
            "a_b",
            &format!("a{}", "b".repeat(40)),
        ] {
            assert!(!is_local_name(bad), "{bad:?}");
        }
    }
}
