//! Which remote rows a worker keeps in its feature cache (`--cache-mb`,
//! `--cache-policy`). The rows themselves are fetched once through the
//! feature service (`FeatureClient::fill_cache`) and held in a `TableRows`.

use crate::graph::CsrView;
use std::cmp::Reverse;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// The remote vertices that most edges point from (`by_degree`).
    Degree,
    /// The remote vertices most often drawn in a few pre-sampled epochs (`by_frequency`).
    Presample,
}

crate::value_names!(CachePolicy, "--cache-policy");

/// How many rows of `row_bytes` each fit in `budget_bytes` (4 x dim for dense
/// rows; `FeatureView::mean_row_bytes` for sparse ones, whose size varies:
/// the budget then holds on average). The id -> slot table, 4 bytes per node,
/// is not counted: it is the size of the topology's own arrays, which every
/// worker maps anyway.
pub fn rows_within(budget_bytes: u64, row_bytes: f64) -> usize {
    if row_bytes > 0.0 { (budget_bytes as f64 / row_bytes) as usize } else { 0 }
}

/// Up to `max_rows` remote vertices (owned by a part other than `rank`) in
/// decreasing order of out-degree: the number of nodes that list them as an
/// in-neighbour, i.e. how many neighbourhoods sampling can draw them from.
/// Ties go to the lower id. The result is sorted by id.
pub fn by_degree(graph: CsrView<'_>, owners: &[u16], rank: usize, max_rows: usize) -> Vec<u32> {
    let mut score = vec![0u32; graph.num_nodes()];
    for &u in graph.indices {
        score[u as usize] = score[u as usize].saturating_add(1);
    }
    top_remote(&score, owners, rank, max_rows)
}

/// Up to `max_rows` remote vertices in decreasing order of how often they occur
/// in `accesses` (the input rows of a few pre-sampled epochs).
pub fn by_frequency(accesses: &[u32], owners: &[u16], rank: usize, max_rows: usize) -> Vec<u32> {
    let mut score = vec![0u32; owners.len()];
    for &v in accesses {
        if let Some(s) = score.get_mut(v as usize) {
            *s = s.saturating_add(1);
        }
    }
    top_remote(&score, owners, rank, max_rows)
}

fn top_remote(score: &[u32], owners: &[u16], rank: usize, max_rows: usize) -> Vec<u32> {
    let mut picked: Vec<u32> = (0..score.len().min(owners.len()) as u32)
        .filter(|&v| owners[v as usize] as usize != rank && score[v as usize] > 0)
        .collect();
    if picked.len() > max_rows {
        picked.select_nth_unstable_by_key(max_rows, |&v| (Reverse(score[v as usize]), v));
        picked.truncate(max_rows);
    }
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        for p in [CachePolicy::Degree, CachePolicy::Presample] {
            assert_eq!(p.to_string().parse::<CachePolicy>().unwrap(), p);
        }
        let e = "lru".parse::<CachePolicy>().unwrap_err();
        assert_eq!(e.to_string(), "--cache-policy lru: unknown value; expected degree or presample");
    }

    #[test]
    fn the_budget_counts_whole_rows() {
        assert_eq!(rows_within(1 << 20, 512.0), 2048);
        assert_eq!(rows_within(511, 512.0), 0);
        assert_eq!(rows_within(1 << 20, 0.0), 0);
    }
}
