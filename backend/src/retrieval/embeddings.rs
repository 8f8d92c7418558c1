//! An append-only file of embedding rows (little-endian f32), written in chunks so that a
//! killed encoding run resumes after the last complete row.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// Embedding rows on disk.
pub struct EmbeddingFile {
    path: PathBuf,
    dim: usize,
}

impl EmbeddingFile {
    /// The file at `path`, holding rows of width `dim` (created empty if missing). A partly
    /// written last row is cut off.
    pub fn open(path: &Path, dim: usize) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let row_bytes = (dim * 4) as u64;
        let len = file.metadata()?.len();
        if len % row_bytes != 0 {
            file.set_len(len - len % row_bytes)?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            dim,
        })
    }

    /// Where the rows are.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of complete rows.
    pub fn rows(&self) -> Result<usize> {
        Ok((std::fs::metadata(&self.path)?.len() / (self.dim as u64 * 4)) as usize)
    }

    /// Appends rows (each `dim` values) and makes them durable. They go through a buffer of
    /// 1 MB, never a copy of them all: `bench retrieval` appends a million rows at once.
    pub fn append(&self, rows: &[impl AsRef<[f32]>]) -> Result<()> {
        let file = OpenOptions::new().append(true).open(&self.path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let written = rows.iter().try_for_each(|row| {
            let row = row.as_ref();
            assert_eq!(row.len(), self.dim, "embedding width");
            row.iter().try_for_each(|x| out.write_all(&x.to_le_bytes()))
        });
        written
            .and_then(|()| out.into_inner().map_err(|error| error.into_error()))
            .and_then(|file| file.sync_data())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Drops every row from `rows` on.
    pub fn truncate(&self, rows: usize) -> Result<()> {
        let file = OpenOptions::new().write(true).open(&self.path)?;
        file.set_len((rows * self.dim * 4) as u64)?;
        Ok(())
    }

    /// Reads every row into one row-major matrix.
    pub fn read_all(&self) -> Result<Vec<f32>> {
        let mut rows = Vec::new();
        self.for_each_chunk(|chunk| rows.extend_from_slice(chunk))?;
        Ok(rows)
    }

    /// Rows `range` (clipped to the complete rows) as one row-major matrix rounded to f16,
    /// never holding them as f32.
    pub fn read_half_range(&self, range: Range<usize>) -> Result<Vec<f16>> {
        let count = range.end.min(self.rows()?).saturating_sub(range.start);
        let mut rows = Vec::with_capacity(count * self.dim);
        self.for_each_chunk_in(range, |chunk| {
            let start = rows.len();
            rows.resize(start + chunk.len(), f16::ZERO);
            rows[start..].convert_from_f32_slice(chunk);
        })?;
        Ok(rows)
    }

    /// Calls `take` with the complete rows in order, a few thousand at a time: the file is
    /// never in memory whole.
    pub fn for_each_chunk(&self, take: impl FnMut(&[f32])) -> Result<()> {
        self.for_each_chunk_in(0..usize::MAX, take)
    }

    /// [`EmbeddingFile::for_each_chunk`] over rows `range` (clipped to the complete rows).
    pub fn for_each_chunk_in(
        &self,
        range: Range<usize>,
        mut take: impl FnMut(&[f32]),
    ) -> Result<()> {
        let row_bytes = self.dim * 4;
        let end = range.end.min(self.rows()?);
        let mut file = File::open(&self.path)
            .with_context(|| format!("cannot read {}", self.path.display()))?;
        file.seek(SeekFrom::Start((range.start * row_bytes) as u64))
            .with_context(|| format!("cannot read {}", self.path.display()))?;
        let chunk_rows = (4 << 20) / row_bytes.max(1) + 1;
        let mut bytes = vec![0u8; chunk_rows * row_bytes];
        let mut numbers = Vec::with_capacity(chunk_rows * self.dim);
        let mut done = range.start;
        while done < end {
            let count = chunk_rows.min(end - done);
            let buffer = &mut bytes[..count * row_bytes];
            file.read_exact(buffer)
                .with_context(|| format!("cannot read {}", self.path.display()))?;
            numbers.clear();
            numbers.extend(
                buffer
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
            );
            take(&numbers);
            done += count;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_resume_after_a_torn_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.f32");
        let file = EmbeddingFile::open(&path, 3).unwrap();
        file.append(&[vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]])
            .unwrap();
        // A crash in the middle of a row leaves 5 stray bytes.
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[0; 5])
            .unwrap();
        let file = EmbeddingFile::open(&path, 3).unwrap();
        assert_eq!(file.rows().unwrap(), 2);
        file.append(&[vec![7.0, 8.0, 9.0]]).unwrap();
        assert_eq!(
            file.read_all().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        );
        let half: Vec<f32> = file
            .read_half_range(0..usize::MAX)
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert_eq!(half, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let middle: Vec<f32> = file
            .read_half_range(1..5)
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert_eq!(middle, vec![4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        file.truncate(1).unwrap();
        assert_eq!(file.read_all().unwrap(), vec![1.0, 2.0, 3.0]);
    }
}
