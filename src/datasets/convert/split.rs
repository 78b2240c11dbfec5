//! Train/val/test splits: read from the source, or drawn with the user's seed.

use crate::util::rng::stream;
use rand::seq::SliceRandom;

/// How a converter's nodes are split when the source does not fix it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SplitRule {
    /// Ids read from the source (Planetoid files, OGB split/).
    Given([Vec<u32>; 3]),
    /// Fractions of the labelled nodes (of all nodes when none is labelled).
    Fractions([f64; 3]),
    /// The Planetoid protocol: `per_class` train nodes of each class, then
    /// `val` and `test` nodes from the rest.
    PerClass { per_class: usize, val: usize, test: usize },
    /// No split (a graph without labels).
    #[default]
    None,
}

/// The usual Planetoid-style protocol for graphs that come without a split.
pub const PLANETOID: SplitRule = SplitRule::PerClass { per_class: 20, val: 500, test: 1000 };

/// Checks and normalises `--split`-style fractions: three non-negative numbers
/// summing to at most 1 (fractions) or at most 100 (percentages).
pub fn fractions(v: &[f64]) -> Result<[f64; 3], String> {
    let [a, b, c] = v else {
        return Err(format!("a split has 3 parts (train,val,test), got {}", v.len()));
    };
    if v.iter().any(|x| !x.is_finite() || *x < 0.0) {
        return Err("split parts must be non-negative numbers".into());
    }
    let sum = a + b + c;
    let scale = if sum <= 1.0 + 1e-9 { 1.0 } else { 100.0 };
    if sum > scale + 1e-9 {
        return Err(format!("split parts sum to {sum}, more than 100%"));
    }
    Ok([a / scale, b / scale, c / scale])
}

/// Parses `--split-per-class TRAIN,VAL,TEST`: three whole numbers, the train
/// count at least 1 (PyG's `Planetoid(split="random", num_train_per_class,
/// num_val, num_test)`).
pub fn parse_per_class(s: &str) -> Result<[u64; 3], String> {
    let parts = numbers(s)
        .ok_or_else(|| format!("`{s}` is not three whole numbers like 20,500,1000 (train per class, val, test)"))?;
    per_class(&parts)
}

/// A comma-separated list of numbers, or None where one does not parse.
fn numbers<T: std::str::FromStr>(s: &str) -> Option<Vec<T>> {
    s.split(',').map(|p| p.trim().parse().ok()).collect()
}

/// Checks `split_per_class` values, from the flag or a datasets.toml entry.
pub fn per_class(v: &[u64]) -> Result<[u64; 3], String> {
    match *v {
        [0, _, _] => Err("a per-class split needs at least 1 training node per class, got 0".into()),
        [t, va, te] => Ok([t, va, te]),
        _ => Err(format!("a per-class split has 3 parts (train per class, val, test), got {}", v.len())),
    }
}

/// Parses `60,20,20` or `0.6,0.2,0.2`.
pub fn parse_fractions(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<f64> = numbers(s).ok_or_else(|| format!("`{s}` is not a list of numbers like 60,20,20"))?;
    fractions(&parts)
}

/// Applies `rule` to nodes with `labels` (-1 = unlabelled). Each list comes out sorted.
pub fn apply(rule: &SplitRule, labels: &[i32], num_classes: u32, seed: u64) -> [Vec<u32>; 3] {
    let mut out = match rule {
        SplitRule::Given(ids) => ids.clone(),
        SplitRule::None => Default::default(),
        SplitRule::Fractions(f) => {
            let pool = shuffled_pool(labels, seed);
            let n = pool.len();
            let train = (n as f64 * f[0]).floor() as usize;
            let val = (n as f64 * f[1]).floor() as usize;
            let whole = (f.iter().sum::<f64>() - 1.0).abs() < 1e-9;
            let test = if whole { n - train - val } else { ((n as f64 * f[2]).floor() as usize).min(n - train - val) };
            [pool[..train].to_vec(), pool[train..train + val].to_vec(), pool[train + val..train + val + test].to_vec()]
        }
        SplitRule::PerClass { per_class, val, test } => {
            let pool = shuffled_pool(labels, seed);
            let mut taken = vec![0usize; num_classes as usize];
            let (mut tr, mut rest) = (Vec::new(), Vec::new());
            for v in pool {
                let c = labels[v as usize] as usize;
                if c < taken.len() && taken[c] < *per_class {
                    taken[c] += 1;
                    tr.push(v);
                } else {
                    rest.push(v);
                }
            }
            let va = rest.len().min(*val);
            let te = (rest.len() - va).min(*test);
            [tr, rest[..va].to_vec(), rest[va..va + te].to_vec()]
        }
    };
    for ids in &mut out {
        ids.sort_unstable();
    }
    out
}

