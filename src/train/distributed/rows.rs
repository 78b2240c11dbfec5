//! A distributed worker's feature rows: its own part, its cache, and the
//! remote owners (one request per owner, all in flight at once), behind the
//! `FeatureSource` the worker gathers from.

use super::super::{FeatureSource, RowsAsked, TrainError};
use crate::comm::{FeatureClient, FetchStats, Mesh};
use crate::format::RowRef;
use crate::gather::Rows;
use crate::metrics::RowCounts;
use std::sync::Mutex;

pub struct FetchingRows<'m> {
    client: FeatureClient,
    mesh: &'m Mesh,
    /// (rows by origin, fetches that needed a remote row), for the whole run.
    totals: Mutex<(FetchStats, u64)>,
}

impl<'m> FetchingRows<'m> {
    /// `client` with its cache already filled; `filled` = what filling it fetched.
    pub fn new(client: FeatureClient, mesh: &'m Mesh, filled: FetchStats) -> Self {
        let fetches = u64::from(filled.remote > 0);
        FetchingRows { client, mesh, totals: Mutex::new((filled, fetches)) }
    }

    pub fn totals(&self) -> (FetchStats, u64) {
        *self.totals.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FeatureSource for FetchingRows<'_> {
    fn fetched(&self) -> Option<(FetchStats, u64)> {
        Some(self.totals())
    }
    fn dim(&self) -> usize {
        self.client.dim()
    }

    fn rows(&self, ids: &[u32]) -> Result<(Vec<f32>, RowCounts), TrainError> {
        let mut out = vec![0f32; ids.len() * self.client.dim()];
        let s = self.client.fetch(self.mesh, ids, &mut out).map_err(|e| TrainError::Comm(e.into()))?;
        Ok((out, self.count(s)))
    }

    fn input_rows(&self, ids: &[u32]) -> Result<(Rows, RowCounts), TrainError> {
        let (rows, s) = self.client.fetch_rows(self.mesh, ids).map_err(|e| TrainError::Comm(e.into()))?;
        Ok((rows, self.count(s)))
    }

    fn own_row(&self, id: u32) -> Option<RowRef<'_>> {
        self.client.own_row(id)
    }

    fn own_rows(&self, n: u64) -> RowCounts {
        self.count(FetchStats { requested: n, local: n, ..Default::default() })
    }

    fn stores_sparse(&self) -> bool {
        self.client.is_sparse()
    }

    fn start_rows(&self, ids: Vec<u32>) -> Result<RowsAsked, TrainError> {
        let asked = self.client.start_rows(self.mesh, ids).map_err(|e| TrainError::Comm(e.into()))?;
        Ok(RowsAsked::InFlight(asked))
    }

    fn finish_rows(&self, asked: RowsAsked) -> Result<(Rows, RowCounts), TrainError> {
        match asked {
            RowsAsked::Ready(r) => Ok(r),
            RowsAsked::InFlight(a) => {
                let (rows, s) = self.client.finish_rows(self.mesh, a).map_err(|e| TrainError::Comm(e.into()))?;
                Ok((rows, self.count(s)))
            }
        }
    }
}

impl FetchingRows<'_> {
    /// Adds a fetch to the run's totals.
    fn count(&self, s: FetchStats) -> RowCounts {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.0 += s;
        t.1 += u64::from(s.remote > 0);
        RowCounts { requested: s.requested, local: s.local, cache_hit: s.cache_hit, remote: s.remote }
    }
}
