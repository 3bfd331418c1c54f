//! The brief's rules for how the code is laid out, held by reading the sources.
//!
//! - The folders of `src/` are layers, and a layer uses only the layers below it
//!   (`docs/architecture.md`). The order is the one `src/lib.rs` declares its folders in, read
//!   from there, so moving a layer is one edit. Modules that are one file (`error`, `clock`,
//!   `multiply_hash`) are shared by all and use no layer. A module's unit tests are left out: a
//!   lower layer's test may build its inputs with a higher layer's types (the kubelet's writers
//!   are checked over the `source` layer's parsed documents).
//! - Typed errors in the library, `anyhow` only at the CLI edge.
//! - `unsafe` code only where `docs/architecture.md` lists it (each block says why it is sound:
//!   `clippy::undocumented_unsafe_blocks` is denied in `src/lib.rs`).

use std::fs;
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The folder modules of `src/lib.rs`, lowest layer first.
fn layers() -> Vec<String> {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).expect("src/lib.rs");
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .filter_map(|l| l.split(';').next())
        .map(str::to_string)
        .filter(|m| Path::new(SRC).join(m).is_dir())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules `text` declares for unit tests only, in files of their own
/// (`#[cfg(test)] mod fixtures;`).
fn test_only_modules(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].trim() == "#[cfg(test)]")
        .filter_map(|w| w[1].trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// The Rust files of the library under `dir`, without the files of test-only modules.
fn library_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let test_only: Vec<PathBuf> = files
        .iter()
        .flat_map(|f| {
            let text = fs::read_to_string(f).expect("a source file");
            let parent = f.parent().unwrap_or(Path::new("")).to_path_buf();
            test_only_modules(&text).into_iter().flat_map(move |m| {
                [
                    parent.join(format!("{m}.rs")),
                    parent.join(&m).join("mod.rs"),
                ]
            })
        })
        .collect();
    files.retain(|f| !test_only.contains(f));
    files.sort();
    files
}

/// The lines of `text` that are library code: up to an inline `#[cfg(test)]` module, without
/// comments.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|next| {
                    let next = next.trim();
                    next.starts_with("mod ") && next.ends_with('{')
                })
        })
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split(" //").next().unwrap_or(l)))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .collect()
}

/// Every `crate::<layer>` in `text`'s library code naming a layer above `rank` (`None`: a module
/// shared by all, below every layer).
fn imports_above(text: &str, rank: Option<usize>, layers: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (line, code) in code_lines(text) {
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if let Some(r) = layers.iter().position(|l| *l == name) {
                if rank.is_none_or(|rank| r > rank) {
                    found.push((line, name));
                }
            }
        }
    }
    found
}

