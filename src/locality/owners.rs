//! Who owns each vertex under every partition of the grid at once.

/// Owners of every vertex under several partitions ("columns"), twice: with
/// one vertex's owners side by side, for loops that serve every column at
/// once, and column by column, for loops about one partition (a column of a
/// 2.4M-vertex graph is 5 MB and stays in cache; the interleaved rows do not).
#[derive(Clone, Debug)]
pub struct OwnerTable {
    columns: usize,
    owners: Vec<u16>,
    by_column: Vec<Vec<u16>>,
}

impl OwnerTable {
    /// `maps[c][v]` = owner of `v` in column `c`; every map covers the same vertices.
    pub fn new(maps: &[&[u16]]) -> Self {
        let columns = maps.len();
        let n = maps.first().map_or(0, |m| m.len());
        assert!(maps.iter().all(|m| m.len() == n), "partition maps of different lengths");
        let mut owners = vec![0u16; n * columns];
        for (c, m) in maps.iter().enumerate() {
            for (v, &p) in m.iter().enumerate() {
                owners[v * columns + c] = p;
            }
        }
        OwnerTable { columns, owners, by_column: maps.iter().map(|m| m.to_vec()).collect() }
    }

    pub fn columns(&self) -> usize {
        self.columns
    }

    /// The owners of `v`, one per column.
    #[inline]
    pub fn of(&self, v: u32) -> &[u16] {
        let i = v as usize * self.columns;
        &self.owners[i..i + self.columns]
    }

    #[inline]
    pub fn owner(&self, v: u32, column: usize) -> u16 {
        self.by_column[column][v as usize]
    }

    /// Every vertex's owner in `column`.
    pub fn column(&self, column: usize) -> &[u16] {
        &self.by_column[column]
    }
}

/// A model-centric worker: the model of server `home` of `servers`, whose
/// partition is owner column `column`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trainer {
    pub column: usize,
    pub home: u16,
    pub servers: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_interleaved_per_vertex() {
        let t = OwnerTable::new(&[&[0, 1, 1], &[3, 2, 0]]);
        assert_eq!(t.of(1), &[1, 2]);
        assert_eq!(t.owner(2, 1), 0);
        assert_eq!(t.column(1), &[3, 2, 0]);
    }
}
