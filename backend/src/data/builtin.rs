//! Built-in datasets, read from the fetched `movie-reviews` asset.

use anyhow::Result;
use flipside_shared::data::Dataset;

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
}

impl Builtin {
    pub const ALL: [Builtin; 2] = [Builtin::Imdb, Builtin::RottenTomatoes];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Imdb => "imdb",
            Builtin::RottenTomatoes => "rotten-tomatoes",
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
        }
    }

    /// Reads the dataset. Ids are `imdb-N` / `rt-N` (N = position in the package's file), and
    /// IMDb's `<br />` line breaks become spaces.
    pub fn load(self, home: &Home) -> Result<Dataset> {
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
}
