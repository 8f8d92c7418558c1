//! Running a model over many inputs in batches of similar length.

/// How independent batches are run: one after another ([`Sequential`], the only choice in the
/// browser), or in parallel by an executor the native backend provides.
pub trait BatchExecutor: Sync {
    /// `job(0..count)`, results in index order.
    fn map<T: Send>(&self, count: usize, job: &(dyn Fn(usize) -> T + Sync)) -> Vec<T>;
}

/// Runs batches one after another on the calling thread.
pub struct Sequential;

impl BatchExecutor for Sequential {
    fn map<T: Send>(&self, count: usize, job: &(dyn Fn(usize) -> T + Sync)) -> Vec<T> {
        (0..count).map(job).collect()
    }
}

/// Groups item indices into batches of similar length, longest first, so that padding wastes
/// little compute. `lengths` are token counts (or a proxy of them).
pub fn length_sorted_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect()
}

/// Applies `run` to length-sorted batches of item indices, where `run` returns one row per
/// index; returns the rows in item order. Stops at the first error.
pub fn map_batches<T, E, F>(
    lengths: &[usize],
    batch_size: usize,
    executor: &impl BatchExecutor,
    run: F,
) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send,
    F: Fn(&[usize]) -> Result<Vec<T>, E> + Sync,
{
    let batches = length_sorted_batches(lengths, batch_size);
    let results = executor.map(batches.len(), &|i| run(&batches[i]));
    let mut rows: Vec<Option<T>> = (0..lengths.len()).map(|_| None).collect();
    for (batch, result) in batches.iter().zip(results) {
        for (&index, row) in batch.iter().zip(result?) {
            rows[index] = Some(row);
        }
    }
    Ok(rows
        .into_iter()
        .map(|row| row.expect("every item is in one batch"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_length_sorted_and_rows_come_back_in_order() {
        let lengths = [3, 10, 1, 7, 5];
        assert_eq!(
            length_sorted_batches(&lengths, 2),
            vec![vec![1, 3], vec![4, 0], vec![2]]
        );
        let rows = map_batches(&lengths, 2, &Sequential, |batch| {
            Ok::<_, ()>(batch.iter().map(|&i| lengths[i] * 10).collect())
        })
        .unwrap();
        assert_eq!(rows, vec![30, 100, 10, 70, 50]);
        let failed = map_batches(&lengths, 2, &Sequential, |batch| {
            if batch.contains(&2) {
                Err("boom")
            } else {
                Ok(batch.to_vec())
            }
        });
        assert_eq!(failed, Err("boom"));
    }
}
