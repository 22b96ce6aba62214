//! Go's behaviours that the original's users meet and rely on, kept apart
//! from the service's own logic: the `flag` package's command lines
//! ([`cli`]), `strconv`'s number syntax (`syntax`) and `gopkg.in/yaml.v2`'s
//! reading of descriptor files (`yaml`).

pub mod cli;
pub(crate) mod syntax;
pub(crate) mod yaml;
