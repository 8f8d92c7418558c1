//! Inter-annotator agreement on nominal labels (the review portal's verdicts): Cohen's κ for
//! two annotators and Krippendorff's α for any number, with missing values.

use std::collections::BTreeMap;
use std::hash::Hash;

/// Cohen's κ of two annotators' labels of the same items, `(a[i], b[i])` for item `i`:
/// observed agreement corrected for the agreement their label shares give by chance. `None`
/// for no items, or when chance agreement is certain (both gave one and the same label).
pub fn cohen_kappa<L: Ord>(a: &[L], b: &[L]) -> Option<f64> {
    assert_eq!(
        a.len(),
        b.len(),
        "both annotators must label the same items"
    );
    if a.is_empty() {
        return None;
    }
    let n = a.len() as f64;
    let observed = a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / n;
    let mut shares: BTreeMap<&L, (f64, f64)> = BTreeMap::new();
    for (x, y) in a.iter().zip(b) {
        shares.entry(x).or_default().0 += 1.0 / n;
        shares.entry(y).or_default().1 += 1.0 / n;
    }
    let chance: f64 = shares.values().map(|(pa, pb)| pa * pb).sum();
    (chance < 1.0).then(|| (observed - chance) / (1.0 - chance))
}

/// Krippendorff's α for nominal labels. Each unit (item) lists the labels its annotators gave;
/// units with fewer than two labels cannot be paired and are left out, as the reference
/// implementation does. `None` when fewer than two pairable labels exist or all are the same.
pub fn krippendorff_alpha<L: Ord + Hash>(units: &[Vec<L>]) -> Option<f64> {
    // The coincidence matrix: each ordered pair of labels within a unit of m labels counts
    // 1 / (m - 1).
    let mut coincidences: BTreeMap<(&L, &L), f64> = BTreeMap::new();
    for unit in units.iter().filter(|u| u.len() >= 2) {
        let weight = 1.0 / (unit.len() - 1) as f64;
        for (i, x) in unit.iter().enumerate() {
            for (j, y) in unit.iter().enumerate() {
                if i != j {
                    *coincidences.entry((x, y)).or_default() += weight;
                }
            }
        }
    }
    let mut totals: BTreeMap<&L, f64> = BTreeMap::new();
    for ((x, _), count) in &coincidences {
        *totals.entry(x).or_default() += count;
    }
    let n: f64 = totals.values().sum();
    let disagreeing: f64 = coincidences
        .iter()
        .filter(|((x, y), _)| x != y)
        .map(|(_, count)| count)
        .sum();
    let expected: f64 = totals
        .iter()
        .flat_map(|(x, nx)| {
            totals
                .iter()
                .filter(move |(y, _)| x != *y)
                .map(move |(_, ny)| nx * ny)
        })
        .sum();
    (n >= 2.0 && expected > 0.0).then(|| 1.0 - (n - 1.0) * disagreeing / expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference numbers from scikit-learn 1.5.2 (`cohen_kappa_score`) and the `krippendorff`
    // 0.8.1 package (`alpha(reliability_data=…, level_of_measurement="nominal")`).
    const A: [&str; 10] = [
        "accept", "accept", "reject", "flag", "accept", "reject", "reject", "accept", "relabel",
        "accept",
    ];
    const B: [&str; 10] = [
        "accept", "reject", "reject", "flag", "accept", "reject", "accept", "accept", "accept",
        "accept",
    ];

    #[test]
    fn cohen_kappa_matches_scikit_learn() {
        let kappa = cohen_kappa(&A, &B).unwrap();
        assert!((kappa - 0.5).abs() < 1e-12, "{kappa}");
        assert_eq!(cohen_kappa(&A, &A), Some(1.0));
        assert_eq!(cohen_kappa(&["x", "x"], &["x", "x"]), None);
        assert_eq!(cohen_kappa::<&str>(&[], &[]), None);
    }

    #[test]
    fn krippendorff_alpha_matches_the_reference_package() {
        let two: Vec<Vec<&str>> = A.iter().zip(B).map(|(a, b)| vec![*a, b]).collect();
        let alpha = krippendorff_alpha(&two).unwrap();
        assert!((alpha - 0.521_008_403_361_344_6).abs() < 1e-12, "{alpha}");

        // Three annotators, some items labelled by two of them only (the reference takes a
        // raters × units matrix with NaN for the missing labels).
        let rows: [[Option<u8>; 12]; 3] = [
            [0, 0, 1, 2, 0, 1, 1, 0, 3, 0, 9, 1].map(|v| (v != 9).then_some(v)),
            [0, 1, 1, 2, 0, 1, 0, 0, 0, 0, 1, 9].map(|v| (v != 9).then_some(v)),
            [0, 0, 1, 9, 0, 1, 1, 0, 3, 1, 1, 1].map(|v| (v != 9).then_some(v)),
        ];
        let units: Vec<Vec<u8>> = (0..12)
            .map(|i| rows.iter().filter_map(|row| row[i]).collect())
            .collect();
        let alpha = krippendorff_alpha(&units).unwrap();
        assert!((alpha - 0.612_121_212_121_212_1).abs() < 1e-12, "{alpha}");

        // Single-label units cannot be paired; one label everywhere has no expected disagreement.
        assert_eq!(krippendorff_alpha(&[vec!["a"], vec!["b"]]), None);
        assert_eq!(krippendorff_alpha(&[vec!["a", "a"], vec!["a", "a"]]), None);
    }
}
