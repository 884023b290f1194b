//! The input files of the FLIP-27 tests (`flip27_splits.rs`, `flip27_continuous.rs`): file `f`
//! holds `per_file` numbered lines, and the expected output is every line once, sorted.

#![allow(dead_code, unreachable_pub)]

/// The lines of file `file`.
pub fn lines_of(file: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|l| format!("file{file:02}-line{l:04}"))
        .collect()
}

/// Every line of `files` files, sorted.
pub fn expected(files: usize, per_file: usize) -> Vec<String> {
    let mut all: Vec<String> = (0..files).flat_map(|f| lines_of(f, per_file)).collect();
    all.sort();
    all
}
