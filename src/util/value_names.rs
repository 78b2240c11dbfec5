//! One list of names per enum that a flag takes. clap's `ValueEnum` derive
//! holds it (what `--help` lists and the command line accepts); `FromStr`
//! (config files, saved configs, library callers) and `Display` (messages,
//! `TrainConfig::to_flags`) are made from it by `value_names!`, so the
//! spellings cannot drift apart.

use crate::BadInput;
use clap::ValueEnum;

/// "a, b or c": the names `T` accepts, aliases left out.
pub fn expected<T: ValueEnum>() -> String {
    let names: Vec<String> =
        T::value_variants().iter().filter_map(|v| v.to_possible_value()).map(|p| p.get_name().to_string()).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `s` as a `T` (its names and aliases, exactly as spelled), or an error
/// naming `what` and every accepted name.
pub fn parse<T: ValueEnum>(what: &str, s: &str) -> Result<T, BadInput> {
    T::from_str(s, false).map_err(|_| BadInput::new(format!("{what} {s}: unknown value; expected {}", expected::<T>())))
}

/// The name `v` is given by on the command line.
pub fn name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// `FromStr` and `Display` of an enum from its `ValueEnum` names; `$what`
/// names the flag in errors (`--model gin: unknown value; expected ...`).
#[macro_export]
macro_rules! value_names {
    ($t:ty, $what:expr) => {
        impl std::str::FromStr for $t {
            type Err = $crate::BadInput;
            fn from_str(s: &str) -> std::result::Result<Self, $crate::BadInput> {
                $crate::util::value_names::parse($what, s)
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&$crate::util::value_names::name(self))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
    enum Pick {
        #[value(name = "one", alias = "uno")]
        One,
        Two,
        ThreeFour,
    }
    value_names!(Pick, "--pick");

    #[test]
    fn names_aliases_and_errors_come_from_the_value_enum() {
        assert_eq!("uno".parse::<Pick>().unwrap(), Pick::One);
        assert_eq!("three-four".parse::<Pick>().unwrap(), Pick::ThreeFour);
        assert_eq!(Pick::ThreeFour.to_string(), "three-four");
        let e = "One".parse::<Pick>().unwrap_err();
        assert_eq!(e.0, "--pick One: unknown value; expected one, two or three-four");
    }
}
