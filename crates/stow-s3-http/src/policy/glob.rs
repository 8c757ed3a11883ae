//! The wildcards of policies: `*` any run of characters (none included),
//! `?` any one character.

/// Whether `text` matches `pattern`; `fold` compares ASCII letters without
/// case (actions are case-insensitive, ARNs and keys are not).
pub(crate) fn matches(pattern: &str, text: &str, fold: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let same = |a: char, b: char| {
        if fold {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    // Greedy with one backtrack point: the last `*` seen and where the
    // text stood then (linear in practice, never exponential).
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && (p[pi] == '?' || same(p[pi], t[ti])) {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards() {
        assert!(matches("*", "", false));
        assert!(matches("arn:aws:s3:::b/*", "arn:aws:s3:::b/k/x", false));
        assert!(!matches("arn:aws:s3:::b/*", "arn:aws:s3:::b", false));
        assert!(matches("public/*", "public/", false));
        assert!(!matches("public/*", "private/x", false));
        assert!(matches("a?c", "abc", false));
        assert!(!matches("a?c", "ac", false));
        assert!(matches("*b*b*", "abxbx", false));
        assert!(!matches("*b*b*", "abx", false));
        assert!(matches("s3:get*", "s3:GetObject", true));
        assert!(!matches("s3:get*", "s3:GetObject", false));
        assert!(matches("k", "k", false));
        assert!(!matches("k", "kk", false));
    }
}
