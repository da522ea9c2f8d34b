//! Finding the real EGL vendor the way GLVND finds vendors: the JSON files named by
//! `__EGL_VENDOR_LIBRARY_FILENAMES` (in order), then those in `__EGL_VENDOR_LIBRARY_DIRS` or,
//! without it, `/etc/glvnd/egl_vendor.d` and `/usr/share/glvnd/egl_vendor.d` (each
//! directory's `*.json` files sorted by name, as GLVND's `scandir` with `strcmp` does).
//! The drop-in's own JSON files are skipped by the loader (the library is itself).

use std::path::{Path, PathBuf};

use crate::config::Env;

/// GLVND's default vendor directories (`@sysconfdir@/glvnd/egl_vendor.d:@datadir@/...`).
pub const DEFAULT_DIRS: &str = "/etc/glvnd/egl_vendor.d:/usr/share/glvnd/egl_vendor.d";

/// A library to try as the real vendor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The library: a name for the loader's search, or a path.
    pub library: String,
    /// GLVND loads this vendor as a vendor of its own too (it was found in the list GLVND
    /// itself reads): the drop-in then leaves device enumeration to that entry, so that
    /// devices are not listed twice.
    pub also_loaded_by_glvnd: bool,
}

/// The libraries to try as the real vendor, in order. `configured` (`:`-separated JSON
/// files or libraries) comes first and alone when set. `trust_env`: the process is not
/// setuid/setgid (GLVND ignores its variables otherwise, and so do we).
pub fn candidates(configured: Option<&str>, env: Env<'_>, trust_env: bool) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |library: Option<String>, also: bool| {
        if let Some(library) = library {
            if !out.iter().any(|c| c.library == library) {
                out.push(Candidate {
                    library,
                    also_loaded_by_glvnd: also,
                });
            }
        }
    };
    if let Some(v) = configured {
        for item in v.split(':').filter(|i| !i.is_empty()) {
            if item.ends_with(".json") {
                push(library_of_json(Path::new(item)), false);
            } else {
                push(Some(item.to_string()), false);
            }
        }
        return out;
    }
    let files = trust_env
        .then(|| env("__EGL_VENDOR_LIBRARY_FILENAMES"))
        .flatten();
    if let Some(files) = &files {
        for f in files.split(':').filter(|f| !f.is_empty()) {
            push(library_of_json(Path::new(f)), true);
        }
    }
    // GLVND reads the directories only without a list of files.
    let dirs_loaded = files.is_none();
    let dirs = trust_env
        .then(|| env("__EGL_VENDOR_LIBRARY_DIRS"))
        .flatten()
        .unwrap_or_else(|| DEFAULT_DIRS.to_string());
    for dir in dirs.split(':').filter(|d| !d.is_empty()) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n.as_encoded_bytes().ends_with(b".json"))
            .collect();
        names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
        for n in names {
            push(library_of_json(&Path::new(dir).join(n)), dirs_loaded);
        }
    }
    out
}

/// The library a vendor JSON file names, resolved as GLVND does: a bare name is left to the
/// dynamic loader's search; a relative path with a `/` is relative to the JSON file's
/// directory (after resolving links).
pub fn library_of_json(json: &Path) -> Option<String> {
    let text = std::fs::read_to_string(json).ok()?;
    let lib = json_string_field(&text, "library_path")?;
    if lib.is_empty() {
        return None;
    }
    if !lib.contains('/') || lib.starts_with('/') {
        return Some(lib);
    }
    let dir: PathBuf = std::fs::canonicalize(json).ok()?.parent()?.to_path_buf();
    Some(dir.join(lib).to_string_lossy().into_owned())
}

/// The string value of the first `"field": "..."` in a JSON text (escapes decoded). Enough
/// for GLVND's vendor files, whose one string that matters is `ICD.library_path`.
pub fn json_string_field(text: &str, field: &str) -> Option<String> {
    let quoted = format!("\"{field}\"");
    let at = text.find(&quoted)? + quoted.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
}

/// A JSON string literal of `s`.
pub fn json_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The vendor JSON file naming `library`.
pub fn vendor_json(library: &str) -> String {
    format!(
        "{{\n    \"file_format_version\" : \"1.0.0\",\n    \"ICD\" : {{\n        \"library_path\" : {}\n    }}\n}}\n",
        json_quote(library)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_and_quoting_round_trip() {
        let lib = "/opt/a \"b\"\\c/libEGL_gpucache.so";
        let json = vendor_json(lib);
        assert_eq!(
            json_string_field(&json, "library_path").as_deref(),
            Some(lib)
        );
        assert_eq!(
            json_string_field(r#"{"ICD":{"library_path" :"x\u0041"}}"#, "library_path").as_deref(),
            Some("xA")
        );
        assert_eq!(
            json_string_field(r#"{"library_path": 3}"#, "library_path"),
            None
        );
    }

    #[test]
    fn candidates_follow_glvnd_order() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("50_mesa.json"), vendor_json("libEGL_mesa.so.0")).unwrap();
        std::fs::write(a.join("10_first.json"), vendor_json("libEGL_first.so")).unwrap();
        std::fs::write(a.join("README"), "not json").unwrap();
        std::fs::write(b.join("00_other.json"), vendor_json("rel/libEGL_o.so")).unwrap();
        let files = d.path().join("explicit.json");
        std::fs::write(&files, vendor_json("/abs/libEGL_x.so")).unwrap();
        let dirs = format!("{}:{}", a.display(), b.display());
        let f = files.display().to_string();
        let env = |k: &str| match k {
            "__EGL_VENDOR_LIBRARY_DIRS" => Some(dirs.clone()),
            "__EGL_VENDOR_LIBRARY_FILENAMES" => Some(f.clone()),
            _ => None,
        };
        let b_real = std::fs::canonicalize(&b).unwrap();
        let libs = |c: Vec<Candidate>| -> Vec<(String, bool)> {
            c.into_iter()
                .map(|c| (c.library, c.also_loaded_by_glvnd))
                .collect()
        };
        // With a list of files GLVND loads only those: the directories' vendors are not
        // loaded by GLVND.
        assert_eq!(
            libs(candidates(None, &env, true)),
            vec![
                ("/abs/libEGL_x.so".to_string(), true),
                ("libEGL_first.so".into(), false),
                ("libEGL_mesa.so.0".into(), false),
                (b_real.join("rel/libEGL_o.so").display().to_string(), false),
            ]
        );
        let only_dirs = |k: &str| (k == "__EGL_VENDOR_LIBRARY_DIRS").then(|| dirs.clone());
        assert!(candidates(None, &only_dirs, true)
            .iter()
            .all(|c| c.also_loaded_by_glvnd));
        // A setuid process ignores the variables.
        assert!(!libs(candidates(None, &env, false))
            .iter()
            .any(|(l, _)| l == "/abs/libEGL_x.so"));
        // Configured vendors alone, in order.
        assert_eq!(
            libs(candidates(Some(&format!("{f}:libX.so")), &env, true)),
            vec![
                ("/abs/libEGL_x.so".to_string(), false),
                ("libX.so".into(), false)
            ]
        );
    }
}