#[test]
fn no_layer_imports_one_above_it() {
    let layers = layers();
    // The folders the brief names, in the order they depend on each other.
    assert_eq!(
        layers,
        ["kubelet", "source", "runtime", "analysis", "rewrite", "shim", "agent", "cli"],
        "src/lib.rs declares its layers in another order"
    );
    let mut wrong = Vec::new();
    for (rank, layer) in layers.iter().enumerate() {
        let files = library_files(&Path::new(SRC).join(layer));
        assert!(!files.is_empty(), "src/{layer}/ has no Rust files");
        for file in files {
            let text = fs::read_to_string(&file).expect("a source file");
            for (line, above) in imports_above(&text, Some(rank), &layers) {
                wrong.push(format!(
                    "{}:{line}: the {layer} layer uses crate::{above}, a layer above it",
                    file.strip_prefix(SRC).unwrap_or(&file).display()
                ));
            }
        }
    }
    // The one-file modules every layer shares use no layer at all.
    for shared in ["error", "clock", "multiply_hash"] {
        let text =
            fs::read_to_string(Path::new(SRC).join(format!("{shared}.rs"))).expect("a module");
        for (line, layer) in imports_above(&text, None, &layers) {
            wrong.push(format!(
                "{shared}.rs:{line}: shared by all, it uses crate::{layer}"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The reading itself: what counts as an import, and what is left out.
#[test]
fn the_reader_sees_code_and_skips_comments_and_unit_tests() {
    let layers: Vec<String> = ["kubelet", "source", "analysis", "rewrite"]
        .map(String::from)
        .to_vec();
    let text = "\
//! Docs may link [`crate::rewrite::pin`].
use crate::kubelet::hash;
use crate::source::doc::Doc;
/// Also [`crate::rewrite`] here.
fn f() -> u64 { crate::rewrite::journal::now() } // crate::rewrite again
let x = 1; // a comment naming crate::rewrite
#[cfg(test)]
mod tests {
    use crate::rewrite::apply;
}
";
    // From the analysis layer (rank 2): only the call on line 5 is above it.
    assert_eq!(
        imports_above(text, Some(2), &layers),
        vec![(5, "rewrite".to_string())]
    );
    // From the kubelet layer, `source` is above it too.
    assert_eq!(
        imports_above(text, Some(0), &layers),
        vec![(3, "source".to_string()), (5, "rewrite".to_string())]
    );
    // A test-only module declared in a file of its own does not end the library code.
    let early = "#[cfg(test)]\nmod fixtures;\nuse crate::rewrite::apply;\n";
    assert_eq!(
        imports_above(early, Some(0), &layers),
        vec![(3, "rewrite".to_string())]
    );
    assert_eq!(test_only_modules(early), ["fixtures"]);
    // From the top, nothing is above.
    assert!(imports_above(text, Some(3), &layers).is_empty());
    // A shared module may use none of them.
    assert_eq!(
        imports_above(text, None, &layers),
        vec![
            (2, "kubelet".to_string()),
            (3, "source".to_string()),
            (5, "rewrite".to_string())
        ]
    );
}

/// Typed errors in the library, `anyhow` only at the CLI edge: no layer below `cli` names it.
#[test]
fn anyhow_only_at_the_cli_edge() {
    let layers = layers();
    let mut wrong = Vec::new();
    for layer in layers.iter().filter(|l| *l != "cli") {
        for file in library_files(&Path::new(SRC).join(layer)) {
            let text = fs::read_to_string(&file).expect("a source file");
            for (line, code) in code_lines(&text) {
                if code.contains("anyhow") {
                    wrong.push(format!(
                        "{}:{line}: anyhow below the CLI",
                        file.strip_prefix(SRC).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// No `eprintln!`/`eprint!` (or `println!`/`print!`) in the library: they panic when stderr (or
/// stdout) is closed, and the process then exits 101, no documented code. The CLI's `say!`
/// drops what it cannot write; standard output goes through `cli::support::stdout`, whose closed
/// pipe is no error.
#[test]
fn nothing_panics_on_a_closed_standard_error() {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("a source file");
        for (line, code) in code_lines(&text) {
            if code.contains("print!(") || code.contains("println!(") {
                wrong.push(format!(
                    "{}:{line}: a printing macro that panics (use say! or support::stdout)",
                    file.strip_prefix(SRC).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The files `docs/architecture.md` names for their `unsafe` code, and no others.
#[test]
fn unsafe_code_only_where_the_architecture_lists_it() {
    const LISTED: [&str; 5] = [
        "kubelet/bytescan.rs",
        "kubelet/lanes.rs",
        "kubelet/sink.rs",
        "shim/batched.rs",
        "source/frames.rs",
    ];
    let architecture =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md"))
            .expect("docs/architecture.md");
    for file in LISTED {
        assert!(
            architecture.contains(&format!("`{file}`")),
            "docs/architecture.md does not name {file}"
        );
    }
    let files = library_files(Path::new(SRC));
    let mut with_unsafe: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = fs::read_to_string(f).expect("a source file");
            code_lines(&text).iter().any(|(_, l)| has_unsafe(l))
        })
        .map(|f| {
            f.strip_prefix(SRC)
                .unwrap_or(f)
                .display()
                .to_string()
                .trim_start_matches('/')
                .to_string()
        })
        .collect();
    with_unsafe.sort();
    assert_eq!(with_unsafe, LISTED, "unsafe code outside the listed files");
}

/// Whether a line of code has an `unsafe` block, function, impl, trait or extern block (not the
/// word in a name, such as a lint's).
fn has_unsafe(line: &str) -> bool {
    [
        "unsafe {",
        "unsafe fn",
        "unsafe impl",
        "unsafe trait",
        "unsafe extern",
    ]
    .iter()
    .any(|k| line.contains(k))
}
