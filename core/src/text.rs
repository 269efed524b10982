//! Text shown to people, kept to a length.

/// `n` with its noun, `one` or `many`: "1 step", "3 steps".
pub fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `text` in at most `chars` characters: whole if it fits, else its start
/// and `…`.
pub fn clip(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(chars.saturating_sub(1)).collect();
    kept.push('…');
    kept
}

/// `text` as it may reach a terminal: every control character is shown
/// instead of acted on, so a title or a tool's answer cannot move the
/// cursor, recolour or retitle the terminal. C0 characters and DEL become
/// their Unicode control pictures (ESC is `␛`), C1 characters `\u{9b}`.
/// With `lines`, newlines and tabs are kept as they are.
pub fn visible(text: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let kept = |c: char| lines && (c == '\n' || c == '\t');
    if !text.chars().any(|c| c.is_control() && !kept(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !c.is_control() || kept(c) => shown.push(c),
            '\u{7f}' => shown.push('\u{2421}'),
            c if (c as u32) < 0x20 => {
                shown.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'));
            }
            c => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// JSON text (as `serde_json` writes it) with DEL and the C1 control
/// characters (U+0080–U+009F, the 8-bit CSI among them) written as `\u`
/// escapes: the same value, and nothing in it a terminal acts on. The
/// serializer escapes C0 itself; these it leaves raw.
pub fn json_visible(json: String) -> String {
    let raw = |c: char| ('\u{7f}'..='\u{9f}').contains(&c);
    if !json.chars().any(raw) {
        return json;
    }
    let mut shown = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if raw(c) {
            shown.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// For each of `ids`, the length of its shortest prefix of at least `min`
/// characters that no other of `ids` starts with (its whole length when
/// another id starts with all of it).
pub fn unique_prefix_lengths(ids: &[&str], min: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_unstable_by_key(|&i| ids[i]);
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let mut lengths = vec![0; ids.len()];
    for (at, &i) in order.iter().enumerate() {
        let before = at
            .checked_sub(1)
            .map_or(0, |p| common(ids[order[p]], ids[i]));
        let after = order.get(at + 1).map_or(0, |&n| common(ids[n], ids[i]));
        let whole = ids[i].chars().count();
        lengths[i] = (before.max(after) + 1).max(min).min(whole);
    }
    lengths
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_count_of_one_takes_the_singular() {
        use super::counted;
        assert_eq!(counted(1, "step", "steps"), "1 step");
        assert_eq!(counted(0, "step", "steps"), "0 steps");
        assert_eq!(counted(3, "batch", "batches"), "3 batches");
    }

    use super::{clip, json_visible, unique_prefix_lengths, visible};

    #[test]
    fn control_characters_are_shown_not_acted_on() {
        assert_eq!(visible("plain title", false), "plain title");
        assert_eq!(
            visible("\u{1b}]0;pwned\u{7}red\u{1b}[31m", false),
            "␛]0;pwned␇red␛[31m"
        );
        assert_eq!(visible("a\nb\tc\r", false), "a␊b␉c␍");
        assert_eq!(visible("a\nb\tc\r", true), "a\nb\tc␍");
        assert_eq!(visible("x\u{9b}2J\u{7f}", true), "x\\u{9b}2J␡");
    }

    #[test]
    fn json_keeps_its_value_and_shows_c1() {
        let value = serde_json::json!({"title": "a\u{9b}2J\u{7f}\u{1b}b", "é": "ü"});
        let text = json_visible(value.to_string());
        assert_eq!(text, r#"{"title":"a\u009b2J\u007f\u001bb","é":"ü"}"#);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).ok(),
            Some(value)
        );
        assert_eq!(json_visible("[1]".into()), "[1]");
    }

    #[test]
    fn each_prefix_tells_its_id_apart_from_the_others() {
        let ids = [
            "019ac0de-1111-7aaa",
            "019ac0de-1111-7aab",
            "019ac0de-2222-7000",
            "f0",
        ];
        assert_eq!(unique_prefix_lengths(&ids, 8), [18, 18, 10, 2]);
        assert_eq!(unique_prefix_lengths(&["abc"], 8), [3]);
        assert_eq!(unique_prefix_lengths(&["abcdefghij"], 8), [8]);
        assert!(unique_prefix_lengths(&[], 8).is_empty());
    }

    #[test]
    fn clipped_text_fits_and_says_so() {
        assert_eq!(clip("short", 5), "short");
        assert_eq!(clip("longer", 5), "long…");
        assert_eq!(clip("ééééé é", 3), "éé…");
        assert_eq!(clip("x", 0), "…");
    }
}
