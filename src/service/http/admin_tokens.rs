//! The bearer tokens of `ADMIN_TOKEN_FILE`: one per line, alone or after a
//! name and a space (`alice 3f9a…`), which the overrides' change log shows
//! as who made a change (an unnamed token shows as `token <line>`). Blank
//! lines and lines starting with `#` are skipped.

/// Every `(name, token)` of the file `text`, in file order.
pub fn tokens(text: &str) -> impl Iterator<Item = (String, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        Some(match line.rsplit_once(char::is_whitespace) {
            Some((name, token)) => (name.trim().to_string(), token),
            None => (format!("token {}", i + 1), line),
        })
    })
}

/// The name of the token `given` in the file `text`, if it is one of its.
/// Every token is compared in full, in time independent of where they
/// differ.
pub fn who(text: &str, given: &str) -> Option<String> {
    let mut found = None;
    for (name, token) in tokens(text) {
        if same(token.as_bytes(), given.as_bytes()) && found.is_none() {
            found = Some(name);
        }
    }
    found
}

/// Whether `a` and `b` are equal, comparing every byte of the longer.
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut differ = u8::from(a.len() != b.len());
    for i in 0..n {
        differ |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_known_by_its_name_or_its_line() {
        let file = "# admins\nalice s3cret\n\nb0b-token\n";
        assert_eq!(who(file, "s3cret").as_deref(), Some("alice"));
        assert_eq!(who(file, "b0b-token").as_deref(), Some("token 4"));
    }

    #[test]
    fn anything_else_is_no_one() {
        let file = "alice s3cret\n";
        for wrong in ["s3cre", "s3crett", "alice", "", "# admins"] {
            assert_eq!(who(file, wrong), None, "{wrong:?}");
        }
        assert_eq!(who("", "x"), None);
    }
}
