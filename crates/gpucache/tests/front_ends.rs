//! The front ends that live in this crate (`egl`, `session`) use the engine's public API
//! only, as a front end in a crate of its own must: every `crate::` path they name starts
//! with an item the crate root publishes, and no `super::` path climbs out of the front end.
//! A front end that reaches into the engine fails here, before anyone has to notice in review.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const FRONT_ENDS: [&str; 2] = ["egl", "session"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The names the crate root makes public: `pub mod x;` and the items of `pub use ...;`.
fn public_names() -> BTreeSet<String> {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut names = BTreeSet::new();
    for statement in lib.split(';') {
        let code: Vec<&str> = statement
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        let s = code.join(" ");
        let s = s.trim();
        let Some(rest) = s.rfind("pub ").map(|i| &s[i + 4..]) else {
            continue;
        };
        if let Some(module) = rest.strip_prefix("mod ") {
            names.insert(module.trim().to_owned());
        } else if let Some(path) = rest.strip_prefix("use ") {
            let items = match path.find('{') {
                Some(open) => path[open + 1..path.rfind('}').unwrap()].to_owned(),
                None => path.rsplit("::").next().unwrap().to_owned(),
            };
            for item in items.split(',') {
                let item = item.trim();
                let name = item.rsplit(" as ").next().unwrap().trim();
                if !name.is_empty() {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first path segment of every item named after `crate::` in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d as e}`: the first segment of each item, at the top level.
            let mut depth = 0;
            let mut item = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            out.push(first_segment(&item));
        } else {
            out.push(first_segment(rest));
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn front_ends_name_only_public_items() {
    let public = public_names();
    for required in [
        "Cache",
        "CacheBuilder",
        "Lookup",
        "InsertMode",
        "control",
        "metrics",
    ] {
        assert!(
            public.contains(required),
            "{required} not found in {public:?}"
        );
    }
    let mut violations = Vec::new();
    for front_end in FRONT_ENDS {
        let root = src().join(front_end);
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        assert!(!files.is_empty(), "{front_end} has no files");
        for file in files {
            let code = fs::read_to_string(&file).unwrap();
            let name = file.strip_prefix(src()).unwrap().display().to_string();
            for segment in crate_paths(&code) {
                if !public.contains(&segment) {
                    violations.push(format!("{name}: crate::{segment} is not public"));
                }
            }
            // `super::` from the front end's root module is the crate root; deeper modules
            // may go up to the root module but not past it.
            let depth = file.strip_prefix(&root).unwrap().components().count()
                - usize::from(file.ends_with("mod.rs"));
            let too_far = "super::".repeat(depth + 1);
            if code.contains(&too_far) {
                violations.push(format!("{name}: `{too_far}` leaves the front end"));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_checker_catches_what_it_must() {
    assert_eq!(
        crate_paths("use crate::{Cache, disk::format as f, store::{Store}};\ncrate::egl::set"),
        ["Cache", "disk", "store", "egl"]
    );
    assert!(!public_names().contains("disk"));
    assert!(!public_names().contains("store"));
}