/// Labelled nodes (all nodes when none is labelled) in a seeded random order.
fn shuffled_pool(labels: &[i32], seed: u64) -> Vec<u32> {
    let mut pool: Vec<u32> = (0..labels.len() as u32).filter(|&v| labels[v as usize] >= 0).collect();
    if pool.is_empty() {
        pool = (0..labels.len() as u32).collect();
    }
    pool.shuffle(&mut stream(seed, "split"));
    pool
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disjoint(s: &[Vec<u32>; 3]) -> bool {
        let mut all: Vec<u32> = s.iter().flatten().copied().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        all.len() == n
    }

    #[test]
    fn fractions_cover_labelled_nodes_and_follow_the_seed() {
        let labels: Vec<i32> = (0..1000).map(|i| if i % 10 == 0 { -1 } else { i % 3 }).collect();
        let s = apply(&SplitRule::Fractions([0.6, 0.2, 0.2]), &labels, 3, 1);
        assert_eq!([s[0].len(), s[1].len(), s[2].len()], [540, 180, 180]);
        assert!(disjoint(&s));
        assert!(s.iter().flatten().all(|&v| labels[v as usize] >= 0));
        assert_eq!(s, apply(&SplitRule::Fractions([0.6, 0.2, 0.2]), &labels, 3, 1));
        assert_ne!(s, apply(&SplitRule::Fractions([0.6, 0.2, 0.2]), &labels, 3, 2));
    }

    #[test]
    fn per_class_takes_twenty_of_each_class() {
        let labels: Vec<i32> = (0..3000).map(|i| i % 7).collect();
        let s = apply(&PLANETOID, &labels, 7, 0);
        assert_eq!([s[0].len(), s[1].len(), s[2].len()], [140, 500, 1000]);
        for c in 0..7 {
            assert_eq!(s[0].iter().filter(|&&v| labels[v as usize] == c).count(), 20);
        }
        assert!(disjoint(&s));
    }

    #[test]
    fn split_fractions_are_checked() {
        assert_eq!(parse_fractions("60,20,20").unwrap(), [0.6, 0.2, 0.2]);
        assert_eq!(parse_fractions("0.5,0.25,0.25").unwrap(), [0.5, 0.25, 0.25]);
        assert!(parse_fractions("60,20").is_err());
        assert!(parse_fractions("80,20,20").unwrap_err().contains("more than 100%"));
        assert!(parse_fractions("a,b,c").is_err());
    }

    #[test]
    fn per_class_counts_are_checked() {
        assert_eq!(parse_per_class("86, 300,1806").unwrap(), [86, 300, 1806]);
        assert!(parse_per_class("0,300,1806").unwrap_err().contains("at least 1"));
        assert!(parse_per_class("20,500").unwrap_err().contains("3 parts"));
        assert!(parse_per_class("20,-1,5").unwrap_err().contains("whole numbers"));
        assert!(parse_per_class("0.5,1,1").is_err());
    }

    #[test]
    fn per_class_stops_where_the_nodes_run_out() {
        // CiteSeer-like: the asked val + test exceed what the train nodes leave.
        let labels: Vec<i32> = (0..600).map(|i| if i % 50 == 0 { -1 } else { i % 6 }).collect();
        let rule = SplitRule::PerClass { per_class: 30, val: 100, test: 1000 };
        let s = apply(&rule, &labels, 6, 4);
        assert_eq!([s[0].len(), s[1].len(), s[2].len()], [180, 100, 588 - 280]);
        assert!(disjoint(&s));
        assert!(s.iter().flatten().all(|&v| labels[v as usize] >= 0));
        assert_ne!(s, apply(&rule, &labels, 6, 5));
    }
}
