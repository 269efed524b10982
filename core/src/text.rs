//! Text shown to people, kept to a length.

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

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clipped_text_fits_and_says_so() {
        assert_eq!(clip("short", 5), "short");
        assert_eq!(clip("longer", 5), "long…");
        assert_eq!(clip("ééééé é", 3), "éé…");
        assert_eq!(clip("x", 0), "…");
    }
}
