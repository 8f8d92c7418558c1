//! The Dis-AE that ships with Flipside (`backend/models/dis-ae/`: compact int8 weights, its
//! config, vocabulary and training record), so that `generate --method lass`, the server's jobs
//! and the page "Generate in your browser" work with no training step. A Dis-AE that
//! `lass train` finishes in HOME/models/dis-ae takes its place.

use crate::shipped::ShippedModel;

/// The name the shipped Dis-AE takes under HOME/models (and on the command line).
pub const SHIPPED_DIS_AE: &str = "dis-ae-shipped";

/// The shipped Dis-AE.
pub const DIS_AE: ShippedModel = ShippedModel {
    name: SHIPPED_DIS_AE,
    files: &[
        (
            "config.json",
            include_bytes!("../../models/dis-ae/config.json"),
        ),
        (
            "model.safetensors",
            include_bytes!("../../models/dis-ae/model.safetensors"),
        ),
        (
            "tokenizer.json",
            include_bytes!("../../models/dis-ae/tokenizer.json"),
        ),
        ("lass.json", include_bytes!("../../models/dis-ae/lass.json")),
        (
            "training.json",
            include_bytes!("../../models/dis-ae/training.json"),
        ),
    ],
};

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::home::Home;
    use crate::lass::model::load_reproducer;

    #[test]
    fn every_shipped_file_matches_its_checksum_and_the_model_loads() {
        DIS_AE.check(include_str!("../../models/dis-ae/SHA256SUMS"), 10_000_000);
        let root = tempfile::tempdir().unwrap();
        let dir = DIS_AE.dir(&Home::new(root.path())).unwrap();
        let reproducer = load_reproducer::<Flex>(&dir, &Default::default()).unwrap();
        assert!(reproducer.config.copy.is_some());
    }
}
