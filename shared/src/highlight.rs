//! Finding keywords inside helper sentences, to highlight them in the browser app: whole words
//! (or phrases), compared case-insensitively.

/// A piece of a text, and whether it is one of the keywords.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub text: String,
    pub keyword: bool,
}

/// Splits `text` into keyword and non-keyword segments. A keyword matches when it appears as a
/// whole word (not inside a longer word), ignoring ASCII case; longer keywords win where two
/// would match at the same place.
pub fn keyword_segments(text: &str, keywords: &[String]) -> Vec<Segment> {
    let mut keywords: Vec<&str> = keywords
        .iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .collect();
    keywords.sort_by_key(|k| std::cmp::Reverse(k.len()));

    let mut segments = Vec::new();
    let mut plain_start = 0;
    let mut i = 0;
    while i < text.len() {
        let at_word_start = text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word_char(c));
        let found = at_word_start
            .then(|| keywords.iter().find(|k| matches_at(text, i, k)))
            .flatten();
        match found {
            Some(keyword) => {
                if plain_start < i {
                    segments.push(plain(&text[plain_start..i]));
                }
                let end = i + keyword.len();
                segments.push(Segment {
                    text: text[i..end].to_string(),
                    keyword: true,
                });
                plain_start = end;
                i = end;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    if plain_start < text.len() {
        segments.push(plain(&text[plain_start..]));
    }
    segments
}

fn plain(text: &str) -> Segment {
    Segment {
        text: text.to_string(),
        keyword: false,
    }
}

/// Whether `keyword` is at byte `start` of `text` and ends at a word boundary.
fn matches_at(text: &str, start: usize, keyword: &str) -> bool {
    let end = start + keyword.len();
    let Some(candidate) = text.get(start..end) else {
        return false;
    };
    candidate.eq_ignore_ascii_case(keyword)
        && text[end..].chars().next().is_none_or(|c| !is_word_char(c))
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(text: &str, keywords: &[&str]) -> String {
        let keywords: Vec<String> = keywords.iter().map(|k| k.to_string()).collect();
        keyword_segments(text, &keywords)
            .into_iter()
            .map(|s| {
                if s.keyword {
                    format!("[{}]", s.text)
                } else {
                    s.text
                }
            })
            .collect()
    }

    #[test]
    fn matches_whole_words_ignoring_case() {
        assert_eq!(
            marked("Dull, DULL and dullness.", &["dull"]),
            "[Dull], [DULL] and dullness."
        );
    }

    #[test]
    fn prefers_the_longer_phrase() {
        assert_eq!(
            marked("a waste of time", &["waste", "waste of time"]),
            "a [waste of time]"
        );
    }

    #[test]
    fn leaves_text_without_keywords_alone() {
        assert_eq!(marked("café au lait", &["lait"]), "café au [lait]");
        assert_eq!(marked("nothing here", &[]), "nothing here");
    }
}
