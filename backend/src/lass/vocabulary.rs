//! Training the Dis-AE's subword vocabulary on a corpus with the `tokenizers` crate.

use anyhow::{Context, Result};
use flipside_shared::models::dis_ae::vocabulary::SPECIAL_TOKENS;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::normalizers::{Lowercase, NFKC, NormalizerWrapper, Sequence};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder};

/// A BPE vocabulary of at most `size` ids learnt from `texts`: lowercased, NFKC-normalised,
/// words marked by `▁`; ids 0–3 are [`SPECIAL_TOKENS`]. Returns the `tokenizer.json` bytes.
pub fn train_vocabulary<I, S>(texts: I, size: usize) -> Result<Vec<u8>>
where
    I: Iterator<Item = S> + Send,
    S: AsRef<str> + Send,
{
    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|t| AddedToken::from(*t, true))
        .collect();
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(specials)
        .build()
        .into();
    let model = BPE::builder()
        .unk_token(SPECIAL_TOKENS[3].to_string())
        .build()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let metaspace = Metaspace::new('▁', PrependScheme::Always, true);
    let mut tokenizer: Tokenizer = TokenizerBuilder::<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >::new()
    .with_model(model.into())
    .with_normalizer(Some(
        Sequence::new(vec![NFKC.into(), Lowercase.into()]).into(),
    ))
    .with_pre_tokenizer(Some(metaspace.clone().into()))
    .with_decoder(Some(metaspace.into()))
    .build()
    .map_err(|e| anyhow::anyhow!("{e}"))?
    .into();
    tokenizer
        .train(&mut trainer, texts)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("training the vocabulary")?;
    let json = tokenizer
        .to_string(false)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(json.into_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use flipside_shared::models::dis_ae::vocabulary::Vocabulary;

    const TEXTS: [&str; 6] = [
        "The film was great and the cast superb.",
        "The film was awful and the cast dreadful.",
        "A great plot, a superb ending.",
        "An awful plot, a dreadful ending.",
        "The acting was great.",
        "The acting was awful.",
    ];

    #[test]
    fn a_trained_vocabulary_round_trips_lowercased_text() {
        let json = train_vocabulary(TEXTS.iter().cycle().take(60), 80).unwrap();
        let vocabulary = Vocabulary::from_json(&json, 64).unwrap();
        assert!(vocabulary.size() <= 80, "{}", vocabulary.size());
        let ids = vocabulary.encode("The film was GREAT.").unwrap();
        assert_eq!((ids[0], *ids.last().unwrap()), (1, 2), "{ids:?}");
        assert_eq!(vocabulary.decode(&ids).unwrap(), "the film was great.");
        // Frequent words become single pieces.
        assert_eq!(vocabulary.encode("film").unwrap().len(), 3);
        // Long texts are cut, keeping </s>.
        let short = Vocabulary::from_json(&json, 4).unwrap();
        let ids = short
            .encode("the film was great and the cast superb")
            .unwrap();
        assert_eq!((ids.len(), ids[3]), (4, 2));
    }

    #[test]
    fn masking_replaces_each_named_word_by_one_mask() {
        let json = train_vocabulary(TEXTS.iter().cycle().take(60), 80).unwrap();
        let vocabulary = Vocabulary::from_json(&json, 64).unwrap();
        let words: HashSet<String> = ["great", "dreadful"].map(String::from).into();
        let text = "The film was GREAT, the ending dreadful, greatest cast.";
        let (ids, masked) = vocabulary.encode_masking(text, &words, 3).unwrap();
        assert_eq!(ids, vocabulary.encode(text).unwrap());
        // "GREAT" and "dreadful", whatever their pieces, are one mask each.
        assert_eq!(masked.iter().filter(|&&m| m == 3).count(), 2, "{masked:?}");
        let pieces = |word: &str| vocabulary.encode(word).unwrap().len() - 2;
        assert_eq!(
            ids.len() - masked.len(),
            pieces("GREAT") + pieces("dreadful") - 2
        );
        let text_of = |ids: &[u32]| vocabulary.decode(ids).unwrap();
        // "great" and "dreadful" are gone, "greatest" (another word) and the rest stay.
        let masked_text = text_of(
            &masked
                .iter()
                .copied()
                .filter(|&m| m != 3)
                .collect::<Vec<_>>(),
        );
        assert!(!masked_text.contains("dreadful"), "{masked_text}");
        assert!(masked_text.contains("greatest cast"), "{masked_text}");
        assert!(masked_text.starts_with("the film was"), "{masked_text}");
    }

    #[test]
    fn a_tokenizer_without_the_special_ids_is_refused() {
        let json = train_vocabulary(TEXTS.iter().cycle().take(60), 80).unwrap();
        let text = String::from_utf8(json)
            .unwrap()
            .replace("\"<pad>\"", "\"<nothing>\"");
        assert!(Vocabulary::from_json(text.as_bytes(), 64).is_err());
    }
}
