//! The command line: arguments, every output format, the exit status, one file per subcommand.

pub mod output; // every table and every -o format
