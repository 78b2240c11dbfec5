use crate::BadInput;
use std::fmt;
use std::str::FromStr;

/// How many in-neighbours one layer keeps per destination vertex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Fanout {
    /// The full neighbourhood.
    All,
    /// At most this many (degree <= fanout keeps all).
    Upto(u32),
}

impl Fanout {
    /// Number of neighbours drawn for a vertex of in-degree `deg`.
    #[inline]
    pub fn take(self, deg: usize) -> usize {
        match self {
            Fanout::All => deg,
            Fanout::Upto(k) => deg.min(k as usize),
        }
    }
}

impl fmt::Display for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fanout::All => f.write_str("all"),
            Fanout::Upto(k) => write!(f, "{k}"),
        }
    }
}

/// Per-layer fanouts, input layer first (`10,25` = 10 for layer 0, 25 for the
/// layer that outputs the roots); the number of entries is the number of layers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Fanouts(pub Vec<Fanout>);

impl Fanouts {
    pub fn layers(&self) -> usize {
        self.0.len()
    }
    /// `all` repeated for `layers` layers.
    pub fn all(layers: usize) -> Fanouts {
        Fanouts(vec![Fanout::All; layers])
    }
}

impl FromStr for Fanouts {
    type Err = BadInput;
    /// Parses `10,10`, `25,10,5` or `all` (every layer keeps every neighbour,
    /// number of layers taken from context: see `Fanouts::all`) / `all,all`.
    fn from_str(s: &str) -> Result<Self, BadInput> {
        let mut out = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.eq_ignore_ascii_case("all") {
                out.push(Fanout::All);
                continue;
            }
            match p.parse::<u32>() {
                Ok(k) if k > 0 => out.push(Fanout::Upto(k)),
                _ => {
                    return Err(BadInput::new(format!(
                        "bad fanout `{p}` in `{s}`: expected positive integers or `all`, comma-separated, e.g. 10,10"
                    )));
                }
            }
        }
        Ok(Fanouts(out))
    }
}

impl fmt::Display for Fanouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        let f: Fanouts = "10, 25,all".parse().unwrap();
        assert_eq!(f.0, vec![Fanout::Upto(10), Fanout::Upto(25), Fanout::All]);
        assert_eq!(f.to_string(), "10,25,all");
        assert_eq!(Fanout::Upto(10).take(3), 3);
        assert_eq!(Fanout::Upto(10).take(30), 10);
        assert_eq!(Fanout::All.take(30), 30);
    }

    #[test]
    fn rejects_zero_negative_and_junk() {
        for bad in ["0", "10,-1", "ten", "", "10,,10"] {
            let e = bad.parse::<Fanouts>().unwrap_err();
            assert!(e.0.contains("bad fanout"), "{bad}: {e}");
        }
    }
}
